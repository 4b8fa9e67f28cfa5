"""The contexts recent reports were checked in, so that a report's widget can check again.

Only the contexts of the last `KEPT_CONTEXTS` reports are kept (a context
holds its op, and the op its compiled functions): a cell run a thousand times
does not pile up old ops. Older reports show their widget with the controls
disabled. Nothing is kept where no widget can use it: in a kernel answering a
client that names no cell (nbclient, `jupyter console`), which gets no widget,
and for a report whose widget was closed (its cell ran again, `forget`). An
op's compiled functions are cycles of TensorFlow objects that only a full
collection frees, rare in a notebook's large heap: let go of while young, they
are freed within the next cell; kept eight runs, they grew the kernel by
about 0.1 MB per re-run of a checking cell (`benchmarks/bench_widget.py`).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any

from gradmagic.notebook.kernel import cell_of, kernel

#: Re-check contexts kept (by report).
KEPT_CONTEXTS = 8

# id(report) -> (weak reference to the report, its context); the most recent last.
_contexts: OrderedDict[int, tuple[weakref.ref, Any]] = OrderedDict()


def remember(report: Any, context: Any) -> None:
    """Keep `context` as the one `report` was checked in (it has `recheck(text, overrides, progress)`), unless in a
    kernel whose client names no cell: that client gets no widget to re-check with."""
    # A freed report's context can never be asked for again, and it holds the op: drop it now. Its id may also be
    # given to a new report, whose entry must then count as the newest, not take the old one's place in line.
    for key in [key for key, (reference, _) in _contexts.items() if reference() is None]:
        del _contexts[key]
    running_kernel = kernel()
    if running_kernel is not None and cell_of(running_kernel) is None:
        return
    _contexts[id(report)] = (weakref.ref(report), context)
    _contexts.move_to_end(id(report))
    while len(_contexts) > KEPT_CONTEXTS:
        _contexts.popitem(last=False)


def context_of(report: Any) -> Any:
    """The context `report` was checked in, while it is among the last `KEPT_CONTEXTS`; else None."""
    entry = _contexts.get(id(report))
    return entry[1] if entry is not None and entry[0]() is report else None


def forget(report: Any) -> None:
    """Drop the context `report` was checked in (its widget was closed: nothing will re-check it)."""
    entry = _contexts.get(id(report))
    if entry is not None and entry[0]() is report:
        del _contexts[id(report)]
