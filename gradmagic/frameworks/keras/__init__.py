"""Keras 3's `keras.ops.custom_gradient`: the adapter of the backend Keras runs on.

Keras fixes its backend (`KERAS_BACKEND`, or `~/.keras/keras.json`) when it is
first imported, so one process checks ops on one backend; the portability
check (`gradmagic.portability`) runs the others in subprocesses. On
TensorFlow, `keras.ops.custom_gradient` is `tf.custom_gradient` and the
TensorFlow adapter serves it (with Keras's wording); JAX and PyTorch have
adapters of their own (`jax_backend.py`, `torch_backend.py`), sharing
`common.py`. Importing this package imports Keras and its backend.
"""

from __future__ import annotations

import keras

from gradmagic.errors import FrameworkUnavailable
from gradmagic.frameworks.base import Adapter
from gradmagic.frameworks.names import KERAS_BACKENDS


def _adapter_for(backend: str) -> Adapter:
    if backend == "tensorflow":
        from gradmagic.frameworks.tensorflow.eager import KerasTensorFlowAdapter

        return KerasTensorFlowAdapter()
    if backend == "jax":
        from gradmagic.frameworks.keras.jax_backend import ADAPTER as jax_adapter

        return jax_adapter
    if backend == "torch":
        from gradmagic.frameworks.keras.torch_backend import ADAPTER as torch_adapter

        return torch_adapter
    raise FrameworkUnavailable(
        f"Keras runs on the {backend!r} backend here; gradmagic checks keras.ops.custom_gradient on "
        f"{', '.join(KERAS_BACKENDS[:-1])} and {KERAS_BACKENDS[-1]}. Set KERAS_BACKEND to one of them before Keras is "
        "imported (then restart the kernel)."
    )


ADAPTER = _adapter_for(keras.backend.backend())
