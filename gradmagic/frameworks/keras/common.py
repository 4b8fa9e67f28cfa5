"""What the adapters of Keras's JAX and PyTorch backends share. Importing this module imports Keras.

(On the TensorFlow backend `keras.ops.custom_gradient` is `tf.custom_gradient`
itself, and the TensorFlow adapter serves it.)
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, ContextManager

import keras

from gradmagic.frameworks.base import Adapter, Layout, Target
from gradmagic.frameworks.cache import made_from
from gradmagic.frameworks.keras import watching
from gradmagic.frameworks.names import backend_name


class KerasAdapter(Adapter):
    """What the adapters of Keras's JAX and PyTorch backends share: the decorator, its keyword arguments."""

    name = "keras"
    decorator = "keras.ops.custom_gradient"
    mixes_floats = True

    def decorate(self, function: Callable) -> Callable:
        """Decorate with `keras.ops.custom_gradient`; the op also takes keyword arguments, as constants."""
        return keyword_binding_op(function)

    def check_scope(self, target: Target) -> ContextManager[None]:
        """A check's calls of the op are not the watched code's: a running watch does not record them."""
        return watching.unrecorded()


def keyword_binding_op(function: Callable) -> Callable:
    """`keras.ops.custom_gradient(function)` as an op that also takes keyword arguments, as constants.

    On JAX and PyTorch the decorated op refuses keyword arguments (JAX: "could
    not be resolved to positional-only arguments"; PyTorch: "forward() got an
    unexpected keyword argument"). This op binds them to the function first,
    so they get no gradient, as with TensorFlow.
    """
    op = keras.ops.custom_gradient(function)

    def custom_gradient_op(*args, **kwargs):
        __tracebackhide__ = True
        if kwargs:
            with_keywords = functools.partial(function, **kwargs)
            with_keywords.__name__ = getattr(function, "__name__", "op")
            return keras.ops.custom_gradient(with_keywords)(*args)
        return op(*args)

    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        if hasattr(function, attribute):
            setattr(custom_gradient_op, attribute, getattr(function, attribute))
    custom_gradient_op.__signature__ = inspect.signature(function)
    return made_from(custom_gradient_op, function)


class VariableReads(keras.StatelessScope):
    """Notes each Keras variable whose value is read, which then reads as usual (its stored value)."""

    def __init__(self):
        super().__init__()
        self.variables: list = []

    def get_current_value(self, variable):
        if not any(variable is seen for seen in self.variables):
            self.variables.append(variable)
        value = super().get_current_value(variable)
        if value is None and self.original_scope is not None:
            value = self.original_scope.get_current_value(variable)
        return value


def refuse_variables(layout: Layout, backend: str) -> None:
    """The structure checks stop at a closed-over variable on JAX and PyTorch (`GradientConvention.variables`)."""
    if layout.variables:
        raise NotImplementedError(
            f"On Keras's {backend_name(backend)} backend keras.ops.custom_gradient gives no gradient for closed-over "
            "variables; pass them as inputs to check them."
        )


def closure(function: Any) -> dict:
    """The variables a function closes over, by name."""
    code, cells = getattr(function, "__code__", None), getattr(function, "__closure__", None) or ()
    return dict(zip(code.co_freevars, (cell.cell_contents for cell in cells))) if code else {}


def new_variable(value: Any, name: str, trainable: bool) -> keras.Variable:
    """A Keras variable holding `value` (a notebook's variable rebuilt in another backend's process)."""
    return keras.Variable(value, name=name, trainable=trainable)
