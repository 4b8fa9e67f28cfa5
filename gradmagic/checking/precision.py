"""The precision finite differences run in: float64 where the op accepts it (float32 for an op of a 16-bit float
that refuses float64), else the op's own; and the precision the op really computes in, measured.

Example inputs are cast up when the forward runs on the wider inputs and
keeps their precision throughout (outputs in it; for float64, nothing
narrowed inside: Keras's `ops.sin` on JAX computes float64 in float32, its
`ops.matmul` on PyTorch returns float32 for float64). Whether it does is
remembered per op and input layout, so later checks of the same op ask once.

An op may compute in a narrower float than its inputs and outputs (Keras's
quantised layers cast float64 to float32 inside; a float32 constant mixed in
by hand; a float16 compute dtype under a mixed-precision policy): its
outputs then carry the narrower rounding, and steps of the wider precision
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

from gradmagic.checking.differences import EPSILONS, aligned_empty, machine_epsilon, relative_step
from gradmagic.checking.run import CheckRun, OpFailed, flat_upstream, tensor_meta
from gradmagic.frameworks.base import Layout, RawGraph

# Per raw function (dropped with it): whether the forward accepts an input layout cast up to a wider float, by layout:
# None where it does, else why not.
_REFUSES_WIDER: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Per raw function: the precision it computes in (`effective`), by input layout.
_EFFECTIVE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: The floats finite differences may run in, finest first: float32 only for ops of a coarser float.
WIDER = ("float64", "float32")


def finest(run: CheckRun) -> Layout:
    """The layout with floating inputs cast to the finest float the forward accepts and keeps (`WIDER`, finer than
    the op's own precision); else the layout itself."""
    own = run.precision(run.layout)
    known = _REFUSES_WIDER.setdefault(run.target.raw, {})
    for wider in WIDER:
        if machine_epsilon(wider) >= machine_epsilon(own):
            break
        key = (_key(run, run.layout), wider)
        candidate = _cast(run, wider)
        if key not in known:
            known[key] = _refusal(run, candidate, wider)
        if known[key] is None:
            return candidate
    return run.layout


def reason(run: CheckRun, layout: Layout) -> str:
    """Why the finite differences at `layout` run in its precision, in a few words ("`w` is a float32 variable")."""
    dtype = run.precision(layout)
    if run.effective is not None and dtype == run.effective:
        return f"the op computes in {dtype} inside (measured)"
    if layout is not run.layout:
        return f"the inputs cast up to {dtype}, which the op keeps"
    if machine_epsilon(dtype) <= EPSILONS["float64"]:
        return "the inputs' own"
    if not run.options.float64:
        return "float64=False was given"
    dtypes, _ = run.dtypes_and_sizes(layout)
    variables = [name for name, part in list(zip(run.columns.names, dtypes))[len(layout.perturbed) :] if part == dtype]
    if variables:
        named = ", ".join(f"`{name}`" for name in variables)
        return f"{named} {'is a' if len(variables) == 1 else 'are'} {dtype} variable{'s'[: len(variables) - 1]}"
    known = _REFUSES_WIDER.get(run.target.raw, {})
    refusals = [known.get((_key(run, run.layout), wider)) for wider in WIDER]
    return next((refusal for refusal in refusals if refusal), f"the inputs' own (the op keeps {dtype})")


def refuse(run: CheckRun, layout: Layout) -> None:
    """The forward accepted `layout`, cast up, but the rest did not (the gradient function mixes in float32
    constants): remember to stay in the op's own precision."""
    wider = tensor_meta(run.adapter, layout.perturbed[0]).dtype
    _REFUSES_WIDER[run.target.raw][(_key(run, run.layout), wider)] = f"the gradient function refuses {wider} inputs"


def _cast(run: CheckRun, dtype: str) -> Layout:
    """The layout with its floating inputs cast to `dtype`."""
    adapter, layout = run.adapter, run.layout
    inputs = list(layout.inputs)
    for k in layout.perturbable:
        values = adapter.to_numpy(inputs[k])
        cast = aligned_empty(values.shape, dtype)  # a framework may take it without a copy (`Adapter.constant`)
        cast[...] = values
        inputs[k] = adapter.constant(cast, dtype)
    return dataclasses.replace(layout, inputs=tuple(inputs), structure=adapter.pack(layout.structure, inputs))


def _key(run: CheckRun, layout: Layout) -> tuple:
    return (
        tuple(run.adapter.meta(leaf) for leaf in layout.inputs),
        layout.perturbable,
        tuple(id(v) for v in layout.variables),
        tuple((name, id(value)) for name, value in layout.kwargs.items()),
    )


def _refusal(run: CheckRun, layout: Layout, dtype: str) -> str | None:
    """None where the forward runs on these inputs and keeps their precision (outputs in `dtype` and, for float64,
    nothing narrowed inside: elsewhere a narrower float inside is measured, `effective`); else why not."""
    adapter, target = run.adapter, run.target
    try:  # through the adapter, which runs it in the precision of the inputs (JAX: x64 for float64)
        forward = adapter.run_forward(lambda: target.raw(*layout.structure, **layout.kwargs), list(layout.inputs))
        outputs, _ = adapter.flatten(target.outputs_of(forward.result))
    except Exception as error:  # the forward mixes in narrower constants or variables: stay in its own precision
        return f"the forward refuses {dtype} inputs ({type(error).__name__})"
    metas = [adapter.meta(output) for output in outputs]
    narrowed = [meta.dtype for meta in metas if meta is not None and meta.floating and meta.dtype != dtype]
    if narrowed:
        return f"the op returns {narrowed[0]} for {dtype} inputs"
    if dtype == "float64" and forward.narrows_float64:
        return "the op computes float64 inputs in a narrower float inside"
    return None


#: A custom gradient written for an op's own precision may differ from the derivative by this many of its roundings,
#: relative, where the finite differences run in a wider float (`gradient_rounding`).
GRADIENT_ROUNDINGS = 4


def gradient_rounding(run: CheckRun, layout: Layout) -> float:
    """The relative error a custom gradient computed at `layout` may carry by the rounding of the op's own precision:
    none in that precision itself; at a layout gradmagic cast up, a few of its roundings. A 16-bit op's gradient
    function is written with its constants in that float (`ops.cast(0.7978845608, x.dtype)`, `3 * k` computed in
    float16), which PyTorch and JAX mix into float64 inputs as they are: its gradient is then as exact as that
    float, while finite differences in float64 see the derivative to 1e-10. Judged at its own precision, rounding is
    no mismatch, and a wrong factor (1.1 times) far beyond it still is. TensorFlow, which refuses mixed floats, runs
    an op it accepts cast up in the wider float throughout: nothing there."""
    own = run.precision(run.layout)
    if not run.adapter.mixes_floats or layout is run.layout:
        return 0.0
    if machine_epsilon(own) <= machine_epsilon(run.precision(layout)):
        return 0.0
    return GRADIENT_ROUNDINGS * machine_epsilon(own)


#: The precisions `effective` tells apart, finest first.
LADDER = ("float64", "float32", "float16", "bfloat16")
#: Slopes at a step and at a 64th of it agree to this relative difference where the op resolves the step.
AGREEMENT = 1e-2
#: ... or to this many roundings of u . f(z) at the candidate precision, over the smaller step.
ROUNDINGS = 4


def effective(run: CheckRun, layout: Layout, graph: RawGraph | None) -> str:
    """The float the op computes in at `layout`, measured (see the module's docstring): z's own dtype or coarser.
    Remembered per op and input layout, as whether it accepts float64. `graph`: the op's traced graph, at its own
    inputs, where there is one (the floats it computes in)."""
    known = _EFFECTIVE.setdefault(run.target.raw, {})
    key = _key(run, layout)
    if key not in known:
        known[key] = _measure(run, layout, graph)
    return known[key]


def _narrower(run: CheckRun, layout: Layout, graph: RawGraph | None) -> list[str]:
    """The precisions the op may compute in besides `layout`'s, finest first: none where its traced graph (at the
    op's own inputs) has no cast (TensorFlow, JAX and PyTorch never narrow a float without one), else the floats that
    graph computes in; any where it calls into Python, which they cannot see, or was not traced. An op of a 16-bit
    float cast up to a wider one may cast back to its own (`ops.cast(x, "float16")`, a cast its own inputs make
    vanish from the graph): its own precision is always a candidate there."""
    if graph is None or any(op.meaning in ("python_function", "eager_python_function") for op in graph.ops):
        return list(LADDER)
    own = run.precision(run.layout)
    floats = set(traced_floats(graph))
    if layout is not run.layout and machine_epsilon(own) > EPSILONS["float32"]:
        floats.add(own)
    elif not any(op.meaning == "cast" for op in graph.ops):
        return []
    return [name for name in LADDER if name in floats]


def traced_floats(graph: RawGraph | None) -> list[str]:
    """The floats the op's traced graph (at its own inputs) computes in, finest first; [] without a graph."""
    floats = {dtype for op in graph.ops for _, dtype in op.outputs} if graph is not None else set()
    return [name for name in LADDER if name in floats]


def _measure(run: CheckRun, layout: Layout, graph: RawGraph | None) -> str:
    z = run.z(layout)
    declared = run.precision(layout)
    coarser = [name for name in _narrower(run, layout, graph) if machine_epsilon(name) > machine_epsilon(declared)]
    candidates = [declared] + coarser
    if len(candidates) < 2 or not z.size:  # nothing coarser to tell apart
        return declared
    rng = np.random.default_rng([run.options.seed, 5])
    direction = rng.choice([-1.0, 1.0], z.size) * rng.uniform(0.5, 1.0, z.size) * np.maximum(np.abs(z), 1)
    relative = np.array([factor * relative_step(name, None) for name in candidates for factor in (1.0, 1 / 64)])
    offsets = (relative[:, None] * direction[None]).astype(z.dtype)
    upstream = flat_upstream(run, z.dtype)
    try:
        # Through the compiled function the comparison then uses (traced once for both): full mode takes whole
        # outputs, projection mode contracted ones (in float64 here, so nothing is lost).
        if run.columns.size > run.options.full_threshold:
            plus, minus = run.evaluate(layout, offsets, upstream, signs=(1.0, -1.0))
        else:
            values = run.evaluate(layout, offsets, signs=(1.0, -1.0))
            plus, minus = values.astype(np.float64) @ upstream.astype(np.float64)
    except OpFailed:  # the op failing at a perturbed point: the finite differences report it
        return declared
    with np.errstate(all="ignore"):
        slopes = (plus.astype(np.float64) - minus) / (2 * relative)
    # The rounding of u . f(z) at a precision's epsilon, over the small step: what a slope there may be off by.
    outputs = [run.adapter.to_numpy(o) for o, meta in zip(run.trial.outputs, run.trial.output_metas) if meta.floating]
    scale = float(np.abs(upstream.astype(np.float64) * np.concatenate([np.ravel(o) for o in outputs])).sum())
    for k, name in enumerate(candidates):
        step, small = slopes[2 * k], slopes[2 * k + 1]
        allowed = AGREEMENT * max(abs(step), abs(small)) + ROUNDINGS * EPSILONS[name] * scale / relative[2 * k + 1]
        # Both slopes zero where a coarser step moves the outputs: the steps moved nothing the op computes (below its
        # precision's spacing), which is no resolution.
        unmoved = step == 0 and small == 0 and np.any(slopes[2 * k + 2 :] != 0)
        if np.isfinite(step) and np.isfinite(small) and abs(step - small) <= allowed and not unmoved:
            return name
    return declared  # no step resolved smoothly along this direction (a jump): judged element by element
