"""The telemetry file of the flight recorder: one JSON object per line, appended by one rank, and its reader.

Why JSON lines: a killed job leaves whole lines (each record is one `write` of a whole line to a file opened
for appending), any tool reads them, and a record of a step costs about 120 bytes. The reader decodes a whole
file at once with msgspec (the step lines as one typed array) into numpy columns, so the plugin reads 100k steps
of a rank in tens of milliseconds; it keeps an incomplete last line for later (the file may still grow).

Kinds of line (docs/flight-recorder.md lists every field):
- the header, first: ``{"k": "start", "v": 1, "rank", "world", "worker", "host", "pid", "t0", "device", "comm",
  "flush", "rules"}``;
- a step (no ``k``; ``s`` always first): ``{"s": step, "t": start (Unix s), "w": wall ms, "d": data-wait ms,
  "h": host CPU ms, "c": collectives ms, "o": optimizer ms, "m": peak RSS MiB, "dm": device peak MiB,
  "g": [[step, GPU ms], ...]}`` (``c``, ``o``, ``dm``, ``g`` only when measured; ``g`` carries the GPU times of
  earlier steps whose device events completed since the last record: the device is never waited for);
- a capture: ``{"k": "capture", "s": step, "rule", "why", "ranks", "healthy", "steps", "dir", "tool"}``;
- the end: ``{"k": "end", "s": last step, "t", "device"}`` (the device library found: torch, cupy, pycuda or none).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: the version of the record format (the header's "v")
VERSION = 1
#: the telemetry file of a worker: ``{worker}{SUFFIX}`` beside its traces
SUFFIX = ".telemetry.jsonl"
#: the columns of a rank's steps, in `RankTelemetry.columns`: the record's key -> the column's name
COLUMNS = {"w": "wall_ms", "d": "data_ms", "h": "host_ms", "c": "comm_ms", "o": "optimizer_ms", "m": "rss_mib"}


@dataclass
class RankTelemetry:
    """One telemetry file decoded: its header, per-step columns (numpy float32, NaN where not measured; the start
    times float64) and events."""

    path: str
    header: dict = field(default_factory=dict)
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    start_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    gpu_ms: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    device_mib: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    captures: list[dict] = field(default_factory=list)
    ended: bool = False
    end: dict = field(default_factory=dict)  # the end record (its "device": the library found, "none" on a CPU job)
    bad_lines: int = 0
    #: GPU times given for steps that are not in this part (a file read in parts: they belong to an earlier part)
    orphan_gpu: list[tuple[int, float]] = field(default_factory=list)

    @property
    def rank(self) -> int:
        r = self.header.get("rank")
        return int(r) if isinstance(r, int) else -1


_decoders: dict[str, Any] = {}


def _decoder() -> tuple[Any, Any, Any]:
    """(msgspec, the step lines' typed decoder, the Step type), made on first use: the recorder itself (writing)
    needs only the standard library and numpy, so that it runs in any training environment."""
    if not _decoders:
        import msgspec

        class Step(msgspec.Struct, omit_defaults=True):
            """One step's record (the file's keys: short, because there is one per step per rank)."""

            s: int
            t: float = 0.0
            w: float = float("nan")
            d: float = float("nan")
            h: float = float("nan")
            c: float = float("nan")
            o: float = float("nan")
            m: float = float("nan")
            dm: float = float("nan")
            g: list[tuple[int, float]] = []

        _decoders.update(msgspec=msgspec, steps=msgspec.json.Decoder(list[Step]), step=Step)
    return _decoders["msgspec"], _decoders["steps"], _decoders["step"]


def decode(path: str, data: bytes) -> RankTelemetry:
    """A telemetry file's bytes -> RankTelemetry. An incomplete last line (a job killed mid-write, or a file still
    written) is left out; lines that do not decode are counted in `bad_lines`, never an error."""
    msgspec, steps_decoder, step_type = _decoder()
    out = RankTelemetry(path)
    end = data.rfind(b"\n")
    lines = data[: end + 1].split(b"\n")[:-1] if end >= 0 else []
    step_lines = [ln for ln in lines if ln.startswith(b'{"s":')]
    other = [ln for ln in lines if ln and not ln.startswith(b'{"s":')]
    try:
        steps = steps_decoder.decode(b"[" + b",".join(step_lines) + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError):
        steps = []
        for ln in step_lines:
            try:
                steps.append(msgspec.json.decode(ln, type=step_type))
            except (msgspec.DecodeError, msgspec.ValidationError):
                out.bad_lines += 1
    for ln in other:
        try:
            rec: Any = msgspec.json.decode(ln)
        except msgspec.DecodeError:
            out.bad_lines += 1
            continue
        if not isinstance(rec, dict):
            out.bad_lines += 1
        elif rec.get("k") == "start" and not out.header:
            out.header = rec
        elif rec.get("k") == "capture":
            out.captures.append(rec)
        elif rec.get("k") == "end":
            out.ended, out.end = True, rec
    n = len(steps)
    out.steps = np.fromiter((r.s for r in steps), np.int64, n)
    out.start_s = np.fromiter((r.t for r in steps), np.float64, n)
    for key, name in COLUMNS.items():  # float32: 7 digits are enough for ms and MiB, and half the memory
        out.columns[name] = np.fromiter((getattr(r, key) for r in steps), np.float32, n)
    out.device_mib = np.fromiter((r.dm for r in steps), np.float32, n)
    gpu = np.full(n, np.nan, np.float32)
    pairs = [p for r in steps if r.g for p in r.g]
    if pairs and n:
        at = np.array([p[0] for p in pairs], np.int64)
        ms = np.array([p[1] for p in pairs], np.float64)
        pos = np.searchsorted(out.steps, at)
        ok = (pos < n) & (out.steps[np.minimum(pos, n - 1)] == at)
        gpu[pos[ok]] = ms[ok]
        out.orphan_gpu = [(int(a), float(b)) for a, b in zip(at[~ok], ms[~ok])]
    elif pairs:
        out.orphan_gpu = [(int(a), float(b)) for a, b in pairs]
    out.gpu_ms = gpu
    return out


def encode_step(
    step: int,
    start_s: float,
    wall_ms: float,
    data_ms: float,
    host_ms: float,
    rss_mib: float,
    comm_ms: float | None = None,
    optimizer_ms: float | None = None,
    device_mib: float | None = None,
    gpu: list[tuple[int, float]] | None = None,
) -> bytes:
    """One step's line (with its newline). Written by hand, not by a JSON encoder: a handful of numbers, and the
    reader finds step lines by their first key."""
    parts = [f'{{"s":{step},"t":{start_s:.6f},"w":{wall_ms:.3f},"d":{data_ms:.3f},"h":{host_ms:.3f},"m":{rss_mib:.1f}']
    if comm_ms is not None:
        parts.append(f',"c":{comm_ms:.3f}')
    if optimizer_ms is not None:
        parts.append(f',"o":{optimizer_ms:.3f}')
    if device_mib is not None:
        parts.append(f',"dm":{device_mib:.1f}')
    if gpu:
        parts.append(',"g":[' + ",".join(f"[{s},{ms:.3f}]" for s, ms in gpu) + "]")
    parts.append("}\n")
    return "".join(parts).encode()


def encode_event(record: dict) -> bytes:
    """A header, capture or end line (with its newline; rare lines: the standard library's encoder)."""
    return json.dumps(record, separators=(",", ":"), default=str).encode() + b"\n"
