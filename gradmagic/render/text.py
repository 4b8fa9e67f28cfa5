"""A Report as plain text, for terminals, `text/plain` and `assert_gradient`."""

from __future__ import annotations

import textwrap

from gradmagic.render import (
    VERDICT_WORDS,
    backend_rows,
    checked_line,
    counted,
    framework_label,
    headline,
    numerics_summary,
    seconds,
    surrogate_line,
    where,
)
from gradmagic.render.graph import format_bytes, graph_summary
from gradmagic.report import Report, ValueSummary, WatchedOp, WatchReport

WIDTH = 100
#: Characters of an op's first problem in a watch's table (the whole problem is in the op's report below it).
PROBLEM_WIDTH = 90


def render_text(report: Report) -> str:
    """The whole report: verdict, problems, shapes table and the finite-difference summary."""
    op = report.op
    counts = {
        severity: sum(p.severity == severity for p in report.problems) for severity in ("error", "warning", "info")
    }
    lines = [
        f"{op.name}{op.signature} {headline(report)} "
        f"({counted(counts['error'], 'error')}, {counted(counts['warning'], 'warning')}) "
        f"[{framework_label(op)}, {op.mode}, "
        f"{report.timings.get('total', 0) * 1e3:.0f} ms]"
    ]
    checked = checked_line(report)
    if checked:
        lines += textwrap.wrap(checked, WIDTH, initial_indent="  ", subsequent_indent="  ")
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
        for name, verdict, detail, _versions, took in backend_rows(report):
            lines.append(f"    {name:<26} {verdict:<22} {detail}  [{took}]")
    lines.append("  " + numerics_summary(report))
    if report.graph is not None:
        lines.append("  " + graph_summary(report.graph))
    return "\n".join(lines)


def render_watch_text(report: WatchReport) -> str:
    """A watch's report: the verdict, where the first gradient went non-finite, a table of the ops, then each op:
    what its calls received and did, and its report."""
    lines = [watch_headline(report)]
    lines += [f"  {line}" for line in nonfinite_lines(report)]
    if report.watched:
        rows = [("op", "where", "calls", "verdict", "first problem")] + [watch_row(op) for op in report.watched]
        widths = [max(len(row[column]) for row in rows) for column in range(4)]
        for row in rows:
            cells = [cell.ljust(width) for cell, width in zip(row, widths)] + [row[4]]
            lines.append("  " + "  ".join(cells).rstrip())
    raised = raised_line(report)
    for note in report.notes + ((raised,) if raised else ()):
        lines += textwrap.wrap(note, WIDTH, initial_indent="  note: ", subsequent_indent="        ")
    for op in report.watched:
        lines.append("")
        lines += [f"  {line}" for line in watched_op_text(op).split("\n")]
    return "\n".join(lines)


def watched_op_text(op: WatchedOp) -> str:
    """One op of a watch: what its calls received and did, what the watched code showed of it, and its report."""
    lines = watched_op_lines(op)
    for finding in op.findings:
        lines.append(f"  {finding.severity:<7} {finding.code}")
        lines += textwrap.wrap(finding.message, WIDTH, initial_indent="      ", subsequent_indent="      ")
    lines += [f"  {line}" for line in render_text(op.report).split("\n")]
    return "\n".join(lines)


def raised_line(report: WatchReport) -> str | None:
    """What the watched code raised, in a sentence; None where it raised nothing."""
    return f"The watched code raised {report.error}." if report.error else None


def watch_headline(report: WatchReport) -> str:
    return f"{watch_summary(report)} [{watch_timings(report)}]"


def watch_summary(report: WatchReport) -> str:
    """`watch of 3 custom-gradient ops fails (2 errors, 0 warnings)`."""
    count = len(report.watched)
    errors = sum(problem.severity == "error" for problem in report.problems)
    warnings = sum(problem.severity == "warning" for problem in report.problems)
    return (
        f"watch of {counted(count, 'custom-gradient op')} {VERDICT_WORDS[report.verdict]} "
        f"({counted(errors, 'error')}, {counted(warnings, 'warning')})"
    )


def watch_timings(report: WatchReport) -> str:
    """The framework; the time the watched block took, the watch's own part in it (the compiled code traced for the
    watch, up to the time before the first recorded call; the recording; setting up and putting back), and the
    checks'; the memory the kept inputs took, of the limit."""
    version = report.framework_version  # Keras's names its backend: "keras 3.15.1, jax 0.10.2"
    framework = version if version.startswith(report.framework) else f"{report.framework} {version}"
    return f"{framework}; {watch_time(report)}"


def watch_time(report: WatchReport) -> str:
    """`watched 269 ms, the watch's part in it: up to 231 ms tracing compiled code again for the watch (before the
    first recorded call), recording 1 ms, setting up and putting back 3 ms; checks 1.4 s; inputs kept 2.0 KiB of
    64.0 MiB`."""
    timings = report.timings
    parts = []
    if "before_first_call" in timings:
        parts.append(
            f"up to {seconds(timings['before_first_call'])} tracing compiled code again for the watch (before the "
            "first recorded call)"
        )
    parts.append(f"recording {seconds(timings.get('recording', 0))}")
    if "setup" in timings:
        parts.append(f"setting up and putting back {seconds(timings['setup'])}")
    return (
        f"watched {seconds(timings.get('watched', 0))}, the watch's part in it: {', '.join(parts)}; checks "
        f"{seconds(timings.get('checks', 0))}{budget_words(report)}; inputs kept {format_bytes(report.kept_bytes)} of "
        f"{format_bytes(report.memory_limit)}"
    )


def budget_words(report: WatchReport) -> str:
    """` (12 of at most 100 checks, 3 kept calls left out)`: the checks' budget and its use, where there was one."""
    budget = report.budget
    if budget is None:
        return ""
    left = f", {counted(budget.left_out, 'kept call')} left out" if budget.left_out else ""
    return f" ({budget.used} of at most {counted(budget.checks, 'check')}{left})"


#: Tests named per op in its lines; beyond, how many more.
TESTS_NAMED = 5


def tests_line(op: WatchedOp) -> str | None:
    """`reached by 3 tests: tests/test_a.py::test_one (4 calls), ...`: the tests that called the op (under
    `pytest --gradmagic`); None outside a test suite."""
    if not op.tests:
        return None
    named = ", ".join(f"{each.test} ({counted(each.calls, 'call')})" for each in op.tests[:TESTS_NAMED])
    more = f", and {len(op.tests) - TESTS_NAMED} more" if len(op.tests) > TESTS_NAMED else ""
    return f"reached by {counted(len(op.tests), 'test')}: {named}{more}"


def nonfinite_lines(report: WatchReport) -> list[str]:
    """Where the watched code's first gradient and first output went non-finite, that none did, or that no op was
    called."""
    lines = []
    if report.first_nonfinite_gradient is not None:
        lines.append(f"first non-finite gradient: {report.first_nonfinite_gradient}")
    if report.first_nonfinite_output is not None:
        lines.append(f"first non-finite output: {report.first_nonfinite_output}")
    if not report.watched:
        lines.append(
            "the watched code called no custom-gradient op that could be recorded"
            + (" (the notes say why where they can)" if report.notes else "")
        )
    elif not lines:
        lines.append("no gradient or output went non-finite")
    return lines + worker_lines(report)


def worker_lines(report: WatchReport) -> list[str]:
    """A line per worker of a multi-worker run: its verdict and its ops' calls and verdicts."""
    lines = []
    for worker in report.workers:
        ops = "; ".join(f"{op.name}: {counted(op.calls, 'call')}, {VERDICT_WORDS[op.verdict]}" for op in worker.ops)
        mine = " (this report)" if worker.worker == report.worker else ""
        lines.append(f"{worker.worker}{mine}: {VERDICT_WORDS[worker.verdict]}" + (f" ({ops})" if ops else ""))
    return lines


def watch_row(op: WatchedOp) -> tuple[str, str, str, str, str]:
    """An op's row of the watch's table: name, where, calls, verdict and its first problem (its code and first
    sentence; the whole of it is in the op's own part below the table)."""
    calls = calls_label(op)
    first = op.first_problem
    problem = ""
    if first is not None:
        at = f" (at call {first.call})" if first.call is not None else ""
        sentence = " ".join(first.message.split()).split(". ")[0].rstrip(".")
        problem = f"{first.code}{at}: {_clipped(sentence, PROBLEM_WIDTH)}"
    elif op.verdict == "unchecked":
        problem = op.report.numerics.skipped_because or ""
    return op.name, op.where or "", calls, VERDICT_WORDS[op.verdict], problem


def calls_label(op: WatchedOp) -> str:
    """`4 (4 compiled)`, `3 (3 under XLA, 1 replayed uncompiled)`, `0 (traced 1 time, never ran)`: the watched code's
    calls of the op (those under XLA counted, the watch's replays not), and how they ran."""
    count, ways = _calls(op)
    return f"{count}" + (f" ({ways})" if ways else "")


def _calls(op: WatchedOp) -> tuple[int, str]:
    own = op.calls - op.replayed_calls
    compiled = op.compiled_calls - op.replayed_calls
    ways = [f"{compiled} compiled"] if compiled else []
    ways += [f"{op.xla_calls} under XLA"] if op.xla_calls else []
    ways += [f"{op.replayed_calls} replayed uncompiled"] if op.replayed_calls else []
    ways += [f"on {op.replicas} replicas"] if op.replicas else []
    if not own + op.xla_calls and op.traces:
        ways.append(f"traced {counted(op.traces, 'time')}, never ran")
    return own + op.xla_calls, ", ".join(ways)


def watched_op_lines(op: WatchedOp) -> list[str]:
    """What an op's calls received and did (as traced, where no call ran), and the calls it was checked at."""
    count, ways = _calls(op)
    lines = [
        f"{op.name} ({op.where or 'defined where unknown'}): {counted(count, 'call')}"
        f"{f' ({ways})' if ways else ''}, {counted(op.gradient_calls, 'gradient call')}"
    ]
    for role, summaries in (("input", op.inputs), ("output", op.outputs)):
        lines += [f"  {role:<7}{value_line(summary)}" for summary in summaries]
    if not op.inputs:
        lines += [f"  traced {value_line(summary)}" for summary in op.traced_inputs]
    reached = tests_line(op)
    if reached:
        lines.append(f"  {reached}")
    if op.nonfinite_gradient_calls:
        lines.append(
            f"  gradient non-finite in {op.nonfinite_gradient_calls} of {counted(op.gradient_calls, 'call')}, "
            "first: "
            f"{op.first_nonfinite_gradient}"
        )
    if op.checked:
        lines.append(
            "  checked at "
            + "; ".join(
                f"{f'call {checked.call}' if checked.call else 'made inputs'} ({', '.join(checked.reasons)}"
                f"{f', in {checked.test}' if checked.test else ''}): {VERDICT_WORDS[checked.verdict]}"
                for checked in op.checked
            )
        )
    return lines


def value_line(summary: ValueSummary) -> str:
    """`x  float32 [32, 16]  from -3.1 to 4.2, non-finite in 2 calls`."""
    shapes = ", ".join(str(list(shape)) for shape in summary.shapes)
    extent = "" if summary.minimum is None else f"  from {summary.minimum:.4g} to {summary.maximum:.4g}"
    nonfinite = f", non-finite in {counted(summary.nonfinite_calls, 'call')}" if summary.nonfinite_calls else ""
    return f"{summary.name:<10} {summary.dtype} {shapes}{extent}{nonfinite}"


def _clipped(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
