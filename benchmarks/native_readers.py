"""Native JSON readers measured against gpuscope's Python reader (issue 25, item 1).

Each option reads a Kineto trace file into the columns of `TraceData.events` (complete events, in
traceEvents order; every arg column the model has), fed the way it needs:

  * orjson, simdjson: the inflated document parsed whole (Python objects, or simdjson's lazy proxies),
    columns built from per-key lists by gpuscope's own coercions;
  * pyarrow: traceEvents cut into one event per line (msgspec's list-of-raw pass, counted) for
    `pyarrow.json.read_json` with an explicit schema;
  * polars: the traceEvents array bytes (found by msgspec's top-level pass, counted) for
    `polars.read_json` with an explicit schema (numbers and lists read as text where a key mixes types);
  * duckdb: the traceEvents array written to a temporary file (counted) for `read_json(format='array')`.

The arrow-shaped results (pyarrow, polars, duckdb) become columns through one shared step: texts by
their dictionary (one conversion per distinct value), numbers by numpy. Each option runs in its own
process: time from the file path to the columns, peak RSS (ru_maxrss, and above the imports). Then,
outside the clock, its columns are compared with `read_trace`'s, column by column.

    python benchmarks/native_readers.py table FILE... [--repeat 3]   # time, memory, mismatches
    python benchmarks/native_readers.py compare [ROOT]                # every shared trace (../shared/traces)
    python benchmarks/native_readers.py probes                        # what each option cannot express
    python benchmarks/native_readers.py floor FILE...                 # inflate and raw parse alone
    python benchmarks/native_readers.py phases FILE...                # read_trace's phases, the floor

The args and their columns, kinds, missing values and families come from `trace/event_args.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from profiler_core.trace import event_args as EA  # noqa: E402
from profiler_core.trace.categories import DEVICE_CATS, normalise_category  # noqa: E402
from profiler_core.trace.model import EVENT_COLUMNS  # noqa: E402
from profiler_core.trace.read import columns as C  # noqa: E402
from profiler_core.trace.read import decode as D  # noqa: E402

OPTIONS = ("msgspec", "orjson", "simdjson", "pyarrow", "polars", "duckdb")
TOP = ("ph", "cat", "name", "pid", "tid", "ts", "dur")
#: arg field -> (Kineto key, kind); kinds: int, float, text, json (a list kept as its JSON text), triple
_KINDS = {EA.INT64: "int", EA.INT32: "int", EA.FLOAT: "float", EA.TEXT: "text", EA.JSON: "json", EA.TRIPLE: "triple"}
#: the event-args schema's rows with a column of TraceData.events
EVENT_ARGS = tuple(a for a in EA.ARGS if a.table == "events" and a.column is not None)
#: raw field -> (Kineto key, kind); an older spelling is its own field `{field}__{i}`
FIELDS = {}
#: field -> its older spellings' fields
ALTS: dict = {}
for _a in EVENT_ARGS:
    FIELDS[_a.field] = (_a.keys[0], _KINDS[_a.kind])
    ALTS[_a.field] = [f"{_a.field}__{i}" for i in range(1, len(_a.keys))]
    FIELDS.update({f"{_a.field}__{i}": (k, _KINDS[_a.kind]) for i, k in enumerate(_a.keys[1:], 1)})
#: older spellings that differ from another key only in case (DuckDB's STRUCT names ignore case)
_MAIN_KEYS = {a.keys[0].lower() for a in EVENT_ARGS}
CASE_ALTS = {f for f, (k, _) in FIELDS.items() if "__" in f and k.lower() in _MAIN_KEYS}
_FLOAT_COLUMNS = {c for a in EVENT_ARGS if a.kind is EA.FLOAT for c in a.columns}
_TEXT_COLUMNS = {"cat", "name"} | {c for a in EVENT_ARGS if a.kind in (EA.TEXT, EA.JSON) for c in a.columns}


# --------------------------------------------------------------------------- feeding
def inflate(path: str) -> bytes:
    """The file's JSON bytes (ISA-L inflate when gzip)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        from isal import igzip

        return igzip.decompress(data)
    return data


def events_slice(data: bytes) -> tuple[dict, bytes]:
    """(top-level keys but traceEvents, the traceEvents array's bytes), by msgspec's raw pass."""
    if data.lstrip()[:1] == b"[":
        return {}, data
    top = _retry_repaired(D.TOP_DECODER.decode, data)
    meta = {k: D.ANY_DECODER.decode(v) for k, v in top.items() if k != "traceEvents"}
    return meta, bytes(top["traceEvents"])


def _retry_repaired(parse, data: bytes):
    """parse(data), or on invalid JSON parse(repaired data) as the reader does (bare N/A, NaN ...)."""
    try:
        return parse(data)
    except ValueError:  # every option's decode error is one
        fixed = D.repair_json(data)
        if fixed is None:
            raise
        return parse(fixed)


# --------------------------------------------------------------------------- options
def read_msgspec(path: str) -> dict:
    """The reference: gpuscope's Python reader, in this process only."""
    from profiler_core.trace.read.reader import read_trace

    t = read_trace(path, processes=0)
    ev = t.dense_events().sort_values("idx", kind="stable")  # the sparse args too, as full columns
    out = {c: _plain(ev[c]) for c in EVENT_COLUMNS}
    if C.base_ns_of(t.metadata) is None:  # rebased on the first event: back to the file's µs
        out["ts"] = out["ts"] + t.base_ns
    return out


def _plain(series) -> np.ndarray:
    if str(series.dtype) == "category":
        return np.asarray(series.astype(object).fillna(""), dtype=object)
    return np.asarray(series.to_numpy())


def read_orjson(path: str) -> dict:
    import orjson

    data = inflate(path)
    doc = _retry_repaired(orjson.loads, data)
    del data
    evs = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    meta = {k: v for k, v in doc.items() if k != "traceEvents"} if isinstance(doc, dict) else {}
    return _from_dicts(evs, meta, lambda e, k: e.get(k))


def read_simdjson(path: str) -> dict:
    import simdjson

    data = inflate(path)
    doc = _retry_repaired(simdjson.Parser().parse, data)
    evs = doc["traceEvents"] if isinstance(doc, simdjson.Object) else doc
    meta = {k: doc[k] for k in doc if k != "traceEvents"} if isinstance(doc, simdjson.Object) else {}
    meta = {
        k: (v.as_dict() if hasattr(v, "as_dict") else v.as_list() if hasattr(v, "as_list") else v)
        for k, v in meta.items()
    }
    return _from_dicts(evs, meta, lambda e, k: e.get(k))


def _from_dicts(evs, meta: dict, get) -> dict:
    """Per-key lists of the complete events, made into columns by gpuscope's coercions."""
    pairs = [(i, e) for i, e in enumerate(evs) if hasattr(e, "get") and get(e, "ph") == "X"]
    idx = [i for i, _ in pairs]
    xs = [e for _, e in pairs]  # (not evs[i]: a simdjson array is walked from its start by each index)
    raw: dict = {k: [get(e, k) for e in xs] for k in TOP if k != "ph"}
    args = [get(e, "args") for e in xs]
    args = [a if a is not None and hasattr(a, "get") else {} for a in args]
    for field, (key, kind) in FIELDS.items():
        values = [a.get(key) for a in args]
        if kind == "json":
            values = [None if v is None else _json_text(v) for v in values]
        elif kind == "triple":
            values = [
                list(v) if v is not None and hasattr(v, "__len__") and not isinstance(v, str) else v for v in values
            ]
        raw[field] = values
    raw["idx"] = np.asarray(idx, dtype=np.int64)
    return _finish(ListColumns(raw), meta)


def _json_text(v) -> str:
    import msgspec

    if hasattr(v, "as_list"):
        v = v.as_list()
    return msgspec.json.encode(v).decode()


def _arrow_schema(lib: str):
    """The explicit schema of an event for pyarrow / polars / duckdb (args: the model's keys only)."""
    if lib == "pyarrow":
        import pyarrow as pa

        t = {"int": pa.int64(), "float": pa.float64(), "text": pa.string(), "triple": pa.list_(pa.int64())}
        jt = {f: pa.list_(pa.list_(pa.int64())) for f in FIELDS if f.split("__")[0] == "input_dims"}
        args = pa.struct(
            [(k, jt.get(f, pa.list_(pa.string())) if kind == "json" else t[kind]) for f, (k, kind) in FIELDS.items()]
        )
        return pa.schema(
            [
                ("ph", pa.string()),
                ("cat", pa.string()),
                ("name", pa.string()),
                ("pid", pa.int64()),
                ("tid", pa.int64()),
                ("ts", pa.float64()),
                ("dur", pa.float64()),
                ("args", args),
            ]
        )
    if lib == "polars":
        import polars as pl

        t = {"int": pl.Int64, "float": pl.Float64, "text": pl.String, "json": pl.String, "triple": pl.List(pl.Int64)}
        args = pl.Struct({k: t[kind] for f, (k, kind) in FIELDS.items()})
        return {
            "ph": pl.String,
            "cat": pl.String,
            "name": pl.String,
            "pid": pl.String,
            "tid": pl.String,
            "ts": pl.Float64,
            "dur": pl.Float64,
            "args": args,
        }
    t = {"int": "BIGINT", "float": "DOUBLE", "text": "VARCHAR", "json": "JSON", "triple": "BIGINT[]"}
    # DuckDB's struct keys ignore case: "External id" also matches old traces' "external id", and
    # "Input Dims" torch 1.8's "Input dims"
    args = ", ".join(f'"{k}" {t[kind]}' for f, (k, kind) in FIELDS.items() if f not in CASE_ALTS)
    return {
        "ph": "VARCHAR",
        "cat": "VARCHAR",
        "name": "VARCHAR",
        "pid": "VARCHAR",
        "tid": "VARCHAR",
        "ts": "DOUBLE",
        "dur": "DOUBLE",
        "args": f"STRUCT({args})",
    }


def ndjson_of(path: str) -> tuple[dict, bytes]:
    """The top-level keys and traceEvents rewritten as one event per line (msgspec's raw-list pass)."""
    meta, arr = events_slice(inflate(path))
    arr = arr.replace(b"\n", b" ")  # a JSON text holds no raw newline: only the layout's go
    return meta, b"\n".join(D.RAW_LIST_DECODER.decode(arr))


def read_pyarrow(path: str) -> dict:
    import io

    import pyarrow.json as pj

    meta, ndjson = ndjson_of(path)
    opts = pj.ParseOptions(explicit_schema=_arrow_schema("pyarrow"), unexpected_field_behavior="ignore")
    table = pj.read_json(io.BytesIO(ndjson), parse_options=opts, read_options=pj.ReadOptions(block_size=16 << 20))
    del ndjson
    return _from_arrow(table, meta)


def read_polars(path: str) -> dict:
    import polars as pl

    meta, lines = ndjson_of(path)  # read_json of the array refuses a list where a text is declared
    df = pl.read_ndjson(lines, schema=_arrow_schema("polars"))
    del lines
    return _from_arrow(df.to_arrow(), meta)


def read_duckdb(path: str) -> dict:
    import duckdb

    meta, arr = events_slice(inflate(path))
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        f.write(arr)
        f.flush()
        del arr
        schema = _arrow_schema("duckdb")
        struct = schema.pop("args")
        schema["args"] = "JSON"
        cols = ", ".join(f"{k}: '{v}'" for k, v in schema.items())
        # the keys that differ from another only in case go by json_extract (see _arrow_schema)
        types = {"int": "::BIGINT", "json": "", "text": "::VARCHAR", "float": "::DOUBLE"}
        alts = "".join(
            f', json_extract(args, \'$."{FIELDS[f][0]}"\'){types[FIELDS[f][1]]} as "{f}"' for f in sorted(CASE_ALTS)
        )
        con = duckdb.connect()
        table = con.sql(
            f"select * exclude (args), json_transform(args, '{_duck_struct_json(struct)}') as args{alts} "
            f"from read_json('{f.name}', format='array', columns={{{cols}}}, maximum_object_size=1073741824)"
        ).arrow()
    return _from_arrow(table, meta)


def _duck_struct_json(struct: str) -> str:
    """DuckDB's json_transform structure for a STRUCT(...) type of _arrow_schema("duckdb")."""
    types = {"BIGINT": "BIGINT", "DOUBLE": "DOUBLE", "VARCHAR": "VARCHAR", "JSON": "JSON", "BIGINT[]": ["BIGINT"]}
    out = {}
    for part in struct[len("STRUCT(") : -1].split(", "):
        key, typ = part.rsplit(" ", 1)
        out[key.strip('"')] = types[typ]
    return json.dumps(out).replace("'", "''")


def _from_arrow(table, meta: dict) -> dict:
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(table, pa.RecordBatchReader):
        table = table.read_all()
    table = table.combine_chunks()
    ph = table.column("ph")
    mask = pc.fill_null(pc.equal(ph, "X"), False)
    idx = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
    x = table.filter(mask)
    raw: dict = {k: x.column(k) for k in TOP if k != "ph"}
    args = x.column("args").combine_chunks()
    for field, (key, _kind) in FIELDS.items():
        i = args.type.get_field_index(key)
        if field in x.column_names:  # read as its own column (duckdb)
            raw[field] = x.column(field).combine_chunks()
        else:
            raw[field] = pc.struct_field(args, [i]) if i >= 0 else pa.nulls(len(x), pa.int64())
    raw["idx"] = idx
    return _finish(ArrowColumns(raw), meta)


def read_reference(path: str):
    """The reference as timed: read_trace in this process only (its TraceData, unconverted)."""
    from profiler_core.trace.read.reader import read_trace

    return read_trace(path, processes=0)


READERS = {
    "msgspec": read_reference,
    "orjson": read_orjson,
    "simdjson": read_simdjson,
    "pyarrow": read_pyarrow,
    "polars": read_polars,
    "duckdb": read_duckdb,
}


# --------------------------------------------------------------------------- the shared column step
class ListColumns:
    """Raw per-key Python lists -> numpy, by gpuscope's own coercions (`columns._Coerce` ...)."""

    def __init__(self, raw: dict) -> None:
        self.raw, self.bad = raw, {}
        self.co = C._Coerce(self.bad)

    def floats(self, k: str) -> np.ndarray:
        return self.co.floats(k, self.raw[k])

    def ints(self, k: str, missing: int, dtype) -> np.ndarray:
        return self.co.ints(k, self.raw[k], missing, dtype)

    def texts(self, k: str, convert) -> np.ndarray:
        it = C.Interner(convert)
        codes = it.add(self.raw[k])
        return np.asarray(it.values, dtype=object)[codes]

    def labels(self, k: str, labels) -> np.ndarray:
        return labels.column(self.raw[k])

    def triples(self, k: str) -> np.ndarray:
        b = C.Builder()
        return b._triples(k, self.raw[k])

    def present(self, k: str) -> np.ndarray:
        return np.fromiter((v is not None for v in self.raw[k]), bool, len(self.raw[k]))


class ArrowColumns:
    """Arrow columns -> numpy: texts through their dictionary, numbers by to_numpy."""

    def __init__(self, raw: dict) -> None:
        self.raw = raw

    def floats(self, k: str) -> np.ndarray:
        import pyarrow.compute as pc

        return pc.fill_null(self.raw[k].cast("float64"), float("nan")).to_numpy(zero_copy_only=False)

    def ints(self, k: str, missing: int, dtype) -> np.ndarray:
        import pyarrow.compute as pc

        a = self.raw[k]
        if a.type in ("string", "large_string"):  # a text column (pid, tid ...): per distinct value
            return self.texts(k, lambda v: missing if v is None else int(v)).astype(dtype)
        return pc.fill_null(a, missing).to_numpy(zero_copy_only=False).astype(dtype, copy=False)

    def _dict(self, k: str):
        import pyarrow as pa
        import pyarrow.compute as pc

        a = self.raw[k]
        if pa.types.is_list(a.type) or pa.types.is_large_list(a.type):  # pyarrow's typed lists: by their text
            a = pa.array([None if v is None else json.dumps(v, separators=(",", ":")) for v in a.to_pylist()])
        d = pc.dictionary_encode(a.cast("string") if not pa.types.is_string(a.type) else a)
        if isinstance(d, pa.ChunkedArray):
            d = d.combine_chunks()
        codes = pc.fill_null(d.indices, -1).to_numpy(zero_copy_only=False)
        return codes, d.dictionary.to_pylist()

    def texts(self, k: str, convert) -> np.ndarray:
        codes, values = self._dict(k)
        lut = np.asarray([convert(v) for v in values] + [convert(None)], dtype=object)
        return lut[codes]

    def labels(self, k: str, labels) -> np.ndarray:
        import pyarrow as pa

        if pa.types.is_integer(self.raw[k].type):
            return self.ints(k, 0, np.int64)
        codes, values = self._dict(k)
        lut = np.asarray([labels.code(v) for v in values] + [labels.code(None)], dtype=np.int64)
        return lut[codes]

    def triples(self, k: str) -> np.ndarray:
        import pyarrow.compute as pc

        a = self.raw[k]
        n = len(a)
        lens = pc.fill_null(pc.list_value_length(a), 0).to_numpy(zero_copy_only=False)
        flat = pc.list_flatten(a).to_numpy(zero_copy_only=False)
        out = np.zeros((n, 3), np.int32)
        ok = lens == 3
        if ok.all():
            return flat.reshape(n, 3).astype(np.int32)
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        for i in np.flatnonzero(ok):
            out[i] = flat[starts[i] : starts[i] + 3]
        return out

    def present(self, k: str) -> np.ndarray:
        return self.raw[k].is_valid().to_numpy(zero_copy_only=False)


#: CPU seconds spent in _finish by this process (the child reports it next to the total)
FINISH_CPU_S = [0.0]


def _finish(cols, meta: dict) -> dict:
    """_finish_columns, timed into FINISH_CPU_S."""
    t0 = time.process_time()
    try:
        return _finish_columns(cols, meta)
    finally:
        FINISH_CPU_S[0] += time.process_time() - t0


def _finish_columns(cols, meta: dict) -> dict:
    """The model's event columns (traceEvents order, absolute ns) from one option's raw columns,
    by the reader's rules: valid ts, dur in ns, categories normalised, pid/tid labels, each family
    of categories its own args, GPU device/stream from pid/tid."""
    ts_us, dur_us = cols.floats("ts"), cols.floats("dur")
    keep = C._valid_ts(ts_us) & ~(np.abs(dur_us) >= C._MAX_US)
    out: dict = {"idx": np.asarray(cols.raw["idx"])}
    out["ts"] = C.to_ns(ts_us)
    dur = C.to_ns(np.where(np.isfinite(dur_us), dur_us, 0.0))
    out["dur"] = np.maximum(dur, 0)
    out["cat"] = cols.texts("cat", lambda v: normalise_category(C.to_text(v)))
    out["name"] = cols.texts("name", C.to_text)
    labels = C.Labels()
    out["pid"], out["tid"] = cols.labels("pid", labels), cols.labels("tid", labels)
    import pandas as pd

    cat_codes, cat_values = pd.factorize(out["cat"])  # one hash pass; each family by its code
    groups = EA.EVENT_GROUPS
    grp = np.asarray([groups.index(EA.CATEGORY_GROUP.get(c, "other")) for c in cat_values], np.int8)[cat_codes]

    def rows_of(a) -> np.ndarray:
        carries = np.asarray([g in a.groups or g == "other" for g in groups])
        return carries[grp]

    def merged(field: str, get, missing_of) -> np.ndarray:
        v = get(field)
        for alt in ALTS[field]:  # the first spelling present wins
            v = (
                np.where(cols.present(field), v, get(alt))
                if missing_of is None
                else np.where(v == missing_of, get(alt), v)
            )
        return v

    for a in EVENT_ARGS:
        rows, kind = rows_of(a), _KINDS[a.kind]
        if kind == "triple":
            xyz = cols.triples(a.field)
            for j, c in enumerate(a.columns):
                out[c] = np.where(rows, xyz[:, j], a.missing).astype(np.int32)
        elif kind == "json":
            v = merged(a.field, lambda f: cols.texts(f, lambda s: C._compact_json(s.encode()) if s else ""), "")
            out[a.column] = np.where(rows, v, "")
        elif kind == "text":
            out[a.column] = np.where(rows, merged(a.field, lambda f: cols.texts(f, C.to_text), ""), "")
        elif kind == "float":
            out[a.column] = np.where(rows, merged(a.field, cols.floats, None), np.nan)
        else:
            dtype = np.int32 if a.kind is EA.INT32 else np.int64
            v = merged(a.field, lambda f, d=dtype, m=a.missing: cols.ints(f, m, d), None)
            out[a.column] = np.where(rows, v, a.missing).astype(dtype)
    gpu = np.asarray([c in DEVICE_CATS for c in cat_values], bool)[cat_codes]
    for c, src in (("device", "pid"), ("stream", "tid")):
        fill = gpu & (out[c] == -1) & (out[src] >= 0)
        out[c] = np.where(fill, out[src], out[c])
    return {c: out[c][keep] for c in EVENT_COLUMNS}


# --------------------------------------------------------------------------- comparing
def mismatches(mine: dict, ref: dict) -> list:
    """Columns that differ from the reference, each with its count of differing rows."""
    if len(mine["idx"]) != len(ref["idx"]):
        return [f"rows {len(mine['idx'])} vs {len(ref['idx'])}"]
    out = []
    for c in EVENT_COLUMNS:
        a, b = np.asarray(mine[c]), np.asarray(ref[c])
        if c in _FLOAT_COLUMNS:
            same = (a == b) | (np.isnan(a.astype(float)) & np.isnan(b.astype(float)))
        elif c in _TEXT_COLUMNS:
            same = a.astype(object) == b.astype(object)
        else:
            same = a.astype(np.int64) == b.astype(np.int64)
        bad = int(len(a) - np.count_nonzero(same))
        if bad:
            i = int(np.flatnonzero(~same)[0])
            out.append(f"{c}: {bad} rows (e.g. idx {ref['idx'][i]}: {a[i]!r} vs {b[i]!r})")
    return out


CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {here!r})
import native_readers as nr
opt, path, compare = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
import gc
gc.disable()  # as read_trace does while it reads: millions of objects, no cycles
nr.warm_imports(opt)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0, c0 = time.perf_counter(), time.process_time()
try:
    cols = nr.READERS[opt](path)
    err = None
except Exception as e:
    cols, err = None, f"{{type(e).__name__}}: {{e}}"[:300]
t1, c1 = time.perf_counter(), time.process_time()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
res = {{"s": t1 - t0, "cpu_s": c1 - c0, "column_step_cpu_s": nr.FINISH_CPU_S[0], "error": err,
        "peak_mb": peak / 1024, "base_mb": base / 1024,
        "events": 0 if cols is None else len(cols["idx"]) if isinstance(cols, dict) else len(cols.events)}}
if compare and opt != "msgspec":
    try:
        ref, ref_err = nr.read_msgspec(path), None
    except Exception as e:
        ref, ref_err = None, f"{{type(e).__name__}}: {{e}}"[:200]
    if ref is None:
        res["mismatches"] = [] if err else ["the reference refuses the file: " + ref_err]
        res["error"] = None if err else res["error"]
        res["both_refuse"] = bool(err)
    elif cols is not None:
        res["mismatches"] = nr.mismatches(cols, ref)
print(json.dumps(res))
"""


def warm_imports(opt: str) -> None:
    """The option's imports, done before the clock starts (as bench_real does for both sides)."""
    import msgspec  # noqa: F401
    import pandas  # noqa: F401
    from isal import igzip  # noqa: F401

    from profiler_core.trace.read import reader  # noqa: F401

    if opt in ("pyarrow", "polars", "duckdb"):
        import pyarrow.compute  # noqa: F401
        import pyarrow.json  # noqa: F401
    if opt != "msgspec":
        __import__({"simdjson": "simdjson"}.get(opt, opt))


def run_child(opt: str, path: str, compare: bool) -> dict:
    """One option on one file in a fresh process."""
    p = subprocess.run(
        [sys.executable, "-c", CHILD.format(here=HERE), opt, path, "1" if compare else "0"],
        capture_output=True,
        text=True,
        check=False,
    )
    if p.returncode != 0:
        return {"error": f"process failed ({p.returncode}): {p.stderr.strip()[-300:]}", "s": float("nan"), "peak_mb": 0}
    return json.loads(p.stdout.strip().splitlines()[-1])


def cmd_table(files: list, repeat: int, options: list, compare: bool) -> None:
    """Per option: median time (wall and CPU) over `repeat` reads of all `files`, peak RSS, and
    (with `compare`) the columns that differ from read_trace's."""
    for opt in options:
        runs = [run_child(opt, f, compare=False) for f in files for _ in range(repeat)]
        errs = [r["error"] for r in runs if r.get("error")]
        secs = [sum(r["s"] for r in runs[i::repeat]) for i in range(repeat)]
        cpu = [sum(r.get("cpu_s", 0) for r in runs[i::repeat]) for i in range(repeat)]
        peak = max(r["peak_mb"] for r in runs)
        added = max(r["peak_mb"] - r.get("base_mb", 0) for r in runs)
        ev = sum(r.get("events", 0) for r in runs[::repeat])
        cmp = [run_child(opt, f, compare=True) for f in files] if compare and opt != "msgspec" and not errs else []
        mm = [m for r in cmp for m in r.get("mismatches", [])]
        m = max(ev, 1) / 1e6
        print(
            json.dumps(
                {
                    "option": opt,
                    "s": round(statistics.median(secs), 3),
                    "cpu_s": round(statistics.median(cpu), 3),
                    "column_step_cpu_s": round(statistics.median(r.get("column_step_cpu_s", 0) for r in runs), 3),
                    "s_per_M": round(statistics.median(secs) / m, 2),
                    "cpu_s_per_M": round(statistics.median(cpu) / m, 2),
                    "peak_mb": round(peak),
                    "added_mb": round(added),
                    "events": ev,
                    "error": errs[0] if errs else None,
                    "mismatches": mm,
                }
            ),
            flush=True,
        )


def cmd_compare(root: str, options: list) -> None:
    """Every trace under `root` read by the reference once and by each option, in this process."""
    import gc

    gc.disable()
    files = []
    for d, _, names in os.walk(root):
        if "reference" not in d:
            files += [os.path.join(d, n) for n in sorted(names) if n.endswith((".json", ".json.gz"))]
    bad: dict = {opt: {} for opt in options}
    for f in sorted(files):
        try:
            ref, ref_err = read_msgspec(f), None
        except Exception as e:  # noqa: BLE001
            ref, ref_err = None, f"{type(e).__name__}"
        for opt in options:
            try:
                cols, err = READERS[opt](f), None
            except Exception as e:  # noqa: BLE001
                cols, err = None, f"{type(e).__name__}: {e}"[:200]
            if ref is None:
                issue = None if err else f"the reference refuses the file ({ref_err}), the option reads it"
            else:
                issue = err or "; ".join(mismatches(cols, ref))
            if issue:
                bad[opt][os.path.relpath(f, root)] = issue
        del ref
        gc.collect()
    for opt in options:
        print(json.dumps({"option": opt, "files": len(files), "differ": len(bad[opt]), "details": bad[opt]}))


def _x(name: str, cat: str = "cpu_op", ts: int = 1, tid=1, **args) -> dict:
    """One complete event of a probe (args under their Kineto keys, `_` for a space)."""
    ev = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": 1}
    if args:
        ev["args"] = {k.replace("_", " "): v for k, v in args.items()}
    return ev


_KERNEL = {"grid": [1, 2, 3], "block": [4, 1, 1], "registers_per_thread": 32, "device": 0, "stream": 7}
#: small traces, each of one property real traces have; an option expresses it when its columns
#: equal the reference's (or both refuse the file)
PROBES = {
    "heterogeneous args (cpu_op vs kernel keys)": [
        _x("a", External_id=3, Input_Dims=[[8, 8]], Input_type=["float"]),
        _x("k", "kernel", 2, 7, External_id=3, correlation=9, **_KERNEL),
    ],
    "nested Input Dims with texts and empties": [
        _x("a", Input_Dims=[[8, 8], [], [[2, 3]]], Input_type=["float", "ScalarList", ""]),
        _x("b", ts=2, Input_Dims=[["x"], []], Input_type=["str", ""]),
    ],
    "mixed int/str tid (kernel streams) after 30k rows": [_x("a", ts=i) for i in range(30000)]
    + [_x("k", "kernel", tid="stream 7", device=0)],
    "mixed int/str arg value (External id)": [_x("a", External_id=3), _x("b", ts=2, External_id="12")],
    "int beyond float precision (2**53 + 1)": [_x("a", External_id=2**53 + 1)],
    "int beyond int64 (2**64)": [_x("a", Sequence_number=2**64), _x("b", ts=2, Sequence_number=4)],
}
_NAME_BAD = b'{"ph": "X", "cat": "cpu_op", "name": "a\xff\xfeb", "pid": 1, "tid": 1, "ts": 1, "dur": 1}'
_ARGS_NAN = b'"args": {"blocks per SM": NaN, "est. achieved occupancy %": N/A}'
#: raw-byte probes (not expressible as Python objects): name -> one event's JSON text
RAW_PROBES = {
    "invalid UTF-8 in a name": _NAME_BAD,
    "bare NaN / N/A words": b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1, '
    + _ARGS_NAN
    + b"}",
}
_LAST = json.dumps(_x("z", ts=2)).encode()


def cmd_probes(options: list) -> None:
    tmp = tempfile.mkdtemp(prefix="x25a-probes-")
    paths = {}
    for name, evs in PROBES.items():
        paths[name] = os.path.join(tmp, f"p{len(paths)}.json")
        with open(paths[name], "w") as f:
            json.dump({"traceEvents": evs, "baseTimeNanoseconds": 0}, f)
    for name, ev in RAW_PROBES.items():
        paths[name] = os.path.join(tmp, f"p{len(paths)}.json")
        with open(paths[name], "wb") as f:
            f.write(b'{"traceEvents": [' + ev + b", " + _LAST + b'], "baseTimeNanoseconds": 0}')
    for opt in options:
        res = {}
        for name, p in paths.items():
            r = run_child(opt, p, compare=True)
            res[name] = r.get("error") or ("; ".join(r.get("mismatches", [])) or "ok")
        print(json.dumps({"option": opt, "probes": res}), flush=True)


FLOOR_STEPS = ("isal", "zlib", "simdjson_parse", "orjson_loads", "msgspec_raw_list")


def cmd_floor(files: list, steps: tuple = FLOOR_STEPS) -> None:
    """Per million events, in CPU seconds of this process (robust to other load on the machine): ISA-L
    inflate, zlib inflate, and raw parses (no columns) of the JSON; `steps` picks some (a big trace:
    orjson's objects or simdjson's tape may not fit)."""
    import gc
    import zlib

    import msgspec
    import orjson
    import simdjson
    from isal import igzip

    gc.disable()
    events = 0
    t = dict.fromkeys(steps, 0.0)
    nbytes = 0

    def timed(step: str, fn, *args):
        if step not in t:
            return None
        t0 = time.process_time()
        out = fn(*args)
        t[step] += time.process_time() - t0
        return out

    for path in files:
        with open(path, "rb") as f:
            gz = f.read()
        t0 = time.process_time()
        data = igzip.decompress(gz)
        t["isal"] = t.get("isal", 0.0) + time.process_time() - t0
        timed("zlib", zlib.decompress, gz, 31)
        del gz
        nbytes += len(data)
        timed("simdjson_parse", lambda d: simdjson.Parser().parse(d) and None, data)
        timed("orjson_loads", lambda d: orjson.loads(d) and None, data)
        t0 = time.process_time()
        top = D.TOP_DECODER.decode(data)
        raws = msgspec.json.Decoder(list[msgspec.Raw]).decode(top["traceEvents"])
        if "msgspec_raw_list" in t:
            t["msgspec_raw_list"] += time.process_time() - t0
        events += len(raws)
        del top, raws, data
    m = events / 1e6
    print(json.dumps({"events": events, "json_mb": round(nbytes / 1e6), **{k: round(v / m, 3) for k, v in t.items()}}))


def cmd_phases(files: list) -> None:
    """CPU seconds per million events of the phases of one serial read_trace and its floor (bench_real.py's
    `phases`; GPUSCOPE_NATIVE_READER=0 for the Python reader's)."""
    sys.path.insert(0, HERE)
    import bench_real

    print(json.dumps(bench_real.phases(files, dict(os.environ, PYTHONPATH=ROOT))), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cmd", choices=("table", "compare", "probes", "floor", "phases"))
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--options", default=",".join(OPTIONS))
    ap.add_argument("--no-compare", action="store_true", help="table: time and memory only")
    ap.add_argument("--steps", default=",".join(FLOOR_STEPS), help="floor: which steps")
    args = ap.parse_args()
    options = args.options.split(",")
    if args.cmd == "table":
        cmd_table(args.paths, args.repeat, options, not args.no_compare)
    elif args.cmd == "compare":
        cmd_compare(args.paths[0] if args.paths else os.path.join(ROOT, "..", "shared", "traces"), options)
    elif args.cmd == "probes":
        cmd_probes([o for o in options if o != "msgspec"])
    elif args.cmd == "phases":
        cmd_phases(args.paths)
    else:
        cmd_floor(args.paths, tuple(args.steps.split(",")))


if __name__ == "__main__":
    main()
