"""The streaming gunzip: ISA-L and zlib give the same bytes, bad streams raise, and the size hint."""

import gzip
import io
import os
import zlib

import pytest

from profiler_core.trace.read import gunzip


def _impls():
    out = [zlib]
    fast = gunzip._implementation("isal")
    if fast is not zlib:
        out.append(fast)
    return out


@pytest.mark.parametrize("impl", _impls(), ids=lambda m: m.__name__)
def test_every_implementation_inflates_concatenated_members_exactly(impl):
    parts = [os.urandom(1000).hex().encode() * 40, b'{"traceEvents": []}', b"x" * 300000]
    data = b"".join(gzip.compress(p) for p in parts)
    out = b"".join(gunzip.gunzip_blocks(io.BytesIO(data), chunk=4096, impl=impl))
    assert out == b"".join(parts)


@pytest.mark.parametrize("impl", _impls(), ids=lambda m: m.__name__)
def test_truncated_and_corrupt_streams_raise(impl):
    data = gzip.compress(b"abc" * 100000)
    with pytest.raises(gunzip.TruncatedGzip):
        b"".join(gunzip.gunzip_blocks(io.BytesIO(data[:-20]), impl=impl))
    bad = data[:10] + bytes(b ^ 0xFF for b in data[10:200]) + data[200:]
    with pytest.raises(gunzip.ERRORS):
        b"".join(gunzip.gunzip_blocks(io.BytesIO(bad), impl=impl))


def test_the_environment_can_force_zlib(monkeypatch):
    monkeypatch.setenv("GPUSCOPE_GUNZIP", "zlib")
    assert gunzip._implementation() is zlib


def test_size_hint(tmp_path):
    text = b'{"traceEvents": [' + b'{"ph": "X"},' * 5000 + b"{}]}"
    one = tmp_path / "one.json.gz"
    one.write_bytes(gzip.compress(text))
    assert gunzip.uncompressed_size_hint(str(one)) == len(text)  # ISIZE of a single member
    plain = tmp_path / "plain.json"
    plain.write_bytes(text)
    assert gunzip.uncompressed_size_hint(str(plain)) == len(text)
    many = tmp_path / "many.json.gz"  # the last member's ISIZE is below the file's size: a guess
    many.write_bytes(gzip.compress(os.urandom(20000)) + gzip.compress(b"]}"))
    assert gunzip.uncompressed_size_hint(str(many)) == 8 * os.path.getsize(many)
