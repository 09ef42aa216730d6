"""Bandwidth of collectives, and whether an exchange is far slower than its bytes need. Pure functions over arrays.

Definitions (NCCL-tests' `PERFORMANCE.md`, so the figures compare with what `nccl-tests` prints for a link):

* algorithm bandwidth `algbw = bytes / seconds`, where bytes is the collective's message size (the larger of its
  input and output buffers: what `collectives.collectives` gives as `bytes`);
* bus bandwidth `busbw = algbw x bus_factor(kind, n)`, the traffic each rank's link carries, comparable with the
  link's peak whatever the collective and the group size n:
  all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all, gather, scatter (n-1)/n; broadcast, reduce, send,
  recv 1. An unknown kind or group size gives NaN (never a guessed factor).

`latency_bound` states its rule once (module constants): an exchange is far slower than its bytes need when

1. it moves at most `SMALL_BYTES` (64 KiB) and takes at least `SLOW_US` (100 us): at any link speed NCCL reaches,
   such a message is carried in well under `SLOW_US` (a few to a few tens of us of latency plus bytes over tens
   of GB/s), so the time is latency or stalls, not bytes; or
2. the link's peak is known (`peak_gbps`, GB/s per rank) and the exchange takes at least `SLOW_US` while its bus
   bandwidth is below `LOW_SHARE` (10 %) of that peak.

Short exchanges (under `SLOW_US`) are never named: their cost is small whatever their bandwidth.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

__all__ = [
    "SMALL_BYTES",
    "SLOW_US",
    "LOW_SHARE",
    "collective_kind",
    "bus_factor",
    "bandwidth",
    "latency_bound",
]

#: at most this many bytes and at least SLOW_US: the exchange's time is not its bytes' (rule 1)
SMALL_BYTES = 64 * 1024
#: exchanges shorter than this (us) are never named latency- or bandwidth-bound
SLOW_US = 100.0
#: below this share of the link's peak bus bandwidth an exchange of SLOW_US or more is named (rule 2)
LOW_SHARE = 0.10

#: canonical kind -> how its bus factor follows the group size n
_FACTORS = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
}
_WORDS = (  # (pattern over the squeezed lower-case name, kind): first match wins; "reduce_scatter" before "reduce"
    (re.compile(r"allreduce"), "all_reduce"),
    (re.compile(r"reducescatter"), "reduce_scatter"),
    (re.compile(r"allgather"), "all_gather"),
    (re.compile(r"alltoall"), "all_to_all"),
    (re.compile(r"broadcast|bcast"), "broadcast"),
    (re.compile(r"sendrecv"), "send"),
    (re.compile(r"scatter"), "scatter"),
    (re.compile(r"gather"), "gather"),
    (re.compile(r"reduce"), "reduce"),
    (re.compile(r"recv"), "recv"),
    (re.compile(r"send"), "send"),
)


def collective_kind(name: str) -> str | None:
    """The canonical kind of a collective's name in any of its spellings ("nccl:all_reduce", "allreduce",
    "_allgather_base", "reduce_scatter_tensor_coalesced", "alltoall_base", "mpi:ibcast", "gloo:broadcast"), None
    for what moves no data by a known pattern (barrier, wait) or is not a collective name."""
    text = str(name).strip().lower()
    text = text.rsplit(":", 1)[-1]  # "nccl:all_reduce" -> "all_reduce"
    squeezed = re.sub(r"[^a-z]", "", text)
    for pattern, kind in _WORDS:
        if pattern.search(squeezed):
            return kind
    return None


def bus_factor(kind: Any, n: Any) -> np.ndarray:
    """NCCL-tests' bus factor per collective (float array, broadcast over `kind` and `n`): `kind` a name or an
    array of names (any spelling `collective_kind` reads), `n` the group size (scalar or array). NaN where the kind
    is unknown or n < 1."""
    n_arr = np.asarray(n, dtype=np.float64)
    kinds = np.asarray(kind, dtype=object)
    shape = np.broadcast_shapes(n_arr.shape, kinds.shape)
    n_b = np.broadcast_to(n_arr, shape).ravel().tolist()
    names = np.broadcast_to(kinds, shape).ravel().tolist()
    known = {k: collective_kind(k) if k else None for k in set(names)}
    out = np.full(len(n_b), np.nan)
    for i, (k, size) in enumerate(zip(names, n_b)):
        kk = known[k]
        if kk is not None and size >= 1:
            out[i] = _FACTORS[kk](size)
    return out.reshape(shape)


def bandwidth(nbytes: Any, seconds: Any, kind: Any, n: Any) -> tuple[np.ndarray, np.ndarray]:
    """(algbw, busbw) in bytes per second, float arrays broadcast over the arguments: bytes / seconds and that
    times `bus_factor(kind, n)`. NaN where bytes < 0 (unknown), seconds <= 0, or (busbw only) the factor is
    unknown."""
    b = np.asarray(nbytes, dtype=np.float64)
    s = np.asarray(seconds, dtype=np.float64)
    b, s = np.broadcast_arrays(b, s)
    ok = (b >= 0) & (s > 0)
    alg = np.full(b.shape, np.nan)
    np.divide(b, s, out=alg, where=ok)
    bus = alg * bus_factor(kind, n)
    return alg, bus


def latency_bound(
    nbytes: Any, seconds: Any, kind: Any = None, n: Any = None, peak_gbps: float | None = None
) -> np.ndarray:
    """Boolean array: the exchanges far slower than their bytes need (the module's rule): at least SLOW_US long
    and either at most SMALL_BYTES, or (with `peak_gbps`, the link's peak bus bandwidth in GB/s, and a known kind
    and group size) a bus bandwidth below LOW_SHARE of that peak. Unknown bytes (< 0) are never named."""
    b = np.asarray(nbytes, dtype=np.float64)
    s = np.asarray(seconds, dtype=np.float64)
    b, s = np.broadcast_arrays(b, s)
    slow = (b >= 0) & (s * 1e6 >= SLOW_US)
    out = slow & (b <= SMALL_BYTES)
    if peak_gbps is not None and peak_gbps > 0 and kind is not None and n is not None:
        _, bus = bandwidth(b, s, kind, n)
        with np.errstate(invalid="ignore"):
            out = out | (slow & (bus < LOW_SHARE * peak_gbps * 1e9))
    return out
