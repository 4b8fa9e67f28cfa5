"""The ops of a traced TensorFlow graph in neutral terms (`RawOp`), for the gradient graph of both modes."""

from __future__ import annotations

from gradmagic.frameworks.base import RawOp

#: Ops that forward their input as it is.
_PASSTHROUGH = {"Identity", "IdentityN", "ReadVariableOp"}
#: TensorFlow's op types that tell an intended surrogate gradient from a mistake (see `RawOp.meaning`).
_MEANINGS = {
    "Round": "round",
    "Rint": "round",
    "Sign": "sign",
    "Floor": "floor",
    "Ceil": "ceil",
    "ArgMax": "argmax",
    "ArgMin": "argmax",
    "ClipByValue": "clip",
    "Minimum": "minimum",
    "Maximum": "maximum",
    "StopGradient": "stop_gradient",
    "PreventGradient": "stop_gradient",
    "PyFunc": "python_function",
    "PyFuncStateless": "python_function",
    "EagerPyFunc": "eager_python_function",
    "Cast": "cast",
}
SCOPES = {"forward": "forward", "backward": "backward"}


def raw_op(op, filename: str | None, placeholders: dict, variables: dict, scopes: dict = SCOPES) -> RawOp:
    """An op of a traced graph in neutral terms (see RawOp); `scopes` maps top-level name scopes to passes.

    `placeholders` maps placeholder names to (kind, label); `variables` the names of variable handles to their
    variables.
    """
    scope = scopes.get(op.name.split("/")[0])
    label = ""
    outputs = tuple((tuple(t.shape.as_list()) if t.shape.rank is not None else (), t.dtype.name) for t in op.outputs)
    if op.name in placeholders:
        kind, label = placeholders[op.name]
    elif op.name in variables:  # the handle's placeholder: shown with the variable's own shape and dtype
        variable = variables[op.name]
        kind, label = "variable", variable.name.removesuffix(":0")
        outputs = ((tuple(variable.shape.as_list()), variable.dtype.name),)
    elif op.type == "Placeholder":
        kind = "capture"
    elif op.type == "Const":
        kind = "constant"
    elif op.type in _PASSTHROUGH:
        kind = "passthrough"
    elif op.type == "NoOp":
        kind = "noop"
    else:
        kind = "op"
    # The innermost frame in the op's file: searched from the inside out (a deep op's stack has hundreds of frames).
    line = None
    if filename and scope:
        line = next((frame.lineno for frame in reversed(op.traceback) if frame.filename == filename), None)
    return RawOp(
        op.name,
        op.type,
        kind,
        scope,
        tuple((t.op.name, t.value_index) for t in op.inputs),
        outputs,
        line,
        tuple(range(len(op.outputs))) if kind == "passthrough" else (),
        label,
        "custom_gradient" if _has_custom_gradient(op) else _MEANINGS.get(op.type),
    )


def _has_custom_gradient(op) -> bool:
    """Whether `op` is where a tf.custom_gradient op takes its gradient (an IdentityN whose gradient is overridden)."""
    try:
        return op.type == "IdentityN" and op.get_attr("_gradient_op_type").startswith(b"CustomGradient")
    except (ValueError, AttributeError):  # no such attribute
        return False
