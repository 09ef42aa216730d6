"""The committed issue-11 fixtures are exactly what tests/data/issue11/make_fixtures.py writes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

DATA = Path(__file__).parent / "data" / "issue11"


def test_fixtures_match_their_generator(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("issue11_fixtures", DATA / "make_fixtures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "OUT", tmp_path)
    for fn in mod.FIXTURES:
        fn()
    made = sorted(p.name for p in tmp_path.iterdir())
    assert made == sorted(p.name for p in DATA.glob("*.pt.trace.json.gz"))
    for name in made:
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name
