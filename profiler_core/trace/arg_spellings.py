"""Every spelling Kineto traces have used for an op's shape args (docs/internals.md §3).

torch 1.8 wrote `Input dims`; torch 1.9 and later write `Input Dims`. `Input type` has kept its name;
`Input Strides` exists since torch 2.0. The other case variants are accepted as well, so a trace written
by any tool that follows one of these spellings reads the same.
"""

from __future__ import annotations

from typing import Any

#: canonical key -> the other spellings, oldest first
SPELLINGS: dict[str, tuple[str, ...]] = {
    "Input Dims": ("Input dims", "Input DIMS", "input dims"),
    "Input type": ("Input Type", "Input types", "Input Types", "input type"),
    "Input Strides": ("Input strides", "input strides"),
}


def shape_arg(args: dict, key: str) -> Any:
    """`args[key]` for a canonical shape key, else the value under one of its historic spellings, else None."""
    value = args.get(key)
    if value is not None:
        return value
    for alt in SPELLINGS.get(key, ()):
        value = args.get(alt)
        if value is not None:
            return value
    return None
