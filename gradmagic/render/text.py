"""A Report as plain text, for terminals, `text/plain` and `assert_gradient`."""

from __future__ import annotations

import textwrap

from gradmagic.render import VERDICT_WORDS, backend_rows, framework_label, headline, numerics_summary, surrogate_line, where
from gradmagic.render.graph import graph_summary
from gradmagic.report import Report

WIDTH = 100


def render_text(report: Report) -> str:
    """The whole report: verdict, problems, shapes table and the finite-difference summary."""
    op = report.op
    counts = {
        severity: sum(p.severity == severity for p in report.problems) for severity in ("error", "warning", "info")
    }
    lines = [
        f"{op.name}{op.signature} {headline(report)} "
        f"({counts['error']} error{'s' * (counts['error'] != 1)}, {counts['warning']} warning"
        f"{'s' * (counts['warning'] != 1)}) [{framework_label(op)}, {op.mode}, "
        f"{report.timings.get('total', 0) * 1e3:.0f} ms]"
    ]
    surrogate = surrogate_line(report)
    if surrogate:
        lines += textwrap.wrap(surrogate, WIDTH, initial_indent="  ", subsequent_indent="  ")
    for problem in report.problems:
        place = where(problem.location, op.filename)
        head = f"  {problem.severity:<7} {problem.code}" + (f" ({place})" if place else "")
        lines.append(head)
        for paragraph in problem.message.split("\n"):  # a message's code sample keeps its lines
            lines += textwrap.wrap(paragraph, WIDTH, initial_indent="      ", subsequent_indent="      ") or [""]
    if report.tensors:
        lines.append("  shapes:")
        for row in report.tensors:
            shape = "None" if row.shape is None else f"{row.dtype}{list(row.shape)}"
            expected = (
                ""
                if row.matches or row.expected_shape is None
                else (f"   MISMATCH: expected {row.expected_dtype}{list(row.expected_shape)}")
            )
            lines.append(f"    {row.role:<17} {row.name:<20} {shape}{expected}")
    if report.backends:
        lines.append("  backends:")
        for name, verdict, version, detail, seconds in backend_rows(report):
            lines.append(
                f"    {name:<26} {VERDICT_WORDS[verdict]:<22} {detail}" + (f"  [{seconds}]" if seconds else "")
            )
    lines.append("  " + numerics_summary(report))
    if report.graph is not None:
        lines.append("  " + graph_summary(report.graph))
    return "\n".join(lines)
