"""Cell text to Python function: the first step of gradmagic's pipeline.

A `%%custom_gradient` cell comes in two forms:

* definition form: the cell holds a `def` (helper statements and imports may
  stand before or after it); the magic line may name the def to decorate;
* body form: the magic line gives the signature, `name(params)`, and the cell
  is the function's body, `return` included.

Line numbers stay as the user sees them, the magic line being line 1, so that
syntax errors and tracebacks (once the caller has put `Cell.text` in
`linecache` under `Cell.filename`) point at the user's own lines. A cell run
again unchanged reuses its compiled code (see `compile_cell`).
"""

from __future__ import annotations

import ast
import functools
import types
from dataclasses import dataclass
from typing import Callable

from gradmagic.errors import CellError


@dataclass(frozen=True)
class Cell:
    """A cell of one of gradmagic's cell magics as the user sees it: the magic line is line 1, the body starts on line
    2. This class is where that holds: the cell's text is made, split and numbered here only."""

    magic_line: str  # `%%custom_gradient log1pexp(x)`
    body: str
    filename: str  # the cell's name in `linecache`

    @classmethod
    def typed(cls, magic: str, line: str, body: str, register: Callable[[str], str]) -> Cell:
        """The cell the user typed: cell magic `magic` with `line`, over `body`; `register(text)` puts the cell's text
        in `linecache` and returns its name there."""
        magic_line = f"%%{magic} {line}".rstrip()
        return cls(magic_line, body, register(_cell_text(magic_line, body)))

    @classmethod
    def of(cls, text: str, filename: str) -> Cell:
        """The cell whose text (as registered in `linecache` under `filename`) is `text`."""
        magic_line, _, body = text.partition("\n")
        return cls(magic_line, body, filename)

    @property
    def text(self) -> str:
        """The whole cell, magic line first, as registered in `linecache`."""
        return _cell_text(self.magic_line, self.body)

    def numbered(self, body: str | None = None) -> str:
        """The body (or `body`, the body as IPython transforms it) as Python source numbered as the cell is, the magic
        line's place left empty."""
        return "\n" + (self.body if body is None else body)


def _cell_text(magic_line: str, body: str) -> str:
    return f"{magic_line}\n{body}"


@dataclass(frozen=True)
class CompiledCell:
    """A cell compiled to a module whose running defines function `name`."""

    name: str
    form: str  # "definition" or "body"
    code: types.CodeType
    decorators: tuple[tuple[str, int], ...] = ()  # the def's decorators as written, and their cell lines


@functools.lru_cache(maxsize=64)
def compile_cell(cell: Cell, target: str | None) -> CompiledCell:
    """Compile `cell` into code that defines the function to decorate.

    `target` is the magic line's positional word: `None` or a name (definition
    form), or `name(params)` (body form). Raises `SyntaxError` located in the
    cell, or `CellError` when the cell does not define a usable function.

    The same cell (text and filename: Jupyter's kernel names a cell by its
    text) gets the same code objects back. Compiling is a pure function of
    them, and TensorFlow keeps, for good, every distinct Python stack it
    traces ops from: with new code objects each re-run of a checking cell
    kept about 0.15 MB more.
    """
    if target is not None and "(" in target:
        return _compile_body_form(cell, target)
    return _compile_definition_form(cell, target)


def _parse_body(cell: Cell) -> ast.Module:
    return ast.parse(cell.numbered(), cell.filename)


def _compile_definition_form(cell: Cell, target: str | None) -> CompiledCell:
    tree = _parse_body(cell)
    functions = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    names = list(dict.fromkeys(node.name for node in functions))
    if not functions:
        raise CellError(
            "The cell defines no function. Write `def name(x): ...` in the cell, or give the "
            "signature on the magic line (`%%custom_gradient name(x)`) and write only the body."
        )
    if target is None:
        if len(names) > 1:
            raise CellError(
                f"The cell defines {len(names)} functions ({', '.join(names)}); name the one to "
                f"decorate on the magic line, e.g. `%%custom_gradient {names[-1]}`."
            )
        name = names[0]
    elif not target.isidentifier():
        raise CellError(f"`{target}` is not a function name; write `%%custom_gradient NAME` or `NAME(params)`.")
    elif target not in names:
        raise CellError(
            f"The cell defines no function named `{target}`; it defines {', '.join(names)}. To write only "
            f"the body instead, give the parameters on the magic line: `%%custom_gradient {target}(x)`."
        )
    else:
        name = target
    node = [node for node in functions if node.name == name][-1]
    if isinstance(node, ast.AsyncFunctionDef):
        raise CellError(
            f"`{name}` (cell line {node.lineno}) is an `async def`; a custom-gradient op must be a plain `def`."
        )
    for decorator in node.decorator_list:
        written = ast.unparse(decorator)
        if written.split("(")[0].endswith("custom_gradient"):
            raise CellError(
                f"`{name}` is already decorated with `@{written}` (cell line {decorator.lineno}); "
                "remove that line: the magic applies the decorator itself."
            )
        if written.split("(")[0].split(".")[-1] == "function":
            raise CellError(
                f"`{name}` is decorated with `@{written}` (cell line {decorator.lineno}); remove that line: the magic "
                f"needs the plain function, which returns `(outputs, grad)`, to make the custom-gradient op. The op "
                f"works inside tf.function: decorate the function that calls it, or compile it after this cell, "
                f"`{name}_compiled = tf.function({name})`."
            )
    decorators = tuple((ast.unparse(decorator), decorator.lineno) for decorator in node.decorator_list)
    return CompiledCell(name, "definition", compile(tree, cell.filename, "exec"), decorators)


def _compile_body_form(cell: Cell, target: str) -> CompiledCell:
    header_source = f"def {target}:\n    pass\n"
    try:
        header = ast.parse(header_source)
    except SyntaxError as error:
        raise _signature_error(cell, target, error.msg, error.lineno == 1 and error.offset) from None
    function = header.body[0] if len(header.body) == 1 else None
    if not isinstance(function, ast.FunctionDef) or function.decorator_list:
        raise _signature_error(cell, target, "expected `name(params)`", None)
    _shift_columns(function, cell.magic_line.find(target) - len("def "))
    function.body = _parse_body(cell).body
    if not function.body:
        raise CellError(f"The cell is empty: write the body of `{function.name}`, ending with `return outputs, grad`.")
    module = ast.Module(body=[function], type_ignores=[])
    return CompiledCell(function.name, "body", compile(module, cell.filename, "exec"))


def _signature_error(cell: Cell, target: str, message: str, offset: int | None) -> SyntaxError:
    """A SyntaxError pointing into the signature on the magic line (line 1)."""
    column = cell.magic_line.find(target) + 1
    column += offset - 1 - len("def ") if offset else len(target)
    return SyntaxError(
        f"invalid signature on the magic line: {message}", (cell.filename, 1, column, cell.magic_line, 1, column + 1)
    )


def _shift_columns(function: ast.FunctionDef, shift: int) -> None:
    """Make the signature's column offsets those of the magic line."""
    for node in ast.walk(function):
        if getattr(node, "col_offset", None) is not None:
            node.col_offset += shift
        if getattr(node, "end_col_offset", None) is not None:
            node.end_col_offset += shift


def run_compiled_cell(compiled: CompiledCell, namespace: dict) -> types.FunctionType:
    """Run the compiled cell in `namespace` and return the function it defined.

    Exceptions from the user's code propagate unchanged, with their traceback
    in the cell's lines.
    """
    __tracebackhide__ = True
    exec(compiled.code, namespace)
    function = namespace.get(compiled.name)
    if not isinstance(function, types.FunctionType) and compiled.decorators:
        written, line = compiled.decorators[0]
        raise CellError(
            f"`{compiled.name}` is decorated with `@{written}` (cell line {line}), which made it a "
            f"{type(function).__name__}, not a function; remove the decorator: the magic needs the plain function, "
            "which returns `(outputs, grad)`, to make the custom-gradient op."
        )
    if not isinstance(function, types.FunctionType):
        raise CellError(
            f"After the cell ran, `{compiled.name}` is a {type(function).__name__}, not the function the cell "
            "defines: a later statement in the cell rebinds that name."
        )
    return function


_MISSING = object()


class UnchangedOnFailure:
    """Context manager: if the block raises, undo every binding it made in `namespace`.

    A failing cell thereby leaves the user's previous op and variables exactly
    as they were (the same objects under the same names). In-place mutations
    of objects cannot be undone and are not attempted.
    """

    def __init__(self, namespace: dict):
        self.namespace = namespace
        self.snapshot: dict = {}

    def __enter__(self) -> UnchangedOnFailure:
        self.snapshot = dict(self.namespace)
        return self

    def __exit__(self, exc_type, exc, traceback) -> bool:
        if exc_type is not None:
            for key in [key for key in self.namespace if key not in self.snapshot]:
                del self.namespace[key]
            for key, value in self.snapshot.items():
                if self.namespace.get(key, _MISSING) is not value:
                    self.namespace[key] = value
        return False


# -- an unchanged cell keeps its op --------------------------------------------------------------------------------

_DEFINITION = "definition pinned"  # the key of a function's pinned definition in its cache (`frameworks.cache`)
_PINNED_DEPTH = 4  # how deep the functions and containers a definition reads are followed
_PINNED_SIZE = 10_000  # the most elements of a container or array pinned by value


class _Same:
    """A value pinned by identity: a module, a class, a framework's immutable tensor or its variable (read when
    called, by reference when traced). Holds the value, so its id cannot be reused while the pin lives."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other) -> bool:
        return isinstance(other, _Same) and other.value is self.value

    __hash__ = None


class _Unpinned(Exception):
    """The definition reads a value whose sameness cannot be told cheaply (a mutable object, a large array)."""


def remember_definition(function: types.FunctionType, by_reference) -> None:
    """Note what `function`'s behaviour depends on besides its arguments (see `unchanged_definition`).

    `by_reference(value)` tells a framework's values that are pinned by
    identity (immutable tensors, variables)."""
    from gradmagic.frameworks.cache import cache_of

    cache_of(function)[_DEFINITION] = _pin_definition(function, by_reference)


def unchanged_definition(previous: types.FunctionType, function: types.FunctionType, by_reference) -> bool:
    """Whether `function` (a cell run again) behaves as `previous` (its last run) did when it was defined: the same
    code objects (`compile_cell` returns them for the same cell), the same defaults, and every global it or the
    functions it calls read the same value (by value for numbers, strings, small NumPy arrays and small tuples, lists
    and dicts of them, as they are now; by identity for modules, classes and the framework's tensors and variables).
    Then the previous op, with its traces, can serve again: a trace bakes in the Python values read while tracing, so
    any other value it reads, or one whose sameness cannot be told cheaply (a large list or array, an object of the
    user's), makes the cell a new op."""
    from gradmagic.frameworks.cache import cache_of

    if previous.__code__ is not function.__code__ or previous.__globals__ is not function.__globals__:
        return False
    remembered = cache_of(previous).get(_DEFINITION)
    return remembered is not None and remembered == _pin_definition(function, by_reference)


def _pin_definition(function: types.FunctionType, by_reference) -> tuple | None:
    try:
        return _pin(function, by_reference, _PINNED_DEPTH, set())
    except (_Unpinned, RecursionError):
        return None


def _pin(value, by_reference, depth: int, seen: set):
    """A token equal for values that behave the same (raises `_Unpinned`)."""
    if value is None or isinstance(value, (bool, int, str, bytes, complex)):
        return (type(value), value)
    if isinstance(value, float):
        return (float, repr(value))  # nan equals itself, -0.0 differs from 0.0
    if isinstance(value, (types.ModuleType, type, types.BuiltinFunctionType)) or by_reference(value):
        return _Same(value)
    if depth <= 0 or id(value) in seen:
        raise _Unpinned
    seen = seen | {id(value)}
    if isinstance(value, (tuple, list, frozenset)):  # a list by value: what the definition reads from it now
        if len(value) > _PINNED_SIZE:
            raise _Unpinned
        items = sorted(value, key=repr) if isinstance(value, frozenset) else value
        return (type(value), tuple(_pin(item, by_reference, depth - 1, seen) for item in items))
    if isinstance(value, dict):
        if len(value) > _PINNED_SIZE:
            raise _Unpinned
        return (
            dict,
            tuple((_pin(k, by_reference, 0, seen), _pin(v, by_reference, depth - 1, seen)) for k, v in value.items()),
        )
    if isinstance(value, functools.partial):
        return (functools.partial, _pin((value.func, value.args, value.keywords), by_reference, depth, seen))
    if isinstance(value, types.MethodType):
        return (types.MethodType, _Same(value.__self__), _pin(value.__func__, by_reference, depth - 1, seen))
    if isinstance(value, types.FunctionType):
        return _pin_function(value, by_reference, depth, seen)
    if type(value).__module__ == "numpy":
        return _pin_numpy(value)
    raise _Unpinned


def _pin_function(function: types.FunctionType, by_reference, depth: int, seen: set) -> tuple:
    """A function: its code, defaults and closure, and the globals its code (inner functions included) reads."""
    closure = tuple(cell.cell_contents for cell in function.__closure__ or ())
    pinned = [
        _Same(function.__code__),
        _pin((function.__defaults__, function.__kwdefaults__, closure), by_reference, depth - 1, seen),
    ]
    namespace, builtins = function.__globals__, function.__globals__.get("__builtins__", {})
    builtins = vars(builtins) if isinstance(builtins, types.ModuleType) else builtins
    for name in sorted(_names_read(function.__code__)):
        if name in namespace:
            pinned.append((name, _pin(namespace[name], by_reference, depth - 1, seen)))
        elif name in builtins:
            pinned.append((name, _Same(builtins[name])))
    return tuple(pinned)


@functools.lru_cache(maxsize=256)
def _names_read(code: types.CodeType) -> frozenset:
    """The global (and attribute) names `code` and the code objects inside it use."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _names_read(constant)
    return frozenset(names)


def _pin_numpy(value) -> tuple:
    import numpy as np

    if isinstance(value, np.ndarray):
        if value.size > _PINNED_SIZE or value.dtype == object:
            raise _Unpinned
        return (np.ndarray, value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.generic):
        return (type(value), value.tobytes())
    if isinstance(value, (np.dtype, np.ufunc)):
        return _Same(value)
    raise _Unpinned
