"""Compiled functions for an op: `tf.function`s traced once per op and input layout, in gradmagic's own thread,
with what tracing leaves in TensorFlow's global state tied to the op's life.

TensorFlow keeps two things for good when it traces a graph, however
short-lived the graph:

* the gradient functions of custom-gradient ops (see `Registrations`);
* what it records of the Python stack each op was created from, holding the
  stack's code objects. A notebook cell is a new code object every time it
  runs, at the bottom of every stack traced from it: re-running a checking
  cell kept about 1 MB each time. In gradmagic's own thread the stack starts
  at gradmagic's code; only the frames of the user's op can be new, and a
  `%%custom_gradient` cell run again unchanged keeps its code objects
  (`source.compile_cell`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import logging
import os
import queue
import sys
import threading
import types
import weakref
from typing import Any, Callable

import tensorflow as tf
from tensorflow.python.eager import context as tf_context  # for the caller's device scope, see Compiled
from tensorflow.python.framework import ops as tf_ops  # for the gradient registry, see Registrations

from gradmagic.frameworks.cache import cache_of

_REGISTERED = "gradient functions registered"
EAGER_RUNS = 5  # eager runs of one small batch before its compiled function is traced (see `Compiled.worth_tracing`)


def compiled(function: Callable, owner: Callable, key: tuple, input_signature: list | None = None) -> Compiled:
    """`function` as a `tf.function` kept in the cache of `owner` (the op's raw function) under `key`: traced once,
    reused by later checks.

    AutoGraph stays off: inside the op TensorFlow never converts the user's
    function (tf.custom_gradient's op is exempt), so the check runs it as
    written too.
    """
    cache = cache_of(owner)
    if key not in cache:
        traced = tf.function(function, input_signature=input_signature, autograph=False)
        # Each op and layout gets its own function, traced once; TensorFlow's "frequent retracing" warning counts
        # traces per code object across all of them (Keras turns it off the same way).
        traced._omit_frequent_tracing_warning = True
        cache[key] = Compiled(traced, registrations_of(owner))
    return cache[key]


def registrations_of(function: Callable) -> Registrations:
    """The gradient functions tracing registered for `function`'s op; they leave the registry when it is freed."""
    cache = cache_of(function)
    if _REGISTERED not in cache:
        cache[_REGISTERED] = Registrations()
        with contextlib.suppress(TypeError):  # a callable that cannot be referenced weakly keeps a fresh cache
            weakref.finalize(function, unregister, cache[_REGISTERED].names)
    return cache[_REGISTERED]


class Registrations:
    """The gradient functions `tf.custom_gradient` registered while an op's compiled functions traced.

    Each trace of a custom-gradient op in a graph registers a gradient
    function under a fresh name ("CustomGradient-N") in TensorFlow's global
    registry, for good; it holds the traced graph and, through the user's
    `grad`, the namespace it was defined in: about 5 MB per redefinition of
    a small op (TensorFlow issues 27492 and 97697). Here the registry keeps
    only a weak stand-in; the function itself is held by the op's cache,
    which also holds every graph that could ask for it, and the names leave
    the registry when the op's raw function is freed.
    """

    def __init__(self):
        self.names: list[str] = []
        self.functions: list[Callable] = []

    @contextlib.contextmanager
    def noting(self):
        registry = gradient_registry()
        before = set(registry)  # not a count: a finalizer may unregister a freed op's names meanwhile
        try:
            yield
        finally:
            for name in [name for name in registry if name not in before]:
                if name.startswith("CustomGradient-"):
                    function = registry[name]["type"]
                    self.names.append(name)
                    self.functions.append(function)
                    registry[name] = {**registry[name], "type": _weak_stand_in(function)}


class Compiled:
    """A `tf.function` traced in gradmagic's TensorFlow thread, its traces' gradient registrations noted.

    Only tracing happens there: the traced function then runs in the caller's
    thread, as any `tf.function` call, so Ctrl-C and variable restoring work
    as they do without gradmagic. Ctrl-C during a trace returns at once (see
    `in_tensorflow_thread`).
    """

    def __init__(self, function: Any, registrations: Registrations):
        self.function = function
        self.registrations = registrations
        self.traced: set = set()  # the argument shapes and dtypes already traced for
        self.ran_eagerly: dict = {}  # ... and how often they ran eagerly instead (`worth_tracing`)

    def __call__(self, *args):
        key = self._key(args)
        if key not in self.traced:
            self.get_concrete_function(*args)
            self.traced.add(key)
        return self.function(*args)

    def worth_tracing(self, *args, work: int, eager_work: int, may_trace: bool = True, run_cost: float = 1.0) -> bool:
        """Whether to call the compiled function with these arguments rather than run them eagerly: when it is traced
        for them already, when `work` exceeds `eager_work` (what an eager run may cost), or when their eager runs (in
        this check or earlier ones of the op) cost `EAGER_RUNS` small runs before and `may_trace`; `run_cost` is
        what this run costs in small runs (a large input's eager run costs several). A trace costs about as much as 2
        to 10 eager runs of a small batch (measured on small ops: 190 ms against 37 ms, 114 against 16); tracing
        once the eager runs have cost that much keeps the total at most about twice the best choice made knowing how
        often the op will be checked. Else it notes an eager run."""
        key = self._key(args)
        if key in self.traced or work > eager_work:
            return True
        if may_trace and self.ran_eagerly.get(key, 0) >= EAGER_RUNS:
            return True
        self.ran_eagerly[key] = self.ran_eagerly.get(key, 0) + run_cost
        return False

    def traced_for(self, *args) -> bool:
        """Whether the function is traced for arguments of these shapes and dtypes."""
        return self._key(args) in self.traced

    def _key(self, args: tuple) -> tuple:
        key = (tf_context.context().device_name,)
        if self.function.input_signature is None:  # else one trace serves every call
            key += tuple(_shape_and_dtype(leaf) for leaf in tf.nest.flatten(args))
        return key

    def get_concrete_function(self, *args):
        def trace():
            with self.registrations.noting():
                return self.function.get_concrete_function(*args)

        return in_tensorflow_thread(trace)


class _Worker:
    """A daemon thread tracing one function at a time; a new one replaces it when a caller gives up."""

    STOP = object()

    def __init__(self):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=_THREAD_NAME, daemon=True)
        self.thread.start()

    def submit(self, function: Callable[[], Any]) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self.jobs.put((future, function))
        return future

    def abandon(self) -> None:
        """Stop after the trace under way, which gets a KeyboardInterrupt as soon as it runs Python again.

        A trace stuck in a sleep or in C++ ends in the background when that
        returns; tracing changes nothing of the user's.
        """
        self.jobs.put(self.STOP)
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(self.thread.ident), ctypes.py_object(KeyboardInterrupt)
        )

    def _serve(self) -> None:
        while True:
            try:
                if self._serve_one() is self.STOP:
                    return
            except KeyboardInterrupt:  # abandoned between two calls
                return

    def _serve_one(self) -> Any:
        job = self.jobs.get()
        if job is self.STOP:
            return job
        future, function = job
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(function())
            except BaseException as error:
                future.set_exception(error)
        return None


_THREAD_NAME = "gradmagic-tensorflow"
_worker: _Worker | None = None
_worker_lock = threading.Lock()


def in_tensorflow_thread(call: Callable[[], Any]) -> Any:
    """`call()` in gradmagic's TensorFlow thread (directly if already in it), in the caller's device.

    Ctrl-C while waiting raises KeyboardInterrupt here at once and abandons the
    thread (see `_Worker.abandon`); the next call starts a new one.
    """
    global _worker
    if threading.current_thread().name == _THREAD_NAME:
        return call()
    device = tf_context.context().device_name

    def in_scope():
        if not device:
            return call()
        with tf.device(device):
            return call()

    with _worker_lock:
        worker = _worker = _worker or _Worker()
    future = worker.submit(in_scope)
    try:
        return future.result()
    except KeyboardInterrupt as interrupt:
        if future.done():
            raise
        traced = _stack_below(worker.thread, in_scope.__code__)  # where the trace was: the user's code, usually
        with _worker_lock:
            if _worker is worker:
                _worker = None
        worker.abandon()
        # Shown from the trace's frames down, in place of the standard library's wait for it (`future.result()`).
        here = interrupt.__traceback__
        raise interrupt.with_traceback(types.TracebackType(traced, here.tb_frame, here.tb_lasti, here.tb_lineno))


class _QuietVectorizer(logging.Filter):
    """Drops what TensorFlow's vectorizer (`pfor`) logs while gradmagic traces in its own thread: an op of the user's
    gradient it cannot vectorize makes it log an ERROR with the op's whole definition before it falls back to a loop,
    which gradmagic asks for (`fallback_to_while_loop`). Nothing is wrong, nothing is shown."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (threading.current_thread().name == _THREAD_NAME and "parallel_for" in record.pathname)


tf.get_logger().addFilter(_QuietVectorizer())


#: Where TensorFlow's own modules lie: its tracing machinery's frames are left out of an interrupted trace's stack.
TENSORFLOW_FILES = os.path.dirname(os.path.abspath(tf.__file__)) + os.sep


def _stack_below(thread: threading.Thread, code: types.CodeType) -> types.TracebackType | None:
    """The frames `thread` is running below the frame of `code`, TensorFlow's own left out, as a traceback (None when
    it runs no such frame)."""
    frame = sys._current_frames().get(thread.ident)
    frames = []
    while frame is not None and frame.f_code is not code:
        if not frame.f_code.co_filename.startswith(TENSORFLOW_FILES):
            frames.append(frame)
        frame = frame.f_back
    if frame is None:
        return None
    traceback = None
    for below in frames:  # innermost first: each links to the one it called
        traceback = types.TracebackType(traceback, below, below.f_lasti, below.f_lineno)
    return traceback


def gradient_registry() -> dict:
    """TensorFlow's name -> {"type": gradient function, ...} registry (private; an empty dict if it moves)."""
    registry = getattr(getattr(tf_ops, "_gradient_registry", None), "_registry", None)
    return registry if isinstance(registry, dict) else {}


def unregister(names: list) -> None:
    """Take these gradient functions out of TensorFlow's registry."""
    registry = gradient_registry()
    for name in names:
        registry.pop(name, None)


def _shape_and_dtype(leaf: Any) -> Any:
    shape = getattr(leaf, "shape", None)
    return (tuple(shape), leaf.dtype) if shape is not None and hasattr(leaf, "dtype") else leaf


def _weak_stand_in(function: Callable) -> Callable:
    reference = weakref.ref(function)

    def gradient(*args):
        alive = reference()
        if alive is None:
            raise LookupError("this custom gradient belonged to an op gradmagic has since freed")
        return alive(*args)

    return gradient
