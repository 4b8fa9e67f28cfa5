"""One widget per notebook cell: a cell run again closes the widgets it displayed before, and a cell deleted in
JupyterLab closes its widgets when the next cell runs (frontends name the cell of each request, and the deleted
ones; `cell_starts` is IPython's `pre_run_cell` event). A closed widget's report has its re-check context dropped
too (`contexts.forget`), so that the op it held goes with the widget."""

from __future__ import annotations

from gradmagic.notebook import contexts
from gradmagic.notebook.kernel import cell_of, kernel, request


class CellWidgets:
    """The widgets each notebook cell displayed in its latest run."""

    def __init__(self):
        self.by_cell: dict[str, list] = {}

    def cell_starts(self, running_kernel) -> None:
        """Before a cell runs: close the widgets of its previous run and of the cells deleted since."""
        metadata = request(running_kernel).get("metadata") or {}
        for cell in [*(metadata.get("deletedCells") or ()), metadata.get("cellId")]:
            for shown in self.by_cell.pop(cell, []) if cell else []:
                shown.close()
                contexts.forget(getattr(shown, "shown", None))

    def adopt(self, shown, running_kernel) -> None:
        cell = cell_of(running_kernel)
        if cell:  # a client that does not name cells (nbclient, a console): nothing will replace it
            self.by_cell.setdefault(cell, []).append(shown)


CELLS = CellWidgets()


def cell_starts(_info=None) -> None:
    """IPython's `pre_run_cell` event (registered by `%load_ext gradmagic`): a cell run again frees its widgets."""
    running_kernel = kernel()
    if running_kernel is not None:
        CELLS.cell_starts(running_kernel)
