"""What an op does besides computing: state its forward and gradient function change, and what they print.

A check runs the forward and the gradient function many times (the
structure run, each finite difference, each trace of a compiled function),
none of them asked for by the user. The state they can reach (the values
they close over, the globals they name or assign, the attributes of the
objects they name, one level deep: framework variables, lists, dicts, sets,
NumPy arrays, and the bindings themselves) is watched: what changed is put
back, and named. What they print during a check is kept out of the
notebook and reported.

A gradient function should compute gradients and nothing else: a framework
calls it once per gradient taken, again inside every trace of a compiled
function, and not at all when no gradient is asked for, so a counter it
increments behaves differently in every setting (`grad-side-effect`, from
the structure checks). A forward's state is put back once, at the end of
the check (`forward-side-effect`); its output is `op-output`.
"""

from __future__ import annotations

import copy
import dis
import functools
import io
import math
import sys
import types
from typing import Any, Callable

import numpy as np

from gradmagic.checking.findings import Findings, listing
from gradmagic.checking.source_lines import first_line
from gradmagic.frameworks.base import Adapter

_CONTAINERS = (list, dict, set, bytearray)
_MISSING = object()  # a global the code assigns that did not exist before
#: Immutable values a binding may be set to again, equal: not a change (`n = 0` run twice).
_SCALARS = (bool, int, float, complex, str, bytes, type(None))


class StateWatch:
    """A snapshot of the state `function` can reach, to tell what it changed and put it back."""

    def __init__(self, adapter: Adapter, function: Callable):
        self.adapter = adapter
        self.saved: dict[str, tuple[Any, str, Any]] = {}  # name -> (object, kind, saved copy)
        self.bindings: dict[str, tuple[str, Any, str, Any]] = {}  # name -> (kind, owner, key, value)
        values, bindings = _reachable(function)
        for name, value in values.items():
            saved = self._save(value)
            if saved is not None:
                self.saved[name] = (value, *saved)
        for name, (kind, owner, key) in bindings.items():
            self.bindings[name] = (kind, owner, key, _read(kind, owner, key))

    def _save(self, value: Any) -> tuple[str, Any] | None:
        meta = self.adapter.meta(value)
        if meta is not None and meta.name is not None:  # a framework variable
            try:
                return "variable", np.array(self.adapter.to_numpy(value), copy=True)
            except RuntimeError:  # one the check cannot read, nor change: TF1's graph mode mirrors the user's
                return None
        if isinstance(value, np.ndarray):
            return "array", value.copy()
        if isinstance(value, _CONTAINERS):
            return "container", copy.copy(value)
        return None

    def changed(self) -> list[tuple[str, str]]:
        """(name, kind) of what changed since the snapshot: "variable" (assigned), "array" or "container" (changed in
        place), or "binding" (a global, a closed-over name or an attribute set to another value)."""
        found = [
            (name, "binding")
            for name, (kind, owner, key, value) in self.bindings.items()
            if not _same_binding(_read(kind, owner, key), value)
        ]
        for name, (value, kind, saved) in self.saved.items():
            if kind == "container":
                same = _same_container(value, saved)
            else:
                current = self.adapter.to_numpy(value) if kind == "variable" else value
                same = np.array_equal(current, saved, equal_nan=True)
            if not same and (name, "binding") not in found:
                found.append((name, kind))
        return found

    def restore(self) -> bool:
        """Put back what changed; False if some of it could not be (a variable this framework cannot assign here, an
        attribute that cannot be set)."""
        restored = True
        for name, kind in self.changed():
            if kind == "binding":
                restored = _write(*self.bindings[name]) and restored
                continue
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
        for name, (value, kind, saved) in self.saved.items():  # in an object a binding was put back to, if changed
            if kind == "container" and not _same_container(value, saved):
                restored = False
        return restored


def described(changed: list[tuple[str, str]]) -> str:
    """`calls` (changed), `v` (assigned), `n` (set): what `StateWatch.changed` found, as a message lists it."""
    words = {"variable": "assigned", "binding": "set"}
    return ", ".join(f"`{name}` ({words.get(kind, 'changed')})" for name, kind in changed)


class OpEffects:
    """Around one check: the state the op's forward can reach, put back at the end, and what the op prints, kept
    out of the notebook; `settle` names both in findings (before the report is made), leaving is enough on an
    exception or an interrupt."""

    def __init__(self, adapter: Adapter, function: Callable):
        self.function = function
        self.state = StateWatch(adapter, function)
        self.output = _Output()
        self.settled = False

    def __enter__(self) -> OpEffects:
        self.output.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if not self.settled:
            self.settled = True
            self.output.stop()
            self.state.restore()

    def settle(self, findings: Findings) -> None:
        """Stop keeping the output, put the forward's state back, and record what it printed and changed."""
        if self.settled:
            return
        self.settled = True
        text = self.output.stop()
        changed = self.state.changed()
        restored = self.state.restore()
        wording = findings.wording
        line = first_line(self.function)
        if changed:
            python_state = [name for name, kind in changed if kind != "variable"]
            findings.add(
                "forward-side-effect",
                "warning" if python_state or not restored else "info",
                f"The forward of `{findings.name}` changes state: {described(changed)}. The check ran it many times "
                "(each finite difference, each trace), none of which you asked for; "
                + (
                    "gradmagic put it back as it was before the check."
                    if restored
                    else "gradmagic could not put all of it back: it stays changed."
                )
                + (
                    f" Python state ({listing(python_state)}) counts calls unreliably: {wording.framework} runs the "
                    f"forward's Python code on every eager call but only when it traces it {wording.compiled}. Keep "
                    "such state outside the op."
                    if python_state
                    else ""
                ),
                line=line,
            )
        if text.strip():
            lines = text.strip().splitlines()
            findings.add(
                "op-output",
                "info",
                f"`{findings.name}` printed while gradmagic checked it ({len(lines)} line{'s' * (len(lines) != 1)}; "
                f"the first: `{lines[0].strip()[:200]}`). The check runs the forward and the gradient function many "
                "times (each finite difference, each trace), so what they print is kept out of the notebook. A print "
                f"in the op runs on every eager call, but only when it is traced {wording.compiled}.",
                line=line,
            )


class _Output(io.TextIOBase):
    """Stands for `sys.stdout` while a check runs: keeps what is printed (from any thread), and answers the rest
    (`fileno`, `encoding`) as the stream it replaced. `sys.stderr` is left alone: warnings go there, once per place
    in the code by Python's default, and from the framework as much as from the op."""

    def __init__(self):
        super().__init__()
        self.parts: list[str] = []
        self.replaced: Any = None

    def start(self) -> None:
        self.replaced, sys.stdout = sys.stdout, self

    def stop(self) -> str:
        """Put the stream back (unless something replaced this one meanwhile); what was printed."""
        if self.replaced is not None:
            if sys.stdout is self:
                sys.stdout = self.replaced
            self.replaced = None
        return "".join(self.parts)

    def write(self, text: str) -> int:
        self.parts.append(str(text))
        return len(text)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.replaced.fileno()

    @property  # typeshed declares TextIOBase.encoding writable; io's is a read-only attribute, as this is
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.replaced, "encoding", None) or "utf-8"


def _reachable(function: Callable) -> tuple[dict[str, Any], dict[str, tuple[str, Any, str]]]:
    """The values `function` closes over and the globals its code (and the functions nested in it) names; and the
    bindings it may set: the globals it assigns, its closed-over names, the attributes of those objects it names."""
    function, owner = unwrapped(function)
    code = getattr(function, "__code__", None)
    if code is None:
        return {}, {}
    found: dict[str, Any] = {} if owner is None else {"self": owner}
    bindings: dict[str, tuple[str, Any, str]] = {}  # name -> (kind, owner, key: the name in the owner)
    for name, cell in zip(code.co_freevars, getattr(function, "__closure__", None) or ()):
        try:
            found[name] = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        bindings[name] = ("cell", cell, name)
    names = code_names(code)
    namespace = getattr(function, "__globals__", {})
    for name in names:
        if name in namespace and name not in found:
            found[name] = namespace[name]
    for name in _assigned_globals(code):
        bindings.setdefault(name, ("global", namespace, name))
    for name, value in list(found.items()):
        attributes = _attributes(name, value, names)
        found.update(attributes)
        bindings.update({label: ("attribute", value, label.split(".", 1)[1]) for label in attributes})
    return found, bindings


def unwrapped(function: Any) -> tuple[Any, Any]:
    """The Python function behind decorators, `functools.partial` and bound methods, and the object a method is bound
    to (None for a function)."""
    owner = None
    for _ in range(16):  # a decorator's chain of `__wrapped__`, a partial of a partial
        if isinstance(function, functools.partial):
            function = function.func
        elif isinstance(function, types.MethodType):
            function, owner = function.__func__, function.__self__
        elif hasattr(function, "__wrapped__"):
            function = function.__wrapped__
        else:
            break
    return function, owner


def _attributes(name: str, value: Any, names: set[str]) -> dict[str, Any]:
    """The attributes of an object the code names (`self.calls` of a layer whose gradient function counts in a
    variable): one level deep, plain objects only (not modules, classes, functions or what is saved itself)."""
    if isinstance(value, (types.ModuleType, type, types.FunctionType, types.MethodType, np.ndarray, *_CONTAINERS)):
        return {}
    attributes = getattr(value, "__dict__", None)
    if not isinstance(attributes, dict):
        return {}
    return {f"{name}.{attribute}": attributes[attribute] for attribute in names if attribute in attributes}


def code_names(code: types.CodeType) -> set[str]:
    """The names `code` and the functions nested in it read: globals, attributes."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= code_names(constant)
    return names


def _assigned_globals(code: types.CodeType) -> set[str]:
    """The globals the code (and the functions nested in it) assigns or deletes (`global n; n += 1`)."""
    found = {
        instruction.argval
        for instruction in dis.get_instructions(code)
        if instruction.opname in ("STORE_GLOBAL", "DELETE_GLOBAL")
    }
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            found |= _assigned_globals(constant)
    return found


def _read(kind: str, owner: Any, key: str) -> Any:
    if kind == "cell":
        try:
            return owner.cell_contents
        except ValueError:
            return _MISSING
    if kind == "global":
        return owner.get(key, _MISSING)
    return getattr(owner, "__dict__", {}).get(key, _MISSING)


def _write(kind: str, owner: Any, key: str, value: Any) -> bool:
    """Set a binding back to `value` (a global that did not exist is deleted); False where it cannot be."""
    try:
        if kind == "cell":
            owner.cell_contents = value
        elif kind == "global" and value is _MISSING:
            owner.pop(key, None)
        elif kind == "global":
            owner[key] = value
        elif value is _MISSING:
            delattr(owner, key)
        else:
            setattr(owner, key, value)
    except Exception:  # noqa: BLE001 - a read-only attribute, a cell that cannot be set: say it stays changed
        return False
    return True


def _same_binding(current: Any, saved: Any) -> bool:
    """Whether a binding still holds its value: the same object, or an equal number or string."""
    if current is saved:
        return True
    if type(current) is not type(saved) or not isinstance(saved, _SCALARS):
        return False
    if isinstance(saved, float) and math.isnan(saved):
        return math.isnan(current)
    return current == saved


def _same_container(value: Any, saved: Any) -> bool:
    if len(value) != len(saved):
        return False
    try:
        return bool(value == saved)
    except Exception:  # elements that cannot be compared (arrays): the same objects, then
        return all(a is b for a, b in zip(value, saved))
