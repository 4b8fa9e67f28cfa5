"""What a `%%register_gradient` cell defines: the gradient functions `(op, grad)` it registers for op types, the op
types they apply to, and the forward its check calls.

The cell is read as code found in the wild: a def under `@tf.RegisterGradient("Name")` (or registered by a
`tf.RegisterGradient("Name")(fn)` line), or a plain def `(op, grad)` that the magic registers under its own name;
the op types on the magic line, or those the cell's own `gradient_override_map({...})` maps to the gradient; a forward
def (a function of tensors, `tf.numpy_function` inside for the "py_func with gradient" recipe) whose check calls it
with its ops built under the override. Registering replaces what the cell registered when it last ran, so it runs
again (TensorFlow alone refuses a name twice).
"""

from __future__ import annotations

import ast
import inspect
import types
from dataclasses import dataclass

from gradmagic.errors import CellError, GradmagicError
from gradmagic.source import Cell, compile_module

#: The first parameter's names that make a def a gradient function `(op, grad)` as TensorFlow calls one.
_OP_PARAMETERS = ("op", "unused_op", "_op", "_", "operation")


@dataclass(frozen=True)
class GradientCell:
    """A `%%register_gradient` cell, read."""

    code: types.CodeType
    gradients: tuple[tuple[str, int], ...]  # the gradient defs: (name, cell line)
    registered_as: dict  # a gradient def's name -> the name its `@...RegisterGradient("...")` gives (when constant)
    forwards: tuple[tuple[str, bool], ...]  # the other top-level defs: (name, whether it enters an override itself)
    #: Each `gradient_override_map({...})` entry written in the cell: (op type, the value's source, cell line).
    mapped: tuple[tuple[str, str, int], ...]


def read(cell: Cell) -> GradientCell:
    """Compile and read `cell`; CellError when it defines no gradient function."""
    tree = ast.parse(cell.numbered(), cell.filename)
    gradients, registered_as, forwards = [], {}, []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        decorator = next((d for d in node.decorator_list if _registers(d)), None)
        if decorator is not None or _gradient_shaped(node):
            gradients.append((node.name, node.lineno))
            name = _constant_argument(decorator) if decorator is not None else None
            if name is not None:
                registered_as[node.name] = name
        else:
            forwards.append((node.name, any(_override_maps(node))))
    for statement in tree.body:  # `tf.RegisterGradient("Name")(fn)` as a statement of its own
        call = statement.value if isinstance(statement, ast.Expr) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Call) and _registers(call.func):
            if call.args and isinstance(call.args[0], ast.Name):
                name = _constant_argument(call.func)
                if name is not None:
                    registered_as[call.args[0].id] = name
                if call.args[0].id not in [g for g, _ in gradients]:
                    gradients.append((call.args[0].id, statement.lineno))
    if not gradients:
        raise CellError(
            "The cell defines no gradient function: %%register_gradient registers a def `(op, grad)` (TensorFlow "
            "calls it with the op and the gradient of each of its outputs, and it returns one gradient per op input), "
            'written plain or under `@tf.RegisterGradient("Name")`. A custom-gradient op, `(outputs, grad)`, is '
            "%%custom_gradient's."
        )
    mapped = tuple(
        (key.value, ast.unparse(value), call.lineno)
        for call in _override_maps(tree)
        for key, value in zip(call.args[0].keys, call.args[0].values)  # type: ignore[attr-defined]
        if isinstance(key, ast.Constant) and isinstance(key.value, str)
    )
    return GradientCell(
        compile_module(tree.body, cell.filename),
        tuple(gradients),
        registered_as,
        tuple(forwards),
        mapped,
    )


def forward_of(cell: GradientCell, chosen: str | None, names: list[str], namespace: dict) -> str | None:
    """The forward def the check calls: `chosen`, else the one def whose parameters take the `--check` inputs
    `names` (the recipe's generic `py_func(func, inp, Tout)` helper does not); None where the cell has none."""
    forwards = [name for name, _ in cell.forwards]
    if chosen is not None:
        if chosen not in forwards:
            raise GradmagicError(
                f"`--forward {chosen}`: the cell defines no forward `{chosen}`"
                + (f" (its forwards: {', '.join(f'`{n}`' for n in forwards)})." if forwards else ".")
            )
        return chosen
    if len(forwards) <= 1:
        return forwards[0] if forwards else None
    if not names:  # nothing to call it with: none is chosen (a cell of helpers, checked later with --forward)
        return None
    fitting = [name for name in forwards if _takes(namespace.get(name), names)]
    if len(fitting) == 1:
        return fitting[0]
    raise GradmagicError(
        f"The cell defines several functions besides its gradient ({', '.join(f'`{n}`' for n in forwards)}) and "
        f"{'more than one' if fitting else 'none'} of them takes the --check inputs: name the one to check with "
        "`--forward NAME`."
    )


def op_types_of(cell: GradientCell, gradient: str, registered: str, line_types: list[str], namespace: dict) -> list:
    """The op types `gradient` (registered as `registered`) applies to: the magic line's, else the keys of the cell's
    override maps whose value is its name (a value the cell computes, as the recipe's random name, counts for the
    cell's only gradient)."""
    if line_types:
        return list(line_types)
    found = []
    for op_type, value, _ in cell.mapped:
        try:
            named = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            named = namespace.get(value, None) if value.isidentifier() else None
            if named is None and len(cell.gradients) == 1:
                named = registered
        if named == registered and op_type not in found:
            found.append(op_type)
    return found


def _registers(decorator: ast.expr) -> bool:
    """Whether `decorator` is a `RegisterGradient("...")` call (`tf.`, `ops.`, `tf.compat.v1.` or bare)."""
    if not isinstance(decorator, ast.Call):
        return False
    function = decorator.func
    name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
    return name == "RegisterGradient"


def _constant_argument(call: ast.Call) -> str | None:
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    return None


def _gradient_shaped(node: ast.FunctionDef) -> bool:
    """A def `(op, grad, ...)`: its first parameter the op, one more (or `*grads`) for the outputs' gradients."""
    arguments = node.args.posonlyargs + node.args.args
    if not arguments or arguments[0].arg not in _OP_PARAMETERS:
        return False
    return len(arguments) >= 2 or node.args.vararg is not None


def _override_maps(tree: ast.AST) -> list[ast.Call]:
    """The `....gradient_override_map({...})` calls in `tree` whose argument is a dict written out."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "gradient_override_map"
        and node.args
        and isinstance(node.args[0], ast.Dict)
    ]


def _takes(function, names: list[str]) -> bool:
    """Whether `function` can be called with exactly the keyword arguments `names`."""
    try:
        inspect.signature(function).bind(**dict.fromkeys(names))
    except (TypeError, ValueError):
        return False
    return True
