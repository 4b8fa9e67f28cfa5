"""What gradmagic keeps for an op's raw function (its decorated op, its compiled functions), stored on the function.

Freed with the function when the notebook redefines it: the entries refer
back to the function, so a WeakKeyDictionary keyed by it would never let it
go. A callable without attributes (a builtin, a `functools.partial`) gets a
fresh cache each time.
"""

from __future__ import annotations

from typing import Callable

_ATTRIBUTE = "__gradmagic_cache__"


def cache_of(function: Callable) -> dict:
    """The cache kept on `function` (created empty on first use)."""
    cache = getattr(function, _ATTRIBUTE, None)
    if cache is None:
        try:
            cache = function.__dict__.setdefault(_ATTRIBUTE, {})
        except AttributeError:
            return {}
    return cache
