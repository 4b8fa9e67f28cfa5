"""State a gradient function changes: a gradient function should compute gradients and nothing else.

A framework calls it once per gradient taken, again inside every trace of a
compiled function, and not at all when no gradient is asked for: a counter
it increments, a variable it assigns, a list it appends to behave
differently in every setting. The structure checks watch what the gradient
function can reach (the values it closes over and the globals it names:
framework variables, lists, dicts, sets, NumPy arrays) while they call it;
what changed is put back, also at the end of the check, and named.
"""

from __future__ import annotations

import copy
import types
from typing import Any, Callable

import numpy as np

from gradmagic.frameworks.base import Adapter

_CONTAINERS = (list, dict, set, bytearray)


class StateWatch:
    """A snapshot of the state `function` can reach, to tell what it changed and put it back."""

    def __init__(self, adapter: Adapter, function: Callable):
        self.adapter = adapter
        self.saved: dict[str, tuple[Any, str, Any]] = {}  # name -> (object, kind, saved copy)
        for name, value in _reachable(function).items():
            saved = self._save(value)
            if saved is not None:
                self.saved[name] = (value, *saved)

    def _save(self, value: Any) -> tuple[str, Any] | None:
        meta = self.adapter.meta(value)
        if meta is not None and meta.name is not None:  # a framework variable
            return "variable", np.array(self.adapter.to_numpy(value), copy=True)
        if isinstance(value, np.ndarray):
            return "array", value.copy()
        if isinstance(value, _CONTAINERS):
            return "container", copy.copy(value)
        return None

    def changed(self) -> list[tuple[str, str]]:
        """(name, kind) of what changed since the snapshot: "variable", "array" or "container"."""
        found = []
        for name, (value, kind, saved) in self.saved.items():
            if kind == "container":
                same = _same_container(value, saved)
            else:
                current = self.adapter.to_numpy(value) if kind == "variable" else value
                same = np.array_equal(current, saved, equal_nan=True)
            if not same:
                found.append((name, kind))
        return found

    def restore(self) -> bool:
        """Put back what changed; False if some of it could not be (a variable this framework cannot assign here)."""
        restored = True
        for name, kind in self.changed():
            value, _, saved = self.saved[name]
            if kind == "variable":
                try:
                    self.adapter.assign(value, saved)
                except NotImplementedError:
                    restored = False
            elif kind == "array":
                value[...] = saved
            elif isinstance(value, (list, bytearray)):
                value[:] = saved
            else:
                value.clear()
                value.update(saved)
        return restored


def _reachable(function: Callable) -> dict[str, Any]:
    """The values `function` closes over and the globals its code (and the functions nested in it) names."""
    function = getattr(function, "__wrapped__", function)
    code = getattr(function, "__code__", None)
    if code is None:
        return {}
    found = {}
    for name, cell in zip(code.co_freevars, getattr(function, "__closure__", None) or ()):
        try:
            found[name] = cell.cell_contents
        except ValueError:  # an empty cell
            continue
    names = _names(code)
    namespace = getattr(function, "__globals__", {})
    for name in names:
        if name in namespace and name not in found:
            found[name] = namespace[name]
    for name, value in list(found.items()):
        found.update(_attributes(name, value, names))
    return found


def _attributes(name: str, value: Any, names: set[str]) -> dict[str, Any]:
    """The attributes of an object the code names (`self.calls` of a layer whose gradient function counts in a
    variable): one level deep, plain objects only (not modules, classes, functions or what is saved itself)."""
    if isinstance(value, (types.ModuleType, type, types.FunctionType, types.MethodType, np.ndarray, *_CONTAINERS)):
        return {}
    attributes = getattr(value, "__dict__", None)
    if not isinstance(attributes, dict):
        return {}
    return {f"{name}.{attribute}": attributes[attribute] for attribute in names if attribute in attributes}


def _names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _names(constant)
    return names


def _same_container(value: Any, saved: Any) -> bool:
    if len(value) != len(saved):
        return False
    try:
        return bool(value == saved)
    except Exception:  # elements that cannot be compared (arrays): the same objects, then
        return all(a is b for a, b in zip(value, saved))
