"""One check, as the phases see it, and the values the phases hand on.

`check` (`engine.py`) makes a `CheckRun`, the context every phase works in: the
op, its options, the channel its findings go to (`Findings`), the op's batched
calls (`evaluate`, `vjps`, ...), and once the structure phase has run, the
`Subject` it found (the inputs as tensors, the eager trial, z's layout and the
axes naming it). What a later phase finds it returns as a value (`Traced`,
`Evidence`, `Numerics`), which `check` hands to the phases that need it.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, cast

import numpy as np

from gradmagic.checking.differences import Axis, aligned_concatenate, coarser, coarsest, working_dtype
from gradmagic.checking.findings import Findings
from gradmagic.checking.linearity import Linearity
from gradmagic.checking.options import CheckOptions
from gradmagic.checking.side_effects import OpEffects, StateWatch
from gradmagic.frameworks.base import Adapter, Directions, Layout, RawGraph, Target, TensorMeta, Vjps
from gradmagic.report import Graph, Numerics, OpDescription, Report, Surrogate, Sweep


class OpFailed(Exception):
    """The op, or its framework running it, raised in one of the adapter's batched calls (`CheckRun.evaluate` and the
    others): a finding about the op, `error` saying what. An exception of any other kind in a phase is gradmagic's
    own, never reported as the op's."""

    def __init__(self, error: Exception):
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


@dataclass
class CheckInputs:
    """The example inputs of one check, as tensors, with a name per leaf."""

    structure: tuple  # positional arguments, leaves converted to tensors
    kwargs: dict
    leaves: list
    names: list[str]
    metas: list[TensorMeta]
    #: The positional arguments given as Python ints or bools, by position, with their names and values: the op's
    #: own eager call gets them as they are (as a plain call passes them), the compiled ones as tensors.
    from_python: dict = field(default_factory=dict)

    @property
    def as_given(self) -> tuple:
        """The positional arguments for a plain eager call: tensors, the Python numbers as given."""
        return tuple(self.from_python[k][1] if k in self.from_python else arg for k, arg in enumerate(self.structure))


@dataclass
class Trial:
    """What one eager run of the forward and the gradient function returned."""

    outputs: list
    output_names: list[str]
    output_metas: list[TensorMeta]
    variables: list
    variable_names: list[str]
    upstreams: list
    gradients: list | None = None  # one per input leaf
    variable_gradients: list | None = None
    #: For a composite: the custom-gradient ops its call reached (their functions' names), when the adapter tells.
    reached: tuple[str, ...] | None = None
    #: How many of the framework's ops the forward ran, where the adapter counts them (`ForwardRun.ops`).
    ops: int | None = None
    #: What the gradient function can reach, when it changed some of it: put back at the end of the check again.
    state: StateWatch | None = None
    #: The op this run checked (a callable that turned out to reach custom-gradient ops: the composite).
    target: Target | None = None
    #: The line of the gradient function's `def` in its file or cell: where a wrong gradient is said to be.
    gradient_line: int | None = None

    def let_go(self, gradients_only: bool = False) -> None:
        """Drop the values (input- and output-sized tensors) once no phase needs them: the gradients after the
        comparison with the compiled run, the outputs and upstreams once projection mode starts. Their shapes and
        dtypes stay in the metas."""
        self.gradients = self.variable_gradients = None
        if not gradients_only:
            self.outputs, self.upstreams = [], []


@dataclass(frozen=True)
class OwnPrecision:
    """The vector-Jacobian products at the example point in the op's own precision: for the trial's upstream (u1),
    through the custom gradient and autodiff, then in full mode every one-hot upstream (the Jacobian); and, custom
    only, for the other linearity probes (`linearity.Probes`)."""

    trial: Vjps
    #: The custom gradient at each row k of the linearity `Probes` (taken in the same call, or when asked for at
    #: millions of elements); None once linearity is judged.
    probes: Callable[[int], np.ndarray] | None

    @property
    def outputs(self) -> np.ndarray:
        return self.trial.outputs[0]

    @property
    def trial_gradient(self) -> np.ndarray:
        return self.trial.custom[0, 0]

    @property
    def jacobian(self) -> Vjps | None:
        """The custom and autodiff Jacobians ([1, M, N]), when they were taken."""
        if self.trial.custom.shape[1] == 1:
            return None
        autodiff = None if self.trial.autodiff is None else self.trial.autodiff[:, 1:]
        return Vjps(self.trial.outputs, self.trial.custom[:, 1:], autodiff)


#: Directions reach the framework as factors (`Directions`) above this many elements; below, building them in NumPy
#: costs less than the few more ops per direction the framework runs (eagerly, on an op's first checks).
FACTORED = 1 << 16


@dataclass(frozen=True)
class Subject:
    """What a check checks, as the structure phase found it: the op (a composite once known as one), its example
    inputs as tensors, the trial run, z's layout at the example inputs (in their own precision), and the axes
    naming z's elements (the perturbable inputs, then the variables) and the flat floating outputs."""

    target: Target
    inputs: CheckInputs
    trial: Trial
    layout: Layout
    columns: Axis
    rows: Axis

    @property
    def compared(self) -> bool:
        """Whether there is a gradient to compare: floating outputs, and floating inputs or variables."""
        return bool(self.rows.size and self.columns.size)


@dataclass(frozen=True)
class CompiledDifference:
    """The largest difference between a direct and a compiled run beyond rounding, in one output or gradient
    (`compiled.measure_compiled`)."""

    what: str  # "output" | "gradient"
    position: int  # which output, or which input's gradient
    element: str  # "output[3]", "dx[0, 1]"
    difference: float
    allowed: float
    precision: str
    #: The allowance is a rounding bound of a 16-bit float (a tensor's largest element), which cancellation inside
    #: the op may exceed: then measured again in a wider float.
    rounding_bound: bool
    wider: str | None = None  # the wider float it was measured again in
    in_wider: float | None = None  # ... and the difference there


@dataclass(frozen=True)
class Traced:
    """The graph phase's result: the forward and backward traced together (None where not traced; without the values
    of its run), what the traced forward's ops do (`surrogate.forward_ops`), the graph drawn for the report, whether
    the trace was put off to the op's next check, and, where tracing is how the framework compiles, its run measured
    against the direct call (`measured`; `compiled`, the difference, None where they agree)."""

    raw: RawGraph | None = None
    forward_ops: frozenset[str] | None = None
    graph: Graph | None = None
    deferred: bool = False
    measured: bool = False
    compiled: CompiledDifference | None = None


@dataclass(frozen=True)
class Evidence:
    """What the phases before the numbers found, which the numbers phase reads: the traced graph, the own-precision
    products where full mode compares them (its Jacobians), the linearity verdict, and, for projection mode, where
    autodiff alone is NaN/Inf in the op's own precision ((elements, the first), `compiled.rescued`)."""

    traced: Traced = Traced()
    own: OwnPrecision | None = None
    linearity: Linearity | None = None
    rescued: tuple[int, int] | None = None


@dataclass
class CheckRun:
    """The context of one check, passed to every phase. Written only here and by `check`: the `subject` once the
    structure phase found it, the op's measured precision (`effective`) once the numbers phase measured it; the
    op's calls keep their own state (`autodiff_failure`, z read once per layout)."""

    adapter: Adapter
    target: Target
    options: CheckOptions
    findings: Findings
    progress: Callable[[float, str], None]
    started: float = field(default_factory=time.perf_counter)
    timings: dict[str, float] = field(default_factory=dict)
    #: The forward's state and the op's output during the check: put back and named when the report is made.
    effects: OpEffects | None = None
    subject: Subject | None = None
    #: The float the op computes in where the finite differences run, measured (`precision.effective`) when it is
    #: coarser than z's dtype there; steps and tolerances follow it.
    effective: str | None = None
    #: What the framework raised when autodiff of the forward was taken beside the custom gradient, which alone
    #: worked (see `vjps`); autodiff is left out since.
    autodiff_failure: Exception | None = None
    _z: dict = field(default_factory=dict, repr=False)  # id(layout): (layout, z), see `z`

    def checks(self, subject: Subject) -> None:
        """From now on the phases check `subject` (its target: a composite once the structure phase knew it)."""
        self.subject, self.target = subject, subject.target

    @property
    def inputs(self) -> CheckInputs:
        return self._subject.inputs

    @property
    def trial(self) -> Trial:
        return self._subject.trial

    @property
    def layout(self) -> Layout:
        return self._subject.layout

    @property
    def columns(self) -> Axis:
        return self._subject.columns

    @property
    def rows(self) -> Axis:
        return self._subject.rows

    @property
    def compared(self) -> bool:
        """Whether there is a gradient to compare (`Subject.compared`)."""
        return self._subject.compared

    @property
    def _subject(self) -> Subject:
        if self.subject is None:
            raise RuntimeError("the structure phase has not found the subject yet")
        return self.subject

    @property
    def failed(self) -> bool:
        return self.findings.failed

    def phase(self, name: str, fraction: float, step: Callable[..., Any], *arguments: Any, timing: str | None = None):
        """`step(self, *arguments)`, a phase of the check: progress reported as it starts, its time recorded under
        `timing`; what it returns."""
        self.progress(fraction, name)
        mark = time.perf_counter()
        try:
            return step(self, *arguments)
        finally:
            if timing is not None:
                self.timings[timing] = self.timings.get(timing, 0.0) + time.perf_counter() - mark

    def z(self, layout: Layout) -> np.ndarray:
        """z as NumPy: the perturbable inputs then the variables, flattened, in float64 if one of them is, else in
        float32 (`differences.working_dtype`: float16 and bfloat16 held exactly). Read once per layout in a check
        (the example point: not to be written)."""
        kept = self._z.get(id(layout))
        if kept is not None and kept[0] is layout:
            return kept[1]
        to_numpy = self.adapter.to_numpy
        parts = [np.ravel(to_numpy(leaf)) for leaf in layout.perturbed] + [
            np.ravel(to_numpy(v)) for v in layout.variables
        ]
        dtype = working_dtype(*[part.dtype for part in parts])
        alone = parts[0] if len(parts) == 1 else None
        if alone is not None and alone.dtype == dtype and alone.flags.c_contiguous and alone.ctypes.data % 64 == 0:
            z = alone  # the input's own memory (read-only where the framework's): no copy of millions of elements
        else:
            z = aligned_concatenate(parts, dtype)
        self._z[id(layout)] = (layout, z)
        return z

    def release_z(self, layout: Layout) -> None:
        """Let go of z at `layout` (read again if asked for): N elements a later phase does not need."""
        self._z.pop(id(layout), None)

    def evaluate(
        self,
        layout: Layout,
        offsets: np.ndarray | Directions,
        upstream: np.ndarray | None = None,
        signs: tuple = (1.0,),
    ) -> np.ndarray:
        """`Adapter.evaluate` of this check's op; what it raises, as `OpFailed`. `Directions` reach an adapter that
        does not take them, or at fewer than `FACTORED` elements, as their dense values (and their product with the
        gradient is taken here)."""
        factored = isinstance(offsets, Directions) and self.adapter.takes_directions and offsets.steps.size > FACTORED
        if not isinstance(offsets, Directions) or factored:
            return self._op_call(self.adapter.evaluate, layout, offsets, upstream, signs)
        dense = offsets.dense()
        values = self._op_call(self.adapter.evaluate, layout, dense, upstream, signs)
        if offsets.gradient is None:
            return values
        return np.concatenate([values, (dense @ offsets.gradient)[None]])

    def vjps(
        self, layout: Layout, points: np.ndarray, upstreams: np.ndarray, autodiff: bool = True, jacobian: bool = False
    ) -> Vjps:
        """`Adapter.vjps` of this check's op; what it raises, as `OpFailed`. Autodiff of the forward is a reference,
        not the op: when the call fails with it and works without it, autodiff is left out (`autodiff_failure`), of
        this call and the later ones (`tf.py_function` has a gradient TensorFlow takes once per run of the forward)."""
        autodiff = autodiff and self.autodiff_failure is None
        try:
            return self._op_call(self.adapter.vjps, layout, points, upstreams, autodiff, jacobian)
        except OpFailed as failed:
            if not autodiff:
                raise
            vjps = self._op_call(self.adapter.vjps, layout, points, upstreams, False, jacobian)
            self.autodiff_failure = failed.error
            return vjps

    def second_order(self, layout: Layout, upstream: np.ndarray) -> np.ndarray:
        """`Adapter.second_order` of this check's op; what it raises, as `OpFailed`."""
        return self._op_call(self.adapter.second_order, layout, upstream)

    def gradient_graph(self, layout: Layout, upstreams: list, arguments: list) -> RawGraph:
        """`Adapter.gradient_graph` of this check's op; what it raises, as `OpFailed`."""
        return self._op_call(self.adapter.gradient_graph, layout, upstreams, arguments)

    def _op_call(self, primitive: Callable, layout: Layout, *arguments: Any) -> Any:
        try:
            return primitive(self.target, layout, *arguments)
        except Exception as error:  # the op failing, in its framework: a finding; gradmagic's own code is not here
            raise OpFailed(error) from error

    def dtypes_and_sizes(self, layout: Layout) -> tuple[list[str], list[int]]:
        """The dtype and size of each part of z (the perturbable inputs, then the variables), a dtype coarsened to
        the op's measured precision (`effective`)."""
        metas = [tensor_meta(self.adapter, value) for value in [*layout.perturbed, *layout.variables]]
        return [coarser(meta.dtype, self.effective) for meta in metas], [meta.size for meta in metas]

    def precision(self, layout: Layout) -> str:
        """The precision the op computes in at `layout`, what its comparisons there are judged in: the coarsest of
        z's parts' dtypes, or the op's coarser measured one (`effective`)."""
        return coarsest(self.dtypes_and_sizes(layout)[0])

    def _why_no_numbers(self) -> str:
        """Why no gradient value was compared, when the numbers phase did not run."""
        errors = [problem.code for problem in self.findings.problems if problem.severity == "error"]
        if errors:
            return f"not run after the error {errors[0]}"
        if self.findings.stopped is not None:
            return self.findings.stopped
        return "not asked for (numbers=False)" if not self.options.numbers else "not run"

    def report(self, traced: Traced | None = None, numerics: Numerics | None = None, sweep: Sweep | None = None):
        """The Report of what the phases found (`traced`'s graph, `numerics`, `sweep`) and the findings; the op's
        effects during the check put back and named first."""
        if self.effects is not None:  # before the findings become the report's problems
            self.effects.settle(self.findings)
        self.timings["total"] = time.perf_counter() - self.started
        adapter, target, options = self.adapter, self.target, self.options
        description = OpDescription(
            target.name,
            str(target.signature) if target.signature else "(...)",
            adapter.name,
            adapter.version,
            # `Adapter.resolve` makes no other origin; frameworks/ spells no Report type (it imports none)
            cast(Literal["magic", "decorated", "plain", "composite"], target.origin),
            adapter.mode,
            self.findings.source,
            adapter.backend,
        )
        surrogate = self.findings.surrogate or (Surrogate(declared=True) if options.surrogate else None)
        numerics = numerics or Numerics(mode="skipped", skipped_because=self._why_no_numbers())
        return Report(
            description,
            tuple(self.findings.problems),
            tuple(self.findings.rows),
            numerics,
            dict(self.timings),
            dataclasses.asdict(options),
            traced.graph if traced is not None else None,
            sweep,
            surrogate=surrogate,
            inputs=tuple(self.findings.inputs),
        )


def tensor_meta(adapter: Adapter, value: Any) -> TensorMeta:
    """`adapter.meta(value)` of a value the check holds as a tensor or variable (an input leaf once converted, a
    variable the forward read); a TypeError, gradmagic's own, for anything else."""
    meta = adapter.meta(value)
    if meta is None:
        raise TypeError(f"a tensor or variable was expected here, not a {type(value).__name__}")
    return meta


def known_shape(meta: TensorMeta) -> tuple[int, ...]:
    """The shape of a tensor the check has run, every dimension known; a ValueError, gradmagic's own, where one is
    not (a graph's tensor whose shape only running the graph tells)."""
    shape = tuple(dim for dim in meta.shape if dim is not None)
    if len(shape) != len(meta.shape):
        raise ValueError(f"the shape {meta.shape} has unknown dimensions where the check needs them known")
    return shape


def flat_upstream(run: CheckRun, dtype: Any) -> np.ndarray:
    """The trial's upstream gradients of the floating outputs, flattened into one vector of `dtype`."""
    trial = run.trial
    parts = [
        run.adapter.to_numpy(upstream) for upstream, meta in zip(trial.upstreams, trial.output_metas) if meta.floating
    ]
    return aligned_concatenate(parts, dtype)
