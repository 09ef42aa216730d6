"""Which version of a file a parse belongs to: the one place that says what "the same file" means."""

from __future__ import annotations

import os


def file_identity(st: os.stat_result) -> tuple[int, ...]:
    """Size, mtime, inode, device and ctime (ns) of a stat result: a file replaced by another of
    the same size and mtime (a copy with `cp -p`, a rename over it) still differs in inode or ctime."""
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, st.st_ctime_ns)


def portable_identity(ident: tuple) -> tuple[int, ...]:
    """`file_identity` without the device number, for records compared on other machines (a
    network mount's device number differs per client): size, mtime, inode, ctime; () for ()."""
    return tuple(ident[:3]) + tuple(ident[4:]) if ident else ()
