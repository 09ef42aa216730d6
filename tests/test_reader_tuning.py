"""The reader's speed helpers: Raw -> bytes in bulk, and malloc settings switched between parsing and views."""
import json

import msgspec

from profiler_core.trace import reader


def test_raw_bytes_matches_bytes_including_nul_and_empty():
    raws = [msgspec.Raw(b"[[1,2],[]]"), msgspec.Raw(b""), msgspec.Raw(b'["float"]')]
    assert reader._raw_bytes(raws) == [b"[[1,2],[]]", b"", b'["float"]']
    odd = [msgspec.Raw(b"a\0b"), msgspec.Raw(b"c")]  # a NUL would break the join/split: slow path
    assert reader._raw_bytes(odd) == [b"a\0b", b"c"]
    assert reader._raw_bytes([]) == []


class _FakeLibc:
    def __init__(self):
        self.calls = []

    def mallopt(self, param, value):
        self.calls.append((param, value))

    def malloc_trim(self, pad):
        self.calls.append(("trim", pad))


def _trace(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0,
         "args": {"Input Dims": [[2, 2]], "Input type": ["float"]}}]}))
    return path


def test_read_trace_tunes_for_views_then_restores_parsing_settings(tmp_path, monkeypatch):
    fake = _FakeLibc()
    monkeypatch.setattr(reader, "_LIBC", fake)
    monkeypatch.setattr(reader, "_VIEWS_TUNED", False)
    t = reader.read_trace(_trace(tmp_path))
    assert t.events["input_dims"].tolist() == ["[[2,2]]"]
    assert fake.calls[-2:] == [(-3, reader.VIEWS_MMAP_THRESHOLD), (-1, reader.VIEWS_MMAP_THRESHOLD)]
    assert reader._VIEWS_TUNED
    fake.calls.clear()
    reader.read_trace(_trace(tmp_path))  # the next read parses under the reader's own settings again
    assert fake.calls[:2] == [(-3, reader.MMAP_THRESHOLD), (-1, reader._GLIBC_TRIM_THRESHOLD)]
    assert fake.calls[-2:] == [(-3, reader.VIEWS_MMAP_THRESHOLD), (-1, reader.VIEWS_MMAP_THRESHOLD)]


def test_no_malloc_tuning_without_glibc(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "_LIBC", False)
    monkeypatch.setattr(reader, "_VIEWS_TUNED", False)
    reader.read_trace(_trace(tmp_path))
    reader.tune_memory_for_views()
    assert not reader._VIEWS_TUNED
