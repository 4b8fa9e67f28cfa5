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
    tree = _source_tree(target)
    first = first_line(target.raw)
    names: set[str] = set()
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.FunctionDef) and node.name == target.name and node.decorator_list:
            if first in (node.lineno, *(decorator.lineno for decorator in node.decorator_list)):
                names |= {n.id for d in node.decorator_list for n in ast.walk(d) if isinstance(n, ast.Name)}
    return names


def _source_tree(target: Target) -> ast.Module | None:
    """The AST of the file or cell `target.raw` was written in (a cell's magic line blanked); parsed once per text
    (every check of an op asks, and a module may be thousands of lines)."""
    lines = linecache.getlines(target.filename) if target.filename else []
    if lines and lines[0].startswith("%%"):
        lines = ["\n"] + lines[1:]
    return _parsed("".join(lines))


@functools.lru_cache(maxsize=32)
def _parsed(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def _outer_returns(target: Target) -> list[ast.Return]:
    """The `return` statements of `target.raw` itself, not of functions nested in it."""
    tree = _source_tree(target)
    if tree is None:
        return []
    first = first_line(target.raw)
    body = tree.body if first == 1 else None  # body form: the cell is the function's body
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.FunctionDef)
            and node.name == target.name
            and first in (node.lineno, *(decorator.lineno for decorator in node.decorator_list))
        ):
            body = node.body
    returns: list[ast.Return] = []
    pending: list[ast.AST] = list(body or [])
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Return):
            returns.append(node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            pending.extend(ast.iter_child_nodes(node))
    return sorted(returns, key=lambda node: node.lineno)
