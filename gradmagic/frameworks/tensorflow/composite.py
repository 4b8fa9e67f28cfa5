"""What a callable is to `tf.custom_gradient`: an op it made (a function, a method bound to an object), one wrapped in
`tf.function`, or a differentiable function that reaches such ops inside (a wrapper, a Keras layer,
`tf.recompute_grad`); which custom-gradient ops a call reaches; and a composite's forward with those ops' custom
gradients replaced by autodiff of their own forwards.

`tf.custom_gradient` (and Keras's `keras.ops.custom_gradient` on TensorFlow, which is it) routes every call of an op
through two module functions, one for eager calls and one for graph building; while a call runs, they are replaced
by ones that note the user's function and call through, or call the user's function alone.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import tensorflow as tf
from tensorflow.python.ops import custom_gradient as _tf_custom_gradient

from gradmagic.frameworks.cache import cache_of
from gradmagic.frameworks.tensorflow import overrides
from gradmagic.frameworks.tensorflow.tracing import TENSORFLOW_FILES

_DECORATORS = ("_eager_mode_decorator", "_graph_mode_decorator")


def is_custom_gradient_op(op: Any) -> bool:
    """Whether `op` is what `tf.custom_gradient` returns (its `Bind`, also when bound to an object as a method)."""
    return isinstance(op, _tf_custom_gradient.Bind) and getattr(op._d, "__qualname__", "").startswith(
        "custom_gradient."
    )


def unwrap(op: Any) -> tuple[Callable, str] | None:
    """(the user's function, "decorated") for an op `tf.custom_gradient` made, also through `tf.function`;
    (the callable, "composite") for `tf.recompute_grad(f)`, and for a gradient `%%register_gradient` registered
    (its forward with its ops built under the override); else None."""
    if isinstance(op, overrides.RegisteredGradient):
        return (op.checked, "composite") if op.checked is not None else None
    while callable(getattr(op, "python_function", None)):  # tf.function: check the Python function it runs
        op = op.python_function
    decorator = getattr(op, "_tf_decorator", None)
    if decorator is None or not is_custom_gradient_op(op):
        return None
    if decorator.decorator_name in ("custom_gradient", "__get__"):  # "__get__": a method, bound to its object
        return _users(decorator.decorated_target), "decorated"
    return op, "composite"  # tf.recompute_grad and the like: a custom gradient built from the function's autodiff


def _users(function: Callable) -> Callable:
    """The user's function behind AutoGraph's wrappers: once a `tf.function` over a `tf.custom_gradient` op has
    traced, the op's decorated target is AutoGraph's converted call, its original under `__wrapped__`."""
    for _ in range(8):
        code = getattr(function, "__code__", None)
        inner = getattr(function, "__wrapped__", None)
        if code is None or inner is None or not code.co_filename.startswith(TENSORFLOW_FILES):
            return function
        function = inner
    return function


def _describe(function: Callable) -> str:
    qualname = getattr(function, "__qualname__", "") or ""
    if qualname.startswith("recompute_grad."):
        return "tf.recompute_grad"
    return getattr(function, "__name__", type(function).__name__)


def _recomputed(function: Callable) -> Callable | None:
    """The function `tf.recompute_grad` wraps, when `function` is its custom-gradient inner function."""
    if not (getattr(function, "__qualname__", "") or "").startswith("recompute_grad."):
        return None
    cells = dict(zip(function.__code__.co_freevars, function.__closure__ or ()))
    return cells["f"].cell_contents if "f" in cells else None


@contextlib.contextmanager
def custom_gradients(bypass: bool) -> Iterator[list[str]]:
    """Within: the names of the custom-gradient functions called, as a list filled as they are; with `bypass`,
    each call returns its function's outputs with no custom gradient (autodiff differentiates its forward)."""
    reached: list[str] = []
    originals = [getattr(_tf_custom_gradient, name) for name in _DECORATORS]

    def noting(original: Callable) -> Callable:
        def decorator(function, args, kwargs):
            reached.append(_describe(function))
            if not bypass:
                return original(function, args, kwargs)
            recomputed = _recomputed(function)
            if recomputed is not None:  # its own forward runs unrecorded: call the function it recomputes
                return recomputed(*args, **kwargs)
            return function(*args, **kwargs)[0]

        return decorator

    for name, original in zip(_DECORATORS, originals):
        setattr(_tf_custom_gradient, name, noting(original))
    try:
        yield reached
    finally:  # contexts nest (a check inside a check's call): each puts back what it found
        for name, original in zip(_DECORATORS, originals):
            setattr(_tf_custom_gradient, name, original)


def without_custom(function: Callable) -> Callable:
    """`function` whose calls reach no custom gradient: each custom-gradient op inside runs its forward alone, and
    the ops built under a gradient override keep their op type's own gradient. (A `tf.function` is called through
    its Python function: its traces have the custom gradients in.)"""
    function = python_function(function)

    def forward(*args: Any, **kwargs: Any) -> Any:
        with custom_gradients(bypass=True), overrides.bypassed():
            return function(*args, **kwargs)

    return forward


def is_compiled_function(op: Any) -> bool:
    """Whether `op` is a `tf.function` that no custom-gradient decorator made (a wrapper of ops, not an op)."""
    return callable(getattr(op, "python_function", None)) and unwrap(op) is None


def python_function(function: Callable) -> Callable:
    """The Python function a `tf.function` runs (through nested ones); any other callable itself."""
    while callable(getattr(function, "python_function", None)):
        function = function.python_function
    return function


def in_graph(function: Callable) -> Callable:
    """`function` as a `tf.function` (one per function, kept with it): its ops built into a graph, where gradient
    overrides apply."""
    cache = cache_of(function)
    compiled = cache.get("in a graph")
    if compiled is None:
        compiled = cache["in a graph"] = tf.function(function)
    return compiled


def once_each(names: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))
