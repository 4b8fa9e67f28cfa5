"""The check engine: `check(op, *args)` turns a custom gradient into a `Report`.

Structure checks come first (what the framework accepts silently), then the
op eagerly against its compiled form (`tf.function`, `jax.jit`), then
numbers: finite differences and autodiff. `check` never raises because the user's op is broken: every failure
becomes a problem in the report.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from gradmagic.checking import numeric, portability, projection, surrogate
from gradmagic.checking.graph import build_graph
from gradmagic.checking.structure import CheckInputs, Findings, check_structure, error_text, name_inputs
from gradmagic.checking.sweep import sweep_along
from gradmagic.checking.wording import wording_for
from gradmagic.frameworks import get_adapter
from gradmagic.frameworks.base import Adapter, Layout, Target
from gradmagic.report import Graph, Numerics, OpDescription, Report, Surrogate, Sweep


@dataclass(frozen=True)
class CheckOptions:
    """Options of `check` (and defaults of `%config GradientMagics`)."""

    rtol: float | None = None  # relative tolerance; None: by dtype (float64 1e-5, float32 2e-2)
    atol: float | None = None  # absolute tolerance; None: by dtype (float64 1e-8, float32 1e-3)
    eps: float | None = None  # relative finite-difference step; None: machine epsilon ** (1/3)
    full_threshold: int = 2000  # perturbed elements up to which dense Jacobians are compared
    probes: int = 4  # projection mode: random directions
    seed: int = 0  # random upstream gradients and directions
    float64: bool = True  # run finite differences in float64 when the op accepts it
    tf_function: bool = True  # also take the gradient compiled (tf.function, jax.jit) and compare with eager
    graph: bool = True  # trace the forward and the backward and put the graph in the report
    fold_graph: bool = True  # fold framework plumbing (Identity, NoOp, scalar constants) out of the graph
    order: int = 1  # 2: also check the derivative of the custom gradient (full mode)
    numbers: bool = True  # compare with finite differences and autodiff (False: structure, graph only)
    sweep: bool = True  # full mode: sweep one input element (a scalar input, or an element-wise op)
    sweep_range: tuple[float, float] | None = None  # the swept element's range; None: around the example
    sweep_points: int = 201
    backends: tuple[str, ...] = ()  # Keras ops: also check on these backends ("all" or names), each in a subprocess
    surrogate: bool = False  # the custom gradient is deliberately not the derivative: a mismatch informs, not fails

    def __post_init__(self) -> None:
        object.__setattr__(self, "backends", portability.parse_backends(self.backends))
        if self.order not in (1, 2):
            raise ValueError(f"order must be 1 or 2, not {self.order!r}")
        if self.sweep_range is not None:
            start, stop = (float(v) for v in self.sweep_range)
            if not start < stop:
                raise ValueError(f"sweep_range must be (start, stop) with start < stop, not {self.sweep_range!r}")
            object.__setattr__(self, "sweep_range", (start, stop))
        if self.sweep_points < 2:
            raise ValueError(f"sweep_points must be at least 2, not {self.sweep_points!r}")


def check(
    op: Callable,
    *args: Any,
    kwargs: dict | None = None,
    framework: str = "tensorflow",
    progress: Callable[[float, str], None] | None = None,
    **options: Any,
) -> Report:
    """Check the custom gradient of `op` at the example inputs `args`.

    `op` may be an op made by `%%custom_gradient`, a function decorated with
    `tf.custom_gradient` (or, with `framework="keras"`, `keras.ops.custom_gradient`)
    by hand, or a plain function returning `(outputs, grad_fn)`. With
    `framework="keras"` the op runs on the Keras backend of this process, and
    `backends=[...]` (or `"all"`) also checks it on other backends, each in a
    subprocess (see `gradmagic.checking.portability`). `kwargs` are keyword arguments for the op (they get
    no gradient). `options` are the fields of `CheckOptions`. `progress`, if
    given, is called with the fraction done (0 to 1) and the phase starting.
    """
    adapter = get_adapter(framework)
    target = adapter.resolve(op)
    with adapter.check_scope(target):  # graph mode: the check builds and runs in a graph and session of the op's own
        return _check(adapter, op, target, args, kwargs, progress, options)


def _check(
    adapter: Adapter, op: Callable, target: Target, args: tuple, kwargs: dict | None, progress, options: dict
) -> Report:
    started = time.perf_counter()
    step = progress or (lambda fraction, phase: None)
    step(0.0, "structure")
    settings = CheckOptions(**options)
    source = _source_label(target.filename)
    findings = Findings(target, wording_for(adapter), source)
    timings: dict[str, float] = {}
    description = OpDescription(
        target.name,
        str(target.signature) if target.signature else "(...)",
        adapter.name,
        adapter.version,
        target.origin,
        adapter.mode,
        source,
        adapter.backend,
    )
    numerics = Numerics(mode="skipped", skipped_because="structure errors")
    graph = sweep = None

    inputs = _prepare_inputs(adapter, target, args, dict(kwargs or {}), findings)
    if inputs is not None:
        trial = check_structure(adapter, target, inputs, settings.seed, findings)
        timings["structure"] = time.perf_counter() - started
        if trial is not None and not findings.failed:
            layout = Layout(
                inputs.structure,
                inputs.kwargs,
                tuple(inputs.leaves),
                tuple(k for k, meta in enumerate(inputs.metas) if meta.floating),
                tuple(trial.variables),
            )
            if settings.tf_function:
                step(0.15, adapter.compiled)
                mark = time.perf_counter()
                _compare_eager_and_traced(adapter, target, layout, trial, findings)
                timings["tf_function"] = time.perf_counter() - mark
            if settings.graph and not findings.failed:
                step(0.3, "graph")
                mark = time.perf_counter()
                graph = _gradient_graph(adapter, target, layout, inputs, trial, settings, findings)
                timings["graph"] = time.perf_counter() - mark
            if settings.numbers and not findings.failed:
                step(0.45, "finite differences")
                mark = time.perf_counter()
                try:
                    numerics, sweep = _compare_numbers(
                        adapter, target, layout, inputs, trial, settings, findings, step, surrogate.forward_ops(graph)
                    )
                except Exception as error:  # the op failing at perturbed inputs, or inside a compiled function
                    findings.add(
                        "fd-error",
                        "error",
                        f"Evaluating `{target.name}` for the finite differences (at inputs perturbed by a "
                        f"tiny step, {findings.wording.compiled}) raised {type(error).__name__}: {_cause(error)}",
                    )
                    numerics = Numerics(mode="skipped", skipped_because="the op failed at perturbed inputs")
                timings["numerics"] = time.perf_counter() - mark
    timings["total"] = time.perf_counter() - started
    report = Report(
        description,
        tuple(findings.problems),
        tuple(findings.rows),
        numerics,
        timings,
        dataclasses.asdict(settings),
        graph,
        sweep,
        surrogate=findings.surrogate or (Surrogate(declared=True) if settings.surrogate else None),
    )
    if settings.backends:
        step(0.9, "other backends")
        report = _with_backends(report, op, args, dict(kwargs or {}), adapter, settings)
    step(1.0, "done")
    return report


def _with_backends(report: Report, op, args: tuple, kwargs: dict, adapter: Adapter, settings: CheckOptions) -> Report:
    """The portability check: the same op and inputs on each asked-for Keras backend, in subprocesses."""
    if adapter.backend is None:
        raise ValueError(
            "backends=... checks a keras.ops.custom_gradient op on Keras's backends: pass framework='keras' "
            "(or use %%custom_gradient --keras)"
        )
    started = time.perf_counter()
    results = portability.check_backends(
        op, args, kwargs, settings.backends, dataclasses.asdict(settings), here=(adapter.backend, report)
    )
    others = tuple(result for result in results if result.backend != adapter.backend)
    return dataclasses.replace(
        report,
        problems=report.problems + tuple(portability.summary_problems(others)),
        backends=results,
        timings={**report.timings, "backends": time.perf_counter() - started},
    )


def gradient_graph(
    op: Callable, *args: Any, kwargs: dict | None = None, framework: str = "tensorflow", fold: bool = True
) -> Graph:
    """The forward and the backward of `op` at `args`, as traced: what the report's `graph` holds.

    Raises GradmagicError, with the report's text, when the op is too broken to trace.
    """
    from gradmagic.errors import GradmagicError
    from gradmagic.render.text import render_text

    report = check(
        op, *args, kwargs=kwargs, framework=framework, tf_function=False, numbers=False, sweep=False, fold_graph=fold
    )
    if report.graph is None:
        raise GradmagicError(f"The gradient graph of `{report.op.name}` cannot be traced:\n{render_text(report)}")
    return report.graph


def assert_gradient(op: Callable, *args: Any, **options: Any) -> Report:
    """`check` for test suites: raise AssertionError with the report's text unless it passes."""
    from gradmagic.render.text import render_text

    report = check(op, *args, **options)
    if not report.ok:
        raise AssertionError(render_text(report))
    return report


def _source_label(filename: str | None) -> str | None:
    """IPython's name for a cell of the running shell ("Cell In[3]"), else the file name."""
    ipython = sys.modules.get("IPython")  # never imported here: only used when already running
    shell = ipython.get_ipython() if ipython is not None else None
    compiler = getattr(shell, "compile", None)
    label = compiler.format_code_name(filename) if filename and hasattr(compiler, "format_code_name") else None
    return " ".join(label) if label else filename


def _prepare_inputs(
    adapter: Adapter, target: Target, args: tuple, kwargs: dict, findings: Findings
) -> CheckInputs | None:
    names = name_inputs(adapter, target.signature, args)
    try:
        structure = adapter.to_tensors(args)
    except (TypeError, ValueError) as error:
        findings.add(
            "input-type",
            "error",
            f"An example input cannot become a tensor ({type(error).__name__}: {str(error).splitlines()[0]}). "
            "Give tensors, NumPy arrays or Python numbers.",
        )
        return None
    leaves = adapter.flatten(structure)
    return CheckInputs(structure, kwargs, leaves, names, [adapter.meta(leaf) for leaf in leaves])


def _gradient_graph(
    adapter: Adapter, target: Target, layout: Layout, inputs: CheckInputs, trial, settings, findings: Findings
) -> Graph | None:
    """The forward and backward of the op, traced at the example inputs (see checking/graph.py)."""
    perturbed = [inputs.names[k] for k in layout.perturbable] + trial.variable_names
    arguments = [("input", name) for name in inputs.names] + [("upstream", f"d{name}") for name in trial.output_names]
    try:
        raw = adapter.gradient_graph(target, layout, trial.upstreams, arguments)
    except Exception as error:  # the op traced in a graph: its failures are reported elsewhere; the graph is a view
        findings.add(
            "graph-unavailable",
            "info",
            f"The gradient graph could not be traced: {type(error).__name__}: {_cause(error)}",
        )
        return None
    return build_graph(raw, trial.output_names, [f"d{name}" for name in perturbed], fold=settings.fold_graph)


def _compare_eager_and_traced(adapter: Adapter, target: Target, layout: Layout, trial, findings: Findings) -> None:
    """The decorated op through the framework's gradient machinery, compiled, against the eager trial."""
    compiled, direct = findings.wording.compiled, findings.wording.direct
    try:
        graph_outputs, graph_gradients = adapter.decorated_gradients(target, layout, trial.upstreams)
    except Exception as error:  # TensorFlow's own error about the user's op
        cause = _cause(error)
        advice = findings.wording.traced_advice
        if "keywords arguments only when eager" in cause:
            where = "inside tf.function" if adapter.mode == "eager" else "in graph mode"
            advice = (
                f"tf.custom_gradient refuses keyword arguments {where}: pass them by position, or "
                "make the op with %%custom_gradient, whose op accepts them."
            )
        elif "positional-only arguments" in cause or "forward() got an unexpected keyword argument" in cause:
            # JAX's custom_gradient (a custom_vjp) or Keras's torch.autograd.Function, given a keyword argument
            advice = (
                f"{adapter.decorator} on {findings.wording.framework.removeprefix('Keras on ')} refuses keyword "
                "arguments: pass them by position, bind them with "
                "functools.partial before decorating, or make the op with %%custom_gradient --keras, whose op "
                "accepts them."
            )
        findings.add(
            "graph-mismatch",
            "error",
            f"`{target.name}` works {direct} but taking its gradient {compiled} fails: "
            f"{type(error).__name__}: {cause} {advice}".rstrip(),
        )
        return
    eager_gradients = [trial.gradients[k] for k in layout.perturbable] + list(trial.variable_gradients or [])
    for what, eager, graph in (
        ("output", trial.outputs, graph_outputs),
        ("gradient", eager_gradients, graph_gradients),
    ):
        for position, (value, in_graph) in enumerate(zip(eager, graph)):
            value = np.zeros_like(in_graph) if value is None else adapter.to_numpy(value)
            if not np.allclose(value, in_graph, rtol=1e-5, atol=1e-6, equal_nan=True):
                findings.add(
                    "graph-mismatch",
                    "error",
                    f"`{target.name}` gives a different {what} (#{position}) {direct} and {compiled}: "
                    f"largest difference {np.nanmax(np.abs(value - in_graph)):.3g}. Python-side state or "
                    "randomness in the op behaves differently when traced.",
                )
                return


def _cause(error: Exception) -> str:
    """The sentence that says what went wrong; TensorFlow puts it last, after 'in user code:' and frames."""
    text = error_text(error)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip() and not line.strip().startswith("[[")]
    if ("in user code:" in text or "Graph execution error" in text) and lines:
        return lines[-1]
    return " ".join(lines[:3])


def _compare_numbers(
    adapter: Adapter,
    target: Target,
    layout: Layout,
    inputs: CheckInputs,
    trial,
    settings: CheckOptions,
    findings: Findings,
    step: Callable[[float, str], None],
    forward_ops: frozenset[str] | None,
) -> tuple[Numerics, Sweep | None]:
    """The finite-difference comparison, and the sweep (full mode); `forward_ops` for the surrogate patterns."""
    if not layout.perturbable and not layout.variables:
        return Numerics(mode="skipped", skipped_because="no floating input or variable to perturb"), None
    if not any(meta.floating for meta in trial.output_metas):
        return Numerics(mode="skipped", skipped_because="no floating output"), None
    precise = _in_float64(adapter, target, layout) if settings.float64 else layout
    columns = numeric.Axis(
        tuple(inputs.names[k] for k in layout.perturbable) + tuple(trial.variable_names),
        tuple(tuple(inputs.metas[k].shape) for k in layout.perturbable)
        + tuple(tuple(adapter.meta(v).shape) for v in layout.variables),
    )
    rows = numeric.Axis(
        tuple(name for name, meta in zip(trial.output_names, trial.output_metas) if meta.floating),
        tuple(tuple(meta.shape) for meta in trial.output_metas if meta.floating),
    )
    elements = int(columns.offsets[-1])
    if elements > settings.full_threshold and settings.order == 2:
        findings.add(
            "second-order-skipped",
            "info",
            f"The second-order check runs with dense Jacobians, up to full_threshold = "
            f"{settings.full_threshold} elements; this op has {elements}. Check it at smaller inputs.",
        )

    def compare(precise: Layout) -> Numerics:
        if elements > settings.full_threshold:
            return projection.compare_projected(
                adapter, target, precise, layout, columns, rows, settings, findings, forward_ops
            )
        numerics = numeric.compare_full(
            adapter, target, precise, layout, columns, rows, settings, findings, forward_ops
        )
        if settings.order == 2:
            step(0.7, "second order")
            numeric.compare_second_order(adapter, target, precise, columns, rows, settings, findings)
        return numerics

    try:
        numerics = compare(precise)
    except Exception:
        if precise is layout:
            raise
        # The forward accepted float64 but the gradient function did not (e.g. it mixes in float32 constants):
        # compare in the op's own precision.
        _ACCEPTS_FLOAT64[target.raw][_float64_key(adapter, layout)] = False
        precise = layout
        numerics = compare(precise)
    if numerics.mode == "projection":
        return numerics, None
    sweep = None
    if settings.sweep:
        step(0.85, "sweep")
        try:
            sweep = sweep_along(adapter, target, layout, precise, columns, rows, numerics, findings.problems, settings)
        except Exception as error:  # the op failing away from the example point: the sweep is a view, say why
            findings.add(
                "sweep-unavailable",
                "info",
                f"The sweep could not be computed: {type(error).__name__}: {_cause(error)}",
            )
    return numerics, sweep


def _in_float64(adapter: Adapter, target: Target, layout: Layout) -> Layout:
    """The layout with floating inputs cast to float64, if the forward accepts that; else the layout itself."""
    if all(adapter.meta(layout.inputs[k]).dtype == "float64" for k in layout.perturbable):
        return layout
    inputs = list(layout.inputs)
    for k in layout.perturbable:
        inputs[k] = adapter.cast(inputs[k], "float64")
    candidate = dataclasses.replace(layout, inputs=tuple(inputs), structure=adapter.pack(layout.structure, inputs))
    key = _float64_key(adapter, layout)
    known = _ACCEPTS_FLOAT64.setdefault(target.raw, {})
    if key not in known:
        known[key] = _accepts(adapter, target, candidate)
    return candidate if known[key] else layout


def _float64_key(adapter: Adapter, layout: Layout) -> tuple:
    return (
        tuple(adapter.meta(leaf) for leaf in layout.inputs),
        layout.perturbable,
        tuple(id(v) for v in layout.variables),
        tuple((name, id(value)) for name, value in layout.kwargs.items()),
    )


def _accepts(adapter: Adapter, target: Target, layout: Layout) -> bool:
    """Whether the forward runs on these inputs and keeps their precision, outside and inside."""

    def forward():
        return target.raw(*layout.structure, **layout.kwargs)[0]

    try:  # through the adapter, which runs it in the precision of the inputs (JAX: x64 for float64)
        outputs, _ = adapter.run_recording_variables(forward, exclude=list(layout.inputs))
        if any(
            (meta := adapter.meta(o)) is not None and meta.floating and meta.dtype != "float64"
            for o in adapter.flatten(outputs)
        ):
            return False
        return not adapter.narrows_float64(forward)
    except Exception:  # the forward mixes in float32 constants or variables: stay in its own precision
        return False


# Per raw function (dropped with it): input layouts whose float64 version the forward accepts.
_ACCEPTS_FLOAT64: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
