"""A Report as self-contained, sanitiser-safe HTML: no scripts, every string from the data escaped."""

from __future__ import annotations

import base64
from html import escape

from gradmagic.render import VERDICT_WORDS, where
from gradmagic.render.graph import graph_png, graph_summary
from gradmagic.render.text import numerics_summary
from gradmagic.report import Report

COLOURS = {
    "pass": "#1a7f37",
    "warn": "#9a6700",
    "fail": "#cf222e",
    "error": "#cf222e",
    "warning": "#9a6700",
    "info": "#0969da",
}


def render_html(report: Report) -> str:
    op = report.op
    verdict = report.verdict
    parts = [
        '<div class="gradmagic-report" style="font-family: sans-serif; font-size: 13px; line-height: 1.4">',
        f'<div><b style="color: {COLOURS[verdict]}">{escape(VERDICT_WORDS[verdict].upper())}</b> '
        f"<code>{escape(op.name + op.signature)}</code> "
        f'<span style="color: #57606a">{escape(op.framework)} {escape(op.framework_version)}, {escape(op.mode)}, '
        f"{report.timings.get('total', 0) * 1e3:.0f} ms</span></div>",
    ]
    if report.problems:
        parts.append('<ul style="margin: 4px 0; padding-left: 20px">')
        for problem in report.problems:
            place = where(problem.location, op.filename)
            parts.append(
                f'<li><b style="color: {COLOURS[problem.severity]}">{escape(problem.severity)}</b> '
                f"<code>{escape(problem.code)}</code>"
                + (f' <span style="color: #57606a">({escape(place)})</span>' if place else "")
                + f"<br>{escape(problem.message)}</li>"
            )
        parts.append("</ul>")
    if report.tensors:
        parts.append(
            '<table style="border-collapse: collapse; margin: 4px 0">'
            "<tr><th align=left>role</th><th align=left>name</th><th align=left>shape</th>"
            "<th align=left>expected</th></tr>"
        )
        for row in report.tensors:
            shape = "None" if row.shape is None else f"{row.dtype}{list(row.shape)}"
            expected = "" if row.expected_shape is None else f"{row.expected_dtype}{list(row.expected_shape)}"
            mark = "" if row.matches else ' style="color: #cf222e; font-weight: bold"'
            parts.append(
                f"<tr{mark}><td>{escape(row.role)}</td><td><code>{escape(row.name)}</code></td>"
                f"<td>{escape(shape)}</td><td>{escape(expected)}</td></tr>"
            )
        parts.append("</table>")
    parts.append(f'<div style="color: #57606a">{escape(numerics_summary(report))}</div>')
    if report.graph is not None:
        # An inline PNG: shown without a kernel, and kept by notebook sanitisers (which drop inline SVG).
        png = base64.b64encode(graph_png(report.graph)).decode("ascii")
        parts.append(
            f'<div style="color: #57606a">{escape(graph_summary(report.graph))}</div>'
            f'<img alt="{escape(graph_summary(report.graph))}" style="max-width: 100%" '
            f'src="data:image/png;base64,{png}">'
        )
    parts.append("</div>")
    return "".join(parts)
