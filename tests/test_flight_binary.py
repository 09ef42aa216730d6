"""The telemetry file's binary twin (`{worker}.telemetry.bin`, profiler_core/flight/format.py): the reader's fast
path must answer exactly what decoding the JSON lines answers, on files written by the recorder's own sink, with a
job killed mid-record (a torn binary record, JSON lines past the last record, a torn last line), and must step
aside (None: the JSON is decoded) when the twin does not belong to the JSON file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from profiler_core.flight import format
from profiler_core.flight.recorder import Recorder, _LocalSink
from tb_plugin import telemetry


def _write(root: Path, steps: int = 300, seed: int = 0, name: str = "w0") -> Path:
    """A rank's file through the recorder's sink: missing keys, 0-3 GPU pairs (some for steps not in the file),
    captures between steps, lines written in batches as `flush_steps` does, and the end."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}{format.SUFFIX}"
    sink = _LocalSink(str(path))
    sink.write(format.encode_event({"k": "start", "v": 1, "rank": seed, "world": 2, "worker": name}))
    held: list[tuple[bytes, tuple]] = []
    for s in range(steps):
        npairs = int(rng.integers(0, 4))
        gpu = [(int(s - 1 - i if rng.random() < 0.9 else 10_000 + s), float(rng.gamma(2, 3))) for i in range(npairs)]
        args = (
            s,
            1.7e9 + s * 0.0412345678,
            float(rng.gamma(2, 5)),
            float(rng.random()),
            float(rng.gamma(2, 4)),
            500 + float(rng.random()) * 100,
            float(rng.random() * 3) if s % 3 else None,
            float(rng.random()) if s % 5 else None,
            float(rng.random() * 1e4) if s % 2 else None,
            gpu or None,
        )
        held.append((format.encode_step(*args), args))
        if len(held) == int(rng.integers(1, 4)) or s == steps - 1:
            sink.write(b"".join(ln for ln, _ in held), [(len(ln), a) for ln, a in held])
            held = []
        if s in (40, 41, 200):
            sink.write(format.encode_event({"k": "capture", "s": s, "dir": f"capture_{s}", "why": "test"}))
    sink.write(format.encode_event({"k": "end", "s": steps - 1, "device": "none"}))
    sink.close()
    return path


def _twin(path: Path) -> Path:
    return path.with_name(path.name[: -len(format.SUFFIX)] + format.BIN_SUFFIX)


def _same(a: format.RankTelemetry, b: format.RankTelemetry) -> None:
    for name in ("steps", "start_s", "gpu_ms", "device_mib"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), name
    assert a.columns.keys() == b.columns.keys()
    for k in a.columns:
        assert a.columns[k].dtype == b.columns[k].dtype and np.array_equal(a.columns[k], b.columns[k], equal_nan=True)
    assert (a.header, a.captures, a.ended, a.end, a.bad_lines) == (b.header, b.captures, b.ended, b.end, b.bad_lines)
    assert a.orphan_gpu == b.orphan_gpu


def test_binary_equals_json(tmp_path: Path) -> None:
    path = _write(tmp_path)
    data, bdata = path.read_bytes(), _twin(path).read_bytes()
    fast = format.decode_binary(str(path), data, bdata)
    assert fast is not None
    slow = format.decode(str(path), data)
    _same(fast, slow)
    assert len(slow.steps) == 300 and slow.orphan_gpu and len(slow.captures) == 3 and slow.ended


@pytest.mark.parametrize("cut_bin", [0, 1, 7, 73 * 5 + 30])
@pytest.mark.parametrize("cut_json", [0, 1, 250])
def test_killed_job(tmp_path: Path, cut_bin: int, cut_json: int) -> None:
    """A job killed mid-write: a torn binary record (left out), steps whose lines were written but not their
    records (decoded as JSON), a torn last line (left out, as the JSON reader does)."""
    path = _write(tmp_path)
    data, bdata = path.read_bytes(), _twin(path).read_bytes()
    data = data[: len(data) - cut_json]
    bdata = bdata[: len(bdata) - cut_bin]
    fast = format.decode_binary(str(path), data, bdata)
    assert fast is not None
    _same(fast, format.decode(str(path), data))


def test_a_twin_that_does_not_match_is_not_used(tmp_path: Path) -> None:
    a = _write(tmp_path / "a", seed=1)
    b = _write(tmp_path / "b", seed=2, steps=200)
    data_a, bin_a, bin_b = a.read_bytes(), _twin(a).read_bytes(), _twin(b).read_bytes()
    assert format.decode_binary(str(a), data_a, bin_b) is None  # another rank's twin
    assert format.decode_binary(str(b), b.read_bytes(), bin_a) is None  # a longer twin of another file
    part = format.decode_binary(str(a), data_a[:1000], bin_a)  # a running job: the twin read after the JSON
    assert part is not None
    _same(part, format.decode(str(a), data_a[:1000]))
    assert format.decode_binary(str(a), data_a, b"not a twin") is None
    assert format.decode_binary(str(a), data_a, bin_a.replace(b'"v": 1', b'"v": 9', 1)) is None


def test_reader_uses_the_twin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin's reader answers the same through the twin as without it (the twins removed), and through the
    twin decodes no step line as JSON."""
    monkeypatch.setenv("GPUSCOPE_CACHE", "0")
    for r in range(3):
        _write(tmp_path, seed=r, name=f"h_rank{r:05d}")
    telemetry._files.clear()
    telemetry._jobs.clear()
    parsed: list[int] = []
    real = format._parse

    def counting(path: str, data: bytes) -> tuple:
        parsed.append(data.count(b'{"s":'))  # the step lines decoded as JSON
        return real(path, data)

    monkeypatch.setattr(format, "_parse", counting)
    job = telemetry.load(str(tmp_path))
    fast = (telemetry.summary(job), telemetry.heatmap(job, "gpu_ms", 50))
    assert parsed == [0, 0, 0]
    for f in tmp_path.glob("*" + format.BIN_SUFFIX):
        f.unlink()
    telemetry._files.clear()
    telemetry._jobs.clear()
    job = telemetry.load(str(tmp_path))
    assert (telemetry.summary(job), telemetry.heatmap(job, "gpu_ms", 50)) == fast
    telemetry._files.clear()
    telemetry._jobs.clear()


@pytest.mark.parametrize("flush_steps", [1, 4])
def test_recorder_writes_the_twin(tmp_path: Path, flush_steps: int) -> None:
    with Recorder(tmp_path, rules=None, worker="w0", flush_steps=flush_steps) as rec:
        for _ in range(23):
            rec.step()
    path = tmp_path / f"w0{format.SUFFIX}"
    data, bdata = path.read_bytes(), _twin(path).read_bytes()
    fast = format.decode_binary(str(path), data, bdata)
    assert fast is not None and len(fast.steps) == 23 and fast.ended
    _same(fast, format.decode(str(path), data))
    assert (len(bdata) - bdata.index(b"]]}") - 3) == 23 * format.BIN_DTYPE.itemsize
