"""docs/trace-format.md is the reader's contract: every category and argument it names reaches
the columns it says (a trace built from the document's own tables, written and read back), under
every spelling it lists; its arguments table is the one event_args.ARGS generates."""

import json
import re
from pathlib import Path

import pytest

from profiler_core.trace.event_args import markdown_table
from profiler_core.trace.read.reader import read_trace

DOC = (Path(__file__).resolve().parents[1] / "docs" / "trace-format.md").read_text(encoding="utf-8")
#: a value per argument key, and the column value it must give
VALUES = {
    "External id": (7, 7),
    "Input Dims": ([[2, 3]], "[[2,3]]"),
    "Input type": (["float"], '["float"]'),
    "Call stack": ("a.py(1): f", "a.py(1): f"),
    "Sequence number": (11, 11),
    "Fwd thread id": (12, 12),
    "correlation": (13, 13),
    "grid": ([2, 3, 4], [2, 3, 4]),
    "block": ([32, 1, 1], [32, 1, 1]),
    "device": (0, 0),
    "stream": (7, 7),
    "registers per thread": (32, 32),
    "shared memory": (1024, 1024),
    "static shared memory": (512, 512),
    "dynamic shared memory": (256, 256),
    "Python id": (21, 21),
    "Python parent id": (22, 22),
    "Python module id": (23, 23),
    "blocks per SM": (1.5, 1.5),
    "warps per SM": (6.0, 6.0),
    "est. achieved occupancy %": (25.0, 25.0),
    "bytes": (4096, 4096),
    "Collective name": ("allreduce", "allreduce"),
    "dtype": ("Float", "Float"),
    "In msg nelems": (5, 5),
    "Out msg nelems": (6, 6),
    "Group size": (2, 2),
    "graph id": (3, 3),
    "graph node id": (41, 41),
    "Process Group Name": ("0", "0"),
}
MEMORY = {"Bytes": 64, "Addr": 100, "Total Allocated": 64, "Total Reserved": 128, "Device Type": 1, "Device Id": 0}


def _table(title: str) -> list[list[str]]:
    section = DOC.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows[1:]]


def _ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("doc") / "w.1.pt.trace.json"
    events = []
    for i, (cat, ph, _where, _what) in enumerate(_table("Events")):
        cats = _ticked(cat)
        if ph.strip() != "X" or not cats:
            continue
        gpu = _where.startswith("device")
        events.append(
            {
                "ph": "X",
                "cat": cats[0],
                "name": f"e_{cats[0]}",
                "pid": 0 if gpu else 100,
                "tid": 7 if gpu else 100,
                "ts": 10 * i,
                "dur": 5,
                "args": {},
            }
        )
    for key, on, _column in _table("Arguments (`args`)"):
        keys = _ticked(key)
        if keys[0] not in VALUES:
            continue
        cat = "python_function" if "Python" in on else "kernel" if "kernels" in on or "GPU" in on else "cpu_op"
        for k in keys:  # the key, then each older spelling, alone on an event named after it
            events.append(
                {
                    "ph": "X",
                    "cat": cat,
                    "name": f"arg_{k}",
                    "pid": 0,
                    "tid": 7,
                    "ts": 1000,
                    "dur": 1,
                    "args": {
                        k: VALUES[keys[0]][0],
                        **({"device": 0, "stream": 7} if k not in ("device", "stream") else {}),
                    },
                }
            )
    events.append(
        {
            "ph": "i",
            "cat": "cpu_instant_event",
            "s": "t",
            "name": "[memory]",
            "pid": 100,
            "tid": 100,
            "ts": 2000,
            "args": MEMORY,
        }
    )
    path.write_text(json.dumps({"schemaVersion": 1, "baseTimeNanoseconds": 10**18, "traceEvents": events}))
    return read_trace(str(path), processes=0)


def test_every_category_of_the_document_is_read_as_itself(trace):
    complete = [_ticked(c)[0] for c, ph, _, _ in _table("Events") if ph == "X"]
    assert len(complete) == 9
    got = dict(zip(trace.events["name"].astype(str), trace.events["cat"].astype(str)))
    assert {c: got.get(f"e_{c}") for c in complete} == {c: c for c in complete}


def test_arguments_table_is_generated_from_the_schema():
    section = DOC.split("## Arguments (`args`)\n", 1)[1].split("\n## ", 1)[0]
    assert section[section.index("| key |") :] == markdown_table()


def test_every_argument_of_the_document_reaches_its_column(trace):
    ev = trace.dense_events().set_index(trace.events["name"].astype(str))
    checked = 0
    for key, _on, column in _table("Arguments (`args`)"):
        keys, columns = _ticked(key), _ticked(column)
        if keys[0] in MEMORY:
            row = trace.memory.iloc[0]
            assert [row[c] for c in columns[1:]] == [MEMORY[k] for k in keys]
            checked += len(keys)
            continue
        for k in keys:  # every spelling reads as the key
            expected = VALUES[keys[0]][1]
            if len(columns) == 3:  # grid, block
                assert [int(ev.loc[f"arg_{k}", c]) for c in columns] == expected, k
            else:
                value = ev.loc[f"arg_{k}", columns[0]]
                assert (value == expected) or str(value) == str(expected), (k, columns[0], value)
        checked += 1
    assert checked == len(VALUES) + len(MEMORY)
