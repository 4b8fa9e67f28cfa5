"""How messages name the framework, its ops and its calls, so advice reads as the user's own code would."""

from __future__ import annotations

from dataclasses import dataclass

from gradmagic.frameworks.base import Adapter

_BACKEND_NAMES = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}


@dataclass(frozen=True)
class Wording:
    """The names a message uses for one framework (and Keras backend)."""

    framework: str  # who runs the op: "TensorFlow", "Keras on JAX"
    decorator: str  # "tf.custom_gradient"
    autodiff: str  # "TensorFlow's own gradient", "JAX's own gradient (jax.vjp)"
    compiled: str  # "inside tf.function", "inside jax.jit"
    zeros_like: str
    cast: str
    reduce_sum: str
    reshape: str
    where: str
    softplus: str
    stop_gradient: str


def wording_for(adapter: Adapter) -> Wording:
    """The wording of messages about ops of `adapter`."""
    if adapter.backend is None:
        return Wording(
            "TensorFlow",
            adapter.decorator,
            "TensorFlow's own gradient",
            f"inside {adapter.compiled}",
            "tf.zeros_like",
            "tf.cast",
            "tf.reduce_sum",
            "tf.reshape",
            "tf.where",
            "tf.math.softplus",
            "tf.stop_gradient",
        )
    backend = backend_name(adapter.backend)
    return Wording(
        f"Keras on {backend}",
        adapter.decorator,
        f"{backend}'s own gradient ({adapter.autodiff})",
        f"inside {adapter.compiled}" if adapter.compiled.startswith(("tf.", "jax.")) else f"with {adapter.compiled}",
        "ops.zeros_like",
        "ops.cast",
        "ops.sum",
        "ops.reshape",
        "ops.where",
        "ops.softplus",
        "ops.stop_gradient",
    )


def backend_name(backend: str) -> str:
    """A Keras backend's name as users write it: "jax" -> "JAX"."""
    return _BACKEND_NAMES.get(backend, backend)
