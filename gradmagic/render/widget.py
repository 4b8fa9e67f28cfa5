"""A Report as one live widget (anywidget): the report's data, the values of its controls and the state of the
kernel's work, as traits; the view is `labextension/src/widget.ts`, bundled into `gradmagic/static/widget.js`,
the same view the JupyterLab extension draws saved reports with.

One widget model per report, whatever its size (and its layout's). The model carries a small stub as its front-end
(`gradmagic/static/stub.js`, from `labextension/src/stub.ts`), not the view: the stub finds the view once per page,
registered by gradmagic's JupyterLab extension in JupyterLab and Notebook 7, and elsewhere (VS Code) asked of the
kernel over the widget's comm (`{"action": "view"}`, answered with the bundle and its stylesheet). So JupyterLab,
Notebook 7 and VS Code draw it with nothing to build or enable, and a notebook saved with its widgets' state holds
no copy of the view per report. The controls send requests (check again, sweep) as messages; the widget calls back
into whoever made it, which checks: the widget itself never does. A re-checked report's output data (the report and
its static fallbacks, which the JupyterLab extension saves in the notebook) goes to the view as a message, not a
trait, so that the saved widget state does not hold the static HTML again.
"""

from __future__ import annotations

import functools
import time
import uuid
from pathlib import Path
from typing import Callable

import anywidget
import traitlets

from gradmagic.render import no_sweep_reason
from gradmagic.render.words import report_data, watch_data
from gradmagic.report import MIME_TYPE, Report, display_text

STATIC = Path(__file__).resolve().parent.parent / "static"
#: What the widget shows where the view was never built (a clone installed without `./dev` or a wheel build).
UNBUILT_VIEW = """
export default { render({ el }) {
  el.textContent = "gradmagic's report view is not built (gradmagic/static/widget.js is missing): run ./dev test "
    + "or pip install a wheel built from the repository. The report's text and HTML are in the same output.";
} };
"""

#: Re-runs a check: (inputs text, option overrides, progress callback) -> Report; raises with a message to show.
Recheck = Callable[[str, dict, Callable[[float, str], None]], Report]
#: The static fallbacks of a report (`text/html`, `text/plain`), for the saved output of a re-checked one.
Fallbacks = Callable[[Report], dict]


@functools.cache
def _static(name: str, fallback: str) -> str:
    """The text of a built static file, read once: anywidget would turn a path into a watched file whose change
    signal holds every widget made from it, closed or not, for good."""
    path = STATIC / name
    if not path.is_file():
        return fallback
    text = path.read_text(encoding="utf-8")
    # anywidget takes a string of one line ending in a file suffix for a path: a line break makes it the contents.
    return text if text.endswith("\n") else text + "\n"


class ReportWidget(anywidget.AnyWidget):
    """The report's live view: its data (`report`), its controls (`controls`) and the kernel's work (`status`).

    `recheck` re-runs the check for the controls (None: they are off, e.g.
    for a report read back from JSON, or one whose op was freed). `inputs` is
    the text the inputs field starts with: `x=EXPR y=EXPR`, as `%gradcheck`
    takes them. `fallbacks` makes a re-checked report's static fallbacks.
    """

    _esm = _static("stub.js", UNBUILT_VIEW)
    report = traitlets.Dict().tag(sync=True)
    view = traitlets.Unicode("report").tag(sync=True)
    controls = traitlets.Dict().tag(sync=True)
    status = traitlets.Dict().tag(sync=True)
    #: Names this widget for its views: each view the front-end makes of it (after a redraw of its output) finds
    #: what the user opened and typed in the last one.
    key = traitlets.Unicode().tag(sync=True)

    def __init__(
        self,
        report: Report,
        recheck: Recheck | None = None,
        inputs: str = "",
        fallbacks: Fallbacks | None = None,
        reason: str = "This report has no op to re-check: run its cell again.",
        view: str = "report",
    ):
        self._recheck, self._fallbacks, self._inputs, self._reason = recheck, fallbacks, inputs, reason
        self.shown = report
        # The first state goes out with the widget's model (one message), not as updates after it.
        super().__init__(
            report=self._data(report),
            view=view,
            controls=self._controls(report),
            status=_status(),
            key=uuid.uuid4().hex,
        )
        self.on_msg(self._on_message)

    def show(self, report: Report) -> None:
        """Show `report` in place, its options in the controls."""
        self.shown = report
        self.controls = self._controls(report)
        self.report = self._data(report)

    @staticmethod
    def _data(report: Report) -> dict:
        """The report's data as the view reads it: its fields and its words."""
        return report_data(report)

    def close(self) -> None:
        """Close the widget and its layout's model (ipywidgets makes one per widget; `Widget.close` leaves it), and let
        go of what checks again (its op): a closed widget gets no more requests, whoever still holds it."""
        layout = self.layout
        super().close()
        layout.close()
        self._recheck = self._fallbacks = None

    def _controls(self, report: Report) -> dict:
        options = report.options
        sweep_range = options.get("sweep_range") or (
            (report.sweep.points[0], report.sweep.points[-1]) if report.sweep is not None else None
        )
        return {
            "inputs": self._inputs,
            "eps": _text(options.get("eps")),
            "rtol": _text(options.get("rtol")),
            "atol": _text(options.get("atol")),
            "sweepFrom": _text(sweep_range[0]) if sweep_range else "",
            "sweepTo": _text(sweep_range[1]) if sweep_range else "",
            "available": self._recheck is not None,
            "reason": "" if self._recheck is not None else self._reason,
        }

    def _on_message(self, _widget, content: dict, _buffers) -> None:
        action = content.get("action") if isinstance(content, dict) else None
        if action == "view":  # a page without gradmagic's extension (VS Code) asks for the view, once
            view = _static("widget.js", UNBUILT_VIEW)
            self.send({"gradmagic": "view", "esm": view, "css": _static("widget.css", "")})
            return
        if action not in ("recheck", "sweep") or self._recheck is None or self.status.get("running"):
            return
        try:
            text, overrides = self._request(action, content)
        except ValueError as error:
            done = "re-checked" if action == "recheck" else "swept"
            self.status = _status(message=f"Not {done}: {error}", error=True)
            return
        started = time.perf_counter()
        self.status = _status(running=True, message="checking…")

        def progress(fraction: float, phase: str) -> None:
            self.status = _status(running=True, fraction=fraction, message=phase)

        try:
            report = self._recheck(text, overrides, progress)
        except Exception as error:  # noqa: BLE001 - shown to the user; the previous report stays
            self.status = _status(message=f"Not re-checked: {error}", error=True)
            return
        if action == "recheck":
            self._inputs = text
        self.show(report)
        if self._fallbacks is not None:  # the output's new data, for the JupyterLab extension to save
            self.send({"gradmagic": "saved", "data": {MIME_TYPE: self.report, **self._fallbacks(report)}})
        took = f"{(time.perf_counter() - started) * 1e3:.0f} ms"
        if action == "sweep" and report.sweep is None:  # checked again, but nothing to draw: say why, never "Swept"
            self.status = _status(message=f"Nothing swept (checked in {took}). {no_sweep_reason(report, live=True)}")
            return
        done = "Re-checked" if action == "recheck" else "Swept"
        self.status = _status(message=f"{done} in {took}.")

    def _request(self, action: str, content: dict) -> tuple[str, dict]:
        """The inputs text and option overrides a request asks for (ValueError naming a bad field)."""
        options = self.shown.options
        keep = {name: options.get(name) for name in ("eps", "rtol", "atol")}
        sweep = _sweep_overrides(self.shown)
        if action == "recheck":
            overrides = {name: _positive(str(content.get(name, "")), label) for name, label in _FIELDS}
            return str(content.get("inputs", "")), {**sweep, **overrides}
        low, high = str(content.get("from", "")).strip(), str(content.get("to", "")).strip()
        sweep = {"sweep": True, "sweep_range": None}
        if low or high:
            start, stop = _float(low, "from"), _float(high, "to")
            if not start < stop:
                raise ValueError(f"the sweep range must go up, not from {start:g} to {stop:g}")
            sweep["sweep_range"] = (start, stop)
        element = content.get("element")
        if isinstance(element, dict) and isinstance(element.get("input"), str):
            sweep["sweep_element"] = (element["input"], tuple(int(i) for i in element.get("index") or ()))
        return self._inputs, {**keep, **sweep}


class WatchWidget(ReportWidget):
    """A watch's report (`WatchReport`) in the same live view (`view` "watch"): its table of ops, each op's report
    under its row drawn as every report is. No controls: a watch is run again, not re-checked (each op's report
    names the op, for `%gradcheck`)."""

    def __init__(self, report):
        reason = "A watch's report: run the watched cell again, or check an op with %gradcheck."
        super().__init__(report, reason=reason, view="watch")

    @staticmethod
    def _data(report) -> dict:
        return watch_data(report)

    def _controls(self, report) -> dict:
        return {
            "inputs": "",
            "eps": "",
            "rtol": "",
            "atol": "",
            "sweepFrom": "",
            "sweepTo": "",
            "available": False,
            "reason": self._reason,
        }


#: The option fields of the controls: (option, what the user sees).
_FIELDS = (("eps", "step"), ("rtol", "rtol"), ("atol", "atol"))


def _sweep_overrides(report: Report) -> dict:
    """What keeps the sweep a re-check shows: the same element over the same range, if there is a sweep."""
    if report.sweep is None:
        return {}
    sweep = report.sweep
    return {
        "sweep": True,
        "sweep_range": report.options.get("sweep_range"),
        "sweep_element": (sweep.input, tuple(sweep.index)),
    }


def _status(running: bool = False, fraction: float = 0.0, message: str = "", error: bool = False) -> dict:
    """The kernel's work as the view shows it; `message` (a failed re-check's error, the user's text) made
    `display_text`: literal, no control characters, cut when long."""
    return {"running": running, "fraction": float(fraction), "message": display_text(message), "error": error}


def _text(value) -> str:
    return "" if value is None else f"{value:.6g}" if isinstance(value, float) else str(value)


def _float(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{what} must be a number, not {text!r}") from None


def _positive(text: str, what: str) -> float | None:
    if not text.strip():
        return None
    value = _float(text.strip(), what)
    if not value > 0:
        raise ValueError(f"{what} must be positive, not {text!r}")
    return value
