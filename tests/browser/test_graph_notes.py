"""Issue 24, item 4: where replayed CUDA-graph kernels cannot reach their capture ops, Operators, Kernels and
Modules say so in a notice."""

from __future__ import annotations

import pytest

from .conftest import GRAPH_RUN, open_view


@pytest.mark.parametrize("view", ["operators", "kernels", "modules"])
def test_graph_launch_row_notice(guarded_page, tensorboard, view):
    page = open_view(guarded_page, tensorboard, view, GRAPH_RUN)
    text = page.inner_text(f"#{view}-notes")
    assert text.startswith("One row, 'CompiledFunction', holds most of the GPU time (100.0 %).")
    assert "the capture is not in this trace" in text
