"""The example inputs of a check: tensors with readable names, and z's layout over them (and over the variables).

z is what finite differences perturb: the floating leaves of the positional
arguments, flattened in order, then the variables the forward reads. `columns`
names its elements (`x[2]`, `dense/w[0, 1]`), `rows` the op's flat floating
outputs (`output[1][3]`).
"""

from __future__ import annotations

import inspect

import numpy as np

from gradmagic.checking.differences import Axis
from gradmagic.checking.run import CheckInputs, CheckRun, Subject, Trial, known_shape, tensor_meta
from gradmagic.frameworks.base import Adapter, Layout
from gradmagic.report import CheckedInput, TensorRow


def prepare_inputs(run: CheckRun, args: tuple, kwargs: dict) -> CheckInputs | None:
    """The inputs as tensors, named, in the shapes table; `input-type` (None) when one cannot become a tensor."""
    adapter = run.adapter
    names = name_inputs(adapter, run.target.signature, args)
    try:
        structure = adapter.to_tensors(args)
    except (TypeError, ValueError) as error:
        run.findings.add(
            "input-type",
            "error",
            f"An example input cannot become a tensor ({type(error).__name__}: {str(error).splitlines()[0]}). "
            "Give tensors, NumPy arrays or Python numbers.",
        )
        return None
    leaves, _ = adapter.flatten(structure)
    from_python = {k: (name, arg) for k, (name, arg) in enumerate(zip(names, args)) if type(arg) in (int, bool)}
    inputs = CheckInputs(structure, kwargs, leaves, names, [tensor_meta(adapter, leaf) for leaf in leaves], from_python)
    for name, leaf, meta in zip(names, leaves, inputs.metas):
        run.findings.rows.append(TensorRow("input", name, meta.shape, meta.dtype))
        run.findings.inputs.append(CheckedInput(name, meta.dtype, meta.shape, *value_range(adapter, leaf)))
    for name, value in kwargs.items():  # a Python number given by keyword: the op gets it as it is
        if type(value) in (int, bool, float):
            run.findings.inputs.append(CheckedInput(name, f"Python {type(value).__name__}", (), value, value))
    return inputs


def value_range(adapter: Adapter, leaf) -> tuple[float | None, float | None]:
    """The smallest and largest finite value of an input (None, None for one without numbers, or whose values only
    running a graph gives)."""
    try:
        values = np.asarray(adapter.to_numpy(leaf))
    except Exception:  # a graph's placeholder: its values come with the session
        return None, None
    if values.dtype.kind not in "biuf" or not values.size:
        return None, None
    if values.dtype.kind != "f":
        return float(values.min()), float(values.max())
    finite = np.isfinite(values)  # a byte per element, no copy of the values (an input of millions of elements)
    if not finite.any():
        return None, None
    return float(np.min(values, where=finite, initial=np.inf)), float(np.max(values, where=finite, initial=-np.inf))


def name_inputs(adapter: Adapter, signature: inspect.Signature | None, args: tuple) -> list[str]:
    """A readable name per flattened input leaf: `x`, `xs[1]`, `pair['a']`."""
    parameter_names: list[str] = []
    if signature is not None:
        for parameter in signature.parameters.values():
            if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
                parameter_names.append(parameter.name)
            elif parameter.kind is parameter.VAR_POSITIONAL:
                parameter_names += [f"{parameter.name}[{i}]" for i in range(len(args) - len(parameter_names))]
                break
    parameter_names += [f"args[{i}]" for i in range(len(parameter_names), len(args))]
    names = []
    for name, arg in zip(parameter_names, args):
        names += [name + path for path in adapter.flatten(arg)[1]]
    return names


def lay_out(run: CheckRun, inputs: CheckInputs, trial: Trial) -> Subject:
    """The subject of the check: z's layout over the inputs and the trial's variables, and the axes naming its
    elements and the outputs'."""
    adapter = run.adapter
    perturbable = tuple(k for k, meta in enumerate(inputs.metas) if meta.floating)
    layout = Layout(inputs.structure, inputs.kwargs, tuple(inputs.leaves), perturbable, tuple(trial.variables))
    columns = Axis(
        tuple(inputs.names[k] for k in perturbable) + tuple(trial.variable_names),
        tuple(known_shape(inputs.metas[k]) for k in perturbable)
        + tuple(known_shape(tensor_meta(adapter, v)) for v in trial.variables),
    )
    rows = Axis(
        tuple(name for name, meta in zip(trial.output_names, trial.output_metas) if meta.floating),
        tuple(known_shape(meta) for meta in trial.output_metas if meta.floating),
    )
    return Subject(trial.target or run.target, inputs, trial, layout, columns, rows)
