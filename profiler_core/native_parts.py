"""Whether the optional C extensions are built where gpuscope is installed, in words.

Both are optional (setup.py builds them where a C compiler is found; without one pip installs the pure-Python
package): the native trace reader (`profiler_core.trace.read._native`) and the op tree's nesting pass
(`profiler_core.analysis.stages._tree`). Without them everything works, slower; that is said once, never
silently: at the plugin's start (a warning in TensorBoard's log) and in `gpuscope --version`'s detail.
"""

from __future__ import annotations

import importlib
import logging
import threading

#: (module, what it is, what happens without it, the setting that turns it off)
PARTS: tuple[tuple[str, str, str, str], ...] = (
    (
        "profiler_core.trace.read._native",
        "native trace reader",
        "traces are read by the Python reader (several times slower on big traces)",
        "GPUSCOPE_NATIVE_READER",
    ),
    (
        "profiler_core.analysis.stages._tree",
        "op tree's C pass",
        "the op tree is nested in numpy only",
        "GPUSCOPE_NATIVE_TREE",
    ),
)

#: how to get them, said with what is missing
HOW_TO_BUILD = (
    "they are built when gpuscope is installed where a C compiler and the Python headers are found "
    "(e.g. apt-get install gcc python3-dev, then "
    "pip install --force-reinstall --no-deps --no-binary gpuscope gpuscope; "
    "in a source tree: .ci/build_native.sh .)"
)

_said = False
_said_lock = threading.Lock()


def missing() -> list[tuple[str, str, str]]:
    """(what, why it is not importable, what happens without it) for each C extension that is not built."""
    out = []
    for module, what, without, _ in PARTS:
        try:
            importlib.import_module(module)
        except ImportError as e:
            out.append((what, f"{type(e).__name__}: {e}", without))
    return out


def detail() -> str:
    """One line per C extension: built (and whether a setting turns it off), or not built with the consequence."""
    from profiler_core import settings

    gone = {what: (why, without) for what, why, without in missing()}
    lines = []
    for _, what, _, setting in PARTS:
        if what in gone:
            why, without = gone[what]
            lines.append(f"{what}: not built ({why}): {without}")
        elif not settings.get(setting):
            lines.append(f"{what}: built, turned off by {setting}=0")
        else:
            lines.append(f"{what}: built")
    if gone:
        lines.append(HOW_TO_BUILD)
    return "\n".join(lines)


def missing_message() -> str | None:
    """The warning that names the C extensions that are not built, or None when both are."""
    gone = missing()
    if not gone:
        return None
    parts = "; ".join(f"the {what} is not built: {without}" for what, _, without in gone)
    return f"gpuscope: {parts}. {HOW_TO_BUILD[0].upper()}{HOW_TO_BUILD[1:]}"


def say_once(logger: logging.Logger) -> bool:
    """Warns once per process through `logger` when a C extension is not built; True when it warned now."""
    global _said
    with _said_lock:
        if _said:
            return False
        _said = True
    message = missing_message()
    if message is None:
        return False
    logger.warning("%s", message)
    return True
