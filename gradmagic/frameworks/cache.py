"""What gradmagic keeps on the callables it works with: for an op's raw function, its cache (its decorated op, its
compiled functions); on an op an adapter made, the function it was made from.

The cache is freed with the function when the notebook redefines it: the
entries refer back to the function, so a WeakKeyDictionary keyed by it would
never let it go. A callable without attributes (a builtin, a
`functools.partial`) gets a fresh cache each time.
"""

from __future__ import annotations

from typing import Callable

_ATTRIBUTE = "__gradmagic_cache__"
_FUNCTION = "_gradmagic_function"


def made_from(op: Callable, function: Callable) -> Callable:
    """`op`, an adapter's `decorate` of `function`, marked as made from it; returned."""
    setattr(op, _FUNCTION, function)
    return op


def function_of(op: object) -> Callable | None:
    """The function an adapter's `decorate` made `op` from; None for any other object."""
    return getattr(op, _FUNCTION, None)


def cache_of(function: Callable) -> dict:
    """The cache kept on `function` (created empty on first use)."""
    cache = getattr(function, _ATTRIBUTE, None)
    if cache is None:
        try:
            cache = function.__dict__.setdefault(_ATTRIBUTE, {})
        except AttributeError:
            return {}
    return cache
