"""The precision finite differences run in: float64 where the op accepts it, else the op's own; and the precision
the op really computes in, measured.

Float32 example inputs are cast up when the forward runs on float64 inputs
and keeps their precision throughout (outputs in float64, nothing narrowed
inside: Keras's `ops.sin` on JAX computes float64 in float32). Whether it
does is remembered per op and input layout, so later checks of the same op
ask once.

An op may compute in a narrower float than its inputs and outputs (Keras's
quantised layers cast float64 to float32 inside; a float32 constant mixed in
by hand): its float64 outputs then carry float32 rounding, and float64 steps
would measure that rounding. `effective` measures it: central differences of
u . f along one random direction, at each candidate precision's own step and
at a 64th of it, agree where the op resolves that step (the truncation
error shrinks, rounding grows 64-fold: float32 rounding swamps float64's
smallest step); the finest precision whose steps agree is the op's.
"""

from __future__ import annotations

import dataclasses
import weakref

import numpy as np

from gradmagic.checking.differences import EPSILONS, relative_step
from gradmagic.checking.run import CheckRun, flat_upstream
from gradmagic.frameworks.base import Layout

# Per raw function (dropped with it): input layouts whose float64 version the forward accepts.
_ACCEPTS_FLOAT64: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Per raw function: the precision it computes in (`effective`), by input layout.
_EFFECTIVE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def in_float64(run: CheckRun) -> Layout:
    """The layout with floating inputs cast to float64, if the forward accepts that; else the layout itself."""
    adapter, layout = run.adapter, run.layout
    if all(adapter.meta(leaf).dtype == "float64" for leaf in layout.perturbed):
        return layout
    inputs = list(layout.inputs)
    for k in layout.perturbable:
        inputs[k] = adapter.to_tensors(np.asarray(adapter.to_numpy(inputs[k]), np.float64))
    candidate = dataclasses.replace(layout, inputs=tuple(inputs), structure=adapter.pack(layout.structure, inputs))
    known = _ACCEPTS_FLOAT64.setdefault(run.target.raw, {})
    key = _key(run, layout)
    if key not in known:
        known[key] = _accepts(run, candidate)
    return candidate if known[key] else layout


def refuse_float64(run: CheckRun) -> None:
    """The forward accepted float64 but the rest did not (the gradient function mixes in float32 constants): remember
    to stay in the op's own precision."""
    _ACCEPTS_FLOAT64[run.target.raw][_key(run, run.layout)] = False


def _key(run: CheckRun, layout: Layout) -> tuple:
    return (
        tuple(run.adapter.meta(leaf) for leaf in layout.inputs),
        layout.perturbable,
        tuple(id(v) for v in layout.variables),
        tuple((name, id(value)) for name, value in layout.kwargs.items()),
    )


def _accepts(run: CheckRun, layout: Layout) -> bool:
    """Whether the forward runs on these inputs and keeps their precision, outside and inside."""
    adapter, target = run.adapter, run.target
    try:  # through the adapter, which runs it in the precision of the inputs (JAX: x64 for float64)
        forward = adapter.run_forward(lambda: target.raw(*layout.structure, **layout.kwargs), list(layout.inputs))
        outputs, _ = adapter.flatten(target.outputs_of(forward.result))
    except Exception:  # the forward mixes in float32 constants or variables: stay in its own precision
        return False
    metas = [adapter.meta(output) for output in outputs]
    narrowed_outputs = any(meta is not None and meta.floating and meta.dtype != "float64" for meta in metas)
    return not narrowed_outputs and not forward.narrows_float64


#: The precisions `effective` tells apart, finest first.
LADDER = ("float64", "float32", "bfloat16")
#: Slopes at a step and at a 64th of it agree to this relative difference where the op resolves the step.
AGREEMENT = 1e-2
#: ... or to this many roundings of u . f(z) at the candidate precision, over the smaller step.
ROUNDINGS = 4


def effective(run: CheckRun, layout: Layout) -> str:
    """The float the op computes in at `layout`, measured (see the module's docstring): z's own dtype or coarser.
    Remembered per op and input layout, as whether it accepts float64."""
    known = _EFFECTIVE.setdefault(run.target.raw, {})
    key = _key(run, layout)
    if key not in known:
        known[key] = _measure(run, layout)
    return known[key]


#: What an op of the traced graph must do for the op to compute in another precision than its inputs': TensorFlow,
#: JAX and PyTorch never narrow a float without a cast, and Python code they cannot see may do anything.
NARROWING = ("cast", "python_function")


def _measure(run: CheckRun, layout: Layout) -> str:
    z = run.z(layout)
    declared = str(z.dtype)
    if declared != "float64" or not z.size:  # narrower still inside (mixed precision) is not measured
        return declared
    if run.raw_graph is not None and not any(op.meaning in NARROWING for op in run.raw_graph.ops):
        return declared  # the traced graph computes in its inputs' precision throughout: nothing to measure
    candidates = LADDER
    rng = np.random.default_rng([run.options.seed, 5])
    direction = rng.choice([-1.0, 1.0], z.size) * rng.uniform(0.5, 1.0, z.size) * np.maximum(np.abs(z), 1)
    relative = np.array([factor * relative_step(name, None) for name in candidates for factor in (1.0, 1 / 64)])
    offsets = (relative[:, None] * direction[None]).astype(z.dtype)
    upstream = flat_upstream(run, z.dtype)
    try:
        # Through the compiled function the comparison then uses (traced once for both): full mode takes whole
        # outputs, projection mode contracted ones (in float64 here, so nothing is lost).
        if run.columns.size > run.options.full_threshold:
            plus, minus = run.adapter.evaluate(run.target, layout, offsets, upstream, signs=(1.0, -1.0))
        else:
            values = run.adapter.evaluate(run.target, layout, offsets, signs=(1.0, -1.0))
            plus, minus = values.astype(np.float64) @ upstream.astype(np.float64)
    except Exception:  # the op failing at a perturbed point: the finite differences report it
        return declared
    with np.errstate(all="ignore"):
        slopes = (plus.astype(np.float64) - minus) / (2 * relative)
    # The rounding of u . f(z) at a precision's epsilon, over the small step: what a slope there may be off by.
    outputs = [run.adapter.to_numpy(o) for o, meta in zip(run.trial.outputs, run.trial.output_metas) if meta.floating]
    scale = float(np.abs(upstream.astype(np.float64) * np.concatenate([np.ravel(o) for o in outputs])).sum())
    for k, name in enumerate(candidates):
        step, small = slopes[2 * k], slopes[2 * k + 1]
        allowed = AGREEMENT * max(abs(step), abs(small)) + ROUNDINGS * EPSILONS[name] * scale / relative[2 * k + 1]
        if np.isfinite(step) and np.isfinite(small) and abs(step - small) <= allowed:
            return name
    return declared  # no step resolved smoothly along this direction (a jump): judged element by element
