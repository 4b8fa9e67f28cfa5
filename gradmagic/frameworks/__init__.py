"""Framework adapters: everything that knows TensorFlow sits behind `Adapter`.

`get_adapter` imports a framework only when asked, so `%load_ext gradmagic`
stays light, and turns a missing framework into a message saying what to
install.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

from gradmagic.errors import FrameworkUnavailable
from gradmagic.frameworks.base import Adapter


@dataclass(frozen=True)
class _Known:
    module: str  # gradmagic's adapter module
    package: str  # the framework's top-level import name
    display_name: str
    extra: str  # gradmagic's extra that installs it
    # The adapter module for TensorFlow 1's graph mode, used where the framework builds graphs instead of running
    # ops eagerly (the adapter module then has `executes_eagerly()`).
    graph_module: str | None = None


_KNOWN = {
    "tensorflow": _Known(
        "gradmagic.frameworks.tensorflow",
        "tensorflow",
        "TensorFlow",
        "tensorflow",
        graph_module="gradmagic.frameworks.tensorflow_graph",
    ),
    # Keras 3 on the backend it was imported with (KERAS_BACKEND): TensorFlow, JAX or PyTorch.
    "keras": _Known("gradmagic.frameworks.keras", "keras", "Keras 3", "tensorflow"),
}

# Keras backends' import names and the gradmagic extra that installs each.
_BACKEND_EXTRAS = {"jax": "jax", "jaxlib": "jax", "torch": "torch", "tensorflow": "tensorflow"}

#: Names accepted by `get_adapter` (and `%config GradientMagics.framework`).
NAMES = tuple(_KNOWN)


def get_adapter(name: str) -> Adapter:
    """Return the adapter of framework `name`, importing the framework on first use.

    TensorFlow gets the graph-mode adapter where it builds graphs rather than
    running ops eagerly: after `tf.compat.v1.disable_eager_execution()`, or
    inside `with tf.Graph().as_default():`.
    """
    known = _KNOWN[name]
    try:
        module = importlib.import_module(known.module)
    except ModuleNotFoundError as error:
        missing = (error.name or "").split(".")[0]
        if name == "keras" and missing in _BACKEND_EXTRAS:  # Keras is there, its backend is not
            raise FrameworkUnavailable(
                f"Keras is set to run on {missing} (KERAS_BACKEND), which is not installed for this kernel's "
                f"Python ({sys.executable}). Install it with\n"
                f"    %pip install 'gradmagic[{_BACKEND_EXTRAS[missing]}]'\n"
                "then restart the kernel, or choose another backend with KERAS_BACKEND before Keras is imported."
            ) from None
        if missing != known.package:
            raise
        raise FrameworkUnavailable(
            f"gradmagic needs {known.display_name} to decorate and check ops, and it is not installed for "
            f"this kernel's Python ({sys.executable}). Install it with\n"
            f"    %pip install 'gradmagic[{known.extra}]'\n"
            f"(or 'gradmagic[{known.extra}-cpu]' for the CPU-only build, or keep a {known.display_name} "
            "you already have), then restart the kernel."
        ) from None
    except FrameworkUnavailable:
        raise
    except Exception as error:
        raise FrameworkUnavailable(
            f"{known.display_name} is installed but fails to import ({type(error).__name__}: {error}); "
            f"try `import {known.package}` in a cell to see the full error."
        ) from None
    if known.graph_module is not None and not module.executes_eagerly():
        return importlib.import_module(known.graph_module).ADAPTER
    if (
        module.ADAPTER.backend == "tensorflow"
        and not importlib.import_module(_KNOWN["tensorflow"].module).executes_eagerly()
    ):
        raise FrameworkUnavailable(
            "Keras 3 needs TensorFlow's eager execution, which is disabled here (TensorFlow 1's graph mode, "
            "tf.compat.v1.disable_eager_execution()). gradmagic checks tf.custom_gradient ops in graph mode: "
            "use %%custom_gradient without --keras, or framework='tensorflow'."
        )
    return module.ADAPTER
