"""A parser process of the parallel reader: parses one byte range of a trace, writes it to stdout.

    python -m profiler_core.trace.read.span_worker PATH LO HI [N:N:...]

(HI "-": to the end of the trace; N:N:..., the `storage.fingerprint` of the file the reader
expects: another one gives 4)

Started by `profiler_core.trace.read.stream.SpanProcess`; the output is the pickled columns of the
events between the cuts at LO and HI. Exit code 3 (with the message on stderr) is a TraceReadError,
4 a range the quick splitter cannot cut (the reader then reads the file serially).
"""

from __future__ import annotations

import gc
import sys


def main(argv: list[str]) -> int:
    """Parse the range named by argv and write it to stdout; the exit code says how it went."""
    if len(argv) not in (3, 4):
        sys.stderr.write(__doc__)
        return 2
    gc.disable()  # millions of short-lived objects, no cycles
    from profiler_core.trace.read import stream
    from profiler_core.trace.read.malloc_tuning import tune_for_parsing

    tune_for_parsing()
    path, lo, hi = argv[0], int(argv[1]), None if argv[2] == "-" else int(argv[2])
    version = tuple(int(x) for x in argv[3].split(":")) if len(argv) == 4 else None
    try:
        data = stream.parse_span_job(path, lo, hi, version)  # noqa: SLF001 - the reader's own worker
    except stream.TraceReadError as e:
        sys.stderr.write(str(e))
        return stream.SPAN_READ_ERROR
    except stream.NotStreamable:  # noqa: SLF001
        return stream.SPAN_NOT_STREAMABLE
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
