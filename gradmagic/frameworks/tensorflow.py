"""The TensorFlow adapter. Importing this module imports TensorFlow."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import tensorflow as tf


class TensorFlowAdapter:
    """`tf.custom_gradient` ops, called eagerly or inside `tf.function`."""

    name = "tensorflow"
    display_name = "TensorFlow"
    version = tf.__version__
    decorator = "tf.custom_gradient"

    def decorate(self, function: Callable) -> Callable:
        """Decorate with `tf.custom_gradient`; the op also works where TensorFlow's alone fails.

        * Keyword arguments: eagerly, `tf.custom_gradient` passes them through
          as constants that get no gradient; inside `tf.function` it refuses
          them ("supports keywords arguments only when eager execution is
          enabled"). Here graph mode gets the eager behaviour.
        * AutoGraph: TensorFlow's op exposes the user's function as
          `__wrapped__`, and a `tf.function` that receives the op as an
          argument follows it and calls the raw function, which returns
          `(outputs, grad_fn)` instead of outputs. This op exposes its
          signature (`__signature__`) but not the raw function, and every call
          it makes to the user's code goes through `tf.custom_gradient`, which
          AutoGraph leaves unconverted: the user's code runs as written.
        """
        op = tf.custom_gradient(function)

        def custom_gradient_op(*args, **kwargs):
            __tracebackhide__ = True
            if kwargs and not tf.executing_eagerly():
                with_keywords = functools.partial(function, **kwargs)
                with_keywords.__name__ = function.__name__
                return tf.custom_gradient(with_keywords)(*args)
            return op(*args, **kwargs)

        for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(custom_gradient_op, attribute, getattr(function, attribute))
        custom_gradient_op.__signature__ = inspect.signature(function)
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
