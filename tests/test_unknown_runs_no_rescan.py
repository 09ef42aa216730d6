"""Issue 26, item 21: requests naming unknown runs cannot make the plugin rescan the logdir each time."""

from types import SimpleNamespace

from tb_plugin import workspace
from tb_plugin.runs import Scanner

from .test_plugin import P, _client, _events, _put, logdir  # noqa: F401


def test_unknown_run_names_rescan_at_most_once_per_interval(logdir, monkeypatch):
    scans: list = []
    real = Scanner.scan
    monkeypatch.setattr(Scanner, "scan", lambda self: (scans.append(1), real(self))[1])
    monkeypatch.setattr(workspace, "RESCAN_S", 3600.0)
    monkeypatch.setattr(workspace, "FORCED_RESCAN_S", 3600.0)
    c, _ = _client(logdir)
    assert c.get(f"{P}/runs").status_code == 200
    assert len(scans) == 1
    for i in range(50):
        r = c.get(f"{P}/workers?run=nope{i}")
        assert r.status_code == 404
    assert len(scans) == 2  # one forced rescan, not fifty
    _put(logdir / "run9" / "w.pt.trace.json", {"traceEvents": _events(2)})
    assert c.get(f"{P}/workers?run=run9").status_code == 404  # within the interval: not rescanned
    monkeypatch.setattr(workspace, "FORCED_RESCAN_S", 0.0)
    monkeypatch.setattr(workspace, "SCAN_SHARE", 0.0)  # a slow scan on a busy machine spaces nothing out
    r = c.get(f"{P}/workers?run=run9")  # a run that just appeared opens
    assert r.status_code == 200 and r.json == {"workers": ["w"]} and len(scans) == 3


def test_a_slow_scan_spaces_the_next_ones_out(logdir, monkeypatch):
    c, p = _client(logdir)
    c.get(f"{P}/runs")
    state = p.state()
    clock = [state.scanned_at + 10.0]
    monkeypatch.setattr(workspace, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    scans: list = []

    def slow_scan():  # a listing that takes 100 s of the fake clock
        scans.append(clock[0])
        clock[0] += 100.0
        return state.runs

    monkeypatch.setattr(state.scanner, "scan", slow_scan)
    c.get(f"{P}/runs")
    assert len(scans) == 1
    for i in range(10):
        clock[0] += 10.0
        c.get(f"{P}/runs")
        c.get(f"{P}/workers?run=nope{i}")
    assert len(scans) <= 2  # 100 s of requests after a 100 s scan: at most one more scan
