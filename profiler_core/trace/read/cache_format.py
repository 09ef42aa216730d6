"""The on-disk format of the parse cache: a `TraceData` as data only, so reading it runs no code.

    MAGIC | u64 n | msgpack key (n bytes) | u64 m | msgpack header (m bytes) | padding |
    raw numpy buffers (64-byte aligned)

The key (small: `trim` reads only it) names the trace and its version. The header (decoded by
msgspec into plain dicts, lists, str and numbers: never objects) holds the entry's key, the plain
fields of `TraceData`, per DataFrame column where its buffer lies and its dtype, and the sparse
columns (`TraceData.sparse`: each distinct row-position array once, then per column its values' buffer
or codes and texts, rows and missing value). Buffers are
read back with `np.frombuffer` for numeric dtypes only (no object dtype, so no pickle); categories
and object columns are msgpack lists. Anything unexpected raises
`CacheFormatError`; the caller drops the entry.
"""

from __future__ import annotations

import dataclasses
from typing import IO, Any

import msgspec
import numpy as np

from profiler_core.trace.model import TraceData, clean_device_properties, constant_column
from profiler_core.trace.sparse import SparseColumn

MAGIC = b"GPUSCOPE-TRACE-CACHE-2\n"
_ALIGN = 64
_LEN_BYTES = 8
#: a header larger than this is damage, not data (the buffers hold the bulk)
_MAX_HEADER = 1 << 30
_NUMERIC_KINDS = "biuf"
#: TraceData's plain field annotations -> the type a decoded value must have
_PLAIN_TYPES = {"str": str, "int": int, "dict": dict, "list": list, "tuple": tuple}


class CacheFormatError(ValueError):
    """A cache file that is not a valid entry (damaged, foreign or of another version)."""


def _pad(n: int) -> int:
    return -n % _ALIGN


def _numeric_dtype(text: Any) -> np.dtype:
    """The numpy dtype named by `text`, only if it is a plain numeric (never object) type."""
    if not isinstance(text, str) or len(text) > 8:
        raise CacheFormatError(f"bad dtype {text!r}")
    try:
        dt = np.dtype(text)
    except TypeError:
        raise CacheFormatError(f"bad dtype {text!r}") from None
    if dt.kind not in _NUMERIC_KINDS or dt.hasobject or dt.fields is not None or dt.shape:
        raise CacheFormatError(f"dtype {text!r} is not numeric")
    return dt


def _tupled(value: Any) -> Any:
    return tuple(_tupled(v) for v in value) if isinstance(value, (list, tuple)) else value


# ------------------------------------------------------------------------------------- writing
def _add(arr: np.ndarray, arrays: list, offset: int) -> tuple[dict, int]:
    """The spec of a numeric buffer appended to `arrays`, and the offset after it."""
    arr = np.ascontiguousarray(arr)
    _numeric_dtype(arr.dtype.str)
    spec = {"dtype": arr.dtype.str, "offset": offset, "count": int(arr.size)}
    arrays.append(arr)
    return spec, offset + arr.nbytes + _pad(arr.nbytes)


def _sparse_spec(columns: dict, arrays: list, offset: int) -> tuple[dict, int]:
    """The header description of `TraceData.sparse` (a shared row array stored once)."""
    rows: list = []
    row_of: dict = {}
    specs = []
    for name, col in columns.items():
        if not isinstance(col, SparseColumn):
            raise CacheFormatError(f"sparse column {name!r} is not a SparseColumn")
        if id(col.rows) not in row_of:
            row_of[id(col.rows)] = len(rows)
            spec, offset = _add(col.rows, arrays, offset)
            rows.append(spec)
        values, offset = _add(col.values, arrays, offset)
        specs.append(
            {
                "name": name,
                "n": col.n,
                "rows": row_of[id(col.rows)],
                "values": values,
                "missing": col.missing,
                "categories": None if col.categories is None else col.categories.tolist(),
            }
        )
    return {"rows": rows, "columns": specs}, offset


def _frame_spec(df: Any, arrays: list, offset: int) -> tuple[dict, int]:
    """The header description of one DataFrame; its buffers are appended to `arrays`."""
    import pandas as pd

    index = df.index
    if not (isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1):
        raise CacheFormatError("only frames with a default index can be cached")
    columns = []

    def add(arr: np.ndarray) -> dict:
        nonlocal offset
        spec, offset = _add(arr, arrays, offset)
        return spec

    for name in df.columns:
        col = df[name]
        dtype = col.dtype
        if isinstance(dtype, pd.CategoricalDtype):
            cats = dtype.categories
            spec = {
                "kind": "category",
                "codes": add(col.cat.codes.to_numpy()),
                "categories": cats.tolist(),
                "ordered": bool(dtype.ordered),
                "cat_dtype": cats.dtype.str if cats.dtype.kind in _NUMERIC_KINDS else "object",
            }
        elif isinstance(dtype, np.dtype) and dtype.kind in _NUMERIC_KINDS:
            values = col.to_numpy(copy=False)
            if values.strides == (0,) and len(values) > 0:
                spec = {"kind": "constant", "dtype": values.dtype.str, "value": values[0].item()}
            else:
                spec = {"kind": "array", **add(values)}
        elif dtype == object:  # noqa: E721 - a numpy or pandas dtype equal to object's, not a type check
            spec = {"kind": "object", "values": col.tolist()}
        else:
            raise CacheFormatError(f"column {name!r} of dtype {dtype} cannot be cached")
        spec["name"] = name
        columns.append(spec)
    return {"rows": len(df), "columns": columns}, offset


def dump(f: IO[bytes], key: list, t: TraceData) -> None:
    """Write `t` with its `key` to the binary file `f` (CacheFormatError if it cannot be)."""
    import pandas as pd

    arrays: list = []
    offset = 0
    fields, frames = {}, {}
    sparse: dict = {"rows": [], "columns": []}
    for fld in dataclasses.fields(t):
        value = getattr(t, fld.name)
        if isinstance(value, pd.DataFrame):
            frames[fld.name], offset = _frame_spec(value, arrays, offset)
        elif fld.name == "sparse":
            sparse, offset = _sparse_spec(value, arrays, offset)
        else:
            fields[fld.name] = value
    try:
        key_raw = msgspec.msgpack.encode(key)
        header = msgspec.msgpack.encode({"fields": fields, "frames": frames, "sparse": sparse})
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as e:
        raise CacheFormatError(f"cannot encode the trace's fields ({e})") from None
    head = (
        MAGIC
        + len(key_raw).to_bytes(_LEN_BYTES, "little")
        + key_raw
        + len(header).to_bytes(_LEN_BYTES, "little")
        + header
    )
    f.write(head + b"\0" * _pad(len(head)))
    for arr in arrays:
        f.write(memoryview(arr).cast("B"))
        f.write(b"\0" * _pad(arr.nbytes))


# ------------------------------------------------------------------------------------- reading
def _section(f: IO[bytes]) -> Any:
    n = int.from_bytes(f.read(_LEN_BYTES), "little")
    if n > _MAX_HEADER:
        raise CacheFormatError("header too large")
    raw = f.read(n)
    if len(raw) != n:
        raise CacheFormatError("truncated header")
    try:
        return msgspec.msgpack.decode(raw)
    except msgspec.DecodeError as e:
        raise CacheFormatError(f"bad header ({e})") from None


def read_key(f: IO[bytes]) -> Any:
    """The key of the cache file `f` (positioned at its start); leaves `f` after it."""
    if f.read(len(MAGIC)) != MAGIC:
        raise CacheFormatError("not a gpuscope cache file of this version")
    return _section(f)


def read_header(f: IO[bytes]) -> dict:
    """The header after the key (`f` positioned after `read_key`); leaves `f` at the buffers."""
    header = _section(f)
    if (
        not isinstance(header, dict)
        or not isinstance(header.get("fields"), dict)
        or not isinstance(header.get("frames"), dict)
        or not isinstance(header.get("sparse"), dict)
    ):
        raise CacheFormatError("bad header")
    f.read(_pad(f.tell()))
    return header


def _buffer(spec: Any, data: np.ndarray) -> np.ndarray:
    if not isinstance(spec, dict):
        raise CacheFormatError("bad column")
    dt = _numeric_dtype(spec.get("dtype"))
    offset, count = spec.get("offset"), spec.get("count")
    if not (
        isinstance(offset, int)
        and isinstance(count, int)
        and offset >= 0
        and count >= 0
        and offset % _ALIGN == 0
        and offset + count * dt.itemsize <= data.nbytes
    ):
        raise CacheFormatError("column outside the file")
    return np.frombuffer(data, dtype=dt, count=count, offset=offset)


def _column(spec: Any, rows: int, data: np.ndarray) -> Any:
    import pandas as pd

    kind = spec.get("kind") if isinstance(spec, dict) else None
    if kind == "array":
        values = _buffer(spec, data)
    elif kind == "constant":
        dt = _numeric_dtype(spec.get("dtype"))
        value = spec.get("value")
        if not isinstance(value, (bool, int, float)):
            raise CacheFormatError("bad constant")
        return constant_column(np.asarray(value, dtype=dt), rows)
    elif kind == "category":
        codes = _buffer(spec.get("codes"), data)
        cats = spec.get("categories")
        cat_dtype = spec.get("cat_dtype")
        if not isinstance(cats, list) or len(codes) != rows:
            raise CacheFormatError("bad categories")
        dtype = object if cat_dtype == "object" else _numeric_dtype(cat_dtype)
        try:  # from_codes checks every code against the categories
            return pd.Categorical.from_codes(
                codes, categories=pd.Index(cats, dtype=dtype), ordered=bool(spec.get("ordered"))
            )
        except (TypeError, ValueError) as e:
            raise CacheFormatError(f"bad categorical ({e})") from None
    elif kind == "object":
        values = spec.get("values")
        if not isinstance(values, list):
            raise CacheFormatError("bad object column")
        if len(values) != rows:
            raise CacheFormatError("column length differs from the frame's")
        # a Series keeps the object dtype (a bare array of str would become pandas' str dtype)
        return pd.Series(np.fromiter(values, dtype=object, count=rows), dtype=object, copy=False)
    else:
        raise CacheFormatError(f"unknown column kind {kind!r}")
    if len(values) != rows:
        raise CacheFormatError("column length differs from the frame's")
    return values


def _sparse(spec: dict, data: np.ndarray) -> dict:
    """`TraceData.sparse` from its header description (CacheFormatError for anything unexpected)."""
    rows_specs, cols = spec.get("rows"), spec.get("columns")
    if not isinstance(rows_specs, list) or not isinstance(cols, list):
        raise CacheFormatError("bad sparse columns")
    rows = [_buffer(r, data) for r in rows_specs]
    out = {}
    for c in cols:
        if not isinstance(c, dict) or not isinstance(c.get("name"), str) or c["name"] in out:
            raise CacheFormatError("bad sparse column")
        at, n, cats = c.get("rows"), c.get("n"), c.get("categories")
        if not (isinstance(at, int) and 0 <= at < len(rows) and isinstance(n, int)):
            raise CacheFormatError("bad sparse column rows")
        if cats is not None and (not isinstance(cats, list) or not all(isinstance(x, str) for x in cats)):
            raise CacheFormatError("bad sparse column texts")
        missing = c.get("missing")
        if not isinstance(missing, (int, float, str)) or isinstance(missing, bool):
            raise CacheFormatError("bad sparse column missing value")
        try:
            out[c["name"]] = SparseColumn(n, rows[at], _buffer(c.get("values"), data), missing, cats)
        except ValueError as e:
            raise CacheFormatError(f"bad sparse column {c['name']!r} ({e})") from None
    return out


def _frame(spec: Any, data: np.ndarray) -> Any:
    import pandas as pd

    if not isinstance(spec, dict) or not isinstance(spec.get("columns"), list) or not isinstance(spec.get("rows"), int):
        raise CacheFormatError("bad frame")
    rows = spec["rows"]
    names = [c.get("name") if isinstance(c, dict) else None for c in spec["columns"]]
    if len(set(map(repr, names))) != len(names):
        raise CacheFormatError("duplicate column names")
    cols = {n: _column(c, rows, data) for n, c in zip(names, spec["columns"])}
    return pd.DataFrame(cols, columns=names, copy=False) if names else pd.DataFrame(index=range(rows))


def load(f: IO[bytes], size: int, key: list) -> TraceData:
    """The TraceData in the cache file `f` of `size` bytes, if its key is `key`."""
    if read_key(f) != key:
        raise CacheFormatError("key mismatch")
    header = read_header(f)
    data = np.empty(max(0, size - f.tell()), dtype=np.uint8)
    if f.readinto(memoryview(data)) != data.nbytes:
        raise CacheFormatError("truncated file")
    kwargs: dict = {}
    for fld in dataclasses.fields(TraceData):
        if fld.name in header["frames"]:
            kwargs[fld.name] = _frame(header["frames"][fld.name], data)
        elif fld.name == "sparse":
            kwargs[fld.name] = _sparse(header["sparse"], data)
        elif fld.name in header["fields"]:
            value = header["fields"][fld.name]
            kwargs[fld.name] = _tupled(value) if fld.type == "tuple" else value
            expected = _PLAIN_TYPES.get(str(fld.type))
            if expected is not None and not isinstance(kwargs[fld.name], expected):
                raise CacheFormatError(f"field {fld.name!r} is not a {fld.type}")
        elif fld.default is dataclasses.MISSING and fld.default_factory is dataclasses.MISSING:
            raise CacheFormatError(f"missing field {fld.name!r}")
    if "device_properties" in kwargs:  # entries written before the reader checked their types
        kwargs["device_properties"] = clean_device_properties(kwargs["device_properties"])[0]
    try:
        return TraceData(**kwargs)
    except (TypeError, ValueError) as e:
        raise CacheFormatError(f"bad fields ({e})") from None
