"""Run-level answers (/diagnosis, /pipeline, /clock_offsets, /jobdiff, /distributed, /distributed/step and the
Overview's run ledger), computed once per set of summaries.

An answer is keyed by what was asked (the route and its parameters) and by the identity of each worker's summary
(`engine.Summaries.token`: the stored summary file's identity, or the computation that made it), so a trace
rewritten or a summary replaced on disk (`gpuscope summarize --force`) gives another key. Concurrent identical
requests compute once (the others wait for that computation); the last `MAX_ANSWERS` answers are kept.
An answer is shared: callers copy before adding to it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any

#: run-level answers kept (each up to a few MB for big runs)
MAX_ANSWERS = 32


class Answers:
    """A bounded LRU of answers with single-flight computation."""

    def __init__(self, size: int | None = None) -> None:
        self.size = MAX_ANSWERS if size is None else size
        self._lock = threading.Lock()
        self._done: OrderedDict[Hashable, Any] = OrderedDict()
        self._running: dict[Hashable, Future] = {}
        self.computed = 0  # how many answers were computed (tests, benchmarks)

    def get(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The answer of `key`: kept, being computed by another request (waited for), or computed now.
        An exception is not kept: it reaches the requests waiting for it, and the next request computes again."""
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                return self._done[key]
            fut = self._running.get(key)
            mine = fut is None
            if mine:
                fut = self._running[key] = Future()
        assert fut is not None
        if not mine:
            return fut.result()
        try:
            value = compute()
        except BaseException as e:
            with self._lock:
                self._running.pop(key, None)
            fut.set_exception(e)
            raise
        with self._lock:
            self._running.pop(key, None)
            self.computed += 1
            self._done[key] = value
            while len(self._done) > self.size:
                self._done.popitem(last=False)
        fut.set_result(value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._done.clear()


def identity(engine: Any, part: Mapping[str, Any]) -> tuple | None:
    """The identity of one run's summaries (worker -> summary): ((worker, `engine.token`)...), None when a summary
    has none (no longer in the engine's memory). Taken while they are in memory, it stays valid after they leave
    it: a logdir of more summaries than the engine keeps (`GPUSCOPE_SUMMARY_MEMORY`) keeps its answers too."""
    one = []
    for w, s in sorted(part.items()):
        token = engine.token(s)
        if token is None:
            return None
        one.append((w, token))
    return tuple(one)


def answer_of(engine: Any, what: tuple, ids: Iterable[tuple | None], compute: Callable[[], Any]) -> Any:
    """`compute()` kept per (`what`, the runs' `identity`s) in `engine.answers`; computed without keeping it when
    one of them is None."""
    key = tuple(ids)
    if any(i is None for i in key):
        return compute()
    return engine.answers.get((what, key), compute)


def answer(engine: Any, what: tuple, parts: Iterable[Mapping[str, Any]], compute: Callable[[], Any]) -> Any:
    """`compute()` (a run-level view of the summaries in `parts`: worker -> summary, one mapping per run), kept
    per (`what`, each summary's identity) in `engine.answers`. Computed without keeping it when a summary has
    no identity (no longer in the engine's memory)."""
    return answer_of(engine, what, [identity(engine, p) for p in parts], compute)
