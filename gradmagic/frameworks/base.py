"""The interface between gradmagic and a framework."""

from __future__ import annotations

from typing import Any, Callable, Protocol


class Adapter(Protocol):
    """What gradmagic needs from a framework; the rest of the package imports none.

    Later steps of the pipeline add the vector-Jacobian product, conversion to
    NumPy and graph tracing here.
    """

    #: Short name, as in `get_adapter(name)`: "tensorflow".
    name: str
    #: Name shown to users: "TensorFlow".
    display_name: str
    #: The framework's version string.
    version: str
    #: The decorator an op is made with, as users write it: "tf.custom_gradient".
    decorator: str

    def decorate(self, function: Callable) -> Callable:
        """Turn `function`, returning `(outputs, grad_fn)`, into a custom-gradient op."""

    def call(self, op: Callable, args: list, kwargs: dict) -> Any:
        """Call `op` once, eagerly, and return its outputs."""

    def describe(self, value: Any) -> str:
        """A short description of a value or a nested structure: `float32[2,3]`, `(float32[], int32[4])`."""
