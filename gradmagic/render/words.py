"""What every view of a report says, worded once.

`report_words` puts together the words of `gradmagic.render` for one report: the static HTML (`html.py`) is written
with them, and `report_data` hands them to the JupyterLab view and the live widget as the report's `words`, beside its
data (schema 1.8), which those show as they are. A watch's report likewise (`watch_words`, `watch_data`), each op's
report with its own words.
"""

from __future__ import annotations

from typing import Any

from gradmagic.render import (
    VERDICT_WORDS,
    backend_rows,
    checked_line,
    comparison_cells,
    element_name,
    fixes_line,
    headline,
    is_beyond,
    key_figures,
    kinks_line,
    no_graph_reason,
    no_sweep_reason,
    numerics_summary,
    shape_row,
    shown_elements,
    surrogate_line,
    sweep_summary,
    timings_line,
    where,
    worst_title,
)
from gradmagic.render.graph import graph_summary
from gradmagic.render.text import (
    nonfinite_lines,
    raised_line,
    watch_row,
    watch_summary,
    watch_timings,
    watched_op_lines,
)
from gradmagic.report import Report, ReportWords, WatchReport, WatchWords, WorstRow, json_data


def report_words(report: Report) -> ReportWords:
    """Every word the views show of `report` beyond its own strings."""
    graph, sweep = report.graph, report.sweep
    return ReportWords(
        verdict=VERDICT_WORDS[report.verdict],
        headline=headline(report),
        figures=key_figures(report),
        surrogate=surrogate_line(report),
        places=tuple(where(problem.location, report.op.filename) for problem in report.problems),
        numerics=numerics_summary(report),
        kinks=kinks_line(report),
        worst_title=worst_title(report),
        worst=tuple(
            WorstRow((element_name(element), *comparison_cells(element)), is_beyond(element))
            for element in shown_elements(report.numerics)
        ),
        shapes=tuple(shape_row(row) for row in report.tensors),
        backends=tuple(backend_rows(report)),
        sweep=sweep_summary(sweep) if sweep is not None else None,
        no_sweep=no_sweep_reason(report) if sweep is None else None,
        no_sweep_live=no_sweep_reason(report, live=True) if sweep is None else None,
        graph=graph_line(report) if graph is not None else None,
        no_graph=no_graph_reason(report) if graph is None else None,
        timings=timings_line(report),
        checked_at=checked_line(report),
        fixes=fixes_line(report),
    )


def graph_line(report: Report) -> str:
    """The gradient graph's summary, and what its red dashed edges are."""
    return (
        f"{graph_summary(report.graph)} (per call, from the forward until the gradient is taken: the red dashed edges)."
    )


def report_data(report: Report) -> dict[str, Any]:
    """The report's data as the views read it: `report.to_dict()` and its `words`."""
    return {**report.to_dict(), "words": json_data(report_words(report))}


def watch_words(watch: WatchReport) -> WatchWords:
    """Every word the views show of a watch's report beyond its own strings (each op's report has its own)."""
    return WatchWords(
        verdict=VERDICT_WORDS[watch.verdict],
        summary=watch_summary(watch),
        timings=watch_timings(watch),
        lines=tuple(nonfinite_lines(watch)),
        raised=raised_line(watch),
        rows=tuple(watch_row(op) for op in watch.watched),
        calls=tuple(tuple(watched_op_lines(op)[1:]) for op in watch.watched),
        places=tuple(
            tuple(where(finding.location, op.report.op.filename) for finding in op.findings) for op in watch.watched
        ),
    )


def watch_data(watch: WatchReport) -> dict[str, Any]:
    """The watch's report as the views read it: `watch.to_dict()` and its `words`, each op's report with its own."""
    data = watch.to_dict()
    for entry, op in zip(data["watched"], watch.watched):
        entry["report"]["words"] = json_data(report_words(op.report))
    return {**data, "words": json_data(watch_words(watch))}
