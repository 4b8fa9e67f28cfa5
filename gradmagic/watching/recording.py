"""What a watch keeps of the calls it sees: running summaries of every call, and a few calls per op with their inputs,
within a memory limit.

Kept per op: its first call, the calls with the largest and the smallest input values, the first whose output was
non-finite from finite inputs, the first whose gradient went non-finite from a finite upstream gradient, and the
first calls with other input signatures (shapes and dtypes) or on other objects (an op called from several layers).
Under `pytest --gradmagic` the calls are also told by test: each op counts the calls each test made. A
gradient is recorded after its forward call, so the inputs of the last calls of each op are held (not copied) until
their gradient is seen; only a call that is kept is copied.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from gradmagic.frameworks.watching import BackwardCall, ForwardCall, OpSite, Replica, TracedCall
from gradmagic.report import NonFinite, ValueSummary

FIRST_CALL = "first call"
LARGEST = "largest values"
SMALLEST = "smallest values"
NONFINITE_OUTPUT = "first non-finite output"
NONFINITE_GRADIENT = "first non-finite gradient"
#: Calls per op whose inputs are held until their gradient is seen (enough for an op called from many layers).
HELD_CALLS = 16
#: Forward calls per op whose number is remembered for their gradient.
NUMBERED_CALLS = 256
#: Distinct shapes listed per input or output.
SHAPES_LISTED = 8
#: Calls kept per op for being the first with their input shapes or on their object (a method's).
OTHER_PLACES_KEPT = 3
#: Distinct (input shapes, object) noted per op, to tell a call with others.
PLACES_NOTED = 256
#: Distinct traced signatures (input dtypes and shapes) kept per op, to check an op that was traced and never ran.
TRACED_KEPT = 3


@dataclass
class KeptCall:
    """A call whose inputs are kept (copied), to check the op at them."""

    number: int
    reasons: list[str]
    call: Callable
    arguments: tuple[tuple, dict]
    shapes: tuple[tuple[int, ...], ...]
    nbytes: int
    test: str | None = None  # the test that made the call (`CallRecorder.test`)


@dataclass
class HeldCall:
    """A recent call, its inputs held as the framework handed them, until its gradient is seen."""

    number: int
    call: ForwardCall
    inputs_finite: bool
    nbytes: int
    test: str | None = None


class ValueStats:
    """One input or output of an op over its calls: dtype, shapes, range, calls with non-finite elements."""

    def __init__(self, name: str, dtype: str):
        self.name, self.dtype = name, dtype
        self.shapes: dict[tuple[int, ...], None] = {}
        self.minimum: float | None = None
        self.maximum: float | None = None
        self.nonfinite_calls = 0

    def add(self, array: np.ndarray) -> tuple[bool, float | None, float | None]:
        """Count one call's value; whether it was finite, and its smallest and largest finite element."""
        if len(self.shapes) < SHAPES_LISTED:
            self.shapes.setdefault(tuple(array.shape), None)
        low, high, finite = value_range(array)
        if not finite:
            self.nonfinite_calls += 1
        if low is not None:
            self.minimum = low if self.minimum is None else min(self.minimum, low)
            self.maximum = high if self.maximum is None else max(self.maximum, high)
        return finite, low, high

    def summary(self) -> ValueSummary:
        return ValueSummary(self.name, self.dtype, tuple(self.shapes), self.minimum, self.maximum, self.nonfinite_calls)


def traced_summaries(traced: list[TracedCall]) -> tuple[ValueSummary, ...]:
    """The inputs of an op as its traces saw them: each input's dtype and the shapes it was traced with."""
    summaries: dict[str, ValueSummary] = {}
    for call in traced:
        for name, dtype, shape in zip(call.input_names, call.dtypes, call.shapes):
            seen = summaries.get(name)
            shapes = (seen.shapes if seen else ()) + ((shape,) if not seen or shape not in seen.shapes else ())
            summaries[name] = ValueSummary(name, dtype.name, shapes[:SHAPES_LISTED])
    return tuple(summaries.values())


def value_range(array: np.ndarray) -> tuple[float | None, float | None, bool]:
    """(smallest, largest) finite element of a numeric array (None, None without one) and whether all are finite.

    Two passes where all are finite: NaN and infinities show in the extremes."""
    if array.dtype.kind not in "iuf" or array.size == 0:
        return None, None, True
    low, high = array.min(), array.max()
    if array.dtype.kind != "f" or (np.isfinite(low) and np.isfinite(high)):
        return float(low), float(high), True
    finite = array[np.isfinite(array)]
    return (float(finite.min()), float(finite.max()), False) if finite.size else (None, None, False)


def first_nonfinite(array: np.ndarray) -> tuple[tuple[int, ...], int, str] | None:
    """The first non-finite element's index, how many there are and what they are; None when all are finite."""
    if array.dtype.kind != "f" or value_range(array)[2]:
        return None
    bad = ~np.isfinite(array)
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    nan, infinite = bool(np.isnan(array).any()), bool(np.isinf(array).any())
    return index, int(bad.sum()), "NaN and Inf" if nan and infinite else ("NaN" if nan else "Inf")


@dataclass
class NonFiniteSeen:
    """A non-finite gradient or output, and when (the recorder's sequence number) it was seen."""

    sequence: int
    event: NonFinite


@dataclass
class OpRecord:
    """Everything a watch notes of one op."""

    site: OpSite
    first_seen: int
    calls: int = 0
    compiled_calls: int = 0
    gradient_calls: int = 0
    inputs: dict[str, ValueStats] = field(default_factory=dict)
    outputs: dict[str, ValueStats] = field(default_factory=dict)
    nonfinite_output_calls: int = 0
    nonfinite_gradient_calls: int = 0
    # Of each: the first from finite inputs (upstream gradients), else the first.
    first_nonfinite_output: NonFiniteSeen | None = None
    first_nonfinite_gradient: NonFiniteSeen | None = None
    kept: dict[str, KeptCall] = field(default_factory=dict)
    largest: float | None = None
    smallest: float | None = None
    places: set = field(default_factory=set)  # (input shapes, object) of the calls seen: where the op is called
    held: OrderedDict[int, HeldCall] = field(default_factory=OrderedDict)  # by call id, the last HELD_CALLS
    numbers: OrderedDict[int, int] = field(default_factory=OrderedDict)  # call id to call number, the last ones
    unrecorded: dict[str, int] = field(default_factory=dict)  # why calls went unrecorded: traces (or calls)
    traces: int = 0  # times the op was traced into a graph
    traced: list[TracedCall] = field(default_factory=list)  # the first traces with distinct input dtypes and shapes
    xla_calls: int = 0  # calls that ran inside XLA-compiled code (counted, never handed over)
    replayed_calls: int = 0  # of `calls`, those made by the watch's uncompiled replay of an XLA-compiled step
    #: The first call on each replica of a replicated step, its arguments kept (copied), by replica index: the op is
    #: checked across them, in the replicas' context, once every replica's is here.
    replicas: dict[int, tuple[Callable, tuple[tuple, dict]]] = field(default_factory=dict)
    replica: Replica | None = None  # the first replicated call's replica (its context, how many replicas)
    replica_shapes: tuple | None = None  # the input shapes of the calls in `replicas`
    tests: dict[str, int] = field(default_factory=dict)  # calls by test (`CallRecorder.test`), in order first seen

    def kept_calls(self) -> list[KeptCall]:
        """Each kept call once, in call order."""
        unique = {id(kept): kept for kept in self.kept.values()}
        return sorted(unique.values(), key=lambda kept: kept.number)


class CallRecorder:
    """The recorder a framework's recording calls (`frameworks.watching.Recorder`), for one watch.

    Thread-safe: compiled code may call it from several threads at once. It never raises into the watched code
    (the framework's recording notes an error of it as the op unrecorded).

    Calls of one definition are calls of one op: a function defined in a layer's `call` (a new closure each call)
    is one op, each call checked with its own closure.

    `signatures`: calls kept per op for being the first with their input signature (shapes and dtypes) or, with
    `by_object`, on their object, beyond its first call. `extremes`: also keep the calls with the largest and the
    smallest input values. `test`: the test running now (a pytest node id), whose calls are counted as its own; None
    outside a test suite.
    """

    def __init__(
        self, memory_limit: int, signatures: int = OTHER_PLACES_KEPT, by_object: bool = True, extremes: bool = True
    ):
        self.memory_limit = memory_limit
        self.signatures, self.by_object, self.extremes = signatures, by_object, extremes
        self.test: str | None = None
        #: Called with each op's record when the op is first reached (under the lock: it must not call back).
        self.reached: Callable[[OpRecord], None] | None = None
        self.ops: dict[Any, OpRecord] = {}  # by the op's definition (`_definition`)
        self.kept_bytes = 0
        self.held_bytes = 0
        self.calls_not_kept = 0
        self.seconds = 0.0  # spent recording
        #: When the first call was recorded (time.perf_counter), and whether it ran in compiled code: a graph traced
        #: for the watch was traced before it.
        self.first_call_at: float | None = None
        self.first_call_compiled = False
        self._sequence = 0
        self.lock = threading.Lock()

    def forward(self, site: OpSite, call: ForwardCall) -> int:
        with self.lock:
            started = time.perf_counter()
            if self.first_call_at is None:
                self.first_call_at, self.first_call_compiled = started, bool(call.compiled)
            op = self._op(site)
            op.calls += 1
            op.compiled_calls += call.compiled
            op.replayed_calls += call.replayed
            self._sequence += 1
            call_id = self._sequence
            inputs_finite, low, high = True, None, None
            for name, array in zip(call.input_names, call.inputs):
                finite, smallest, largest = _stats(op.inputs, name, array).add(array)
                inputs_finite &= finite
                if smallest is not None:
                    low = smallest if low is None else min(low, smallest)
                    high = largest if high is None else max(high, largest)
            test = self.test
            if test is not None:
                op.tests[test] = op.tests.get(test, 0) + 1
            held = HeldCall(op.calls, call, inputs_finite, sum(array.nbytes for array in call.inputs), test)
            self._hold(op, call_id, held)
            op.numbers[call_id] = op.calls
            if len(op.numbers) > NUMBERED_CALLS:
                op.numbers.popitem(last=False)
            if op.calls == 1:
                self._keep(op, FIRST_CALL, held)
            self._note_place(op, call, held)
            if self.extremes and high is not None and (op.largest is None or high > op.largest):
                op.largest = high
                self._keep(op, LARGEST, held)
            if self.extremes and low is not None and (op.smallest is None or low < op.smallest):
                op.smallest = low
                self._keep(op, SMALLEST, held)
            self._note_outputs(op, call, held)
            self._note_replica(op, call, held)
            self.seconds += time.perf_counter() - started
        return call_id

    def backward(self, site: OpSite, call_id: int, call: BackwardCall) -> None:
        with self.lock:
            started = time.perf_counter()
            op = self._op(site)
            op.gradient_calls += 1
            self._sequence += 1
            held = op.held.pop(call_id, None)
            if held is not None:
                self.held_bytes -= held.nbytes
            for name, gradient in zip(call.gradient_names, call.gradients):
                found = first_nonfinite(gradient) if gradient is not None else None
                if found is None:
                    continue
                op.nonfinite_gradient_calls += 1
                from_finite = all(value_range(upstream)[2] for upstream in call.upstream)
                event = NonFinite(
                    site.name, op.numbers.get(call_id), "gradient", name, *found, from_finite, _test_of(held, self.test)
                )
                if _first(op.first_nonfinite_gradient, from_finite):
                    op.first_nonfinite_gradient = NonFiniteSeen(self._sequence, event)
                    if from_finite:
                        self._keep(op, NONFINITE_GRADIENT, held)
                break
            self.seconds += time.perf_counter() - started

    def traced(self, site: OpSite, call: TracedCall) -> None:
        with self.lock:
            op = self._op(site)
            op.traces += 1
            signature = (call.dtypes, call.shapes)
            if len(op.traced) < TRACED_KEPT and all((seen.dtypes, seen.shapes) != signature for seen in op.traced):
                op.traced.append(call)

    def ran_in_xla(self, site: OpSite, calls: int) -> None:
        with self.lock:
            self._op(site).xla_calls += calls

    def unrecorded(self, site: OpSite, reason: str) -> None:
        with self.lock:
            op = self._op(site)
            op.unrecorded[reason] = op.unrecorded.get(reason, 0) + 1
            if self.test is not None:  # the test reached it, though no call of it was counted
                op.tests.setdefault(self.test, 0)

    def first_nonfinite(self, kind: str) -> NonFinite | None:
        """The first non-finite gradient (`kind` "gradient") or output ("output") of any op: the first from finite
        inputs (upstream gradients), else the first at all."""
        seen = [getattr(op, f"first_nonfinite_{kind}") for op in self.ops.values()]
        seen = [s for s in seen if s is not None]
        if not seen:
            return None
        return min(seen, key=lambda s: (not s.event.from_finite, s.sequence)).event

    # -- keeping --------------------------------------------------------------------------------------------------

    def _op(self, site: OpSite) -> OpRecord:
        key = _definition(site.function)
        op = self.ops.get(key)
        if op is None:
            op = self.ops[key] = OpRecord(site, self._sequence)
            if self.reached is not None:
                self.reached(op)
        return op

    def _note_place(self, op: OpRecord, call: ForwardCall, held: HeldCall) -> None:
        """Keep the first call with another input signature (shapes, dtypes), or on another object, than the calls
        before it."""
        owner = getattr(call.call, "__self__", None)
        shapes = tuple(array.shape for array in call.inputs)
        dtypes = tuple(array.dtype.str for array in call.inputs)
        place = (shapes, dtypes, id(owner) if self.by_object else None)
        if place in op.places or len(op.places) >= PLACES_NOTED:
            return
        op.places.add(place)
        others = sum(reason.startswith("first call ") for reason in op.kept)
        if op.calls == 1 or others >= self.signatures:
            return
        if any(seen[:2] == place[:2] for seen in op.places if seen != place):
            reason = f"first call on `{getattr(owner, 'name', None) or type(owner).__name__}`"
        elif any(seen[0] == shapes for seen in op.places if seen != place):
            named = ", ".join(array.dtype.name for array in call.inputs)
            reason = f"first call with input dtype{'s' * (len(dtypes) != 1)} {named}"
        else:
            reason = f"first call with input shape{'s' * (len(shapes) != 1)} {', '.join(str(list(s)) for s in shapes)}"
        self._keep(op, reason, held)

    def _note_outputs(self, op: OpRecord, call: ForwardCall, held: HeldCall) -> None:
        counted = False
        for name, array in zip(call.output_names, call.outputs):
            finite = _stats(op.outputs, name, array).add(array)[0]
            if finite or counted:
                continue
            counted = True
            op.nonfinite_output_calls += 1
            event = NonFinite(
                op.site.name, held.number, "output", name, *first_nonfinite(array), held.inputs_finite, held.test
            )
            if _first(op.first_nonfinite_output, held.inputs_finite):
                op.first_nonfinite_output = NonFiniteSeen(self._sequence, event)
                if held.inputs_finite:
                    self._keep(op, NONFINITE_OUTPUT, held)

    def _note_replica(self, op: OpRecord, call: ForwardCall, held: HeldCall) -> None:
        """Keep the first call on each replica of a replicated step (of the first's input shapes), within the memory
        limit, to check the op across the replicas."""
        replica = call.replica
        if replica is None or replica.index in op.replicas:
            return
        shapes = tuple(array.shape for array in call.inputs)
        if op.replica is None:
            op.replica, op.replica_shapes = replica, shapes
        if replica.context is not op.replica.context or shapes != op.replica_shapes:
            return
        if self.kept_bytes + held.nbytes > self.memory_limit:
            self.calls_not_kept += 1
            return
        op.replicas[replica.index] = (call.call, call.arguments([np.array(array, copy=True) for array in call.inputs]))
        self.kept_bytes += held.nbytes

    def _keep(self, op: OpRecord, reason: str, held: HeldCall | None) -> None:
        """Keep `held`'s inputs (copied) for `reason`, in place of the call kept for it before; None: a call whose
        inputs were let go before its gradient came (too many calls since, or the memory limit)."""
        if held is None:
            self.calls_not_kept += 1
            return
        previous = op.kept.pop(reason, None)
        if previous is not None:
            previous.reasons.remove(reason)
            if not previous.reasons:
                self.kept_bytes -= previous.nbytes
        same = next((kept for kept in op.kept.values() if kept.number == held.number), None)
        if same is not None:
            same.reasons.append(reason)
            op.kept[reason] = same
            return
        if self.kept_bytes + held.nbytes > self.memory_limit:
            self.calls_not_kept += 1
            return
        arrays = [np.array(array, copy=True) for array in held.call.inputs]
        shapes = tuple(tuple(array.shape) for array in arrays)
        kept = KeptCall(
            held.number, [reason], held.call.call, held.call.arguments(arrays), shapes, held.nbytes, held.test
        )
        op.kept[reason] = kept
        self.kept_bytes += held.nbytes

    def _hold(self, op: OpRecord, call_id: int, held: HeldCall) -> None:
        """Hold a call's inputs until its gradient comes: the last HELD_CALLS of each op, within the memory limit."""
        op.held[call_id] = held
        self.held_bytes += held.nbytes
        if len(op.held) > HELD_CALLS:
            self.held_bytes -= op.held.popitem(last=False)[1].nbytes
        for other in self.ops.values():
            while self.kept_bytes + self.held_bytes > self.memory_limit and other.held:
                oldest = next(iter(other.held))
                if oldest == call_id:
                    break
                self.held_bytes -= other.held.pop(oldest).nbytes


def _definition(function: Callable) -> Any:
    """What makes calls of functions calls of one op: the function's code (every closure of one `def`), else the
    function itself."""
    return getattr(function, "__code__", None) or function


def _test_of(held: HeldCall | None, test: str | None) -> str | None:
    """The test that made a call: the one its inputs were held with, else the one running now."""
    return held.test if held is not None else test


def _stats(table: dict[str, ValueStats], name: str, array: np.ndarray) -> ValueStats:
    stats = table.get(name)
    if stats is None:
        stats = table[name] = ValueStats(name, str(array.dtype))
    return stats


def _first(current: NonFiniteSeen | None, from_finite: bool) -> bool:
    """Whether a new non-finite event replaces `current` as the op's first: none yet, or the first from finite
    inputs after only non-finite ones."""
    return current is None or (from_finite and not current.event.from_finite)
