"""Every `GPUSCOPE_*` environment setting, in one registry: its type, default and meaning.

`get(name)` reads the variable through its one parser. A value that does not parse is reported
once (a warning naming the variable, the value and what it expects) and the default is used:
never a crash at import, never silently ignored. The README's settings table is `markdown()` of
this registry (a test keeps them equal). Light: imports nothing beyond the standard library.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Setting:
    """One environment variable: `kind` is count (integer >= 0), bytes (integer >= 0), number (a finite
    decimal > 0, at most `maximum` where set), flag (1/0, true/false, yes/no, on/off), choice (one of
    `choices`), or text (a path, an address)."""

    name: str
    kind: str
    default: Any
    doc: str
    choices: tuple[str, ...] = ()
    minimum: int = 0
    #: the largest value of a number setting (None: no bound)
    maximum: float | None = None
    #: for development tools (tests, benchmarks), not the profiler or the plugin
    dev: bool = False
    #: the default in words where it is computed when read (`default` None): what the warning about a bad
    #: value and the README's table print, never "none"
    default_text: str = ""

    def shown_default(self) -> str:
        """The default as the README's table and the warning about a bad value print it."""
        if self.default_text:
            return self.default_text
        if isinstance(self.default, bool):
            return f"`{int(self.default)}`"
        return f"`{self.default}`"

    def parse(self, raw: str) -> Any:
        """The value of `raw`; ValueError saying what is expected when it does not parse."""
        text = raw.strip()
        if self.kind in ("count", "bytes"):
            if not (text.isascii() and text.isdigit()) or int(text) < self.minimum:
                raise ValueError(f"an integer >= {self.minimum}")
            return int(text)
        if self.kind == "number":
            try:
                value = float(text)
            except ValueError:
                value = math.nan
            if not (math.isfinite(value) and value > 0 and (self.maximum is None or value <= self.maximum)):
                raise ValueError(self.expects())
            return value
        if self.kind == "flag":
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ValueError("1 or 0 (true/false, yes/no, on/off)")
        if self.kind == "choice":
            if text not in self.choices:
                raise ValueError(f"one of {', '.join(self.choices)}")
            return text
        return raw

    def expects(self) -> str:
        """What a value looks like, in words (for the README)."""
        return {
            "count": f"integer >= {self.minimum}",
            "bytes": "bytes (integer)",
            "number": "number > 0" + (f", at most {self.maximum:g}" if self.maximum is not None else ""),
            "flag": "1 / 0",
            "choice": " \\| ".join(self.choices),
            "text": "text",
        }[self.kind]


def _s(name: str, kind: str, default: Any, doc: str, **kw: Any) -> Setting:
    return Setting(f"GPUSCOPE_{name}", kind, default, doc, **kw)


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        _s(
            "CACHE_DIR",
            "text",
            None,
            "where parsed traces and plugin-made summaries are cached "
            "(created 0700, refused when another user owns it)",
            default_text="`~/.cache/gpuscope`",
        ),
        _s("CACHE", "flag", True, "0 turns the parse cache off"),
        _s("CACHE_MAX_BYTES", "bytes", 8 << 30, "size the parse cache may grow to before old entries are removed"),
        _s(
            "PARSE_PROCESSES",
            "count",
            None,
            "extra processes that parse one trace of 16 MB or more in byte ranges (0 turns it off)",
            default_text="cores - 1, at most 3",
        ),
        _s(
            "LOAD_PROCESSES",
            "count",
            None,
            "plugin processes that parse different trace files at once",
            default_text="half the cores, at most 4, from 4 cores; else 0",
        ),
        _s(
            "LOAD_THREADS",
            "count",
            None,
            "without load processes, files the plugin reads at once in threads",
            minimum=1,
            default_text="2 from 2 cores where the native reader is built, else 1",
        ),
        _s(
            "MAX_LOADED_BYTES",
            "bytes",
            None,
            "the memory budget for parsed traces; a trace is read when the measured cost of what it keeps "
            "(about 224 bytes an event, 128 more with kernel or copy "
            "args) fits, estimated before its body is read",
            default_text="4 GiB, at most half the machine's memory",
        ),
        _s(
            "MAX_TRACE_BYTES",
            "bytes",
            None,
            "the largest uncompressed trace read",
            default_text="4 times GPUSCOPE_MAX_LOADED_BYTES",
        ),
        _s(
            "GUNZIP",
            "choice",
            "isal",
            "gzip inflater: ISA-L (when installed) or the standard library's zlib",
            choices=("isal", "zlib"),
        ),
        _s(
            "NATIVE_READER",
            "flag",
            True,
            "0 reads traces with the Python reader only (else the native reader, where it is built, reads "
            "the files it can read exactly)",
        ),
        _s(
            "NATIVE_TREE",
            "flag",
            True,
            "0 nests the op tree in numpy only (else its C pass, where it is built, counts depths and candidate "
            "parents)",
        ),
        _s(
            "NATIVE_THREADS",
            "count",
            None,
            "threads that scan pieces of one trace with the native reader, beside the thread that inflates "
            "and converts them (0: the reading thread scans them)",
            default_text="cores minus one, at most 4",
        ),
        _s("NO_MALLOC_TUNING", "flag", False, "1 leaves glibc's malloc settings alone while parsing"),
        _s(
            "PREPARE_MAX_WORKERS",
            "count",
            8,
            "runs with more workers are not parsed in the "
            "background; their run-level views read per-worker summaries only",
        ),
        _s(
            "MAX_SUMMARY_BYTES",
            "bytes",
            16 << 20,
            "largest per-worker summary file read (also once gunzipped); a bigger one is recomputed",
        ),
        _s("SUMMARY_MEMORY", "count", 2048, "per-worker summaries kept in the plugin's memory", minimum=1),
        _s(
            "SUMMARY_PROCESSES",
            "count",
            None,
            "processes that compute, beside the plugin's own thread, the summaries a page waits for when it waits "
            "for many (a big run's Distributed view); 0: that thread alone",
            default_text="cores minus one, at most 3",
        ),
        _s(
            "DASK_SCHEDULER",
            "text",
            None,
            "a Dask scheduler (tcp://host:8786) that computes missing "
            "summaries (also the flag --gpuscope_dask_scheduler)",
            default_text="none: the plugin computes them",
        ),
        _s("DISABLE_CUDA", "flag", False, "1 turns CUDA capture off (CPU-only traces)"),
        _s(
            "CUDA_BACKEND",
            "choice",
            "cupti",
            "CUDA capture backend: CUPTI, or CUDA events around PyCUDA launches",
            choices=("cupti", "events"),
        ),
        _s(
            "PEAK_TFLOPS",
            "number",
            None,
            "dense peak TFLOP/s of a GPU the device peaks table does not know (every dtype's compute roof; "
            "also `--peak-tflops` of `gpuscope diagnose`)",
            default_text="none: such a GPU has no roofline",
        ),
        _s(
            "PEAK_GBPS",
            "number",
            None,
            "memory bandwidth GB/s of a GPU the device peaks table does not know (with `GPUSCOPE_PEAK_TFLOPS`)",
            default_text="none: such a GPU has no roofline",
        ),
        _s(
            "ROOFLINE_FRACTION",
            "number",
            0.8,
            "the fraction of its roofline bound an op can realistically reach: ms lost to the bound is device time "
            "minus the time at this fraction of the bound",
            maximum=1.0,
        ),
        _s("KEEP_RAW_RECORDS", "flag", False, "1 keeps CUPTI's raw records on the collector (debugging)"),
        _s("SHARED", "text", None, "the team's shared folder with real traces", dev=True, default_text="`../shared`"),
        _s("ORACLES_DIR", "text", None, "where the GPU oracles of tests live", dev=True, default_text="`.venvs`"),
        _s("BIG_TRACE_EVENTS", "count", 2000000, "events of tests/test_reader_big.py's trace", dev=True),
        _s(
            "NATIVE_FUZZ_SECONDS",
            "count",
            2,
            "seconds of tests/test_native_reader.py's byte-mutation loop",
            dev=True,
        ),
        _s(
            "READER_FUZZ_SECONDS",
            "count",
            3,
            "seconds of tests/test_reader_hostile_documents.py's hostile-input loop (each read in a child process)",
            dev=True,
        ),
        _s("SCREENSHOTS", "flag", False, "1 makes the browser tests refresh docs/screenshots/", dev=True),
        _s(
            "SHOTS_DIR",
            "text",
            None,
            "folder the merged-timeline browser test copies its screenshots to",
            dev=True,
            default_text="none: not copied",
        ),
        _s(
            "DEV_BACKEND",
            "flag",
            False,
            "1 runs browser tests and the FPS benchmark against frontend/dev/dev_server.py instead of TensorBoard",
            dev=True,
        ),
        _s(
            "COMPAT_VENV",
            "text",
            None,
            "the venv with torch, torch-tb-profiler and HTA for the comparisons",
            dev=True,
            default_text="`.venvs/compat`",
        ),
        _s(
            "TORCH_PYTHON",
            "text",
            None,
            "the python with torch for the recording and export benchmarks",
            dev=True,
            default_text="the compat venv's",
        ),
        _s(
            "TBP_PYTHON",
            "text",
            None,
            "the python with torch-tb-profiler for bench_load.py",
            dev=True,
            default_text="the compat venv's",
        ),
        _s(
            "REAL_TRACES",
            "text",
            None,
            "folder with the big real traces of bench_real.py",
            dev=True,
            default_text="none: bench_real.py --real-dir names it",
        ),
        _s("CHROMIUM", "text", "/usr/bin/chromium", "the browser of bench_timeline_fps.py", dev=True),
    )
}

_parsed: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()


def get(name: str) -> Any:
    """The value of setting `name` from the environment now: its default when unset, empty or
    not parseable (the last reported once, as a warning naming the variable)."""
    setting = SETTINGS[name]
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return setting.default
    key = (name, raw)
    with _lock:
        if key in _parsed:
            return _parsed[key]
    try:
        value = setting.parse(raw)
    except ValueError as e:
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        log.warning(
            "gpuscope: ignoring %s=%r: expected %s; using the default (%s)",
            name,
            shown,
            e,
            setting.shown_default().replace("`", ""),
        )
        value = setting.default
    with _lock:
        _parsed[key] = value
    return value


def markdown() -> str:
    """The README's table of settings."""
    lines = ["| variable | value | default | meaning |", "| --- | --- | --- | --- |"]
    for dev in (False, True):
        for s in SETTINGS.values():
            if s.dev == dev:
                default = s.shown_default()
                lines.append(f"| `{s.name}` | {s.expects()} | {default} | {'(development) ' if dev else ''}{s.doc} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
