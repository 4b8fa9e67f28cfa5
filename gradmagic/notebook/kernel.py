"""The running IPython shell and kernel, as far as gradmagic needs them. IPython is never imported here: it is used
when it already runs."""

from __future__ import annotations

import sys
from typing import Any


def shell() -> Any:
    """The running IPython shell, or None."""
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def kernel() -> Any:
    """The running kernel, if IPython runs in one (widgets need its comms); None in a terminal or plain Python."""
    return getattr(shell(), "kernel", None)


def request(running_kernel: Any) -> dict:
    """The execute request the kernel is answering (its `metadata` names the notebook cell, where the client does)."""
    get_parent = getattr(running_kernel, "get_parent", None)
    return (get_parent("shell") if get_parent else getattr(running_kernel, "_parent_header", None)) or {}


def cell_of(running_kernel: Any) -> str | None:
    """The notebook cell the request being answered runs (its `cellId`), or None: no kernel, or a client that names
    no cell (nbclient, `jupyter console`)."""
    if running_kernel is None:
        return None
    return (request(running_kernel).get("metadata") or {}).get("cellId") or None


def user_namespace() -> dict:
    """The notebook's namespace (IPython's), or `__main__`'s in plain Python."""
    running = shell()
    return running.user_ns if running is not None else vars(sys.modules["__main__"])


def source_label(filename: str | None) -> str | None:
    """IPython's name for a cell of the running shell ("Cell In[3]"), else the file name."""
    compiler = getattr(shell(), "compile", None)
    label = compiler.format_code_name(filename) if filename and hasattr(compiler, "format_code_name") else None
    return " ".join(label) if label else filename
