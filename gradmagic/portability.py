"""The portability check: one `keras.ops.custom_gradient` op checked on several Keras backends.

Keras fixes its backend when it is first imported, so each other backend runs
in a fresh Python process with `KERAS_BACKEND` set (this module is that
process's entry point too: `python -m gradmagic.portability`). The
op travels as source, not as an object: the `%%custom_gradient` cell, or the
source of a function written in a cell or file, compiled under the same name
so that line numbers in the other backends' problems are the user's own.
The notebook globals it reads travel by kind (modules by name, arrays and
plain values by value, Keras variables as new variables with the same value,
notebook functions as source); the example inputs go as NumPy arrays. What
cannot travel makes that backend "unavailable" with the reason, never a
silent pass.
"""

from __future__ import annotations

import dataclasses
import dis
import importlib
import inspect
import json
import linecache
import os
import pickle
import subprocess
import sys
import textwrap
import time
import types
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from gradmagic import checking
from gradmagic.checking.options import CheckOptions
from gradmagic.frameworks import PACKAGES, get_adapter, installed, is_keras_variable
from gradmagic.frameworks.names import backend_name
from gradmagic.op import info_of
from gradmagic.report import BackendResult, Problem, Report
from gradmagic.source import Cell, compile_cell

_RESULT_MARKER = "@@gradmagic-backend-result@@"
# Options that only make the per-backend report richer to look at, not its verdict: off in the subprocesses.
_SUBPROCESS_OPTIONS = {"graph": False, "sweep": False, "backends": ()}


class NotPortable(Exception):
    """The op or its inputs cannot be sent to another process; the message says what and why."""


def with_backends(
    report: Report,
    op: Callable,
    args: tuple,
    kwargs: dict,
    options: CheckOptions,
    name_source: Callable[[str | None], str | None] | None = None,
) -> Report:
    """`report` (of the check on this process's Keras backend) with the check on every other backend of
    `options.backends`: a verdict per backend, and each failing backend's first error among the problems.
    `name_source` names the files the other backends' problems point at as the user knows them ("Cell In[3]")."""
    started = time.perf_counter()
    results = check_backends(op, args, kwargs, options, here=(report.op.backend, report))
    if name_source is not None:
        results = tuple(
            dataclasses.replace(result, problems=tuple(_relabelled(p, name_source) for p in result.problems))
            for result in results
        )
    others = tuple(result for result in results if result.backend != report.op.backend)
    return dataclasses.replace(
        report,
        problems=report.problems + tuple(summary_problems(others)),
        backends=results,
        timings={**report.timings, "backends": time.perf_counter() - started},
    )


def check_backends(
    op: Callable,
    args: tuple,
    kwargs: dict,
    options: CheckOptions,
    here: tuple[str, Report] | None = None,
    timeout: float = 600.0,
) -> tuple[BackendResult, ...]:
    """Check `op` at `args` on each of `options.backends`, each in its own process, all at once.

    `here` is (backend, report) of the check that already ran in this process:
    that backend is not run again.
    """
    backends = options.backends
    results: dict[str, BackendResult] = {}
    if here is not None and here[0] in backends:
        results[here[0]] = _result(here[0], here[1], seconds=here[1].timings.get("total", 0.0))
    pending = [b for b in backends if b not in results]
    for backend in [b for b in pending if not installed(b)]:
        package = PACKAGES[backend]
        note = f"{package.module} is not installed here: pip install 'gradmagic[{package.extra}]'"
        results[backend] = BackendResult(backend, "unavailable", note=note)
    pending = [b for b in pending if b not in results]
    if pending:
        try:
            payload = pickle.dumps(
                {
                    "recipe": recipe_for(op, options.framework),
                    "args": _to_arrays(args),
                    "kwargs": _to_arrays(kwargs),
                    "options": {**dataclasses.asdict(options), **_SUBPROCESS_OPTIONS},
                }
            )
        except NotPortable as error:
            for backend in pending:
                results[backend] = BackendResult(backend, "unavailable", note=str(error))
        else:
            results.update(_run_all(pending, payload, timeout))
    return tuple(results[b] for b in backends)


def summary_problems(results: tuple[BackendResult, ...]) -> list[Problem]:
    """backend-fails (error) for each backend whose check fails; backend-unavailable (info) for those not run."""
    problems = []
    for result in results:
        name = backend_name(result.backend)
        if result.verdict == "fail":
            first = next(p for p in result.problems if p.severity == "error")
            problems.append(
                Problem(
                    "backend-fails",
                    "error",
                    f"On Keras's {name} backend the check fails: [{first.code}] {first.message}",
                    first.location,
                )
            )
        elif result.verdict == "unavailable":
            problems.append(Problem("backend-unavailable", "info", f"Not checked on {name}: {result.note}"))
    return problems


def _relabelled(problem: Problem, name_source: Callable[[str | None], str | None]) -> Problem:
    """`problem` with the file its location names as the user knows it (the cell's `Cell In[3]`)."""
    location = problem.location
    if location is None or location.filename is None:
        return problem
    return dataclasses.replace(
        problem, location=dataclasses.replace(location, filename=name_source(location.filename) or location.filename)
    )


def _result(backend: str, report: Report, seconds: float) -> BackendResult:
    return BackendResult(backend, report.verdict, report.op.framework_version, report.problems, seconds)


def _run_all(backends: list[str], payload: bytes, timeout: float) -> dict[str, BackendResult]:
    """One process per backend, started together (most of each one's time is importing its framework)."""
    started = time.perf_counter()
    processes = {}
    try:
        for backend in backends:
            environment = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
            environment.pop("CUDA_VISIBLE_DEVICES", None)
            processes[backend] = subprocess.Popen(
                [sys.executable, "-m", "gradmagic.portability"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=environment,
            )
        outputs = {}
        for backend, process in processes.items():
            try:
                left = max(timeout - (time.perf_counter() - started), 1.0)
                outputs[backend] = (*process.communicate(payload, timeout=left), time.perf_counter() - started)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
                outputs[backend] = (b"", f"no answer after {timeout:.0f} s".encode(), timeout)
    finally:  # Ctrl-C or any failure here: no process is left behind
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    return {backend: _read_result(backend, *output) for backend, output in outputs.items()}


def _read_result(backend: str, stdout: bytes, stderr: bytes, seconds: float) -> BackendResult:
    text = stdout.decode(errors="replace")
    if _RESULT_MARKER not in text:
        lines = [line for line in stderr.decode(errors="replace").strip().splitlines() if line.strip()]
        return BackendResult(
            backend, "unavailable", seconds=seconds, note=f"its process failed: {lines[-1] if lines else 'no output'}"
        )
    answer = json.loads(text.rsplit(_RESULT_MARKER, 1)[1])
    if "unavailable" in answer:
        return BackendResult(backend, "unavailable", seconds=seconds, note=answer["unavailable"])
    return _result(backend, Report.from_dict(answer["report"]), seconds)


# -- what travels ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Global:
    """One notebook global the op reads, in a form another process can rebuild."""

    name: str
    kind: str  # "module" | "value" | "variable" | "function" | "import"
    data: Any


def recipe_for(op: Callable, framework: str = "keras") -> dict:
    """How another process rebuilds `op`: its source (cell or function) and the globals it reads. The function is the
    one `framework`'s adapter checks behind `op` (`Adapter.resolve`)."""
    info = info_of(op)
    target = get_adapter(framework).resolve(op)
    if info is not None and linecache.getlines(info.filename):
        cell = Cell.of("".join(linecache.getlines(info.filename)), info.filename)
        code = compile_cell(cell, info.target).code
        namespace = target.raw.__globals__ if target.origin in ("magic", "decorated") else {}
        return {
            "kind": "cell",
            "magic_line": cell.magic_line,
            "body": cell.body,
            "filename": info.filename,
            "target": info.target,
            "name": info.name,
            "globals": _globals_of(code, namespace, _module_level_names(code)),
        }
    # A plain callable that is no function (a callable object, a partial) is checked through a function made for it.
    function = target.raw if target.origin != "plain" or target.raw is op else op
    if not isinstance(function, types.FunctionType):
        raise NotPortable(f"`{_name(op)}` is a {type(op).__name__}, not a function whose source can be sent")
    try:
        lines, first = inspect.getsourcelines(function)
    except (OSError, TypeError) as error:
        raise NotPortable(f"the source of `{_name(op)}` cannot be read ({error}), so it cannot be rebuilt there")
    return {
        "kind": "function",
        "source": "\n" * (first - 1) + textwrap.dedent("".join(lines)),
        "filename": function.__code__.co_filename,
        "name": function.__name__,
        "globals": _globals_of(function.__code__, function.__globals__, set(), closure=function),
    }


def _globals_of(
    code: types.CodeType, namespace: dict, defined: set, closure: Callable | None = None, depth: int = 0
) -> list[_Global]:
    if closure is not None and closure.__closure__:
        raise NotPortable(
            f"`{closure.__name__}` is a nested function that closes over "
            f"{', '.join(closure.__code__.co_freevars)}; define it at the top level of a cell to check it elsewhere"
        )
    found: list[_Global] = []
    for name in sorted(_read_names(code) - defined):
        if name not in namespace:
            continue  # a builtin, or a name the code defines before use
        found += _transferable(name, namespace[name], depth)
    return found


def _transferable(name: str, value: Any, depth: int) -> list[_Global]:
    if isinstance(value, types.ModuleType):
        return [_Global(name, "module", value.__name__)]
    if isinstance(value, (bool, int, float, complex, str, bytes, type(None), np.ndarray, np.generic)):
        return [_Global(name, "value", value)]
    if is_keras_variable(value):
        return [_Global(name, "variable", (np.asarray(value.numpy()), getattr(value, "name", name), value.trainable))]
    if hasattr(value, "__array__") and hasattr(value, "shape") and hasattr(value, "dtype"):
        return [_Global(name, "value", _array(value))]
    if isinstance(value, (tuple, list)) and all(np.isscalar(v) or isinstance(v, np.ndarray) for v in value):
        return [_Global(name, "value", value)]
    if isinstance(value, (types.FunctionType, type)) and value.__module__ not in ("__main__", None):
        if not value.__module__.startswith("gradmagic") and "<locals>" not in value.__qualname__:
            return [_Global(name, "import", (value.__module__, value.__qualname__))]
    if isinstance(value, types.FunctionType) and depth < 8:
        try:
            lines, first = inspect.getsourcelines(value)
        except (OSError, TypeError):
            lines = None
        if lines is not None:
            inner = _globals_of(value.__code__, value.__globals__, set(), closure=value, depth=depth + 1)
            source = "\n" * (first - 1) + textwrap.dedent("".join(lines))
            return inner + [_Global(name, "function", (source, value.__code__.co_filename))]
    raise NotPortable(
        f"the op reads `{name}` (a {type(value).__name__}) from the notebook, which cannot be sent to another "
        "process; compute it inside the op or pass it as an input"
    )


def _read_names(code: types.CodeType) -> set[str]:
    """Global names the code (and the functions defined in it) read."""
    names = set()
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            names.add(instruction.argval)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _read_names(constant)
    return names


def _module_level_names(code: types.CodeType) -> set[str]:
    """Names a cell's module code binds itself (defs, imports, assignments): not taken from the notebook."""
    return {i.argval for i in dis.get_instructions(code) if i.opname in ("STORE_NAME", "STORE_GLOBAL", "IMPORT_NAME")}


def _array(value: Any) -> np.ndarray:
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value)


def _to_arrays(structure: Any) -> Any:
    """The example inputs with every tensor made a NumPy array (same dtype), containers kept."""
    if isinstance(structure, dict):
        return {key: _to_arrays(value) for key, value in structure.items()}
    if isinstance(structure, (tuple, list)):
        return type(structure)(_to_arrays(value) for value in structure)
    if isinstance(structure, (bool, int, float, complex, str, type(None), np.ndarray, np.generic)):
        return structure
    if hasattr(structure, "__array__") and hasattr(structure, "dtype"):
        return _array(structure)
    raise NotPortable(f"an example input is a {type(structure).__name__}, which cannot be sent to another process")


def _name(op: Any) -> str:
    return getattr(op, "__name__", type(op).__name__)


# -- the other process -------------------------------------------------------------------------------------------


def _rebuild(recipe: dict) -> Callable:
    """The op from its recipe, in this process's Keras backend; globals first, then the code under its filename."""
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    for item in recipe["globals"]:
        namespace[item.name] = _rebuilt_global(item, namespace)
    if recipe["kind"] == "cell":
        from gradmagic.frameworks import get_adapter
        from gradmagic.op import OpInfo, attach
        from gradmagic.source import Cell, compile_cell, run_compiled_cell

        cell = Cell(recipe["magic_line"], recipe["body"], recipe["filename"])
        _register(recipe["filename"], cell.text)
        compiled = compile_cell(cell, recipe["target"])
        op = run_compiled_cell(compiled, namespace, get_adapter("keras").decorate)  # as written, or decorated
        attach(op, OpInfo(compiled.name, "keras", compiled.form, cell.filename, (), recipe["target"]))
        return op
    _register(recipe["filename"], recipe["source"])
    exec(compile(recipe["source"], recipe["filename"], "exec"), namespace)  # noqa: S102 - the user's own op
    return namespace[recipe["name"]]


def _rebuilt_global(item: _Global, namespace: dict) -> Any:
    if item.kind == "module":
        return importlib.import_module(item.data)
    if item.kind == "variable":
        from gradmagic.frameworks.keras.common import new_variable

        value, name, trainable = item.data
        return new_variable(value, name.split("/")[-1].split(":")[0], trainable)
    if item.kind == "import":
        module, qualname = item.data
        value: Any = importlib.import_module(module)
        for part in qualname.split("."):
            value = getattr(value, part)
        return value
    if item.kind == "function":
        source, filename = item.data
        _register(filename, source)
        scope = namespace.copy()
        exec(compile(source, filename, "exec"), scope)  # noqa: S102 - the user's own helper
        return scope[item.name]
    return item.data


def _register(filename: str, text: str) -> None:
    """Put the source in linecache so problems and tracebacks quote the user's lines."""
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)


def _serve() -> None:
    """Read a pickled request on stdin, check the op on this process's backend, print the report's data."""
    from gradmagic.errors import GradmagicError

    request = pickle.loads(sys.stdin.buffer.read())  # noqa: S301 - written by gradmagic's parent process
    try:
        op = _rebuild(request["recipe"])
    except Exception as error:  # the op's source or globals fail here: that backend is unavailable, said why
        answer: dict = {"unavailable": f"the op could not be rebuilt there: {type(error).__name__}: {error}"}
    else:
        try:
            options = CheckOptions(**{**request["options"], "framework": "keras"})
            report = checking.check(op, request["args"], request["kwargs"], options)
        except GradmagicError as error:  # gradmagic cannot check on this backend: say why
            answer = {"unavailable": str(error)}
        else:
            answer = {"report": report.to_dict()}
    sys.stdout.flush()
    sys.stdout.write(_RESULT_MARKER + json.dumps(answer) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    _serve()
