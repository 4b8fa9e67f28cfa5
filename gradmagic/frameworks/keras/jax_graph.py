"""The gradient graph on Keras's JAX backend: the jaxprs of the op's forward (with the residuals `jax.vjp` keeps)
and of its backward, as one graph. Importing this module imports Keras and JAX."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax import tree_util
from jax.extend import core as jax_core

from gradmagic.frameworks.base import Layout, RawGraph, RawOp, Target
from gradmagic.frameworks.keras.jax_values import cotangent, is_floating, of_perturbed, shape_and_dtype

#: Primitives whose inner jaxpr the gradient graph shows op by op: calls and custom derivatives of library functions,
#: and rematerialisation. A `jax.jit` call inside a library function (`jnp.where`, `jax.nn.softplus`, Keras's
#: `ops.argmax`) stays one op, named after its function.
_INLINED = {
    "closed_call",
    "core_call",
    "custom_jvp_call",
    "custom_vjp_call",
    "custom_vjp_call_jaxpr",
    "remat",
    "checkpoint",
}
_NAMED_CALLS = {"pjit", "jit"}
_PASSTHROUGH = {"copy", "copy_p"}
#: JAX's primitives (and named library calls) that tell an intended surrogate gradient from a mistake (`RawOp.meaning`).
_MEANINGS = {
    **{name: name for name in ("round", "sign", "floor", "ceil", "stop_gradient", "argmax")},
    "argmin": "argmax",
    **{"clamp": "clip", "clip": "clip", "min": "minimum", "max": "maximum", "convert_element_type": "cast"},
    **{"pure_callback": "python_function", "io_callback": "python_function"},
}


class GraphTracer:
    """The op's forward and backward as jaxprs, turned into a RawGraph.

    The forward jaxpr computes the outputs and the residuals of `jax.vjp` (what
    the backward keeps); the backward jaxpr takes the residuals and the upstream
    gradients. A backward use of a residual is connected to the forward
    equation (or input) that produced it. Calls of inner jaxprs (`jax.jit`
    inside library functions, custom derivatives) are inlined.
    """

    def __init__(self, target: Target, layout: Layout, upstreams: list, arguments: list):
        self.target, self.layout, self.upstreams, self.arguments = target, layout, upstreams, arguments
        self.ops: list[RawOp] = []
        self.counts: dict[str, int] = {}

    def trace(self) -> RawGraph:
        layout = self.layout
        captured: dict[str, Any] = {}

        def forward(perturbed):
            outputs, pullback = jax.vjp(of_perturbed(self.target.op, layout), *perturbed)
            residuals, captured["pullback"] = tree_util.tree_flatten(pullback)
            captured["outputs"] = outputs
            return tree_util.tree_leaves(outputs), residuals

        forward_jaxpr = jax.make_jaxpr(forward)(layout.perturbed)
        outputs = len(tree_util.tree_leaves(captured["outputs"]))
        residual_avals = forward_jaxpr.out_avals[outputs:]

        def backward(residuals, floating_upstreams):
            pullback = tree_util.tree_unflatten(captured["pullback"], residuals)
            return list(pullback(cotangent(captured["outputs"], floating_upstreams)))

        floating_upstreams = [u for u in self.upstreams if is_floating(u)]
        backward_jaxpr = jax.make_jaxpr(backward)(
            [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in residual_avals], floating_upstreams
        )

        placeholders = [
            self._placeholder(f"inputs/{k}", leaf, *self.arguments[k]) for k, leaf in enumerate(layout.inputs)
        ]
        upstream_placeholders = [
            self._placeholder(f"upstreams/{i}", upstream, *self.arguments[len(layout.inputs) + i])
            for i, upstream in enumerate(self.upstreams)
        ]
        leaf_placeholders = {id(leaf): placeholders[k] for k, leaf in enumerate(layout.inputs)}
        environment = self._constants(forward_jaxpr, leaf_placeholders)
        for k, variable in zip(layout.perturbable, forward_jaxpr.jaxpr.invars):
            environment[variable] = placeholders[k]
        self._emit(forward_jaxpr.jaxpr, "forward", environment)
        produced = [self._source(atom, environment) for atom in forward_jaxpr.jaxpr.outvars]

        backward_environment = self._constants(backward_jaxpr, {})
        floating = iter(i for i, u in enumerate(self.upstreams) if is_floating(u))
        residuals = len(residual_avals)
        for position, variable in enumerate(backward_jaxpr.jaxpr.invars):
            backward_environment[variable] = (
                produced[outputs + position] if position < residuals else upstream_placeholders[next(floating)]
            )
        self._emit(backward_jaxpr.jaxpr, "backward", backward_environment)
        gradients = [self._source(atom, backward_environment) for atom in backward_jaxpr.jaxpr.outvars]
        return RawGraph(tuple(self.ops), tuple(produced[:outputs]), tuple(gradients))

    def _placeholder(self, name: str, value: Any, kind: str, label: str) -> tuple[str, int]:
        self.ops.append(
            RawOp(name, "", kind, None, (), ((tuple(value.shape), np.dtype(value.dtype).name),), None, label=label)
        )
        return (name, 0)

    def _constants(self, closed: Any, known: dict) -> dict:
        """An environment holding the closed jaxpr's constants: an input leaf's placeholder, or a constant op."""
        environment = {}
        for variable, value in zip(closed.jaxpr.constvars, closed.consts):
            environment[variable] = known.get(id(value)) or self._constant(variable.aval)
        return environment

    def _constant(self, aval: Any) -> tuple[str, int]:
        name = self._name("constants", "constant")
        self.ops.append(RawOp(name, "constant", "constant", None, (), (shape_and_dtype(aval),), None))
        return (name, 0)

    def _source(self, atom: Any, environment: dict) -> tuple[str, int]:
        """The (op, output) producing a jaxpr atom; a literal becomes a constant op."""
        if isinstance(atom, jax_core.Literal):
            return self._constant(atom.aval)
        return environment[atom]

    def _emit(self, jaxpr: Any, scope: str, environment: dict, line: int | None = None) -> None:
        """The equations of `jaxpr` as ops; `line` is the enclosing call's, for equations traced elsewhere."""
        for equation in jaxpr.eqns:
            inputs = [self._source(atom, environment) for atom in equation.invars]
            equation_line = _line(equation, self.target.filename) or line
            inner = _inner_jaxpr(equation)
            if inner is not None:
                inner_environment = self._constants(inner, {}) if hasattr(inner, "consts") else {}
                body = getattr(inner, "jaxpr", inner)
                inner_environment.update(zip(body.invars, inputs))
                self._emit(body, scope, inner_environment, equation_line)
                for variable, atom in zip(equation.outvars, body.outvars):
                    environment[variable] = self._source(atom, inner_environment)
                continue
            primitive = equation.primitive.name
            if primitive in _NAMED_CALLS:
                primitive = str(equation.params.get("name", primitive))
            name = self._name(scope, primitive)
            passthrough = primitive in _PASSTHROUGH and len(equation.invars) == len(equation.outvars)
            self.ops.append(
                RawOp(
                    name,
                    primitive,
                    "passthrough" if passthrough else "op",
                    scope,
                    tuple(inputs),
                    tuple(shape_and_dtype(variable.aval) for variable in equation.outvars),
                    equation_line,
                    tuple(range(len(equation.outvars))) if passthrough else (),
                    meaning=_MEANINGS.get(primitive),
                )
            )
            for index, variable in enumerate(equation.outvars):
                environment[variable] = (name, index)

    def _name(self, scope: str, kind: str) -> str:
        count = self.counts.get(scope, 0)
        self.counts[scope] = count + 1
        return f"{scope}/{kind}_{count}"


def _inner_jaxpr(equation: Any) -> Any:
    """The jaxpr an inlinable call equation runs, if it takes and returns the equation's values one to one."""
    if equation.primitive.name not in _INLINED:
        return None
    for value in equation.params.values():
        body = getattr(value, "jaxpr", value)
        if isinstance(body, jax_core.Jaxpr) and (
            len(body.invars) == len(equation.invars) and len(body.outvars) == len(equation.outvars)
        ):
            return value
    return None


def _line(equation: Any, filename: str | None) -> int | None:
    """The innermost line of the user's source (the op's file or cell) that the equation was traced from."""
    traceback = equation.source_info.traceback
    if filename is None or traceback is None:
        return None
    for frame in traceback.frames:  # innermost first
        if frame.file_name == filename:
            return frame.line_num
    return None
