"""A watch's verdicts: each op checked by the check engine (`gradmagic.api.check`) at the calls the watch kept, and
the report of reports built from them and from what the watched code itself showed."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from gradmagic import api
from gradmagic.frameworks.cache import function_of
from gradmagic.frameworks.watching import Instrumentation
from gradmagic.notebook.kernel import source_label, user_namespace
from gradmagic.op import info_of
from gradmagic.report import (
    CallsByTest,
    CheckBudget,
    CheckedCall,
    Location,
    NonFinite,
    Numerics,
    OpDescription,
    Problem,
    Report,
    WatchedOp,
    WatchReport,
    WorkerOp,
    WorkerWatch,
    element_label,
)
from gradmagic.watching.recording import NONFINITE_GRADIENT, CallRecorder, KeptCall, OpRecord, traced_summaries

_VERDICT_RANK = ("fail", "warn", "surrogate", "pass", "unchecked")
#: A dimension a trace did not know (a batch's: None) is this long in the inputs an op that never ran is checked at.
UNKNOWN_DIMENSION = 2
#: What the inputs an op that never ran is checked at are, in words.
MADE_INPUTS = f"standard normal values (integers 0), dimensions not known taken as {UNKNOWN_DIMENSION}"


@dataclass(frozen=True)
class Verdicts:
    """How a watch checks its ops when it ends."""

    check: bool  # False: record only, every op "not checked"
    options: dict[str, Any]  # the check's options (CheckOptions fields) for every op
    surrogates: frozenset[str]  # ops whose custom gradient is deliberately not the derivative, by name
    decorate: Callable[[Callable], Callable]  # an op's function as recorded, decorated again to be checked
    #: Where an op's gradient compiled by XLA differs from its uncompiled one at (call, args, kwargs), in words (None:
    #: it does not); None where the framework has no XLA.
    compiled_difference: Callable[[Callable, tuple, dict], str | None] | None = None
    #: Where an op's gradient across the replicas it ran on is off, in words (None: it is not), from (the replicas'
    #: context, the op's function, this worker's replicas' (args, kwargs) by replica index); None where the framework
    #: has no replicas.
    replica_difference: Callable[[Any, Callable, dict], str | None] | None = None
    #: Every worker's text gathered on every worker, from (the workers' context, this worker's text); None where the
    #: framework has no workers.
    gather_workers: Callable[[Any, str], tuple[int, list[tuple[int, str]]]] | None = None
    #: The most checks to run (an op at a kept call is one), None for no bound (`Watch(max_checks=...)`).
    max_checks: int | None = None


def declared(site: Any, names: frozenset[str] | set[str]) -> bool:
    """Whether `names` (surrogates, known failures) name the op: by its function's name (`soft_round`), or by its
    module and name (`layerkit.ops.soft_round`), or its module and qualified name (`layerkit.layers.Norm.call`)."""
    function = site.function
    module = getattr(function, "__module__", None)
    qualified = getattr(function, "__qualname__", site.name)
    return site.name in names or (module is not None and {f"{module}.{site.name}", f"{module}.{qualified}"} & names)


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
    raised = None if error is None else f"{type(error).__name__}: {error}".rstrip(": ")
    records = sorted(recorder.ops.values(), key=lambda op: op.first_seen)
    reasons = {id(record): skip or _why_not_checked(record, recorder) for record in records}
    calls = {id(record): _to_check(record) for record in records if reasons[id(record)] is None}
    checks = allotted([calls[id(record)] for record in records if id(record) in calls], verdicts.max_checks)
    shares = dict(zip(calls, checks))
    for record in records:
        reason = reasons[id(record)]
        if reason is None and not shares[id(record)]:
            reason = (
                f"not checked: the checks' budget (max_checks={verdicts.max_checks}) was spent on the ops reached "
                "before it"
            )
        if interrupted is None and reason is None:
            share = shares[id(record)]
            try:
                watched.append(_checked(record, calls[id(record)][:share], instrumentation, verdicts, raised))
                continue
            except KeyboardInterrupt as stop:
                interrupted = stop
        report = _unchecked(record, reason or "not checked: the checks were interrupted", instrumentation)
        watched.append(_watched(record, report, raised=raised))
    budget = None
    if verdicts.max_checks is not None:
        used = sum(checks)
        budget = CheckBudget(verdicts.max_checks, used, sum(len(each) for each in calls.values()) - used)
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
        error=raised,
        budget=budget,
    )
    if instrumentation.workers and verdicts.gather_workers is not None and error is None and interrupted is None:
        report = _gathered(report, instrumentation.workers[0], verdicts.gather_workers)
    return report, interrupted


def _gathered(
    report: WatchReport, workers: Any, gather: Callable[[Any, str], tuple[int, list[tuple[int, str]]]]
) -> WatchReport:
    """The report with every worker's watch (each worker's gathered on every worker), naming this worker."""
    summary = {
        "verdict": report.verdict,
        "ok": report.ok,
        "ops": [[op.name, op.calls - op.replayed_calls + op.xla_calls, op.verdict] for op in report.watched],
        "problems": [str(problem) for problem in report.problems if problem.severity != "info"],
    }
    try:
        worker, texts = gather(workers, json.dumps(summary))
    except Exception as error:  # noqa: BLE001 - this worker's report stands; say why the others are missing
        note = f"The other workers' watches could not be gathered ({type(error).__name__}: {error})."
        return dataclasses.replace(report, notes=report.notes + (note,))
    gathered = []
    for index, text in texts:
        data = json.loads(text)
        ops = tuple(WorkerOp(name, calls, verdict) for name, calls, verdict in data["ops"])
        gathered.append(
            WorkerWatch(f"worker {index}", data["verdict"], data["ok"], ops, tuple(data["problems"]))
        )
    return dataclasses.replace(report, worker=f"worker {worker}", workers=tuple(gathered))


def _why_not_checked(record: OpRecord, recorder: CallRecorder) -> str | None:
    if record.kept or (record.traced and not record.calls):
        return None
    if not record.calls:
        return "not checked: no call was recorded (see the watch's findings for why)"
    return (
        f"not checked: no call's inputs could be kept within the watch's memory limit "
        f"({recorder.memory_limit / 2**20:.3g} MiB); raise it with memory_limit"
    )


def _to_check(record: OpRecord) -> list[KeptCall]:
    """The calls to check an op at, the most telling first: its kept calls (the first non-finite gradient's first,
    then in call order); an op that never ran, inputs made to its traced shapes."""
    kept = record.kept_calls()
    return sorted(kept, key=lambda call: NONFINITE_GRADIENT not in call.reasons) or _made_calls(record)


def allotted(calls: list[list[KeptCall]], budget: int | None) -> list[int]:
    """How many of each op's calls to check within `budget` checks (None: all): the ops in turn, a call each a round,
    so that every op gets its most telling call checked before any gets a second. The same on any machine."""
    if budget is None:
        return [len(each) for each in calls]
    shares = [0] * len(calls)
    left = budget
    while left > 0 and any(share < len(each) for share, each in zip(shares, calls)):
        for index, each in enumerate(calls):
            if left and shares[index] < len(each):
                shares[index] += 1
                left -= 1
    return shares


def _checked(
    record: OpRecord, calls: list[KeptCall], instrumentation: Instrumentation, verdicts: Verdicts, raised: str | None
) -> WatchedOp:
    """The op checked at `calls` (the kept calls within the budget; an op that never ran: inputs made to its traced
    shapes); its report the one that shows the most."""
    ops: dict = {}  # the op decorated for each callable, so that its compiled functions are traced once for its checks
    results = []
    for kept in calls:
        try:
            report = _check_at(record, kept, verdicts, ops)
        except Exception as error:  # noqa: BLE001 - the call cannot be checked (its arguments, the op); say why
            report = _unchecked(record, f"not checked: {type(error).__name__}: {error}", instrumentation)
        refused = next((p for p in report.problems if p.code == "forward-error"), None)
        if refused is not None and kept.number:  # it ran at these inputs in the watched code: it refuses a rerun
            message = " ".join(refused.message.split()).split(". ")[0].rstrip(".")
            report = _unchecked(
                record,
                f"not checked: called again at its call {kept.number}'s inputs, which it ran at in the watched code: "
                f"{message} (an op with a side effect, state or a resource of its own cannot be run again to be "
                "checked)",
                instrumentation,
            )
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
        CheckedCall(kept.number, tuple(kept.reasons), kept.shapes, result.verdict, tuple(result.codes()), kept.test)
        for kept, result in sorted(results, key=lambda result: result[0].number)
    )
    found = _xla_finding(record, chosen, verdicts) + _replica_finding(record, verdicts, report.verdict)
    return _watched(record, report, checked, chosen.number, raised, found)


def _replica_finding(record: OpRecord, verdicts: Verdicts, alone: str) -> tuple[Problem, ...]:
    """The op checked across the replicas it ran on, in their context (its collectives included), at the first call
    on each: an error where a replica's gradient is off while its check on one replica (`alone`, its verdict) does not
    fail (where it fails, that check names the error). In a multi-worker run every worker runs this check, whatever
    its own verdict, so that each takes part in the same collectives."""
    replica = record.replica
    if replica is None or verdicts.replica_difference is None:
        return ()
    if len(record.replicas) < replica.local:
        message = (
            f"`{record.site.name}` ran on {replica.count} replicas in sync, and the first calls of only "
            f"{len(record.replicas)} of this worker's {replica.local} could be kept (the memory limit): it was not "
            "checked across the replicas."
        )
        return (Problem("watch-replicas", "warning", message, _location(record)),)
    call = next(iter(record.replicas.values()))[0]
    arguments = {index: kept[1] for index, kept in record.replicas.items()}
    try:
        difference = verdicts.replica_difference(replica.context, call, arguments)
    except Exception as error:  # noqa: BLE001 - say why it could not be checked across the replicas
        message = (
            f"`{record.site.name}` ran on {replica.count} replicas in sync, and could not be checked across them "
            f"({type(error).__name__}: {error})."
        )
        return (Problem("watch-replicas", "warning", message, _location(record)),)
    if difference is None or alone == "fail":  # checked all the same: every worker runs the same collectives
        return ()
    message = (
        f"`{record.site.name}` ran on {replica.count} replicas in sync; checked across them, at each one's first "
        f"call, in their context (its collectives included), {difference}: the gradient leaves out what the other "
        "replicas' outputs owe to this replica's inputs, as a gradient that should all_reduce (as the forward does) "
        "and does not. Checked on one replica alone, where a collective changes nothing, it passes."
    )
    return (Problem("watch-replica-gradient", "error", message, _location(record)),)


def _xla_finding(record: OpRecord, kept: KeptCall, verdicts: Verdicts) -> tuple[Problem, ...]:
    """Where an op that ran under XLA has a gradient there that differs from its uncompiled one (the one the check
    judged), at the chosen call's inputs."""
    if not record.xla_calls or verdicts.compiled_difference is None:
        return ()
    args, kwargs = kept.arguments
    try:
        difference = verdicts.compiled_difference(kept.call, args, kwargs)
    except Exception as error:  # noqa: BLE001 - the comparison is extra: say why it could not be made
        message = (
            f"Its gradient under XLA could not be compared with its uncompiled one ({type(error).__name__}: {error})."
        )
        return (Problem("watch-xla-difference", "info", message, _location(record)),)
    if difference is None:
        return ()
    return (
        Problem(
            "watch-xla-difference",
            "warning",
            f"`{record.site.name}` ran under XLA, and there its gradient is not the uncompiled one the check judged: "
            f"at {_inputs_of(kept)}, {difference}. The compiled step trains on gradients other than those checked.",
            _location(record),
        ),
    )


def _inputs_of(kept: KeptCall) -> str:
    return f"call {kept.number}'s inputs" if kept.number else "the inputs made to its traced shapes"


def _location(record: OpRecord) -> Location:
    return Location(line=record.site.line, filename=source_label(record.site.filename))


def _made_calls(record: OpRecord) -> list[KeptCall]:
    """Calls made up for an op that was traced and never ran: one per traced signature, its inputs of the traced
    dtypes and shapes (`MADE_INPUTS`), numbered 0 (no call of the watched code)."""
    generator = np.random.default_rng(0)
    made = []
    for traced in record.traced:
        arrays = [
            _made_array(generator, dtype, tuple(UNKNOWN_DIMENSION if size is None else size for size in shape))
            for dtype, shape in zip(traced.dtypes, traced.shapes)
        ]
        shapes = tuple(tuple(array.shape) for array in arrays)
        reason = "never ran: inputs made to its traced shapes"
        made.append(KeptCall(0, [reason], traced.call, traced.arguments(arrays), shapes, 0))
    return made


def _made_array(generator: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Standard normal values of a floating dtype (bfloat16's too), zeros of an integer or boolean one."""
    if dtype.kind in "iub":
        return np.zeros(shape, dtype)
    return generator.standard_normal(shape).astype(dtype)


def _check_at(record: OpRecord, kept: KeptCall, verdicts: Verdicts, ops: dict) -> Report:
    """The op checked by the engine at a kept call's inputs, as an op of the notebook when it is one."""
    args, kwargs = kept.arguments
    call, keywords = kept.call, {}
    if isinstance(call, functools.partial):  # an op given keyword arguments inside a graph: check with them
        keywords = dict(call.keywords)
    surrogate = bool(declared(record.site, verdicts.surrogates))
    given = f"the watched code's call {kept.number} of `{record.site.name}`"
    magic = _magic_op(record)
    if magic is not None:
        info = info_of(magic)
        options = {**verdicts.options, "surrogate": surrogate or info.surrogate}
        return api.check_given(magic, args, {**keywords, **kwargs}, info.framework, None, options, given)
    if record.site.registered:  # the op built under its registered gradient's override: checked as it is
        op, surrogate = call, surrogate or _declared_by_magic(record)
    else:
        try:
            op = ops.get(call) or ops.setdefault(call, verdicts.decorate(call))
        except TypeError:  # a callable that cannot be a key: decorated for this check alone
            op = verdicts.decorate(call)
    options = {**verdicts.options, "surrogate": surrogate}
    return api.check_given(op, args, kwargs, options.pop("framework", record.site.framework), None, options, given)


def _declared_by_magic(record: OpRecord) -> bool:
    """Whether the `%%register_gradient` cell that registered this gradient (bound under its def's name, the gradient
    function its `function`) declared it a surrogate."""
    bound = user_namespace().get(getattr(record.site.function, "__name__", ""))
    if getattr(bound, "function", None) is not record.site.function:
        return False
    info = info_of(bound)
    return bool(info is not None and info.surrogate)


def _magic_op(record: OpRecord) -> Callable | None:
    """The notebook's op made by `%%custom_gradient` from the recorded function, if it is bound under its name."""
    op = user_namespace().get(record.site.name)
    return op if function_of(op) is record.site.function and info_of(op) else None


def _watched(
    record: OpRecord,
    report: Report,
    checked: tuple = (),
    checked_call: int | None = None,
    raised: str | None = None,
    found: tuple[Problem, ...] = (),
) -> WatchedOp:
    """The op's part of the watch's report; `found`: findings of its checks beyond its report's."""
    gradient, output = record.first_nonfinite_gradient, record.first_nonfinite_output
    return WatchedOp(
        report=report,
        where=op_where(record),
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
        findings=_findings(record, checked_call, raised) + found,
        traces=record.traces,
        traced_inputs=traced_summaries(record.traced),
        xla_calls=record.xla_calls,
        replayed_calls=record.replayed_calls,
        replicas=record.replica.count if record.replica is not None else 0,
        tests=tuple(CallsByTest(test, calls) for test, calls in record.tests.items()),
    )


def _findings(record: OpRecord, checked_call: int | None, raised: str | None) -> tuple[Problem, ...]:
    """What the watched code itself showed of the op: a non-finite gradient or output that started there, calls that
    went unrecorded, calls that never ran or ran only inside XLA."""
    findings = []
    name = record.site.name
    location = _location(record)
    unrun = _unrun(record, raised)
    if unrun is not None:
        findings.append(Problem("watch-traced-only", "info", unrun, location))
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


def _unrun(record: OpRecord, raised: str | None) -> str | None:
    """What to say of an op whose calls the watch saw no value of: traced and never run (the graph failed, or was
    never run), or run only inside XLA; None for an op with recorded calls."""
    if record.calls or not record.traces:
        return None
    traced = ", ".join(
        f"{summary.name} {summary.dtype} {' or '.join(str(list(shape)) for shape in summary.shapes)}".replace(
            "None", "?"
        )
        for summary in traced_summaries(record.traced)
    )
    seen = f"`{record.site.name}` was traced {_counted(record.traces, 'time')} ({traced})"
    if record.xla_calls:
        ran = (
            f" and ran {_counted(record.xla_calls, 'time')} inside XLA-compiled code, whose values never reach "
            "Python, and no step was replayed uncompiled"
        )
    elif record.site.registered and any(traced.xla for traced in record.traced):
        ran = (
            " inside XLA-compiled code, whose values never reach Python (a registered gradient's backward compiled "
            "by XLA is not counted when it runs)"
        )
    elif raised is not None:
        ran = f" but never ran: the watched code raised {raised}"
    else:
        ran = " but never ran"
    return f"{seen}{ran}. It was checked at inputs made to those shapes ({MADE_INPUTS})."


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
        framework=site.framework,
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
    unmatched = sorted(
        name for name in verdicts.surrogates if not any(declared(r.site, {name}) for r in recorder.ops.values())
    )
    if not unmatched:
        return ()
    names = ", ".join(f"`{name}`" for name in unmatched)
    ops = f"the ops it reached are {', '.join(f'`{name}`' for name in reached)}" if reached else "it reached none"
    return (
        f"Declared surrogate{'s' * (len(unmatched) != 1)} {names} (--surrogate, surrogates=) name"
        f"{'s' * (len(unmatched) == 1)} no op the watched code reached ({ops}): an op is named by its function's "
        "name; check the spelling.",
    )


def op_where(record: OpRecord) -> str | None:
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
