"""Two jobs' kernels aligned from their workers' kernel tables (`analysis.worker.kernel_table.project`, kept in
the summaries): kernel ns per step by (op path, name), a job's groups over its workers, and the pairing of two
jobs' groups by the Diff view's passes (`tables.kernel_places.align_groups`); the job diff reads these."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import pandas as pd

from profiler_core.analysis.tables.kernel_places import align_groups
from tb_plugin.summaries.schema import KernelTable

Key = tuple[str, str]


def per_step(table: KernelTable) -> dict[Key, float]:
    """One worker's kernel ns per step by (path, name) ({} without steps)."""
    n = table.steps
    if not n:
        return {}
    paths = table.paths
    return {(paths[i], nm): float(v) / n for i, nm, v in zip(table.path, table.name, table.total)}


def job_groups(tables: Iterable[KernelTable]) -> pd.DataFrame:
    """One job's kernel groups over its workers' tables: path, name, ordinal (the most common over the workers,
    the smallest on a tie), in order of first appearance over the workers in the order given."""
    seen: dict[Key, Counter] = {}
    for tb in tables:
        paths = tb.paths
        for i, nm, k in zip(tb.path, tb.name, tb.ordinal):
            seen.setdefault((paths[i], nm), Counter())[int(k)] += 1
    rows = [(p, nm, min(c, key=lambda k: (-c[k], k))) for (p, nm), c in seen.items()]
    return pd.DataFrame(rows, columns=["path", "name", "ordinal"])


def align(tables_a: Iterable[KernelTable], tables_b: Iterable[KernelTable]) -> list[dict]:
    """The two jobs' kernel groups paired by `align_groups`: [{"align", "a": (path, name) | None, "b": ...}]."""
    pairs = align_groups(job_groups(tables_a), job_groups(tables_b))
    return [
        {
            "align": how,
            "a": (a["path"], a["name"]) if a is not None else None,
            "b": (b["path"], b["name"]) if b is not None else None,
        }
        for how, a, b in pairs
    ]
