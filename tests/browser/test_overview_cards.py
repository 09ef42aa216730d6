"""The Overview's cards: the GPU summary lists each device with percentages (63.6 %, not 0.6360724629573046) and
its memory in bytes' units, inside the card (wrapped, not clipped); the configuration names the world size once
(not as `world_size` beside `distributed`'s own), at two widths."""

from __future__ import annotations

import re

import pytest

from .conftest import TRACES, missing, open_view

WIDTHS = [1000, 1600]


def _need_shared() -> None:
    if not TRACES.is_dir():
        missing("../shared/traces not present (set GPUSCOPE_SHARED)")


@pytest.mark.parametrize("width", WIDTHS)
def test_gpu_devices_in_percent_inside_the_card(guarded_page, tensorboard, width):
    _need_shared()
    guarded_page.set_viewport_size({"width": width, "height": 820})
    page = open_view(guarded_page, tensorboard, "overview", "resnet50")
    card = page.inner_text("#card-gpu")
    assert not re.search(r"\b0\.\d{5,}", card), card  # no raw fraction anywhere in the card
    heads = page.eval_on_selector_all("#gpu-devices h4", "ts => ts.map(t => t.textContent)")
    assert heads == ["GPU 0: Tesla V100-DGXS-32GB"], heads
    values = page.eval_on_selector_all("#gpu-devices dd", "ts => ts.map(t => t.textContent)")
    assert "31.74 GiB" in values and any(re.fullmatch(r"\d+\.\d %", v) for v in values), values
    # nothing sticks out of the card
    out = page.evaluate(
        "() => { const c = document.querySelector('#card-gpu').getBoundingClientRect();"
        " return [...document.querySelectorAll('#gpu-devices, #gpu-devices *')].filter(e => e.getBoundingClientRect().right > c.right + 0.5)"
        ".map(e => e.textContent.slice(0, 40)); }"
    )
    assert out == [], out


@pytest.mark.parametrize("width", WIDTHS)
def test_world_size_is_said_once(guarded_page, tensorboard, width):
    _need_shared()
    guarded_page.set_viewport_size({"width": width, "height": 820})
    page = open_view(guarded_page, tensorboard, "overview", "cnn_ddp")
    keys = page.eval_on_selector_all("#card-config > dl.kv > dt", "ts => ts.map(t => t.textContent)")
    assert "distributed" in keys and "world_size" not in keys, keys
    inner = page.eval_on_selector_all("#card-config dl.kv dl.kv > dt", "ts => ts.map(t => t.textContent)")
    assert inner.count("world_size") == 1, inner  # distributed's own field
