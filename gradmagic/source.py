"""Cell text to Python function: the first step of gradmagic's pipeline.

A `%%custom_gradient` cell comes in two forms:

* definition form: the cell holds a `def` (helper statements, imports, a
  demo, classes may stand before or after it); the magic line may name it.
  The magic's decorator is written into the `def` (`HOOK`, beneath any the
  user wrote), so that the op is bound where the `def` runs and the lines
  after it use it; a `def` that carries a custom-gradient decorator itself is
  run as written. A cell of a class (a Keras layer) defines the class;
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


#: The name under which the magic's decorator is written into the cell's `def` (innermost, under the user's own
#: decorators): `run_compiled_cell` binds it for the cell's run only.
HOOK = "__gradmagic_op__"


@dataclass(frozen=True)
class CompiledCell:
    """A cell compiled to a module whose running defines `name`: the custom-gradient op (or the function or class
    to check), the cell's other statements running as they would in a plain cell."""

    name: str
    form: str  # "definition" or "body"
    code: types.CodeType  # the cell's statements up to and including the definition of `name`
    decorators: tuple[tuple[str, int], ...] = ()  # the def's decorators as written, and their cell lines
    #: "function": the magic makes the op (its decorator `HOOK`, under any the user wrote); "decorated": the cell
    #: writes a custom-gradient decorator itself, the op is bound as written; "class": a class whose methods reach
    #: custom-gradient ops, checked through an instance.
    kind: str = "function"
    after: types.CodeType | None = None  # the statements after the definition (demo lines), run once it is bound
    framework: str | None = None  # the framework a written decorator names ("keras", "tensorflow")
    calls: frozenset = frozenset()  # the names the def calls (a wrapper of custom-gradient ops calls them)
    gradient_shaped: bool = True  # the def defines a gradient function or returns a pair (an op, not a wrapper)


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
    node = _chosen(tree, target)
    name = node.name
    if isinstance(node, ast.AsyncFunctionDef):
        raise CellError(
            f"`{name}` (cell line {node.lineno}) is an `async def`; a custom-gradient op must be a plain `def`."
        )
    decorators = tuple((ast.unparse(decorator), decorator.lineno) for decorator in node.decorator_list)
    kind, framework = "class", None
    calls: frozenset = frozenset()
    shaped = True
    if isinstance(node, ast.FunctionDef):
        registered = [decorator for decorator in node.decorator_list if _last_name(decorator) == "RegisterGradient"]
        if registered:
            raise CellError(
                f"`{name}` is a registered gradient (`@{ast.unparse(registered[0])}`, cell line "
                f"{registered[0].lineno}): a gradient function for an op type, `(op, grad)`, not a custom-gradient "
                "op that returns `(outputs, grad)`. Run it under %%register_gradient, which registers it so that the "
                "cell runs again, applies it to op types and checks it (see %register_gradient?)."
            )
        written = [decorator for decorator in node.decorator_list if _is_custom_gradient(decorator)]
        made = _decorating_call(tree, name)
        if made is not None:  # `op = tf.custom_gradient(fn)` below the def: the op is what it assigns
            node, name, written = made, made.targets[0].id, [made.value]  # type: ignore[attr-defined]
            decorators = ((ast.unparse(made), made.lineno),)
        if written:
            kind = "decorated"
            framework = "keras" if any(_root(decorator) in _KERAS_ROOTS for decorator in written) else "tensorflow"
        else:
            kind = "function"
            hook = ast.copy_location(ast.Name(HOOK, ast.Load()), node)
            node.decorator_list.append(hook)  # innermost: the op made first, the user's decorators over it
        if isinstance(node, ast.FunctionDef):
            calls = frozenset(_called_names(node))
            shaped = _gradient_shaped(node)
    ast.fix_missing_locations(tree)
    position = tree.body.index(node) + 1
    code = compile_module(tree.body[:position], cell.filename)
    after = compile_module(tree.body[position:], cell.filename) if tree.body[position:] else None
    return CompiledCell(name, "definition", code, decorators, kind, after, framework, calls, shaped)


def _decorating_call(tree: ast.Module, name: str) -> ast.Assign | None:
    """The statement `op = tf.custom_gradient(name)` of the cell (the decorator written as a call, as in
    `clip = tf.custom_gradient(_clip_fn)`), if it has one."""
    for statement in tree.body:
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
            continue
        value, assigned = statement.value, statement.targets[0]
        if isinstance(assigned, ast.Name) and isinstance(value, ast.Call) and _is_custom_gradient(value):
            if value.args and isinstance(value.args[0], ast.Name) and value.args[0].id == name:
                return statement
    return None


def compile_module(statements: list, filename: str) -> types.CodeType:
    """Statements compiled as a module of the cell, with the cell's own `__future__` imports only (none of
    gradmagic's: `from __future__ import annotations` here would make the cell's annotations strings)."""
    return compile(ast.Module(body=statements, type_ignores=[]), filename, "exec", dont_inherit=True)


def _chosen(tree: ast.Module, target: str | None) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef:
    """The definition the cell is about: the one named on the magic line; else its custom-gradient op (a def that
    carries a custom-gradient decorator, or defines or returns a gradient function), if it has one; else its only
    function; else its only class. Several candidates: CellError listing them."""
    defs = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    named = {node.name: node for node in defs + classes}  # the last definition of a name is the one bound
    made = {
        found.targets[0].id: named[found.value.args[0].id]  # type: ignore[attr-defined]
        for found in (_decorating_call(tree, name) for name in list(named))
        if found is not None
    }
    if target is not None:
        if not target.isidentifier():
            raise CellError(f"`{target}` is not a function name; write `%%custom_gradient NAME` or `NAME(params)`.")
        if target in made:
            return made[target]
        if target not in named:
            defined = ", ".join(named) or "nothing"
            raise CellError(
                f"The cell defines no function named `{target}`; it defines {defined}. To write only the body "
                f"instead, give the parameters on the magic line: `%%custom_gradient {target}(x)`."
            )
        return named[target]
    functions = [node for name, node in named.items() if not isinstance(node, ast.ClassDef)]
    made_from = list(made.values())
    ops = [node for node in functions if isinstance(node, ast.FunctionDef) and (_op_shaped(node) or node in made_from)]
    for candidates in (ops, functions, [node for node in named.values() if isinstance(node, ast.ClassDef)]):
        if len(candidates) == 1:
            return candidates[0]
        if candidates:
            names = [node.name for node in candidates]
            what = "custom-gradient ops" if candidates is ops else "functions" if candidates is functions else "classes"
            raise CellError(
                f"The cell defines {len(names)} {what} ({', '.join(names)}); name the one to make and check on the "
                f"magic line, e.g. `%%custom_gradient {names[-1]}`."
            )
    raise CellError(
        "The cell defines no function. Write `def name(x): ...` in the cell, or give the "
        "signature on the magic line (`%%custom_gradient name(x)`) and write only the body."
    )


#: The names a Keras custom-gradient decorator is written from (`@keras.ops.custom_gradient`, `@ops.custom_gradient`).
_KERAS_ROOTS = frozenset({"keras", "ops", "K"})


def _root(decorator: ast.expr) -> str:
    """The name a decorator's expression starts from (`tf` of `@tf.custom_gradient`)."""
    node = decorator.func if isinstance(decorator, ast.Call) else decorator
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def _last_name(decorator: ast.expr) -> str:
    """The last name of a decorator's expression (`custom_gradient` of `@tf.custom_gradient`)."""
    node = decorator.func if isinstance(decorator, ast.Call) else decorator
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def _is_custom_gradient(decorator: ast.expr) -> bool:
    return _last_name(decorator) == "custom_gradient"


def _op_shaped(node: ast.FunctionDef) -> bool:
    """A def that is a custom-gradient op: it carries the decorator, or returns a gradient function."""
    return any(_is_custom_gradient(decorator) for decorator in node.decorator_list) or _returns_gradient(node)


def _own_nodes(node: ast.FunctionDef) -> list[ast.AST]:
    """The nodes of a def's body, not those of the functions and classes defined in it (those themselves are)."""
    found: list[ast.AST] = []
    pending: list[ast.AST] = list(node.body)
    while pending:
        child = pending.pop()
        found.append(child)
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            pending.extend(ast.iter_child_nodes(child))
    return found


def _returns_gradient(node: ast.FunctionDef) -> bool:
    """Whether a def returns `(outputs, grad)` with `grad` a function it defines or a lambda."""
    own = _own_nodes(node)
    defined = {child.name for child in own if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))}
    defined |= {
        target.id
        for child in own
        if isinstance(child, ast.Assign) and isinstance(child.value, ast.Lambda)
        for target in child.targets
        if isinstance(target, ast.Name)
    }
    for child in own:
        if isinstance(child, ast.Return) and isinstance(child.value, ast.Tuple) and len(child.value.elts) >= 2:
            last = child.value.elts[-1]
            if isinstance(last, ast.Lambda) or (isinstance(last, ast.Name) and last.id in defined):
                return True
    return False


def _gradient_shaped(node: ast.FunctionDef) -> bool:
    """Whether a def looks like an op rather than a wrapper of ops: it returns a gradient function, defines a
    function or lambda of its own, or returns a tuple (an op that returns a wrong structure is still an op)."""
    own = _own_nodes(node)
    return _returns_gradient(node) or any(
        isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        or (isinstance(child, ast.Return) and isinstance(child.value, ast.Tuple))
        for child in own
    )


def _called_names(node: ast.FunctionDef) -> set[str]:
    """The plain names a def calls in its own body (`grad_reverse` of `return grad_reverse(x)`)."""
    return {
        child.func.id for child in _own_nodes(node) if isinstance(child, ast.Call) and isinstance(child.func, ast.Name)
    }


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
    function.decorator_list.append(ast.copy_location(ast.Name(HOOK, ast.Load()), function))
    ast.fix_missing_locations(function)
    if not function.body:
        raise CellError(f"The cell is empty: write the body of `{function.name}`, ending with `return outputs, grad`.")
    return CompiledCell(function.name, "body", compile_module([function], cell.filename))


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


def run_compiled_cell(compiled: CompiledCell, namespace: dict, hook: Callable | None = None) -> object:
    """Run the cell's statements up to and including its definition in `namespace`, the magic's decorator bound as
    `HOOK` to `hook` (none: the function is left as it is), and return what the definition bound.

    Exceptions from the user's code propagate unchanged, with their traceback
    in the cell's lines.
    """
    __tracebackhide__ = True
    namespace[HOOK] = hook or _unchanged
    try:
        exec(compiled.code, namespace)
    finally:
        namespace.pop(HOOK, None)
    return namespace.get(compiled.name)


def run_rest(compiled: CompiledCell, namespace: dict, bound: object) -> None:
    """Run the cell's statements after its definition (its demo lines), which see the op bound; CellError where they
    rebind its name."""
    __tracebackhide__ = True
    if compiled.after is None:
        return
    exec(compiled.after, namespace)
    if namespace.get(compiled.name) is not bound:
        raise CellError(
            f"After the cell ran, `{compiled.name}` is a {type(namespace.get(compiled.name)).__name__}, not what the "
            "cell defines: a later statement in the cell rebinds that name."
        )


def _unchanged(function: Callable) -> Callable:
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
