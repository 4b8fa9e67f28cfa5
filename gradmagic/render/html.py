"""A Report as self-contained, sanitiser-safe HTML: no scripts, images inline, every string from the data escaped.

The sections are separate functions: the widget shows each in its own tab,
`render_html` puts them one after another, in `<details>` blocks that fold
without JavaScript (for GitHub, nbviewer and `nbconvert --to html`).
"""

from __future__ import annotations

import base64
from html import escape

from gradmagic.render import (
    BACKEND_NAMES,
    COLOURS,
    VERDICT_WORDS,
    backend_rows,
    framework_label,
    surrogate_line,
    where,
)
from gradmagic.render.graph import graph_summary
from gradmagic.render.text import (
    nonfinite_lines,
    numerics_summary,
    watch_row,
    watch_summary,
    watch_timings,
    watched_op_lines,
)
from gradmagic.report import Report, WatchedOp, WatchReport, element_label

MUTED = "color: #57606a"
#: Problems whose messages the header shows; the rest are in the problems section.
HEADLINED = 3
TIMED_PHASES = ("structure", "tf_function", "graph", "numerics", "backends")


def render_html(report: Report, images=None) -> str:
    """The whole report; `images` (a `figures.ReportImages`) supplies the PNGs, rendered if not given."""
    from gradmagic.render.figures import images_of

    images = images or images_of(report)
    sections = [
        (f"Problems ({len(report.problems)})", problems_html(report), bool(report.problems)),
        *([(f"Backends ({len(report.backends)})", backends_html(report), True)] if report.backends else []),
        ("Shapes", shapes_html(report), True),
        ("Finite differences", numerics_html(report) + image_html(images.jacobians, "Jacobian heatmaps"), True),
    ]
    if report.sweep is not None:
        sections.append(("Sweep", sweep_html(report) + image_html(images.sweep, "sweep"), True))
    if report.graph is not None:
        graph = graph_html(report) + image_html(images.graph, graph_summary(report.graph))
        sections.append(("Gradient graph", graph, False))
    parts = ['<div class="gradmagic-report" style="font-family: sans-serif; font-size: 13px; line-height: 1.4">']
    parts.append(header_html(report, problems=False))
    for title, body, opened in sections:
        parts.append(
            f'<details{" open" if opened else ""} style="margin: 4px 0"><summary><b>{escape(title)}</b></summary>'
            f"{body}</details>"
        )
    parts.append("</div>")
    return "".join(parts)


def header_html(report: Report, problems: bool = True) -> str:
    """Verdict in words and colour, the op's signature, framework and timings; with `problems`, the first ones."""
    op = report.op
    verdict = report.verdict
    timings = " · ".join(
        f"{phase.replace('_', '.')} {report.timings[phase] * 1e3:.0f} ms"
        for phase in TIMED_PHASES
        if phase in report.timings
    )
    parts = [
        f'<div style="font-size: 14px"><b style="color: {COLOURS[verdict]}">{escape(VERDICT_WORDS[verdict].upper())}'
        f"</b> <code>{escape(op.name + op.signature)}</code></div>",
        f'<div style="{MUTED}; font-size: 12px">{escape(framework_label(op))}, '
        f"{escape(op.mode)}; checked in {report.timings.get('total', 0) * 1e3:.0f} ms"
        + (f" ({escape(timings)})" if timings else "")
        + "</div>",
    ]
    surrogate = surrogate_line(report)
    if surrogate:
        parts.append(f'<div style="font-size: 12px; color: {COLOURS["surrogate"]}">{escape(surrogate)}</div>')
    if report.backends:
        marks = {"pass": "✓", "warn": "✓", "surrogate": "✓", "unchecked": "–", "fail": "✗", "unavailable": "–"}
        parts.append(
            '<div style="font-size: 12px">backends: '
            + " · ".join(
                f'<b style="color: {COLOURS[result.verdict]}">'
                f"{escape(BACKEND_NAMES.get(result.backend, result.backend))} {marks[result.verdict]}</b>"
                for result in report.backends
            )
            + "</div>"
        )
    if problems and report.problems:
        parts.append(_problem_list(report, report.problems[:HEADLINED]))
        if len(report.problems) > HEADLINED:
            parts.append(f'<div style="{MUTED}">… and {len(report.problems) - HEADLINED} more (Problems).</div>')
    return "".join(parts)


def problems_html(report: Report) -> str:
    if not report.problems:
        return f'<div style="{MUTED}">No problem found.</div>'
    return _problem_list(report, report.problems)


def _problem_list(report: Report, problems) -> str:
    items = []
    for problem in problems:
        place = where(problem.location, report.op.filename)
        items.append(
            f'<li><b style="color: {COLOURS[problem.severity]}">{escape(problem.severity)}</b> '
            f"<code>{escape(problem.code)}</code>"
            + (f' <span style="{MUTED}">({escape(place)})</span>' if place else "")
            + f'<br><span style="white-space: pre-wrap">{escape(problem.message)}</span></li>'
        )
    return f'<ul style="margin: 4px 0; padding-left: 20px">{"".join(items)}</ul>'


def backends_html(report: Report) -> str:
    """The portability check: the verdict on each Keras backend, each checked in its own process."""
    rows = []
    for name, verdict, version, detail, seconds in backend_rows(report):
        rows.append(
            f'<tr><td>{escape(name)}</td><td><b style="color: {COLOURS[verdict]}">{escape(VERDICT_WORDS[verdict])}</b>'
            f"</td><td>{escape(detail)}</td><td>{escape(version)}</td><td align=right>{escape(seconds)}</td></tr>"
        )
    note = (
        f'<div style="{MUTED}">The same op and inputs on each Keras backend, each in its own process '
        "(KERAS_BACKEND is fixed when Keras is imported). Each failing backend's first error is in Problems.</div>"
    )
    return note + _table(("backend", "verdict", "problems", "versions", "time"), rows)


def shapes_html(report: Report) -> str:
    """Inputs, outputs, upstream and downstream gradients and variables: shape, dtype, and what was expected."""
    if not report.tensors:
        return f'<div style="{MUTED}">No tensor reached the check.</div>'
    rows = []
    for row in report.tensors:
        shape = "None" if row.shape is None else f"{row.dtype}{list(row.shape)}"
        expected = "" if row.expected_shape is None else f"{row.expected_dtype}{list(row.expected_shape)}"
        mark = "✓" if row.matches else "✗ mismatch"
        style = "" if row.matches else f' style="color: {COLOURS["error"]}; font-weight: bold"'
        rows.append(
            f"<tr{style}><td>{escape(row.role)}</td><td><code>{escape(row.name)}</code></td>"
            f"<td>{escape(shape)}</td><td>{escape(expected)}</td><td>{mark if expected else ''}</td></tr>"
        )
    return _table(("role", "name", "shape", "expected", ""), rows)


def numerics_html(report: Report) -> str:
    """How the comparison ran, the worst elements (full mode) or the located ones (projection mode)."""
    numerics = report.numerics
    parts = [f'<div style="{MUTED}">{escape(numerics_summary(report))}</div>']
    if numerics.mode == "full" and numerics.rtol is not None:
        parts.append(
            f'<div style="{MUTED}">tolerance: rtol {numerics.rtol:.3g}, atol {numerics.atol:.3g}, '
            f"step {numerics.eps:.3g} × max(|x|, 1); error 1.0 is the tolerance</div>"
        )
    kinks = [p for p in report.problems if p.code == "nondifferentiable-point" and p.location is not None]
    if kinks:
        labels = ", ".join(where(p.location) for p in kinks)
        parts.append(
            f"<div>Not differentiable at {escape(labels)}: left out of the comparison (▼ in the heatmaps).</div>"
        )
    if numerics.worst:
        heading = (
            "Worst elements"
            if numerics.mode == "full"
            else "Located elements (custom J<sup>T</sup>u vs finite differences)"
        )
        rows = []
        for element in numerics.worst:
            label = element_label(element.input, element.index)
            if element.output is not None:
                label = f"d {element_label(element.output, element.output_index)} / d {label}"
            bad = element.error is not None and element.error > 1
            style = f' style="color: {COLOURS["error"]}"' if bad else ""
            rows.append(
                f"<tr{style}><td><code>{escape(label)}</code></td>"
                + "".join(
                    f"<td align=right>{_number(value)}</td>"
                    for value in (element.custom, element.numerical, element.autodiff, element.error)
                )
                + "</tr>"
            )
        parts.append(f"<div><b>{heading}</b></div>")
        parts.append(_table(("element", "custom", "finite differences", "autodiff", "error"), rows))
    return "".join(parts)


def sweep_html(report: Report) -> str:
    sweep = report.sweep
    element = element_label(sweep.input, tuple(sweep.index) or None)
    output = element_label(sweep.output, tuple(sweep.output_index) or None)
    kind = "the op is element-wise in it" if sweep.elementwise else "a scalar input"
    return (
        f'<div style="{MUTED}">{escape(output)} and its derivative along {escape(element)} ({kind}) from '
        f"{sweep.points[0]:.4g} to {sweep.points[-1]:.4g}, {len(sweep.points)} points; the other inputs at the "
        "example point.</div>"
    )


def graph_html(report: Report) -> str:
    return (
        f'<div style="{MUTED}">{escape(graph_summary(report.graph))} (per call, from the forward until the '
        "gradient is taken: the red dashed edges).</div>"
    )


def image_html(png: bytes | None, alt: str) -> str:
    """An inline PNG: shown without a kernel, and kept by notebook sanitisers (which drop inline SVG)."""
    if png is None:
        return ""
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{escape(alt)}" style="max-width: 100%" src="data:image/png;base64,{data}">'


def _table(headings, rows) -> str:
    head = "".join(f"<th align=left>{escape(h)}</th>" for h in headings)
    return (
        '<table style="border-collapse: collapse; margin: 4px 0; font-size: 12px">'
        f"<tr>{head}</tr>{''.join(rows)}</table>"
    )


def _number(value: float | None) -> str:
    return "" if value is None else escape(f"{value:.6g}")


def render_watch_html(report: WatchReport) -> str:
    """A watch's report: verdict and timings, where the first gradient went non-finite, and a table of the ops, each
    op's own report (as `render_html` draws every Report) folded under its row in a `<details>` block."""
    verdict = report.verdict
    parts = [
        '<div class="gradmagic-watch" style="font-family: sans-serif; font-size: 13px; line-height: 1.4">',
        f'<div style="font-size: 14px"><b style="color: {COLOURS[verdict]}">{escape(VERDICT_WORDS[verdict].upper())}'
        f"</b> {escape(watch_summary(report))}</div>",
        f'<div style="{MUTED}; font-size: 12px">{escape(watch_timings(report))}</div>',
    ]
    parts += [f"<div>{escape(line)}</div>" for line in nonfinite_lines(report)]
    if report.error:
        parts.append(f'<div style="color: {COLOURS["error"]}">The watched code raised {escape(report.error)}.</div>')
    parts += [f'<div style="{MUTED}">{escape(note)}</div>' for note in report.notes]
    if report.watched:
        head = "".join(
            f'<th align=left style="padding: 2px 8px 2px 0">{escape(h)}</th>'
            for h in ("op", "where", "calls", "verdict", "first problem")
        )
        rows = []
        for op in report.watched:
            name, where, calls, words, problem = watch_row(op)
            rows.append(
                f'<tr style="border-top: 1px solid #d0d7de"><td><code>{escape(name)}</code></td>'
                f"<td>{escape(where)}</td><td>{escape(calls)}</td>"
                f'<td><b style="color: {COLOURS[op.verdict]}">{escape(words)}</b></td>'
                f'<td style="white-space: pre-wrap">{escape(problem)}</td></tr>'
                f'<tr><td colspan=5><details style="margin: 0 0 6px 12px"><summary>report of '
                f"<code>{escape(name)}</code></summary>{_watched_op_html(op)}</details></td></tr>"
            )
        parts.append(
            '<table style="border-collapse: collapse; margin: 4px 0; font-size: 12px">'
            f"<tr>{head}</tr>{''.join(rows)}</table>"
        )
    parts.append("</div>")
    return "".join(parts)


def _watched_op_html(op: WatchedOp) -> str:
    """What an op's calls received and did, the calls it was checked at, what the watched code showed of it, then
    its report."""
    lines = "".join(f"<div>{escape(line)}</div>" for line in watched_op_lines(op)[1:])
    findings = _problem_list(op.report, op.findings) if op.findings else ""
    calls = f'<div style="{MUTED}; font-family: monospace; white-space: pre">{lines}</div>'
    return calls + findings + render_html(op.report)
