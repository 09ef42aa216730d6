"""The telemetry file of the flight recorder: one JSON object per line, appended by one rank, and its reader.

Why JSON lines: a killed job leaves whole lines (each record is one `write` of a whole line to a file opened
for appending), any tool reads them, and a record of a step costs about 120 bytes. The reader decodes a whole
file at once with msgspec (the step lines as one typed array) into numpy columns, 100k steps of a rank in about
0.6 s (docs/flight-recorder.md, "Measured"); it keeps an incomplete last line for later (the file may still
grow). A local file also has a binary twin (`BIN_SUFFIX`, `BIN_DTYPE`): the same step records fixed-width, from which
`decode_binary` takes whole columns without decoding their lines (the JSON stays the complete record).

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
import struct
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
    out, fields, at, ms = _parse(path, data)
    return _assemble(out, fields, at, ms)


def _parse(path: str, data: bytes) -> tuple[RankTelemetry, dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """The JSON lines of `data` -> (RankTelemetry with its events and bad lines, the step fields as arrays by key,
    the GPU pairs' steps and ms in file order): the part of `decode` shared with `decode_binary`'s tail."""
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
    fields = {
        "s": np.fromiter((r.s for r in steps), np.int64, n),
        "t": np.fromiter((r.t for r in steps), np.float64, n),
    }
    for key in (*COLUMNS, "dm"):  # float32: 7 digits are enough for ms and MiB, and half the memory
        fields[key] = np.fromiter((getattr(r, key) for r in steps), np.float32, n)
    pairs = [p for r in steps if r.g for p in r.g]
    at = np.array([p[0] for p in pairs], np.int64)
    ms = np.array([p[1] for p in pairs], np.float64)
    return out, fields, at, ms


def _assemble(out: RankTelemetry, fields: dict[str, np.ndarray], at: np.ndarray, ms: np.ndarray) -> RankTelemetry:
    """`out` given its step columns from `fields` and its GPU times from the pairs (`at`, `ms`): a pair whose step
    is not among the steps is an orphan (it belongs to an earlier part of a file read in parts)."""
    out.steps = fields["s"]
    n = len(out.steps)
    out.start_s = fields["t"]
    out.columns = {name: fields[key] for key, name in COLUMNS.items()}
    out.device_mib = fields["dm"]
    gpu = np.full(n, np.nan, np.float32)
    if len(at) and n:
        pos = np.searchsorted(out.steps, at)
        ok = (pos < n) & (out.steps[np.minimum(pos, n - 1)] == at)
        gpu[pos[ok]] = ms[ok]
        out.orphan_gpu = [(int(a), float(b)) for a, b in zip(at[~ok], ms[~ok])]
    elif len(at):
        out.orphan_gpu = [(int(a), float(b)) for a, b in zip(at, ms)]
    out.gpu_ms = gpu
    return out


# --- the binary twin: {worker}.telemetry.bin ---------------------------------------------------------------------
#: the binary twin of a local telemetry file: ``{worker}{BIN_SUFFIX}``
BIN_SUFFIX = ".telemetry.bin"
#: the binary file's first bytes; then a little-endian u32 n and n bytes of a JSON header (``{"v", "fields"}``)
BIN_MAGIC = b"GSTELEM\x00"
BIN_VERSION = 1
#: one record (little-endian, packed): ``k`` 0 a step without a GPU pair, 1 a step with its last pair (``gs``,
#: ``gms``), 2 one of its other pairs, written before the step's record (so a whole step record follows all of its
#: pairs; pairs after the last step record, of a killed job, are left out); the step's values as its JSON line has
#: them (rounded alike, NaN where the line has no key); ``jo``/``jn``: the byte offset and length of the step's
#: line in the JSON file
BIN_DTYPE = np.dtype(
    [("k", "u1"), ("s", "<i8"), ("t", "<f8")]
    + [(k, "<f4") for k in ("w", "d", "h", "c", "o", "m", "dm")]
    + [("gs", "<i8"), ("gms", "<f8"), ("jo", "<u8"), ("jn", "<u4")]
)
_BIN_STRUCT = struct.Struct("<Bqd7fqdQI")
assert _BIN_STRUCT.size == BIN_DTYPE.itemsize
_NAN = float("nan")


def bin_header() -> bytes:
    """The binary file's header: magic, length, JSON (the version and the record's fields, so a reader can check
    that it knows them)."""
    meta = json.dumps({"v": BIN_VERSION, "fields": [[n, BIN_DTYPE[n].str] for n in BIN_DTYPE.names or ()]}).encode()
    return BIN_MAGIC + struct.pack("<I", len(meta)) + meta


def encode_step_bin(
    offset: int,
    length: int,
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
    """The binary record(s) of the step whose JSON line (`encode_step`, same arguments) lies at `offset` and is
    `length` bytes long: the numbers rounded as the line writes them, so that both read back equal."""

    def r(v: float | None, digits: int) -> float:
        return _NAN if v is None else round(v, digits)

    pairs = gpu or []
    nan7 = (_NAN,) * 7
    out = [_BIN_STRUCT.pack(2, step, _NAN, *nan7, s, round(ms, 3), offset, length) for s, ms in pairs[:-1]]
    gs, gms = (pairs[-1][0], round(pairs[-1][1], 3)) if pairs else (-1, _NAN)
    vals = (r(wall_ms, 3), r(data_ms, 3), r(host_ms, 3), r(comm_ms, 3), r(optimizer_ms, 3), r(rss_mib, 1))
    out.append(
        _BIN_STRUCT.pack(1 if pairs else 0, step, round(start_s, 6), *vals, r(device_mib, 1), gs, gms, offset, length)
    )
    return b"".join(out)


def decode_binary(path: str, data: bytes, bdata: bytes) -> RankTelemetry | None:
    """A telemetry file's bytes (`data`) read with its binary twin (`bdata`): the step columns straight from the
    fixed-width records (np.frombuffer), only the few other lines (header, captures, end) and the lines after the
    last whole record (a job killed between the two writes, or still running) decoded as JSON. Equal to
    `decode(path, data)`; None when the twin does not match the JSON file (another version, a rewritten file,
    lines it does not cover): the caller decodes the JSON then."""
    if not bdata.startswith(BIN_MAGIC) or len(bdata) < len(BIN_MAGIC) + 4:
        return None
    (hlen,) = struct.unpack_from("<I", bdata, len(BIN_MAGIC))
    start = len(BIN_MAGIC) + 4 + hlen
    try:
        meta = json.loads(bdata[len(BIN_MAGIC) + 4 : start])
        dtype = np.dtype([(str(n), str(t)) for n, t in meta["fields"]])
    except (ValueError, TypeError, KeyError):
        return None
    if meta.get("v") != BIN_VERSION or dtype != BIN_DTYPE:
        return None
    count = max(0, len(bdata) - start) // dtype.itemsize  # a torn last record (a killed job) is left out
    rec = np.frombuffer(bdata, dtype, count, start)
    end = data.rfind(b"\n") + 1  # the whole lines
    past = np.flatnonzero(rec["jo"] + rec["jn"].astype(np.uint64) > end)
    if len(past):  # records of lines not in `data` (a running job: the twin read after the JSON)
        rec = rec[: past[0]]
    whole = np.flatnonzero(rec["k"] < 2)
    rec = rec[: whole[-1] + 1] if len(whole) else rec[:0]  # pairs without their step's record: torn off
    kind = rec["k"]
    at_step = None if (kind < 2).all() else np.flatnonzero(kind < 2)  # fields first, then rows: cheaper than rows

    def col(name: str, rows: np.ndarray | None = at_step) -> np.ndarray:
        return np.ascontiguousarray(rec[name] if rows is None else rec[name][rows])

    steps = {name: col(name) for name in ("s", "t", *COLUMNS, "dm", "jo", "jn")}
    jo, jn = steps["jo"].astype(np.int64), steps["jn"].astype(np.int64)
    stop = jo + jn
    if len(jo):
        if stop[-1] > end or (len(jo) > 1 and (jo[1:] < stop[:-1]).any()) or (jn < 6).any():
            return None
        raw = np.frombuffer(data, np.uint8, end)
        if (raw[jo] != ord("{")).any() or (raw[stop - 1] != ord("\n")).any():
            return None
        msgspec, _, step_type = _decoder()
        for i in {0, len(jo) - 1}:  # the first and the last line say the same as their records
            try:
                line = msgspec.json.decode(data[jo[i] : stop[i]], type=step_type)
            except (msgspec.DecodeError, msgspec.ValidationError):
                return None
            if line.s != steps["s"][i] or not np.array_equal(np.float32(line.w), steps["w"][i], equal_nan=True):
                return None
    # the lines between step lines (header, captures), then those after the last record: decoded as JSON
    gap_from = np.concatenate([[0], stop])
    gap_to = np.concatenate([jo, [end]])
    has = gap_to[:-1] > gap_from[:-1]
    between = b"".join(data[a:b] for a, b in zip(gap_from[:-1][has], gap_to[:-1][has]))
    if b'\n{"s":' in b"\n" + between:  # a step line without a record: not this file's twin
        return None
    out, tail, at2, ms2 = _parse(path, between + data[gap_from[-1] : end])
    fields = {"s": np.concatenate([steps["s"], tail["s"]]), "t": np.concatenate([steps["t"], tail["t"]])}
    for key in (*COLUMNS, "dm"):
        fields[key] = np.concatenate([steps[key], tail[key]])
    with_pair = np.flatnonzero(kind > 0)
    at = np.concatenate([col("gs", with_pair), at2]).astype(np.int64)
    ms = np.concatenate([col("gms", with_pair), ms2]).astype(np.float64)
    return _assemble(out, fields, at, ms)


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
