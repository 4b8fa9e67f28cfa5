"""What a framework's recording hands a watch (`gradmagic.watching`): the custom-gradient ops a watched call reaches
and the values of each call, as NumPy arrays, so that the watch keeps and checks them without knowing a framework.

A framework's recording (`tensorflow/watching.py`; `keras/jax_watching.py`, `keras/torch_watching.py`) calls a
`Recorder` from wherever the op runs: eagerly, as the call happens, or from inside compiled code, when each step
runs. The arrays it hands over may share memory with the framework's buffers: a recorder copies what it keeps.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Protocol

import numpy as np


@dataclass(frozen=True, eq=False)
class OpSite:
    """A custom-gradient op as its user defined it: calls of the same Python function are calls of one op (a
    method's, on any of its objects; an op called from several layers)."""

    function: Callable  # the innermost Python function (a method's function, a partial's)
    name: str
    filename: str | None
    line: int | None
    #: The framework its check runs with (`gradmagic.check`'s `framework`): "keras" for `keras.ops.custom_gradient`
    #: ops on Keras's JAX and PyTorch backends.
    framework: str = "tensorflow"
    #: For a gradient registered with `tf.RegisterGradient` (`function`, registered under `name`): its calls are calls
    #: of a forward building the op it was taken for under the override, already the op to check (no decorator).
    registered: bool = False

    @classmethod
    def of(cls, function: Callable, name: str, framework: str = "tensorflow", registered: bool = False) -> OpSite:
        """The op of `function`, defined where its code is (file and first line; None for what has no code)."""
        code = getattr(function, "__code__", None)
        filename, line = (code.co_filename, code.co_firstlineno) if code else (None, None)
        return cls(function, name, filename, line, framework, registered)


@dataclass(frozen=True)
class Replica:
    """Where a call ran in a replicated step (`tf.distribute`, several replicas in sync): the framework's context to
    run the op in again (TensorFlow's strategy, opaque here), this replica's index (among every worker's) and how
    many there are."""

    context: Any
    index: int
    count: int  # replicas in sync, on every worker
    local: int  # of them, those of this worker (whose calls this process sees)


@dataclass(frozen=True)
class ForwardCall:
    """One call of an op: its inputs and outputs, and how to call it again at those inputs."""

    call: Callable  # the op's own function as it was called (bound to its object; a partial with its keywords)
    input_names: tuple[str, ...]  # "x", "args[1]", "inputs[0][2]": parameter names and paths into structures
    inputs: list[np.ndarray]  # the tensors it was called with (variables read), in the order of `input_names`
    output_names: tuple[str, ...]
    outputs: list[np.ndarray]
    arguments: Callable[[list[np.ndarray]], tuple[tuple, dict]]  # (args, kwargs) with these arrays as the inputs
    compiled: bool  # called inside compiled code (a tf.function, a Keras train function, a TF1 graph)
    #: Called by the watch's replay of an XLA-compiled step, uncompiled, at the step's inputs (not a call of the
    #: watched code's own: the step itself ran compiled)
    replayed: bool = False
    #: The replica it ran on, in a step replicated over several; None outside one.
    replica: Replica | None = None


@dataclass(frozen=True)
class TracedCall:
    """An op met while a graph was traced (a `tf.function`, Keras's train function, XLA): what its inputs would be
    (dtypes and shapes, None for a dimension not known) and how to call it at arrays of those, before any run (a graph
    whose building or running fails, or that runs inside XLA, may never hand over a value)."""

    call: Callable
    input_names: tuple[str, ...]
    dtypes: tuple[np.dtype, ...]
    shapes: tuple[tuple[int | None, ...], ...]
    arguments: Callable[[list[np.ndarray]], tuple[tuple, dict]]
    xla: bool  # traced inside XLA (jit_compile)


@dataclass(frozen=True)
class BackwardCall:
    """One call of an op's gradient function: the upstream gradients it got and the gradients it returned."""

    upstream: list[np.ndarray]
    gradient_names: tuple[str, ...]  # the inputs' names, then "variable NAME" for the variables' gradients
    gradients: list[np.ndarray | None]  # None: the gradient function returned None for it


class Recorder(Protocol):
    """What a framework's recording calls; `gradmagic.watching.recording.CallRecorder` is one."""

    def forward(self, site: OpSite, call: ForwardCall) -> int:
        """Note a call of the op; return its id, which the gradient of that call is recorded with."""

    def backward(self, site: OpSite, call_id: int, call: BackwardCall) -> None:
        """Note a call of the op's gradient function for the forward call `call_id` (-1: not recorded)."""

    def traced(self, site: OpSite, call: TracedCall) -> None:
        """Note the op met while a graph was traced (its runs, if any, are `forward` calls)."""

    def ran_in_xla(self, site: OpSite, calls: int) -> None:
        """Note `calls` calls of the op that ran inside XLA-compiled code, where no value can be handed over."""

    def unrecorded(self, site: OpSite, reason: str) -> None:
        """Note calls of the op that cannot be recorded; `reason` follows the op's name: "was traced inside XLA ..."."""


@dataclass(frozen=True)
class Instrumentation:
    """What a framework's recording is, what it changed for the watch (each put back when the watch ends), and what
    it could not record."""

    framework: str
    version: str
    #: Filled while the watch runs and when it ends: what the watch changed (a Keras model's functions made again),
    #: what it could not record.
    notes: list[str]
    #: Filled while the watch runs: the compiled functions it traced again (or copied) for itself, by name; where none
    #: was, the time before the first recorded call is the watched code's own.
    retraced: list[str] = field(default_factory=list)
    #: Filled while the watch runs: the framework's contexts of several workers the watched code ran in (TensorFlow's
    #: multi-worker strategies); when the watch ends, every worker's report is gathered through the first
    #: (`gather_workers`).
    workers: list[Any] = field(default_factory=list)



#: Ctrl-Cs that landed in a recording's callback run by compiled code (`in_callback`), in this process.
_callback_interrupts = 0


def in_callback(function: Callable) -> Callable:
    """`function`, a callback that compiled code runs (a `tf.numpy_function`, a `jax.debug.callback`), counting a
    Ctrl-C that lands in it: the framework turns that KeyboardInterrupt into an error of its own (TensorFlow's
    UnknownError, JAX's JaxRuntimeError), which the watch gives back as the Ctrl-C it was (`callback_interrupts`)."""

    @functools.wraps(function)
    def called(*args):
        global _callback_interrupts
        try:
            return function(*args)
        except KeyboardInterrupt:
            _callback_interrupts += 1
            raise

    return called


def callback_interrupts() -> int:
    """How many Ctrl-Cs have landed in the recordings' callbacks in this process (see `in_callback`)."""
    return _callback_interrupts


class Delivery:
    """A framework recording's line to the running watch: the recorder (None when no watch runs) and gradmagic's own
    checks in progress, whose calls of ops are not the watched code's. Handing a call over never raises into the
    watched code: an error in recording is noted as the op unrecorded."""

    def __init__(self) -> None:
        self.recorder: Recorder | None = None
        self.checks = 0

    @property
    def recording(self) -> bool:
        """Whether a watch runs and records calls now (not inside gradmagic's own checks)."""
        return self.recorder is not None and not self.checks

    def deliver(self, method: str, site: OpSite, *arguments: Any) -> int:
        """Call the recorder's `method` for the op; its return (a call id), -1 when nothing is recorded."""
        recorder = self.recorder
        if recorder is None or self.checks:
            return -1
        try:
            return getattr(recorder, method)(site, *arguments) or -1
        except Exception as error:  # noqa: BLE001 - the watched code runs on whatever recording meets
            self.note_failure(site, error)
            return -1

    def note_failure(self, site: OpSite, error: Exception) -> None:
        """Tell the running watch that recording a call of the op failed (the call itself went on)."""
        recorder = self.recorder
        if recorder is not None:
            with contextlib.suppress(Exception):
                recorder.unrecorded(site, f"could not be recorded ({type(error).__name__}: {error})")

    @contextlib.contextmanager
    def unrecorded(self) -> Iterator[None]:
        """Within: calls of ops are not recorded (gradmagic's own checks run inside)."""
        self.checks += 1
        try:
            yield
        finally:
            self.checks -= 1

_POSITIONAL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def argument_names(
    function: Callable, args: tuple, kwargs: dict, flatten_with_paths: Callable[[Any], Iterable[tuple[tuple, Any]]]
) -> list[str]:
    """A name for each leaf of `(args, kwargs)`, in the order the framework's `flatten_with_paths` (its leaves with
    their paths) gives them: `x`, `args[1]`, `pair[0]`."""
    skipped = 0
    while isinstance(function, functools.partial) or inspect.ismethod(function):
        if isinstance(function, functools.partial):
            skipped += len(function.args)
            function = function.func
        else:
            skipped += 1  # self
            function = function.__func__
    positional, variadic = _positional(function)
    positional = positional[skipped:]
    names = []
    for index, arg in enumerate(args):
        base = positional[index] if index < len(positional) else f"{variadic}[{index - len(positional)}]"
        names += [base + path_label(path) for path, _ in flatten_with_paths(arg)]
    names += [str(path[0]) + path_label(path[1:]) for path, _ in flatten_with_paths(kwargs)]
    return names


def path_label(path: tuple) -> str:
    """`[0]['mean']`: a path into a structure, as Python indexes it."""
    return "".join(f"[{step!r}]" if isinstance(step, str) else f"[{step}]" for step in path)


def _positional(function: Callable) -> tuple[tuple[str, ...], str]:
    """The names of `function`'s positional parameters, and of its `*args` (kept per function: eager calls ask
    often)."""
    try:
        return _POSITIONAL[function]
    except (KeyError, TypeError):
        pass
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return (), "args"
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = tuple(p.name for p in parameters if p.kind in kinds)
    variadic = next((p.name for p in parameters if p.kind == inspect.Parameter.VAR_POSITIONAL), "args")
    with contextlib.suppress(TypeError):  # a callable that cannot be referenced weakly is read each time
        _POSITIONAL[function] = (positional, variadic)
    return positional, variadic
