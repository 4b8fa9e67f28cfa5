"""One check, as the phases see it: the op, its options, what was found, and what the phases computed so far.

`check` makes a `CheckRun` and hands it to each phase in turn; a phase reads
what the earlier ones left (the inputs as tensors, the eager trial, the
layout of z) and adds its own. The Report is made from it at the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable

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


@dataclass
class CheckRun:
    """The state of one check, passed from phase to phase."""

    adapter: Adapter
    target: Target
    options: CheckOptions
    findings: Findings
    progress: Callable[[float, str], None]
    started: float = field(default_factory=time.perf_counter)
    timings: dict[str, float] = field(default_factory=dict)
    inputs: CheckInputs | None = None
    trial: Trial | None = None
    layout: Layout | None = None  # z at the example inputs, in their own precision
    precise: Layout | None = None  # the same in float64 where the op accepts it (finite differences run there)
    columns: Axis | None = None  # names z's elements: the perturbable inputs, then the variables
    rows: Axis | None = None  # names the flat floating outputs
    raw_graph: RawGraph | None = None
    forward_ops: frozenset[str] | None = None  # what the traced forward's ops do (see surrogate.forward_ops)
    graph: Graph | None = None
    numerics: Numerics | None = None  # None until the numbers phase ran (or why it did not is said, `report`)
    #: Why the check stopped before comparing any number though nothing failed (non-finite example inputs): the
    #: reason of its "not checked".
    stopped: str | None = None
    sweep: Sweep | None = None
    #: The float the op computes in where the finite differences run, measured (`precision.effective`) when it is
    #: coarser than z's dtype there; steps and tolerances follow it.
    effective: str | None = None
    own_precision: OwnPrecision | None = None  # taken once, compared with the trial, judged for linearity, reused
    #: Where autodiff in the op's own precision is NaN/Inf and the custom gradient not: (elements, the first), taken
    #: from `own_precision` by projection mode, which then lets it go.
    autodiff_rescued: tuple[int, int] | None = None
    linearity: Linearity | None = None
    #: What the framework raised when autodiff of the forward was taken beside the custom gradient, which alone
    #: worked (see `vjps`); autodiff is left out since.
    autodiff_failure: Exception | None = None
    #: What the gradient function can reach, when it changed some of it: put back again at the end of the check.
    state: StateWatch | None = None
    #: The forward's state and the op's output during the check: put back and named when the report is made.
    effects: OpEffects | None = None
    _z: dict = field(default_factory=dict, repr=False)  # id(layout): (layout, z), see `z`

    @property
    def failed(self) -> bool:
        return self.findings.failed

    @contextlib.contextmanager
    def phase(self, name: str, fraction: float, timing: str | None = None):
        """A phase of the check: progress reported as it starts, its time recorded under `timing`."""
        self.progress(fraction, name)
        mark = time.perf_counter()
        try:
            yield
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
        metas = [self.adapter.meta(leaf) for leaf in layout.perturbed] + [
            self.adapter.meta(v) for v in layout.variables
        ]
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
        if self.stopped is not None:
            return self.stopped
        return "not asked for (numbers=False)" if not self.options.numbers else "not run"

    def report(self) -> Report:
        if self.effects is not None:  # before the findings become the report's problems
            self.effects.settle(self.findings)
        self.timings["total"] = time.perf_counter() - self.started
        adapter, target, options = self.adapter, self.target, self.options
        description = OpDescription(
            target.name,
            str(target.signature) if target.signature else "(...)",
            adapter.name,
            adapter.version,
            target.origin,
            adapter.mode,
            self.findings.source,
            adapter.backend,
        )
        surrogate = self.findings.surrogate or (Surrogate(declared=True) if options.surrogate else None)
        numerics = self.numerics or Numerics(mode="skipped", skipped_because=self._why_no_numbers())
        return Report(
            description,
            tuple(self.findings.problems),
            tuple(self.findings.rows),
            numerics,
            dict(self.timings),
            dataclasses.asdict(options),
            self.graph,
            self.sweep,
            surrogate=surrogate,
        )


def flat_upstream(run: CheckRun, dtype: Any) -> np.ndarray:
    """The trial's upstream gradients of the floating outputs, flattened into one vector of `dtype`."""
    trial = run.trial
    parts = [
        run.adapter.to_numpy(upstream) for upstream, meta in zip(trial.upstreams, trial.output_metas) if meta.floating
    ]
    return aligned_concatenate(parts, dtype)
