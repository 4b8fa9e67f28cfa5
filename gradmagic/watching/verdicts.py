"""A watch's verdicts: each op checked by the check engine (`gradmagic.api.check`) at the calls the watch kept, and
the report of reports built from them and from what the watched code itself showed."""

from __future__ import annotations

import functools
import inspect
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

from gradmagic import api
from gradmagic.frameworks.cache import function_of
from gradmagic.frameworks.watching import Instrumentation
from gradmagic.notebook.kernel import source_label, user_namespace
from gradmagic.op import info_of
from gradmagic.report import (
    CheckedCall,
    Location,
    NonFinite,
    Numerics,
    OpDescription,
    Problem,
    Report,
    WatchedOp,
    WatchReport,
    element_label,
)
from gradmagic.watching.recording import NONFINITE_GRADIENT, CallRecorder, KeptCall, OpRecord

_VERDICT_RANK = ("fail", "warn", "surrogate", "pass", "unchecked")


@dataclass(frozen=True)
class Verdicts:
    """How a watch checks its ops when it ends."""

    check: bool  # False: record only, every op "not checked"
    options: dict[str, Any]  # the check's options (CheckOptions fields) for every op
    surrogates: frozenset[str]  # ops whose custom gradient is deliberately not the derivative, by name
    decorate: Callable[[Callable], Callable]  # an op's function as recorded, decorated again to be checked


def watch_report(
    recorder: CallRecorder,
    instrumentation: Instrumentation,
    verdicts: Verdicts,
    timings: dict[str, float],
    error: BaseException | None,
) -> tuple[WatchReport, KeyboardInterrupt | None]:
    """The report of a watch that has ended (with `error`, if the watched code raised). The ops are checked unless
    checking is off or the watch was interrupted; a KeyboardInterrupt during the checks leaves the ops not yet
    checked "not checked", and is returned with the report, to be raised again."""
    started = time.perf_counter()
    skip = None
    if not verdicts.check:
        skip = "not checked: the watch only recorded (check=False)"
    elif isinstance(error, KeyboardInterrupt):
        skip = "not checked: the watch was interrupted"
    watched, interrupted = [], None
    for record in sorted(recorder.ops.values(), key=lambda op: op.first_seen):
        reason = skip or _why_not_checked(record, recorder)
        if interrupted is None and reason is None:
            try:
                watched.append(_checked(record, instrumentation, verdicts))
                continue
            except KeyboardInterrupt as stop:
                interrupted = stop
        watched.append(
            _watched(record, _unchecked(record, reason or "not checked: the checks were interrupted", instrumentation))
        )
    report = WatchReport(
        watched=tuple(watched),
        framework=instrumentation.framework,
        framework_version=instrumentation.version,
        first_nonfinite_gradient=recorder.first_nonfinite("gradient"),
        first_nonfinite_output=recorder.first_nonfinite("output"),
        timings={**timings, "recording": recorder.seconds, "checks": time.perf_counter() - started},
        memory_limit=recorder.memory_limit,
        kept_bytes=recorder.kept_bytes,
        calls_not_kept=recorder.calls_not_kept,
        notes=tuple(instrumentation.notes) + _notes(recorder) + _unmatched(verdicts, recorder),
        error=None if error is None else f"{type(error).__name__}: {error}".rstrip(": "),
    )
    return report, interrupted


def _why_not_checked(record: OpRecord, recorder: CallRecorder) -> str | None:
    if record.kept:
        return None
    if not record.calls:
        return "not checked: no call was recorded (see the watch's findings for why)"
    return (
        f"not checked: no call's inputs could be kept within the watch's memory limit "
        f"({recorder.memory_limit / 2**20:.3g} MiB); raise it with memory_limit"
    )


def _checked(record: OpRecord, instrumentation: Instrumentation, verdicts: Verdicts) -> WatchedOp:
    """The op checked at each kept call; its report the one that shows the most."""
    ops: dict = {}  # the op decorated for each callable, so that its compiled functions are traced once for its checks
    results = []
    for kept in record.kept_calls():
        try:
            report = _check_at(record, kept, verdicts, ops)
        except Exception as error:  # noqa: BLE001 - the call cannot be checked (its arguments, the op); say why
            report = _unchecked(record, f"not checked: {type(error).__name__}: {error}", instrumentation)
        results.append((kept, report))
    chosen, report = min(
        results,
        key=lambda result: (
            _VERDICT_RANK.index(result[1].verdict),
            NONFINITE_GRADIENT not in result[0].reasons,
            result[0].number,
        ),
    )
    checked = tuple(
        CheckedCall(kept.number, tuple(kept.reasons), kept.shapes, result.verdict, tuple(result.codes()))
        for kept, result in results
    )
    return _watched(record, report, checked, chosen.number)


def _check_at(record: OpRecord, kept: KeptCall, verdicts: Verdicts, ops: dict) -> Report:
    """The op checked by the engine at a kept call's inputs, as an op of the notebook when it is one."""
    args, kwargs = kept.arguments
    call, keywords = kept.call, {}
    if isinstance(call, functools.partial):  # an op given keyword arguments inside a graph: check with them
        keywords = dict(call.keywords)
    surrogate = record.site.name in verdicts.surrogates
    given = f"the watched code's call {kept.number} of `{record.site.name}`"
    magic = _magic_op(record)
    if magic is not None:
        info = info_of(magic)
        options = {**verdicts.options, "surrogate": surrogate or info.surrogate}
        return api.check_given(magic, args, {**keywords, **kwargs}, info.framework, None, options, given)
    try:
        op = ops.get(call) or ops.setdefault(call, verdicts.decorate(call))
    except TypeError:  # a callable that cannot be a key: decorated for this check alone
        op = verdicts.decorate(call)
    options = {**verdicts.options, "surrogate": surrogate}
    return api.check_given(op, args, kwargs, options.pop("framework", "tensorflow"), None, options, given)


def _magic_op(record: OpRecord) -> Callable | None:
    """The notebook's op made by `%%custom_gradient` from the recorded function, if it is bound under its name."""
    op = user_namespace().get(record.site.name)
    return op if function_of(op) is record.site.function and info_of(op) else None


def _watched(record: OpRecord, report: Report, checked: tuple = (), checked_call: int | None = None) -> WatchedOp:
    gradient, output = record.first_nonfinite_gradient, record.first_nonfinite_output
    return WatchedOp(
        report=report,
        where=_where(record),
        calls=record.calls,
        compiled_calls=record.compiled_calls,
        gradient_calls=record.gradient_calls,
        inputs=tuple(stats.summary() for stats in record.inputs.values()),
        outputs=tuple(stats.summary() for stats in record.outputs.values()),
        nonfinite_gradient_calls=record.nonfinite_gradient_calls,
        nonfinite_output_calls=record.nonfinite_output_calls,
        first_nonfinite_gradient=gradient.event if gradient else None,
        first_nonfinite_output=output.event if output else None,
        checked=checked,
        checked_call=checked_call,
        findings=_findings(record, checked_call),
    )


def _findings(record: OpRecord, checked_call: int | None) -> tuple[Problem, ...]:
    """What the watched code itself showed of the op: a non-finite gradient or output that started there, calls that
    went unrecorded."""
    findings = []
    name = record.site.name
    location = Location(line=record.site.line, filename=source_label(record.site.filename))
    gradient = record.first_nonfinite_gradient
    if gradient is not None and gradient.event.from_finite:
        event = gradient.event
        checked = "Its check below ran at that call's inputs."
        if checked_call is None:
            checked = "Its inputs were not kept (see the watch's notes)."
        elif checked_call != event.call:
            checked = (
                f"That call's inputs were not kept (see the watch's notes); its check below ran at call "
                f"{checked_call}'s."
            )
        findings.append(
            Problem(
                "watched-nonfinite-gradient",
                "error",
                f"In the watched code the gradient function of `{name}` returned {event.values} for "
                f"{_elements(event)} of d{event.tensor} (first d{element_label(event.tensor, event.index)}) at "
                f"{_call(event)}, from a finite upstream gradient: the non-finite gradient starts here. "
                f"{record.nonfinite_gradient_calls} of its {_counted(record.gradient_calls, 'gradient call')} "
                f"{'was' if record.nonfinite_gradient_calls == 1 else 'were'} non-finite. " + checked,
                location,
            )
        )
    output = record.first_nonfinite_output
    if output is not None and output.event.from_finite:
        event = output.event
        findings.append(
            Problem(
                "watched-nonfinite-output",
                "warning",
                f"In the watched code `{name}` returned {event.values} for {_elements(event)} of {event.tensor} "
                f"(first {element_label(event.tensor, event.index)}) at {_call(event)}, from finite inputs; "
                f"{record.nonfinite_output_calls} of its {_counted(record.calls, 'call')} returned non-finite values.",
                location,
            )
        )
    for reason, count in record.unrecorded.items():
        findings.append(
            Problem(
                "watch-unrecorded",
                "warning",
                f"`{name}` {reason} ({count} time{'s' * (count != 1)}): those calls are neither counted nor checked "
                "here.",
                location,
            )
        )
    return tuple(findings)


def _unchecked(record: OpRecord, reason: str, instrumentation: Instrumentation) -> Report:
    """A "not checked" report of the op, saying why."""
    site = record.site
    try:
        signature = str(inspect.signature(site.function))
    except (TypeError, ValueError):
        signature = "(...)"
    description = OpDescription(
        name=site.name,
        signature=signature,
        framework=instrumentation.framework,
        framework_version=instrumentation.version,
        origin="magic" if _magic_op(record) is not None else "decorated",
        mode="watched",
        filename=source_label(site.filename),
    )
    return Report(op=description, numerics=Numerics(mode="skipped", skipped_because=reason))


def _notes(recorder: CallRecorder) -> tuple[str, ...]:
    notes = []
    count = recorder.calls_not_kept
    if count:
        notes.append(
            f"{count} call{'s' * (count != 1)} worth keeping (first, extreme values, first non-finite) "
            f"{'were' if count != 1 else 'was'} not kept: the inputs kept take at most the memory limit "
            f"({recorder.memory_limit / 2**20:.3g} MiB), or a call's gradient came after its inputs were let go."
        )
    return tuple(notes)


def _unmatched(verdicts: Verdicts, recorder: CallRecorder) -> tuple[str, ...]:
    """A note naming the surrogates declared for ops the watched code never reached (a misspelt name would otherwise
    leave the op it meant judged as an ordinary gradient without a word)."""
    reached = sorted({record.site.name for record in recorder.ops.values()})
    unmatched = sorted(verdicts.surrogates - set(reached))
    if not unmatched:
        return ()
    names = ", ".join(f"`{name}`" for name in unmatched)
    ops = f"the ops it reached are {', '.join(f'`{name}`' for name in reached)}" if reached else "it reached none"
    return (
        f"Declared surrogate{'s' * (len(unmatched) != 1)} {names} (--surrogate, surrogates=) name"
        f"{'s' * (len(unmatched) == 1)} no op the watched code reached ({ops}): an op is named by its function's "
        "name; check the spelling.",
    )


def _where(record: OpRecord) -> str | None:
    """The op's cell ("Cell In[3]") or file (relative to the working directory when inside it), and line."""
    filename = record.site.filename
    if filename is None:
        return None
    label = source_label(filename)
    if label == filename and os.path.isabs(filename):
        relative = os.path.relpath(filename)
        label = filename if relative.startswith("..") else relative
    return f"{label}, line {record.site.line}" if record.site.line else label


def _elements(event: NonFinite) -> str:
    return _counted(event.elements, "element")


def _counted(count: int, word: str) -> str:
    """`1 call`, `2 calls`."""
    return f"{count:,} {word}{'s' * (count != 1)}"


def _call(event: NonFinite) -> str:
    return f"its call {event.call}" if event.call is not None else "a call whose number was not kept"
