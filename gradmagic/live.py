"""Reports shown live: what a Report displays as, how its widget re-checks, and one widget per notebook cell.

`check` is `gradmagic.check`: the check engine's `check`, remembering what
was checked (the op, its inputs as values or as the expressions typed, the
options) so the report's widget can re-check. Only the contexts of the last
few reports and of the widgets on screen are kept: a cell run a thousand
times does not pile up old ops and their traced graphs.

`mimebundle` is what a Report displays as: the widget view when a kernel
with widgets runs; the report's data (`application/vnd.gradmagic.report+json`)
for gradmagic's JupyterLab extension, which draws it with no kernel too; and
always a sanitiser-safe `text/html`, an `image/png` summary and a
`text/plain` summary for places without either (GitHub, nbviewer, an HTML
export, a terminal).

A cell run again closes the widgets it displayed before, and a cell deleted
in JupyterLab closes its widgets when the next cell runs (frontends name the
cell of each request, and the deleted ones; `cell_starts` is IPython's
`pre_run_cell` event).
"""

from __future__ import annotations

import dataclasses
import inspect
import time
import weakref
from collections import OrderedDict
from typing import Any, Callable

from gradmagic import inputs as example_inputs
from gradmagic.errors import InputError
from gradmagic.frameworks import get_adapter
from gradmagic.magic_line import split_words
from gradmagic.render import PROGRESS_AFTER
from gradmagic.report import MIME_TYPE, Report

#: Re-check contexts kept (by report); older reports show their widget with the controls disabled.
KEPT_CONTEXTS = 8


@dataclasses.dataclass(frozen=True)
class CheckContext:
    """What a report checked, to check it again: the op, its inputs and the options."""

    op: Callable
    framework: str
    options: dict
    examples: tuple[example_inputs.ExampleInput, ...] = ()  # as typed (magics); evaluated again on re-check
    arguments: tuple[list, dict] | None = None  # as given (gradmagic.check), used when no inputs are typed

    @property
    def inputs_text(self) -> str:
        return " ".join(str(example) for example in self.examples)

    def recheck(self, text: str, overrides: dict, progress: Callable[[float, str], None] | None = None) -> Report:
        """Check again with the inputs typed in `text` (`x=EXPR y=EXPR`; empty: the same inputs) and `overrides`."""
        examples = example_inputs.parse_example_inputs(split_words(text)) if text.strip() else self.examples
        if examples:
            signature = inspect.signature(self.op)
            example_inputs.check_names(examples, signature, getattr(self.op, "__name__", "op"))
            with get_adapter(self.framework).example_scope():
                values = example_inputs.evaluate(examples, _user_namespace())
            arguments = example_inputs.bind(signature, values)
        elif self.arguments is not None:
            arguments = self.arguments
        else:
            raise InputError("Type the example inputs to check at: x=EXPR y=EXPR ...")
        context = dataclasses.replace(
            self, options={**self.options, **overrides}, examples=examples, arguments=None if examples else arguments
        )
        return context.run(*arguments, progress=progress)

    def run(self, args: list, kwargs: dict, progress: Callable[[float, str], None] | None = None) -> Report:
        """Run the check engine and remember this context for the report's widget."""
        from gradmagic import checking

        report = checking.check(
            self.op, *args, kwargs=kwargs, framework=self.framework, progress=progress, **self.options
        )
        _remember(report, self)
        return report


def check(
    op: Callable,
    *args: Any,
    kwargs: dict | None = None,
    framework: str = "tensorflow",
    progress: Callable[[float, str], None] | None = None,
    **options: Any,
) -> Report:
    """`gradmagic.check`: the check engine's `checking.check` (see it for the arguments), remembered so that
    the report, left as a cell's value in Jupyter, shows as a widget whose Re-check button runs it again."""
    context = CheckContext(op, framework, options, arguments=(list(args), dict(kwargs or {})))
    return context.run(list(args), dict(kwargs or {}), progress=progress)


# id(report) -> (weak reference to the report, its context); the most recent last.
_contexts: OrderedDict[int, tuple[weakref.ref, CheckContext]] = OrderedDict()


def _remember(report: Report, context: CheckContext) -> None:
    # A freed report's context can never be asked for again, and it holds the op: drop it now. Its id may also be
    # given to a new report, whose entry must then count as the newest, not take the old one's place in line.
    for key in [key for key, (reference, _) in _contexts.items() if reference() is None]:
        del _contexts[key]
    _contexts[id(report)] = (weakref.ref(report), context)
    _contexts.move_to_end(id(report))
    while len(_contexts) > KEPT_CONTEXTS:
        _contexts.popitem(last=False)


def context_of(report: Report) -> CheckContext | None:
    """The context `report` was checked in, while it is among the last `KEPT_CONTEXTS`."""
    entry = _contexts.get(id(report))
    return entry[1] if entry is not None and entry[0]() is report else None


def widget(report: Report):
    """A new `ReportWidget` for `report`, with Re-check when its context is known."""
    from gradmagic.render.widget import ReportWidget

    context = context_of(report)
    if context is None:
        return ReportWidget(report)
    return ReportWidget(report, recheck=context.recheck, inputs=context.inputs_text)


def mimebundle(report: Report) -> dict[str, Any]:
    """The report's display: the widget view in a live kernel, the report's data, and the static fallbacks."""
    from gradmagic.render.figures import images_of
    from gradmagic.render.html import render_html
    from gradmagic.render.text import render_text

    images = images_of(report)
    bundle: dict[str, Any] = {
        MIME_TYPE: report.to_dict(),
        "text/plain": render_text(report),
        "text/html": render_html(report, images),
        "image/png": images.summary,
    }
    kernel = _kernel()
    if kernel is not None:
        shown = widget(report)
        _cells.adopt(shown, kernel)
        view = "application/vnd.jupyter.widget-view+json"
        bundle[view] = shown._repr_mimebundle_()[view]
    return bundle


class _CellWidgets:
    """The widgets each notebook cell displayed in its latest run."""

    def __init__(self):
        self.by_cell: dict[str, list] = {}

    def cell_starts(self, kernel) -> None:
        """Before a cell runs: close the widgets of its previous run and of the cells deleted since."""
        metadata = _request(kernel).get("metadata") or {}
        for cell in [*(metadata.get("deletedCells") or ()), metadata.get("cellId")]:
            for shown in self.by_cell.pop(cell, []) if cell else []:
                shown.close()

    def adopt(self, shown, kernel) -> None:
        cell = (_request(kernel).get("metadata") or {}).get("cellId")
        if cell:  # a client that does not name cells (nbclient, a console): nothing will replace it
            self.by_cell.setdefault(cell, []).append(shown)


_cells = _CellWidgets()


def cell_starts(_info=None) -> None:
    """IPython's `pre_run_cell` event (registered by `%load_ext gradmagic`): a cell run again frees its widgets."""
    kernel = _kernel()
    if kernel is not None:
        _cells.cell_starts(kernel)


def _shell():
    """The running IPython shell, or None; IPython is never imported here, only used when already running."""
    import sys

    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def _kernel():
    """The running kernel, if IPython runs in one (widgets need its comms); None in a terminal or plain Python."""
    return getattr(_shell(), "kernel", None)


def _request(kernel) -> dict:
    get_parent = getattr(kernel, "get_parent", None)
    return (get_parent("shell") if get_parent else getattr(kernel, "_parent_header", None)) or {}


def _user_namespace() -> dict:
    import sys

    shell = _shell()
    return shell.user_ns if shell is not None else vars(sys.modules["__main__"])


class ProgressBar:
    """A progress callback for `check` that shows a bar in the running cell once a check passes `PROGRESS_AFTER`."""

    def __init__(self):
        self.started = time.perf_counter()
        self.bar = self.handle = None

    def __call__(self, fraction: float, phase: str) -> None:
        if self.bar is None:
            if time.perf_counter() - self.started < PROGRESS_AFTER or _kernel() is None:
                return
            import ipywidgets
            from IPython.display import display

            self.bar = ipywidgets.FloatProgress(min=0, max=1, description="checking")
            self.handle = display(self.bar, display_id=True)
        self.bar.value = fraction
        self.bar.description = phase

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> bool:
        if self.bar is not None:  # the bar's output becomes empty (no MIME type: nothing shown); the report follows
            from gradmagic.render.widget import close_tree

            self.handle.update({}, raw=True)
            close_tree(self.bar)
        return False


__all__ = ["CheckContext", "ProgressBar", "check", "context_of", "mimebundle", "widget"]
