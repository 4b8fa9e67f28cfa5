"""A Report as a widget made only of ipywidgets' built-in widgets.

No custom widget model: it works wherever ipywidgets does (JupyterLab,
Notebook 7, VS Code), with or without gradmagic's JupyterLab extension. The
sections are the HTML renderer's, one per tab, and the figures are
`figures.ReportImages`'. The controls (example inputs, step, tolerances,
sweep range, Re-check) call back into whoever made the widget: the widget
itself never checks anything.
"""

from __future__ import annotations

import base64
import time
from html import escape
from typing import Callable

import ipywidgets as widgets

from gradmagic.render import COLOURS, PROGRESS_AFTER
from gradmagic.render.figures import images_of
from gradmagic.render.html import (
    backends_html,
    graph_html,
    header_html,
    numerics_html,
    problems_html,
    shapes_html,
    sweep_html,
)
from gradmagic.report import MIME_TYPE, Report

TAB_TITLES = ("Problems", "Shapes", "Finite differences", "Sweep", "Graph")

#: Re-runs a check: (inputs text, option overrides, progress callback) -> Report; raises with a message to show.
Recheck = Callable[[str, dict, Callable[[float, str], None]], Report]


def graph_display(report: Report, png: bytes | None) -> dict:
    """A display of the report's gradient graph alone (an output, as in a notebook file): the report's data for
    gradmagic's JupyterLab extension, which draws the graph interactively, and the static drawing for the rest."""
    data = {MIME_TYPE: report.to_dict()}
    if png:
        data["image/png"] = base64.b64encode(png).decode("ascii")
    return {"output_type": "display_data", "data": data, "metadata": {MIME_TYPE: {"view": "graph"}}}


class ReportWidget(widgets.VBox):
    """The report: header, a tab per section, and controls that re-check in the kernel and update in place.

    `recheck` re-runs the check for the Re-check button (None: the controls
    are disabled, e.g. for a report read back from JSON). `inputs` is the
    text the inputs field starts with: `x=EXPR y=EXPR`, as `%gradcheck` takes
    them. `report` is always the report shown.
    """

    def __init__(self, report: Report, recheck: Recheck | None = None, inputs: str = ""):
        self._recheck = recheck
        full_width = widgets.Layout(width="100%")
        self.header = widgets.HTML()
        self.problems = widgets.HTML()
        self.shapes = widgets.HTML()
        self.numerics = widgets.HTML()
        self.jacobians = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        self.sweep = widgets.HTML()
        self.sweep_image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        self.graph = widgets.HTML()
        # The graph as a display: gradmagic's JupyterLab extension draws it interactively from the report's data;
        # elsewhere (Notebook 7 or VS Code without the extension) the static drawing shows.
        self.graph_view = widgets.Output()
        self.tabs = widgets.Tab(
            children=[
                self.problems,
                self.shapes,
                widgets.VBox([self.numerics, self.jacobians]),
                widgets.VBox([self.sweep, self.sweep_image]),
                widgets.VBox([self.graph, self.graph_view]),
            ],
            titles=TAB_TITLES,
        )

        label_width = {"description_width": "initial"}
        self.inputs = widgets.Text(
            value=inputs,
            description="inputs",
            placeholder="x=tf.constant([1., 2.]) y=3.0",
            style=label_width,
            layout=full_width,
        )
        self.eps = _option_field("step", "relative; default: eps^(1/3)")
        self.rtol = _option_field("rtol", "default: by dtype")
        self.atol = _option_field("atol", "default: by dtype")
        self.sweep_from = _option_field("sweep from", "default: around the example")
        self.sweep_to = _option_field("to", "")
        self.recheck_button = widgets.Button(description="Re-check", icon="refresh", button_style="primary")
        self.recheck_button.on_click(self._on_recheck)
        self.progress = widgets.FloatProgress(
            min=0, max=1, description="checking", style=label_width, layout=widgets.Layout(display="none")
        )
        self.status = widgets.HTML()
        self.controls = widgets.VBox(
            [
                self.inputs,
                widgets.HBox([self.eps, self.rtol, self.atol], layout=widgets.Layout(flex_flow="row wrap")),
                widgets.HBox(
                    [self.sweep_from, self.sweep_to, self.recheck_button, self.progress],
                    layout=widgets.Layout(flex_flow="row wrap"),
                ),
                self.status,
            ]
        )
        super().__init__([self.header, self.tabs, self.controls])
        self.show(report)
        if recheck is None:
            for control in (self.inputs, self.eps, self.rtol, self.atol, self.sweep_from, self.sweep_to):
                control.disabled = True
            self.recheck_button.disabled = True
            self.recheck_button.tooltip = "This report has no op to re-check; run its cell again."

    def show(self, report: Report) -> None:
        """Show `report` in place: every section and the option fields."""
        self.report = report
        images = images_of(report)
        self.header.value = header_html(report)
        self.problems.value = (backends_html(report) if report.backends else "") + problems_html(report)
        self.shapes.value = shapes_html(report)
        self.numerics.value = numerics_html(report)
        self.sweep.value = (
            sweep_html(report)
            if report.sweep is not None
            else _muted(
                "No sweep: it is drawn for a scalar input or an element-wise op, in full mode "
                "(up to full_threshold elements)."
            )
        )
        self.graph.value = graph_html(report) if report.graph is not None else _muted("No gradient graph.")
        for image, data in (
            (self.jacobians, images.jacobians),
            (self.sweep_image, images.sweep),
        ):
            image.value = data or b""
            image.layout.display = None if data else "none"
        self.graph_view.outputs = (graph_display(report, images.graph),) if report.graph is not None else ()
        self.tabs.set_title(0, f"Problems ({len(report.problems)})")
        if not report.ok or report.sweep is None:  # open where the trouble is; else where the picture is
            self.tabs.selected_index = 0 if report.problems else 2
        else:
            self.tabs.selected_index = 3
        options = report.options
        for field, name in ((self.eps, "eps"), (self.rtol, "rtol"), (self.atol, "atol")):
            field.value = "" if options.get(name) is None else repr(options[name])
        shown = (f"{report.sweep.points[0]:.6g}", f"{report.sweep.points[-1]:.6g}") if report.sweep else ("", "")
        self.sweep_from.value, self.sweep_to.value = self._shown_range = shown

    def close(self) -> None:
        """Close this widget and every widget it is made of (children, layouts, styles), freeing their models."""
        close_tree(self)

    def _on_recheck(self, _button=None) -> None:
        try:
            overrides = self._overrides()
        except ValueError as error:
            self._say(str(error), COLOURS["error"])
            return
        self.recheck_button.disabled = True
        started = time.perf_counter()

        def progress(fraction: float, phase: str) -> None:
            if time.perf_counter() - started > PROGRESS_AFTER:
                self.progress.layout.display = None
                self.progress.value = fraction
                self.progress.description = phase

        try:
            report = self._recheck(self.inputs.value, overrides, progress)
        except Exception as error:  # noqa: BLE001 - shown to the user; the previous report stays
            self._say(f"Not re-checked: {error}", COLOURS["error"])
        else:
            self.show(report)
            self._say(f"Re-checked in {(time.perf_counter() - started) * 1e3:.0f} ms.", "#57606a")
        finally:
            self.recheck_button.disabled = False
            self.progress.layout.display = "none"

    def _overrides(self) -> dict:
        """Options from the fields: eps, rtol, atol (empty: the default) and sweep_range."""
        overrides = {}
        for field, name in ((self.eps, "eps"), (self.rtol, "rtol"), (self.atol, "atol")):
            overrides[name] = _positive(field.value, field.description)
        start, stop = self.sweep_from.value.strip(), self.sweep_to.value.strip()
        if (start, stop) != self._shown_range:  # edited: sweep there
            low, high = _float(start, "sweep from"), _float(stop, "sweep to")
            if not low < high:
                raise ValueError(f"The sweep range must go up, not from {low:g} to {high:g}.")
            overrides["sweep_range"] = (low, high)
        elif self.report.options.get("sweep_range") is not None:  # chosen before: keep it
            overrides["sweep_range"] = tuple(self.report.options["sweep_range"])
        return overrides

    def _say(self, message: str, colour: str) -> None:
        self.status.value = f'<span style="color: {colour}">{escape(message)}</span>'


def _option_field(description: str, placeholder: str) -> widgets.Text:
    return widgets.Text(
        description=description,
        placeholder=placeholder,
        style={"description_width": "initial"},
        layout=widgets.Layout(width="16em"),
    )


def _muted(text: str) -> str:
    return f'<div style="color: #57606a">{escape(text)}</div>'


def _float(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{what} must be a number, not {text!r}.") from None


def _positive(text: str, what: str) -> float | None:
    if not text.strip():
        return None
    value = _float(text.strip(), what)
    if not value > 0:
        raise ValueError(f"{what} must be positive, not {text!r}.")
    return value


def close_tree(widget: widgets.Widget, seen: set[int] | None = None) -> None:
    """Close `widget` and every widget it holds (children, layout, style): `Widget.close` closes only its own."""
    seen = set() if seen is None else seen
    if id(widget) in seen:
        return
    seen.add(id(widget))
    for name in widget.keys:
        value = getattr(widget, name, None)
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, widgets.Widget):
                close_tree(item, seen)
    widgets.Widget.close(widget)
