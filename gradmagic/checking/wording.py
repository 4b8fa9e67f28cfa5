"""How messages name the framework, its ops and its calls, so advice reads as the user's own code would."""

from __future__ import annotations

import dataclasses
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
    #: Why a gradient function may not differentiate on this backend, added to second-order mismatches.
    second_order: str = ""
    #: How the structure checks ran the op, against which `compiled` is compared.
    direct: str = "eagerly"
    #: Advice when the op works `direct`ly but its gradient fails `compiled`.
    traced_advice: str = (
        "Code that runs eagerly may use Python values of tensors (`if`, `.numpy()`), which a graph cannot."
    )


def wording_for(adapter: Adapter) -> Wording:
    """The wording of messages about ops of `adapter`."""
    if adapter.backend is None:
        tensorflow = Wording(
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
        if adapter.mode == "graph":  # TensorFlow 1: every call builds into a graph, run in a tf.compat.v1 Session
            return dataclasses.replace(
                tensorflow,
                autodiff="TensorFlow's own gradient (tf.gradients)",
                compiled="in a tf.compat.v1 Session",
                direct="when gradmagic calls it and its gradient function itself",
                traced_advice="",
            )
        return tensorflow
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
        _SECOND_ORDER.get(adapter.backend, ""),
    )


# keras/src/backend/torch/core.py: CustomGradientFunction.forward runs the forward under torch.no_grad.
_SECOND_ORDER = {
    "torch": " On Keras's PyTorch backend the forward runs under torch.no_grad, so the tensors the gradient function "
    "closes over from the forward have no derivative: compute them in the gradient function from the op's inputs, "
    "which it receives as its `*args`.",
}


def backend_name(backend: str) -> str:
    """A Keras backend's name as users write it: "jax" -> "JAX"."""
    return _BACKEND_NAMES.get(backend, backend)
