"""Keras 3's `keras.ops.custom_gradient`: the adapter of the backend Keras runs on.

Keras fixes its backend (`KERAS_BACKEND`, or `~/.keras/keras.json`) when it is
first imported, so one process checks ops on one backend; the portability
check (`gradmagic.checking.portability`) runs the others in subprocesses.
Importing this module imports Keras and its backend.
"""

from __future__ import annotations

import keras

from gradmagic.errors import FrameworkUnavailable

#: Keras backends gradmagic checks on, in the order the portability table lists them.
BACKENDS = ("tensorflow", "jax", "torch")


def _adapter_for(backend: str):
    if backend == "tensorflow":
        from gradmagic.frameworks.tensorflow import KerasTensorFlowAdapter

        return KerasTensorFlowAdapter()
    if backend == "jax":
        from gradmagic.frameworks.keras_jax import ADAPTER as jax_adapter

        return jax_adapter
    if backend == "torch":
        from gradmagic.frameworks.keras_torch import ADAPTER as torch_adapter

        return torch_adapter
    raise FrameworkUnavailable(
        f"Keras runs on the {backend!r} backend here; gradmagic checks keras.ops.custom_gradient on "
        f"{', '.join(BACKENDS)}. Set KERAS_BACKEND to one of them before Keras is imported (then restart the kernel)."
    )


ADAPTER = _adapter_for(keras.backend.backend())
