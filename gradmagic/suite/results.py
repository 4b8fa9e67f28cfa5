"""What `pytest --gradmagic` makes of its watches' reports: one report for the session (the xdist workers' merged,
a dead worker's ops named), an outcome per op as pytest reports a test's (so that a failing op fails the session,
shows in `-ra` and JUnit XML), the terminal's summary, and the JSON and HTML files of `--gradmagic-report`.

Plain functions of plain data: the plugin (`plugin.py`) calls them from its hooks.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gradmagic.report import (
    WATCH_VERDICT_ORDER,
    CallsByTest,
    CheckBudget,
    Numerics,
    OpDescription,
    Report,
    WatchedOp,
    WatchReport,
)
from gradmagic.suite.settings import Settings

#: How an op's outcome is said, in the order the summary's title counts them.
SHOWN_OUTCOMES = ("failed", "not checked", "xfailed", "xpassed", "passed (warnings)", "passed")
#: Width the terminal summary wraps its notes at.
WIDTH = 116


@dataclass(frozen=True)
class LostWorker:
    """A pytest-xdist worker that died before handing over its watch's report, and what its progress file said."""

    worker: str
    cause: str  # what xdist said of it
    progress: dict[str, Any] | None  # its last progress file ({"phase", "test", "ops": [...]}) or None


@dataclass(frozen=True)
class OpOutcome:
    """An op's outcome as a test's: its node id (`layerkit/ops.py::gradmagic::soft_clip`), its place, how it ended,
    what to show."""

    nodeid: str
    location: tuple[str, int | None, str]
    outcome: Literal["passed", "failed", "skipped"]
    longrepr: Any  # the op's report in text (failed), (path, line, "Skipped: why") (skipped), None (passed)
    wasxfail: str | None  # declared a known failure: its reason (xfailed, or xpassed when it passed)
    op: WatchedOp


def merged(reports: list[WatchReport], lost: list[LostWorker], settings: Settings) -> WatchReport | None:
    """One report of the session: the workers' reports merged (an op reached on several workers is one op, with
    everyone's calls and tests and the worst verdict), the ops a dead worker reached added, not checked."""
    if len(reports) == 1 and not lost:
        return reports[0]
    ops: dict[tuple[str, str | None], list[WatchedOp]] = {}
    for report in reports:
        for op in report.watched:
            ops.setdefault((op.name, op.where), []).append(op)
    for worker in lost:
        for op in _lost_ops(worker):
            ops.setdefault((op.name, op.where), []).append(op)
    if not reports and not ops:
        return None
    first = reports[0] if reports else None
    gradients = [r.first_nonfinite_gradient for r in reports if r.first_nonfinite_gradient is not None]
    outputs = [r.first_nonfinite_output for r in reports if r.first_nonfinite_output is not None]
    timings: dict[str, float] = {}
    for report in reports:
        for name, value in report.timings.items():
            timings[name] = max(timings.get(name, 0.0), value) if name == "watched" else timings.get(name, 0) + value
    budgets = [r.budget for r in reports if r.budget is not None]
    notes = [note for report in reports for note in report.notes]
    if len(reports) > 1:
        notes.append(
            f"{len(reports)} pytest-xdist workers each watched their tests, with a budget and a memory limit of their "
            "own: their reports are merged here (an op reached by several, once, with the worst verdict)."
        )
    notes += [_lost_note(worker) for worker in lost]
    return WatchReport(
        watched=tuple(_merged_op(group) for group in ops.values()),
        framework=first.framework if first else "tensorflow",
        framework_version=first.framework_version if first else "",
        first_nonfinite_gradient=min(gradients, key=lambda e: not e.from_finite) if gradients else None,
        first_nonfinite_output=min(outputs, key=lambda e: not e.from_finite) if outputs else None,
        timings=timings,
        memory_limit=sum(r.memory_limit for r in reports),
        kept_bytes=sum(r.kept_bytes for r in reports),
        calls_not_kept=sum(r.calls_not_kept for r in reports),
        notes=tuple(dict.fromkeys(notes)),
        error=next((r.error for r in reports if r.error), None),
        budget=CheckBudget(*(sum(getattr(b, f) for b in budgets) for f in ("checks", "used", "left_out")))
        if budgets
        else None,
    )


def _merged_op(group: list[WatchedOp]) -> WatchedOp:
    """One op seen by several workers: the report of the worst verdict, the calls and tests of all."""
    if len(group) == 1:
        return group[0]
    worst = min(group, key=lambda op: WATCH_VERDICT_ORDER.index(op.verdict))
    tests: dict[str, int] = {}
    for op in group:
        for each in op.tests:
            tests[each.test] = tests.get(each.test, 0) + each.calls
    summed = {
        name: sum(getattr(op, name) for op in group)
        for name in (
            "calls", "compiled_calls", "gradient_calls", "nonfinite_gradient_calls", "nonfinite_output_calls",
            "traces", "xla_calls", "replayed_calls",
        )
    }  # fmt: skip
    gradient = worst.first_nonfinite_gradient or next(
        (op.first_nonfinite_gradient for op in group if op.first_nonfinite_gradient), None
    )
    return dataclasses.replace(
        worst,
        **summed,
        first_nonfinite_gradient=gradient,
        tests=tuple(CallsByTest(test, calls) for test, calls in tests.items()),
    )


def _lost_ops(worker: LostWorker) -> list[WatchedOp]:
    """The ops a dead worker had reached, each "not checked", saying why."""
    progress = worker.progress or {}
    when = "while its checks ran" if progress.get("phase") == "checks" else "before its checks"
    reason = f"not checked: pytest-xdist worker {worker.worker} died {when} ({worker.cause})"
    ops = []
    for entry in progress.get("ops", []):
        filename = (entry.get("where") or "").rsplit(", line ", 1)[0] or None
        description = OpDescription(
            name=entry["name"],
            signature="(...)",
            framework="tensorflow",
            framework_version="",
            origin="decorated",
            mode="watched",
            filename=filename,
        )
        report = Report(op=description, numerics=Numerics(mode="skipped", skipped_because=reason))
        tests = tuple(CallsByTest(test, calls) for test, calls in entry.get("tests", {}).items())
        ops.append(WatchedOp(report=report, where=entry.get("where"), calls=entry.get("calls", 0), tests=tests))
    return ops


def _lost_note(worker: LostWorker) -> str:
    progress = worker.progress
    if progress is None:
        return (
            f"pytest-xdist worker {worker.worker} died ({worker.cause}) before writing what it reached: the ops only "
            "it reached are missing from this report."
        )
    count = len(progress.get("ops", []))
    running = f", while {progress['test']} ran" if progress.get("test") and progress.get("phase") == "tests" else ""
    return (
        f"pytest-xdist worker {worker.worker} died ({worker.cause}{running}): the {count} op{'s' * (count != 1)} it "
        "had reached are listed, not checked."
    )


def outcomes(report: WatchReport, settings: Settings) -> list[OpOutcome]:
    """Each op's outcome as a test's: failed with its report's text, passed, skipped (not checked, saying why), or
    xfailed / xpassed where it is declared a known failure (an xpass fails under `xfail_strict`)."""
    from gradmagic.render.text import watch_row, watched_op_text

    results = []
    seen: set[str] = set()
    for op in report.watched:
        path, line = _place(op)
        nodeid = f"{path}::gradmagic::{op.name}" if path else f"gradmagic::{op.name}"
        if nodeid in seen:
            nodeid += f"[line {line}]"
        seen.add(nodeid)
        location = (path or "gradmagic", (line - 1) if line else None, f"gradmagic::{op.name}")
        xfail = _xfail_reason(op, settings)
        outcome: Literal["passed", "failed", "skipped"] = "passed"
        longrepr: Any = None
        if op.verdict == "fail":
            headline = f"{op.name} ({op.where or 'defined where unknown'}) fails its gradient check: {watch_row(op)[4]}"
            outcome, longrepr = ("skipped", None) if xfail else ("failed", f"{headline}\n\n{watched_op_text(op)}")
        elif op.verdict == "unchecked":
            why = _unchecked_because(op)
            outcome, longrepr, xfail = "skipped", (path or "gradmagic", line or 0, f"Skipped: {why}"), None
        elif xfail is not None and settings.xfail_strict:
            outcome, longrepr, xfail = "failed", f"[XPASS(strict)] {xfail}: its check passes", None
        results.append(OpOutcome(nodeid, location, outcome, longrepr, xfail, op))
    return results


def _unchecked_because(op: WatchedOp) -> str:
    """Why an op was not checked: for one with no call recorded (a registered gradient taken for an op the watch
    cannot build again, calls that could not be recorded), what the watch found of it, since a pytest line cannot send
    its reader to the report's findings."""
    unrecorded = [finding.message for finding in op.findings if finding.code == "watch-unrecorded"]
    if not op.calls and unrecorded:
        return f"not checked: {unrecorded[0]}"
    return op.report.numerics.skipped_because or "not checked"


def _place(op: WatchedOp) -> tuple[str | None, int | None]:
    """The op's file (as `where` says it) and line."""
    if not op.where:
        return None, None
    path, _, line = op.where.partition(", line ")
    return path, int(line) if line.isdigit() else None


def _names_of(op: WatchedOp) -> list[str]:
    """What a declaration may call the op: its name, and its module and name where its file is under the project."""
    path, _ = _place(op)
    names = [op.name]
    if path and path.endswith(".py") and not path.startswith(("/", "..")):
        names.append(path[:-3].replace("/", ".").replace("\\", ".") + "." + op.name)
    return names


def _xfail_reason(op: WatchedOp, settings: Settings) -> str | None:
    """The reason the op is declared a known failure (by name, or module and name), else None."""
    return next((settings.xfail[name] for name in _names_of(op) if name in settings.xfail), None)


def unmatched_xfail(report: WatchReport | None, settings: Settings) -> list[str]:
    """The known failures declared for ops no test reached (a misspelt name, a test that no longer runs)."""
    reached = {name for op in (report.watched if report else ()) for name in _names_of(op)}
    return sorted(name for name in settings.xfail if name not in reached)


def summary_lines(
    report: WatchReport | None, results: list[OpOutcome], settings: Settings, problems: list[str]
) -> tuple[str, list[str]]:
    """The terminal summary's title and lines: a row per op (where, tests, calls, verdict, first problem), the first
    non-finite gradient, the budget's use, what was declared, and anything that went wrong."""
    from gradmagic.render.text import budget_words, calls_label, counted, format_bytes, nonfinite_lines, watch_row

    lines: list[str] = []
    if report is None or not report.watched:
        title = "gradmagic: no custom-gradient op reached"
        if report is None and not problems:  # no watch started (one starts when a test imports a framework)
            lines.append("No test imported TensorFlow or Keras, so no watch started: nothing was checked.")
        else:
            lines.append("No test reached a custom-gradient op that could be recorded.")
    else:
        shown = [_shown_outcome(result) for result in results]
        counts = {word: shown.count(word) for word in SHOWN_OUTCOMES if word in shown}
        tests = len({each.test for op in report.watched for each in op.tests})
        title = (
            f"gradmagic: {counted(len(report.watched), 'custom-gradient op')} reached by {counted(tests, 'test')}: "
            + ", ".join(f"{count} {word}" for word, count in counts.items())
        )
        rows = [("op", "where", "tests", "calls", "verdict", "first problem")]
        for result in results:
            name, where, _, _, problem = watch_row(result.op)
            shown = _shown_outcome(result)
            rows.append((name, where, str(len(result.op.tests)), calls_label(result.op), shown, problem))
        widths = [max(len(row[column]) for row in rows) for column in range(5)]
        for row in rows:
            lines.append("  ".join([cell.ljust(width) for cell, width in zip(row, widths)] + [row[5]]).rstrip())
        lines.append("")
        lines += [line for line in nonfinite_lines(report) if not line.startswith("worker")]
        for result in results:
            tests_of = ", ".join(each.test for each in result.op.tests[:3])
            more = f" and {len(result.op.tests) - 3} more" if len(result.op.tests) > 3 else ""
            if tests_of:
                lines.append(f"{result.op.name} reached by {tests_of}{more}")
        checks = report.timings.get("checks", 0.0)
        lines.append(
            f"checks: {checks:.1f} s{budget_words(report)}; inputs kept {format_bytes(report.kept_bytes)} of "
            f"{format_bytes(report.memory_limit)}; recording {report.timings.get('recording', 0.0):.2f} s"
        )
    lines.append(settings.described())
    if settings.surrogates:
        lines.append(f"surrogates: {', '.join(sorted(settings.surrogates))}")
    if settings.xfail:
        lines.append(f"xfail: {', '.join(f'{name} ({reason})' for name, reason in settings.xfail.items())}")
    missing = unmatched_xfail(report, settings)
    if missing:
        lines.append(f"xfail declared for ops no test reached: {', '.join(missing)} (check the spelling)")
    for note in (report.notes if report else ()) + tuple(problems):
        lines += textwrap.wrap(note, WIDTH, initial_indent="note: ", subsequent_indent="      ")
    return title, lines


def _shown_outcome(result: OpOutcome) -> str:
    if result.wasxfail is not None:
        return "xfailed" if result.outcome == "skipped" else "xpassed"
    return {"passed": "passed", "failed": "failed", "skipped": "not checked"}[result.outcome] + (
        " (warnings)" if result.outcome == "passed" and result.op.verdict == "warn" else ""
    )


def write(report: WatchReport, path: Path) -> list[Path]:
    """The report as JSON (the watch's schema, with the words every view shows) and as a self-contained HTML page
    (the notebook's static view, offline): PATH.json and PATH.html."""
    from gradmagic.render.html import render_watch_html
    from gradmagic.render.words import watch_data

    base = path.with_suffix("") if path.suffix.lower() in (".json", ".html", ".htm") else path
    json_path, html_path = base.with_name(base.name + ".json"), base.with_name(base.name + ".html")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(watch_data(report), indent=1, allow_nan=False), encoding="utf-8")
    title = f"gradmagic: {report}"
    page = (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{_escaped(title)}</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1"></head>'
        f'<body style="margin: 16px">{render_watch_html(report)}</body></html>\n'
    )
    html_path.write_text(page, encoding="utf-8")
    return [json_path, html_path]


def _escaped(text: str) -> str:
    from html import escape

    return escape(text)
