"""Issue 40 item 4: at most `runs.MAX_WAITERS` `/runs?wait=` long polls wait at once (each holds a server thread);
beyond them a long poll answers at once, and the waiters are released when the files are loaded."""

from __future__ import annotations

import threading

from tensorboard.backend import application
from werkzeug.test import Client

import tb_plugin.loader as loader_mod
from tb_plugin import runs

from .test_plugin import P, _client, logdir  # noqa: F401 - the fixture

GUARD_S = 60.0  # a hang guard, never a timing


def test_long_polls_beyond_the_bound_answer_at_once(logdir, monkeypatch):  # noqa: F811
    gate = threading.Event()
    real = loader_mod.read_trace

    def slow(path, *a, **k):
        gate.wait(GUARD_S)
        return real(path, *a, **k)

    monkeypatch.setattr(loader_mod, "read_trace", slow)
    monkeypatch.setattr(runs, "MAX_WAITERS", 2)
    c, p = _client(logdir)
    assert c.get(f"{P}/runs").json["loading"] is True
    loader = p.state().loader
    waited: set = set()
    entered = threading.Semaphore(0)
    real_wait = loader.wait_loaded

    def wait_loaded(timeout):
        if threading.get_ident() not in waited:
            waited.add(threading.get_ident())
            entered.release()
        return real_wait(timeout)

    monkeypatch.setattr(loader, "wait_loaded", wait_loaded)
    out: dict = {}

    def ask(name: str, wait: int) -> None:
        out[name] = (Client(application.TensorBoardWSGI([p])).get(f"{P}/runs?wait={wait}").json, threading.get_ident())

    waiters = [threading.Thread(target=ask, args=(f"w{i}", 60)) for i in range(2)]
    for t in waiters:
        t.start()
    for _ in waiters:
        assert entered.acquire(timeout=GUARD_S)  # both wait for the files
    assert runs.waiting() == 2
    extra = [threading.Thread(target=ask, args=(f"x{i}", 5)) for i in range(3)]
    for t in extra:
        t.start()
    for t in extra:
        t.join(GUARD_S)
    assert not gate.is_set() and all(t.is_alive() for t in waiters)
    for i in range(3):  # answered at once: still loading, never waited for the reads
        d, ident = out[f"x{i}"]
        assert d["loading"] is True and ident not in waited
    gate.set()
    for t in waiters:
        t.join(GUARD_S)
    assert not any(t.is_alive() for t in waiters)
    assert all(out[f"w{i}"][0]["loading"] is False for i in range(2))
    assert runs.waiting() == 0  # the places are given back
