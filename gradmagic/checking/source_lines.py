"""Where in the user's source (a cell registered in `linecache`, or a file) a problem is: the line of an error, of
the function's `return`, of the gradient function."""

from __future__ import annotations

import ast
import functools
import linecache
from typing import Any

from gradmagic.frameworks.base import Target
from gradmagic.frameworks.wording import Wording


def error_line(error: BaseException, target: Target, wording: Wording) -> int | None:
    """The deepest line of the user's source (the cell) in the exception's traceback.

    An error raised when a graph runs, not where the user's code is, names the
    graph operation that failed: then the line that created that operation.
    """
    line = None
    traceback = error.__traceback__
    while traceback is not None:
        if traceback.tb_frame.f_code.co_filename == target.filename:
            line = traceback.tb_lineno
        traceback = traceback.tb_next
    if line is None and target.filename:
        line = wording.created_line(error, target.filename)
    return line


def first_line(function: Any) -> int | None:
    """The line a function's `def` is on (None for what has no code)."""
    code = getattr(function, "__code__", None)
    return code.co_firstlineno if code else None


def return_line(target: Target) -> int | None:
    """The line of the op's last `return` (its own, not of a nested function's), else of its `def`."""
    returns = _outer_returns(target)
    return returns[-1].lineno if returns else first_line(target.raw)


def returned_names(target: Target, count: int) -> list[str] | None:
    """The expressions of the `return a, b, grad` in the source, when it can be found."""
    for node in _outer_returns(target):
        if isinstance(node.value, ast.Tuple) and len(node.value.elts) == count:
            return [ast.unparse(element) for element in node.value.elts]
    return None


def decorator_names(target: Target) -> set[str]:
    """The names the decorators of `target.raw`'s `def` start from (`keras` of `@keras.ops.custom_gradient`)."""
    node = _definition(target)
    return {n.id for d in node.decorator_list for n in ast.walk(d) if isinstance(n, ast.Name)} if node else set()


def _definition(target: Target) -> ast.FunctionDef | None:
    """The `def` of `target.raw` in its source (the one whose line, or a decorator's, is the function's first)."""
    first = first_line(target.raw)
    for node in _functions(_source_text(target)).get(target.name, ()):
        if first in (node.lineno, *(decorator.lineno for decorator in node.decorator_list)):
            return node
    return None


def _source_text(target: Target) -> str:
    """The text of the file or cell `target.raw` was written in (a cell's magic line blanked)."""
    lines = linecache.getlines(target.filename) if target.filename else []
    if lines and lines[0].startswith("%%"):
        lines = ["\n"] + lines[1:]
    return "".join(lines)


def _source_tree(target: Target) -> ast.Module | None:
    """The AST of the file or cell `target.raw` was written in; parsed once per text (every check of an op asks, and
    a module may be thousands of lines)."""
    return _parsed(_source_text(target))


@functools.lru_cache(maxsize=32)
def _parsed(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


@functools.lru_cache(maxsize=32)
def _functions(source: str) -> dict[str, list[ast.FunctionDef]]:
    """The `def`s of a source by name, found once per text (a walk of a long module's tree costs more than a check of
    a small op)."""
    tree = _parsed(source)
    functions: dict[str, list[ast.FunctionDef]] = {}
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.FunctionDef):
            functions.setdefault(node.name, []).append(node)
    return functions


def _outer_returns(target: Target) -> list[ast.Return]:
    """The `return` statements of `target.raw` itself, not of functions nested in it."""
    tree = _source_tree(target)
    if tree is None:
        return []
    definition = _definition(target)
    # The body form, a def found nowhere and the function's first line the cell's: the cell is its body.
    body = definition.body if definition is not None else tree.body if first_line(target.raw) == 1 else None
    returns: list[ast.Return] = []
    pending: list[ast.AST] = list(body or [])
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Return):
            returns.append(node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            pending.extend(ast.iter_child_nodes(node))
    return sorted(returns, key=lambda node: node.lineno)
