"""Framework adapters: everything that knows a framework sits behind `Adapter` (see `base.py`).

| adapter | module |
| --- | --- |
| TensorFlow 2, eager (`tf.custom_gradient`, batches in `tf.function`) | `tensorflow/eager.py` |
| TensorFlow 1's graph mode (`tf.gradients`, a `tf.compat.v1` Session) | `tensorflow/graph_mode.py` |
| Keras 3's `keras.ops.custom_gradient` on TensorFlow, JAX, PyTorch | `keras/` |

`get_adapter` imports a framework only when asked, so `%load_ext gradmagic`
stays light, and turns a missing framework into a message saying what to
install. The frameworks' and Keras backends' names are in one table,
`names.py`; what this process has of them is asked here (`installed`,
`keras_backend`, `is_keras_variable`), without importing them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING

from gradmagic.errors import FrameworkUnavailable
from gradmagic.frameworks.names import KERAS_BACKENDS, NAMES, PACKAGES

if TYPE_CHECKING:  # the interface's module imports NumPy: not at `%load_ext gradmagic`
    from gradmagic.frameworks.base import Adapter


def get_adapter(name: str) -> Adapter:
    """Return the adapter of framework `name`, importing the framework on first use.

    TensorFlow gets the graph-mode adapter where it builds graphs rather than
    running ops eagerly: after `tf.compat.v1.disable_eager_execution()`, or
    inside `with tf.Graph().as_default():`.
    """
    if name == "tensorflow":
        eager = _import("gradmagic.frameworks.tensorflow.eager", name)
        if eager.executes_eagerly():
            return eager.ADAPTER
        return importlib.import_module("gradmagic.frameworks.tensorflow.graph_mode").ADAPTER
    if name == "keras":
        adapter = _import("gradmagic.frameworks.keras", name).ADAPTER
        if (
            adapter.backend == "tensorflow"
            and not _import("gradmagic.frameworks.tensorflow.eager", name).executes_eagerly()
        ):
            raise FrameworkUnavailable(
                "Keras 3 needs TensorFlow's eager execution, which is disabled here (TensorFlow 1's graph mode, "
                "tf.compat.v1.disable_eager_execution()). gradmagic checks tf.custom_gradient ops in graph mode: "
                "use %%custom_gradient without --keras, or framework='tensorflow'."
            )
        return adapter
    raise ValueError(f"unknown framework {name!r}: give one of {', '.join(map(repr, NAMES))}")


def get_watcher() -> ModuleType:
    """The module that records every call of the custom-gradient ops of this process's framework while a watch runs
    (its `recording(recorder)`; see `frameworks/watching.py`): where Keras runs on JAX or PyTorch, its
    `keras.ops.custom_gradient` ops (and TensorFlow's too where TensorFlow is imported); else TensorFlow's:
    `tf.custom_gradient` ops, and `keras.ops.custom_gradient` ops on Keras's TensorFlow backend. The framework is
    imported on first use."""
    backend = keras_backend()
    if backend in ("jax", "torch"):
        return _import(f"gradmagic.frameworks.keras.{backend}_watching", "keras")
    return _import("gradmagic.frameworks.tensorflow.watching", "tensorflow")


def get_registry() -> ModuleType:
    """The module that registers gradient functions for TensorFlow's op types, re-runnably, and makes what
    `%%register_gradient` binds (`frameworks/tensorflow/overrides.py`). TensorFlow is imported on first use."""
    return _import("gradmagic.frameworks.tensorflow.overrides", "tensorflow")


def installed(name: str) -> bool:
    """Whether the package of framework or Keras backend `name` can be imported here (without importing it)."""
    return importlib.util.find_spec(PACKAGES[name].module) is not None


def keras_backend() -> str | None:
    """The backend Keras runs on in this process; None where Keras is not imported (it is not imported here) or
    cannot say (a Keras too old or half imported)."""
    keras = sys.modules.get("keras")
    try:
        return keras.config.backend() if keras is not None else None
    except Exception:  # noqa: BLE001 - nothing to say
        return None


def is_keras_variable(value: object) -> bool:
    """Whether `value` is a Keras variable (without importing Keras: a process that has none has no such value)."""
    keras = sys.modules.get("keras")
    return keras is not None and isinstance(value, keras.Variable)


def _import(module: str, framework: str) -> ModuleType:
    """Import an adapter module; a missing or broken framework becomes a FrameworkUnavailable saying what to do."""
    package = PACKAGES[framework]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        missing = (error.name or "").split(".")[0]
        backend = "jax" if missing == "jaxlib" else missing
        if framework == "keras" and backend in KERAS_BACKENDS:  # Keras is there, its backend not
            extra = PACKAGES[backend].extra
            raise FrameworkUnavailable(
                f"Keras is set to run on {missing} (KERAS_BACKEND), which is not installed for this kernel's "
                f"Python ({sys.executable}). Install it with\n"
                f"    %pip install 'gradmagic[{extra}]'\n"
                "then restart the kernel, or choose another backend with KERAS_BACKEND before Keras is imported."
            ) from None
        if missing != package.module:
            raise
        raise FrameworkUnavailable(
            f"gradmagic needs {package.display_name} to decorate and check ops, and it is not installed for "
            f"this kernel's Python ({sys.executable}). Install it with\n"
            f"    %pip install 'gradmagic[{package.extra}]'\n"
            f"(or 'gradmagic[{package.extra}-cpu]' for the CPU-only build, or keep a {package.display_name} "
            "you already have), then restart the kernel."
        ) from None
    except FrameworkUnavailable:
        raise
    except Exception as error:
        raise FrameworkUnavailable(
            f"{package.display_name} is installed but fails to import ({type(error).__name__}: {error}); "
            f"try `import {package.module}` in a cell to see the full error."
        ) from None
