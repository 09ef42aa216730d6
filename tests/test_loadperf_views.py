"""Speed rewrites in the views agree with the plain computation they replace."""
import numpy as np

from tb_plugin.views.common import sorted_unique
from tb_plugin.views.overview import _coverage, _covered


def test_covered_matches_interval_counting():
    rng = np.random.default_rng(1)
    checked = 0
    for _ in range(400):
        n = int(rng.integers(0, 60))
        s = rng.integers(0, 100, n)
        e = s + rng.integers(0, 15, n) * (rng.random(n) < 0.8)  # some zero-length intervals
        if rng.random() < 0.5:
            order = np.argsort(s, kind="stable")  # sorted starts: the fast path
            s, e = s[order], e[order]
        b = sorted_unique(np.concatenate([s, e, rng.integers(0, 120, int(rng.integers(0, 5)))]))
        if len(b) < 2:
            continue
        got = _covered(b, s, e)
        assert got.dtype == bool and len(got) == len(b) - 1
        assert np.array_equal(got, _coverage(b, s, e) > 0)
        checked += 1
    assert checked > 300
