"""What a Report (and a gradient Graph) displays as in IPython and Jupyter, registered with IPython's formatters.

The Report is plain data: how it shows is IPython's formatters' business.
Its display carries the widget view when a kernel with widgets runs; the
report's data (`application/vnd.gradmagic.report+json`) for gradmagic's
JupyterLab extension, which draws it with no kernel too; and always a
sanitiser-safe `text/html`, an `image/png` summary and a `text/plain`
summary for places without either (GitHub, nbviewer, an HTML export, a
terminal).
"""

from __future__ import annotations

from typing import Any

from gradmagic.notebook.cell_widgets import CELLS
from gradmagic.notebook.contexts import context_of
from gradmagic.notebook.kernel import kernel, shell
from gradmagic.render.figures import images_of
from gradmagic.render.graph import graph_png, graph_summary, graph_svg
from gradmagic.render.html import render_html, render_watch_html
from gradmagic.render.text import render_text, render_watch_text
from gradmagic.render.widget import ReportWidget
from gradmagic.report import MIME_TYPE, WATCH_MIME_TYPE, Graph, Report, WatchReport

_VIEW = "application/vnd.jupyter.widget-view+json"


def register(running_shell: Any = None) -> None:
    """Show Reports, Graphs and WatchReports through gradmagic's displays in `running_shell` (default: the running
    one)."""
    running_shell = running_shell or shell()
    formatter = getattr(getattr(running_shell, "display_formatter", None), "mimebundle_formatter", None)
    if formatter is not None:
        formatter.for_type(Report, report_bundle)
        formatter.for_type(Graph, graph_bundle)
        formatter.for_type(WatchReport, watch_bundle)


def report_bundle(report: Report) -> dict[str, Any]:
    """The report's display: the widget view in a live kernel, the report's data, and the static fallbacks."""
    images = images_of(report)
    bundle: dict[str, Any] = {
        MIME_TYPE: report.to_dict(),
        "text/plain": render_text(report),
        "text/html": render_html(report, images),
        "image/png": images.summary,
    }
    running_kernel = kernel()
    if running_kernel is not None:
        shown = widget(report)
        CELLS.adopt(shown, running_kernel)
        bundle[_VIEW] = shown._repr_mimebundle_()[_VIEW]
    return bundle


def watch_bundle(report: WatchReport) -> dict[str, Any]:
    """A watch's report: its data, a table of its ops with each op's report folded under its row (sanitiser-safe
    HTML, the same view as every Report's), and text. Each op's Report (`report.ops[i]`) displays as any Report."""
    return {
        WATCH_MIME_TYPE: report.to_dict(),
        "text/plain": render_watch_text(report),
        "text/html": render_watch_html(report),
    }


def graph_bundle(graph: Graph) -> dict[str, Any]:
    """The gradient graph drawn (SVG, PNG) and summed up in a line."""
    return {"image/svg+xml": graph_svg(graph), "image/png": graph_png(graph), "text/plain": graph_summary(graph)}


def widget(report: Report) -> ReportWidget:
    """A new `ReportWidget` for `report`, with Re-check when the context it was checked in is known."""
    context = context_of(report)
    if context is None:
        return ReportWidget(report)
    return ReportWidget(report, recheck=context.recheck, inputs=context.inputs_text)
