"""The TensorFlow adapter. Importing this module imports TensorFlow."""

from __future__ import annotations

import functools
from typing import Any, Callable

import tensorflow as tf


class TensorFlowAdapter:
    """`tf.custom_gradient` ops, called eagerly or inside `tf.function`."""

    name = "tensorflow"
    display_name = "TensorFlow"
    version = tf.__version__
    decorator = "tf.custom_gradient"

    def decorate(self, function: Callable) -> Callable:
        """Decorate with `tf.custom_gradient`, keyword arguments working in graph mode too.

        Eagerly, `tf.custom_gradient` passes keyword arguments through as
        constants that get no gradient; inside `tf.function` it refuses them
        ("supports keywords arguments only when eager execution is enabled").
        The op returned here gives graph mode the eager behaviour, so an op
        with keyword-only parameters works in both.
        """
        op = tf.custom_gradient(function)

        # Like the op tf.custom_gradient returns, this wrapper is not converted by
        # AutoGraph inside tf.function: the user's function runs as written.
        @tf.autograph.experimental.do_not_convert
        @functools.wraps(function)
        def custom_gradient_op(*args, **kwargs):
            __tracebackhide__ = True
            if kwargs and not tf.executing_eagerly():
                def with_keywords(*positional):
                    return function(*positional, **kwargs)

                with_keywords.__name__ = function.__name__
                return tf.custom_gradient(with_keywords)(*args)
            return op(*args, **kwargs)

        return custom_gradient_op

    def call(self, op: Callable, args: list, kwargs: dict) -> Any:
        """Call `op` once, eagerly."""
        __tracebackhide__ = True
        return op(*args, **kwargs)

    def describe(self, value: Any) -> str:
        """`float32[2,3]` for a tensor, variable or array; structures element by element."""
        if isinstance(value, tuple):
            inner = ", ".join(self.describe(item) for item in value)
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        if isinstance(value, list):
            return "[" + ", ".join(self.describe(item) for item in value) + "]"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{key!r}: {self.describe(item)}" for key, item in value.items()) + "}"
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            dtype = getattr(value.dtype, "name", str(value.dtype))
            dims = ",".join("?" if dim is None else str(dim) for dim in tuple(value.shape))
            return f"{dtype}[{dims}]"
        text = repr(value)
        return text if len(text) <= 40 else f"{type(value).__name__}"


ADAPTER = TensorFlowAdapter()
