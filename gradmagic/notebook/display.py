"""What a Report (and a gradient Graph) displays as in IPython and Jupyter, registered with IPython's formatters.

The Report is plain data: how it shows is IPython's formatters' business. One output per report, whatever the
front-end:

* always the report's data (`application/vnd.gradmagic.report+json`), a sanitiser-safe `text/html` with its figures
  as inline SVG, and `text/plain`: what a saved notebook, an HTML export, GitHub or a terminal shows, drawn in
  milliseconds, no plotting library;
* in a kernel talking to a notebook front-end (its requests name the cell), the report's live widget (one model):
  JupyterLab and Notebook 7 (whose requests carry their `deletedCells` too) get its model id in the output's
  metadata, where gradmagic's JupyterLab extension finds it, and no widget view in the data, so that an HTML export
  of the saved notebook shows the static report, never an empty widget; other front-ends (VS Code) get the widget
  view itself. Clients that name no cell (nbclient, `jupyter console`) get no widget at all.
"""

from __future__ import annotations

from typing import Any

from gradmagic.notebook.cell_widgets import CELLS
from gradmagic.notebook.contexts import context_of
from gradmagic.notebook.kernel import cell_of, kernel, request, shell
from gradmagic.render.graph import graph_summary, graph_svg
from gradmagic.render.html import render_html, render_watch_html
from gradmagic.render.text import render_text, render_watch_text
from gradmagic.report import MIME_TYPE, WATCH_MIME_TYPE, Graph, Report, WatchReport

_VIEW = "application/vnd.jupyter.widget-view+json"
#: Keys of the execute request's metadata that JupyterLab and Notebook 7 send (the cell's id aside).
_JUPYTERLAB_KEYS = ("deletedCells", "recordTiming")


def register(running_shell: Any = None) -> None:
    """Show Reports, Graphs and WatchReports through gradmagic's displays in `running_shell` (default: the running
    one)."""
    running_shell = running_shell or shell()
    formatter = getattr(getattr(running_shell, "display_formatter", None), "mimebundle_formatter", None)
    if formatter is not None:
        formatter.for_type(Report, report_bundle)
        formatter.for_type(Graph, graph_bundle)
        formatter.for_type(WatchReport, watch_bundle)


def report_bundle(report: Report) -> tuple[dict[str, Any], dict[str, Any]]:
    """The report's display: its data and static fallbacks, and in a notebook front-end its live widget."""
    data: dict[str, Any] = {MIME_TYPE: report.to_dict(), "text/plain": render_text(report)}
    data["text/html"] = render_html(report)
    metadata: dict[str, Any] = {}
    running_kernel = kernel()
    front_end = front_end_of(running_kernel)
    if front_end is not None:
        shown = widget(report)
        CELLS.adopt(shown, running_kernel)
        if front_end == "jupyterlab":
            metadata[MIME_TYPE] = {"model_id": shown.model_id}
        else:
            data[_VIEW] = {"version_major": 2, "version_minor": 1, "model_id": shown.model_id}
    return data, metadata


def front_end_of(running_kernel: Any) -> str | None:
    """`jupyterlab` (JupyterLab, Notebook 7), `notebook` (another front-end naming its cells: VS Code), or None (no
    kernel, or a client that names no cell: nbclient, a console), from the request being answered."""
    if cell_of(running_kernel) is None:
        return None
    metadata = request(running_kernel).get("metadata") or {}
    return "jupyterlab" if any(key in metadata for key in _JUPYTERLAB_KEYS) else "notebook"


def watch_bundle(report: WatchReport) -> dict[str, Any]:
    """A watch's report: its data, a table of its ops with each op's report folded under its row (sanitiser-safe
    HTML, the same view as every Report's), and text. Each op's Report (`report.ops[i]`) displays as any Report."""
    return {
        WATCH_MIME_TYPE: report.to_dict(),
        "text/plain": render_watch_text(report),
        "text/html": render_watch_html(report),
    }


def graph_bundle(graph: Graph) -> dict[str, Any]:
    """The gradient graph drawn (SVG) and summed up in a line."""
    return {"image/svg+xml": graph_svg(graph), "text/plain": graph_summary(graph)}


def widget(report: Report):
    """A new live widget for `report`, with its controls on when the context it was checked in is known."""
    from gradmagic.render.widget import ReportWidget

    context = context_of(report)
    if context is None:
        return ReportWidget(report)
    return ReportWidget(report, recheck=context.recheck, inputs=context.inputs_text, fallbacks=_fallbacks_of)


def _fallbacks_of(report: Report) -> dict[str, str]:
    """What a re-checked report's output saves besides its data: the static HTML and text."""
    return {"text/html": render_html(report), "text/plain": render_text(report)}
