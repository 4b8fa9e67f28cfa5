"""What a `%%custom_gradient` cell defines, made an op and readied for its check: the magic's decorator (run where
the cell's `def` runs, `source.HOOK`), the info that says what was made of a cell that is not a plain `def`, and
what the check calls for it (the op, a wrapper of ops, an instance of a class)."""

from __future__ import annotations

import contextlib
import inspect
from typing import Callable

from gradmagic import source
from gradmagic.errors import GradmagicError
from gradmagic.frameworks.base import call_signature, is_op
from gradmagic.frameworks.cache import function_of
from gradmagic.op import OpInfo, attach, info_of


def hook(compiled: source.CompiledCell, adapter, previous, made: dict) -> Callable:
    """The magic's decorator for the cell's `def`: the op (the previous one, if the cell ran again unchanged), or
    the function itself where it is a wrapper of custom-gradient ops; `made` notes which."""

    def decorate(function):
        called = [name for name in sorted(compiled.calls) if is_op(adapter, function.__globals__.get(name))]
        if not compiled.gradient_shaped and called:  # a wrapper of custom-gradient ops: checked as it is
            made["wrapper"] = called
            return function
        op = _unchanged_op(previous, function, adapter) or _new_op(function, adapter)
        made["op"] = op
        return op

    return decorate


def _unchanged_op(previous, function, adapter):
    """`previous` (the op the cell made when it last ran) if the cell ran again unchanged: the op keeps its traces."""
    raw = function_of(previous)
    info = info_of(previous)
    if raw is None or info is None or info.framework != adapter.name or not adapter.keeps_unchanged_ops:
        return None
    return previous if source.unchanged_definition(raw, function, adapter.by_reference) else None


def _new_op(function, adapter):
    op = adapter.decorate(function)
    if adapter.keeps_unchanged_ops:
        source.remember_definition(function, adapter.by_reference)
    return op


def attach_info(bound: object, info: OpInfo) -> None:
    """Record `info` on what the cell bound (an object that takes no attribute, a class with slots, goes without)."""
    with contextlib.suppress(AttributeError, TypeError):
        attach(bound, info)


def definition_note(compiled: source.CompiledCell, bound: object, adapter, made: dict) -> str | None:
    """The info that says what the magic did with a cell that is not a plain def: decorators written, a wrapper of
    ops, a class. None for the plain case."""
    name = compiled.name
    written = ", ".join(f"`{text}`" if " = " in text else f"`@{text}`" for text, _ in compiled.decorators)
    lines = sorted({line for _, line in compiled.decorators})
    where = f"cell line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}"
    if compiled.kind == "class":
        return None
    if compiled.kind == "decorated":
        if not is_op(adapter, bound):
            raise GradmagicError(
                f"`{name}` is decorated with {written} ({where}), which made it a {type(bound).__name__} that is no "
                f"{adapter.decorator} op; write its decorators as in a plain cell, the custom-gradient one innermost."
            )
        how = "made" if " = " in written else "decorated"
        return f"`{name}` is {how} in the cell ({written}, {where}): bound as written, not decorated again."
    if "wrapper" in made:
        return (
            f"`{name}` returns no gradient function: it calls the custom-gradient "
            f"op{'s' if len(made['wrapper']) > 1 else ''} {', '.join(f'`{op}`' for op in made['wrapper'])}, so it "
            f"is bound as written (not decorated) and checked as the function it is, through their gradients."
        )
    if "op" not in made:
        raise GradmagicError(f"`{name}` was not made by the cell's `def`: the magic's decorator never ran on it.")
    if compiled.decorators:
        return (
            f"`{name}` is decorated in the cell ({written}, {where}): the magic's {adapter.decorator} is applied "
            "beneath them, and the result bound as written."
        )
    return None


def checked_callable(compiled: source.CompiledCell, bound: object, namespace: dict, needed: bool):
    """What the check calls for what the cell bound, the signature its `--check` inputs bind to, and for a class,
    the info that says which instance: the op or function itself; for a class, an instance the cell made (else one
    made without arguments), whose `call` (a Keras layer's) or `__call__` takes the inputs by position."""
    if compiled.kind != "class":
        return bound, signature_of(bound, compiled.name), None
    name = compiled.name
    found = [(key, value) for key, value in namespace.items() if isinstance(value, bound)]  # type: ignore[arg-type]
    if found:
        key, instance = found[-1]
        made = f"`{key}`, the instance the cell made"
    elif needed:
        try:
            instance = bound()  # type: ignore[operator]
        except Exception as error:
            raise GradmagicError(
                f"`{name}` is a class; checking it needs an instance, and `{name}()` failed "
                f"({type(error).__name__}: {error}). Make one in the cell, `layer = {name}(...)`, or after "
                f"it, and check that: `%gradcheck layer x=EXPR`."
            ) from None
        made = f"`{name}()`"
    else:
        return bound, signature_of(bound, name), None
    method = "call" if callable(getattr(instance, "call", None)) else "__call__"
    note = (
        f"`{name}` is a class: checked through {made}, its `{method}` taking the --check inputs by position "
        "(the class is bound as written)."
    )
    return instance, signature_of(instance, name), note


def defined_line(compiled: source.CompiledCell, bound: object, signature, adapter, note: str | None) -> str:
    """What a cell without a check prints."""
    if compiled.kind == "class":
        return (
            f"`{compiled.name}` is a class: check an instance of it with `%gradcheck layer x=EXPR` "
            f"(its `call` takes the inputs by position)."
        )
    said = f"{compiled.name}{signature} is now a {adapter.decorator} op ({adapter.display_name} {adapter.version})."
    if note is not None:
        said = note
    return said


def signature_of(op, expression: str) -> inspect.Signature:
    """The signature `--check` inputs bind to (a Keras layer's `call`'s)."""
    try:
        return call_signature(op)
    except (TypeError, ValueError) as error:
        raise GradmagicError(f"Cannot read the signature of `{expression}`: {error}.") from None
