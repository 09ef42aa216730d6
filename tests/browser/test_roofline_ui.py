"""The Roofline view on the V100 ResNet-50 run: the roofs and the ops as points, the MFU line, the table sorted
by ms lost; a click on a point names the op."""

from __future__ import annotations

from .conftest import TRACES, missing, open_view, screenshot


def test_roofline_view_draws_ops_under_the_roofs(guarded_page, tensorboard, tmp_path):
    if not (TRACES / "kineto_resnet50_v100" / "num_workers_0").is_dir():
        missing("the shared V100 ResNet-50 run is absent")
    page = open_view(guarded_page, tensorboard, "roofline", "resnet50")
    assert "V100 SXM2" in page.inner_text("#roofline-head")
    assert page.inner_text("#roofline-mfu").startswith("MFU ")
    assert page.locator("#roofline-chart circle.pt").count() > 20
    assert page.locator("#roofline-chart line.roof").count() >= 3  # FP32, FP64, FP16 Tensor Cores and memory
    first = page.locator("table.data-table tbody tr").first.inner_text()
    assert "aten::cudnn_convolution_backward" in first
    page.locator("#roofline-chart circle.pt").first.dispatch_event("click")
    assert "aten::" in page.inner_text("#roofline-detail")
    screenshot(page, "roofline", tmp_path)
