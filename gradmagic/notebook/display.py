"""What a Report (and a gradient Graph) displays as in IPython and Jupyter, registered with IPython's formatters.

The Report is plain data: how it shows is IPython's formatters' business. One output per report, whatever the
front-end:

* always the report's data (`application/vnd.gradmagic.report+json`), a sanitiser-safe `text/html` with its figures
  as inline SVG, and `text/plain`: what a saved notebook, an HTML export, GitHub or a terminal shows, drawn in
  milliseconds, no plotting library;
* in a kernel talking to a notebook front-end (its requests name the cell), the report's live widget (one model; a
  watch's report has one too, drawn by the same view):
  JupyterLab and Notebook 7 (whose requests carry their `deletedCells` too) get its model id in the output's
  metadata, where gradmagic's JupyterLab extension finds it, and no widget view in the data, so that an HTML export
  of the saved notebook shows the static report, never an empty widget; other front-ends (VS Code) get the widget
  view itself. Clients that name no cell (nbclient, `jupyter console`) get no widget at all.

A view that fails to render never shows a traceback through gradmagic: the output is then the report's text alone,
with a line saying which view failed and why.
"""

from __future__ import annotations

from typing import Any, Callable

from gradmagic.notebook.cell_widgets import CELLS
from gradmagic.notebook.contexts import context_of
from gradmagic.notebook.kernel import cell_of, kernel, request, shell
from gradmagic.render.graph import graph_summary, graph_svg
from gradmagic.render.html import render_html, render_watch_html
from gradmagic.render.text import render_text, render_watch_text
from gradmagic.render.words import report_data, watch_data
from gradmagic.report import MIME_TYPE, NAME_LIMIT, WATCH_MIME_TYPE, Graph, Report, WatchReport, display_text

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
    """The report's display: its data and static fallbacks, and in a notebook front-end its live widget (its text
    alone, and why, when one of them fails)."""

    def views(text: str) -> tuple[dict[str, Any], dict[str, Any]]:
        data: dict[str, Any] = {MIME_TYPE: _view("data", report_data, report), "text/plain": text}
        data["text/html"] = _view("HTML view", render_html, report)
        return data, _with_live_widget(data, MIME_TYPE, lambda: widget(report))

    return _views_or_text(report, render_text, views, with_metadata=True)


def _with_live_widget(data: dict[str, Any], mime_type: str, make: Callable[[], Any]) -> dict[str, Any]:
    """In a notebook front-end, the live widget `make()` returns, closed with its cell: its model id in the output's
    metadata under `mime_type` for JupyterLab and Notebook 7 (returned), the widget view in `data` elsewhere; the
    output's metadata."""
    metadata: dict[str, Any] = {}
    running_kernel = kernel()
    front_end = front_end_of(running_kernel)
    if front_end is not None:
        shown = _view("live widget", _adopted, make, running_kernel)
        if front_end == "jupyterlab":
            metadata[mime_type] = {"model_id": shown.model_id}
        else:
            data[_VIEW] = {"version_major": 2, "version_minor": 1, "model_id": shown.model_id}
    return metadata


def _adopted(make: Callable[[], Any], running_kernel: Any):
    """The widget `make()` returns, closed with its cell (closed at once if that fails)."""
    shown = make()
    try:
        CELLS.adopt(shown, running_kernel)
    except BaseException:
        shown.close()
        raise
    return shown


class _ViewFailed(Exception):
    """A view of a report failed to render; its message says which and why."""


def _view(name: str, render: Callable, *args: Any) -> Any:
    """`render(*args)`, a view called `name`; its failure as `_ViewFailed`."""
    try:
        return render(*args)
    except Exception as error:
        cause = display_text(" ".join(str(error).split()), NAME_LIMIT)
        raise _ViewFailed(
            f"(gradmagic could not show this report's {name}: {type(error).__name__}{': ' + cause if cause else ''}; "
            "its text is above.)"
        ) from error


def _views_or_text(
    shown: Any, render_text: Callable[[Any], str], views: Callable[[str], Any], with_metadata: bool = False
) -> Any:
    """`views(text)`, the MIME bundle of `shown`; when one of its views fails, its text and a line saying which view
    failed and why, never a traceback through gradmagic."""
    try:
        text = _view("text", render_text, shown)
    except _ViewFailed as failed:
        text = _one_line(shown)
        fallback = {"text/plain": f"{text}\n{failed}"}
    else:
        try:
            return views(text)
        except _ViewFailed as failed:
            fallback = {"text/plain": f"{text}\n{failed}"}
    return (fallback, {}) if with_metadata else fallback


def _one_line(shown: Any) -> str:
    """`shown` in one line (its `str`), where its text view failed."""
    try:
        return display_text(str(shown), NAME_LIMIT)
    except Exception:  # noqa: BLE001 - the last resort
        return f"<{type(shown).__name__}>"


def front_end_of(running_kernel: Any) -> str | None:
    """`jupyterlab` (JupyterLab, Notebook 7), `notebook` (another front-end naming its cells: VS Code), or None (no
    kernel, or a client that names no cell: nbclient, a console), from the request being answered."""
    if cell_of(running_kernel) is None:
        return None
    metadata = request(running_kernel).get("metadata") or {}
    return "jupyterlab" if any(key in metadata for key in _JUPYTERLAB_KEYS) else "notebook"


def watch_bundle(report: WatchReport) -> tuple[dict[str, Any], dict[str, Any]]:
    """A watch's report: its data, a table of its ops with each op's report folded under its row (sanitiser-safe
    HTML, the same view as every Report's), and text; in a notebook front-end, its live widget (one model), drawn by
    the same view as every report (the JupyterLab extension draws the saved data alike). Each op's Report
    (`report.ops[i]`) displays as any Report."""

    def views(text: str) -> tuple[dict[str, Any], dict[str, Any]]:
        data: dict[str, Any] = {
            WATCH_MIME_TYPE: _view("data", watch_data, report),
            "text/plain": text,
            "text/html": _view("HTML view", render_watch_html, report),
        }
        return data, _with_live_widget(data, WATCH_MIME_TYPE, lambda: _watch_widget(report))

    return _views_or_text(report, render_watch_text, views, with_metadata=True)


def _watch_widget(report: WatchReport):
    """A new live widget for a watch's report (anywidget is imported when a widget is first shown)."""
    from gradmagic.render.widget import WatchWidget

    return WatchWidget(report)


def graph_bundle(graph: Graph) -> dict[str, Any]:
    """The gradient graph drawn (SVG) and summed up in a line."""

    def views(text: str) -> dict[str, Any]:
        return {"image/svg+xml": _view("drawing", graph_svg, graph), "text/plain": text}

    return _views_or_text(graph, graph_summary, views)


def widget(report: Report):
    """A new live widget for `report` (a Report, or a WatchReport), with its controls on when the context it was
    checked in is known. TypeError for anything else."""
    from gradmagic.render.widget import ReportWidget, WatchWidget

    if isinstance(report, WatchReport):
        return WatchWidget(report)
    if not isinstance(report, Report):
        shown = repr(report)
        raise TypeError(
            "widget() shows a report: the Report that gradmagic.check or %gradcheck returns (or a watch's "
            f"WatchReport), not {type(report).__name__} {shown if len(shown) <= 60 else shown[:57] + '...'}"
        )
    context = context_of(report)
    if context is None:
        return ReportWidget(report)
    return ReportWidget(report, recheck=context.recheck, inputs=context.inputs_text, fallbacks=_fallbacks_of)


def _fallbacks_of(report: Report) -> dict[str, str]:
    """What a re-checked report's output saves besides its data: the static HTML and text (the text alone, and why,
    when the HTML view fails)."""

    def views(text: str) -> dict[str, str]:
        return {"text/html": _view("HTML view", render_html, report), "text/plain": text}

    return _views_or_text(report, render_text, views)
