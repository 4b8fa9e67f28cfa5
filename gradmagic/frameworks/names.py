"""The frameworks and Keras backends gradmagic knows, by its own names for them: the one table of their packages and
of their names as users write them, which every other naming of them reads. Imports nothing of a framework."""

from __future__ import annotations

from dataclasses import dataclass

#: Names accepted by `get_adapter` (and `%config GradientMagics.framework`).
NAMES = ("tensorflow", "keras")
#: Keras 3's backends gradmagic checks on, in the order the portability table lists them.
KERAS_BACKENDS = ("tensorflow", "jax", "torch")


@dataclass(frozen=True)
class Package:
    """A framework or Keras backend: the package it is imported as, gradmagic's extra that installs it, its name."""

    module: str
    extra: str
    display_name: str


#: Each framework (`NAMES`) and Keras backend (`KERAS_BACKENDS`): its package, gradmagic's extra, its name for users.
PACKAGES = {
    "tensorflow": Package("tensorflow", "tensorflow", "TensorFlow"),
    "keras": Package("keras", "tensorflow", "Keras 3"),
    "jax": Package("jax", "jax", "JAX"),
    "torch": Package("torch", "torch", "PyTorch"),
}


def backend_name(backend: str | None) -> str:
    """A Keras backend's name as users write it: "jax" -> "JAX" (any other name as it is)."""
    return PACKAGES[backend].display_name if backend in KERAS_BACKENDS else backend or ""
