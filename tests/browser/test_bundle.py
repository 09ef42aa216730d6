"""The committed bundle: present, an ES module exporting render(), nothing fetched from another
host, no HTML-from-string sinks, small; and the frontend's own unit tests (node) when node is here."""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
from pathlib import Path

from .conftest import missing

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "tb_plugin" / "static"
FRONTEND = ROOT / "frontend"


def bundle() -> str:
    return (STATIC / "index.js").read_text(encoding="utf-8")


def test_index_js_is_an_es_module_exporting_render():
    assert re.search(r"export\s*\{[^}]*\bas render\b[^}]*\}|export\s+(async\s+)?function\s+render\b", bundle())


def test_no_url_to_another_host():
    # only the SVG namespace URI (an identifier, never fetched) may appear
    urls = set(re.findall(r"(?:https?:)?//[a-zA-Z0-9.-]+\.[a-z]{2,}[^\s\"'`)]*", bundle()))
    assert urls <= {"http://www.w3.org/2000/svg", "//www.w3.org/2000/svg"}, urls


def test_no_html_string_sinks():
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in bundle(), sink


def test_bundle_is_small():
    # 62 KB since issue 39's navigation (60.9 KB: keyboard tabs, the step headline, the merged timeline's track
    # filter and step ends, row occurrences, pie colours; 58.8 KB before)
    size = len(gzip.compress(bundle().encode("utf-8"), 9))
    assert size < 62_000, f"index.js is {size} bytes gzipped (the budget is 62 KB)"


def test_frontend_unit_tests_and_bundle_up_to_date():
    if shutil.which("node") is None or not (FRONTEND / "node_modules" / "esbuild").is_dir():
        missing("node or frontend/node_modules absent (npm ci in frontend/)")
    r = subprocess.run(["node", "test/run.mjs"], cwd=FRONTEND, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "# fail 0" in r.stdout
    r = subprocess.run(["node", "build.mjs", "--check"], cwd=FRONTEND, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
