"""The precision finite differences run in: float64 where the op accepts it, else the op's own.

Float32 example inputs are cast up when the forward runs on float64 inputs
and keeps their precision throughout (outputs in float64, nothing narrowed
inside: Keras's `ops.sin` on JAX computes float64 in float32). Whether it
does is remembered per op and input layout, so later checks of the same op
ask once.
"""

from __future__ import annotations

import dataclasses
import weakref

import numpy as np

from gradmagic.checking.run import CheckRun
from gradmagic.frameworks.base import Layout

# Per raw function (dropped with it): input layouts whose float64 version the forward accepts.
_ACCEPTS_FLOAT64: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


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
        outputs, _ = adapter.flatten(forward.result[0])
    except Exception:  # the forward mixes in float32 constants or variables: stay in its own precision
        return False
    metas = [adapter.meta(output) for output in outputs]
    narrowed_outputs = any(meta is not None and meta.floating and meta.dtype != "float64" for meta in metas)
    return not narrowed_outputs and not forward.narrows_float64
