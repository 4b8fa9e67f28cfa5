"""Structure checks: what the framework accepts silently, or reports far from the cause, found before any number.

The op's raw function and its gradient function are called once, eagerly,
on the example inputs and a random upstream gradient, the way the framework
calls them (`GradientConvention`); what they return is compared with what the
decorator (`tf.custom_gradient`, `keras.ops.custom_gradient` on the backend
at hand) needs.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gradmagic.checking.wording import Wording, backend_name
from gradmagic.frameworks.base import Adapter, OpProblem, Target, TensorMeta
from gradmagic.report import Location, Problem, Surrogate, TensorRow

#: How many element indices a message lists.
LISTED = 5


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


@dataclass
class Findings:
    """Problems and shapes-table rows, as the checks find them."""

    target: Target
    wording: Wording
    source: str | None = None  # how the user names the op's source: "Cell In[3]" or a file path
    problems: list[Problem] = field(default_factory=list)
    rows: list[TensorRow] = field(default_factory=list)
    surrogate: Surrogate | None = None  # a declared or recognised surrogate gradient (see checking/surrogate.py)

    def add(self, code: str, severity: str, message: str, **location: Any) -> None:
        if location.get("line") is not None:
            location.setdefault("filename", self.source)
        self.problems.append(Problem(code, severity, message, Location(**location) if location else None))

    @property
    def failed(self) -> bool:
        return any(problem.severity == "error" for problem in self.problems)


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
        names += [name + path for path in adapter.leaf_paths(arg)]
    return names


def check_structure(
    adapter: Adapter, target: Target, inputs: CheckInputs, seed: int, findings: Findings
) -> Trial | None:
    """Run the forward and the gradient function once; record problems and the shapes table.

    Returns the trial, or None when the structure is too broken to go on.
    """
    for name, meta in zip(inputs.names, inputs.metas):
        findings.rows.append(TensorRow("input", name, meta.shape, meta.dtype))
    _check_keyword_inputs(adapter, inputs, findings)

    try:
        result, variables = adapter.run_recording_variables(
            lambda: target.raw(*inputs.structure, **inputs.kwargs), exclude=inputs.leaves
        )
    except OpProblem as found:  # a mistake the framework reports far away, or not at all, found by the adapter
        findings.add(found.code, "error", found.message, line=_line_of(found, target))
        return None
    except Exception as error:  # the user's forward: any exception is a finding
        findings.add(
            "forward-error", "error", _raised("forward", target, error, findings.wording), line=_line_of(error, target)
        )
        return None

    if not _returns_outputs_and_grad(target, result, findings):
        return None
    outputs = adapter.flatten(result[0])
    output_names = [f"output{path}" for path in adapter.leaf_paths(result[0])]
    output_metas = []
    for name, output in zip(output_names, outputs):
        meta = adapter.meta(output)
        if meta is None:
            findings.add(
                "return-structure",
                "error",
                f"`{target.name}` returns a {type(output).__name__} as {name}; the outputs must be tensors.",
                output=name,
            )
            return None
        output_metas.append(meta)
        findings.rows.append(TensorRow("output", name, meta.shape, meta.dtype))
        _check_finite(
            adapter,
            output,
            meta,
            "nonfinite-output",
            f"The forward's {name}",
            findings,
            output=name,
            severity="warning",
            advice=" The forward overflows or divides by zero there (in the op's own precision); a stable "
            f"form of the forward avoids it (e.g. {findings.wording.softplus} for log(1 + exp(x))).",
        )

    grad_fn = result[1]
    variable_names = [adapter.variable_name(v) for v in variables]
    for name, variable in zip(variable_names, variables):
        meta = adapter.meta(variable)
        findings.rows.append(TensorRow("variable", name, meta.shape, meta.dtype))
    convention = adapter.convention
    if variables and convention.variables == "closed-over":
        _closed_over_variables(adapter, target, variable_names, findings)
        return None
    if convention.single_output and len(outputs) > 1:
        findings.add(
            "backend-outputs",
            "error",
            f"`{target.name}` returns {len(outputs)} output tensors ({_listing(output_names)}); on Keras's "
            f"{backend_name(adapter.backend or '')} backend {adapter.decorator} supports one: its "
            "torch.autograd.Function receives a single upstream gradient, and taking the gradient fails with "
            "`TypeError: CustomGradientFunction.backward() takes 2 positional arguments but "
            f"{len(outputs) + 1} were given`. Return one tensor (stack or concatenate the outputs and split "
            "them after the op), or make one op per output.",
            line=_return_line(target),
        )
        return None
    if variables and not _accepts_variables(grad_fn):
        findings.add(
            "missing-variables-kwarg",
            "error",
            f"The forward reads the variable{'s' if len(variables) > 1 else ''} {_listing(variable_names)}, which "
            f"{'are' if len(variables) > 1 else 'is'} not an input, so {adapter.decorator} calls the gradient function "
            "with `variables=[...]` and expects `(grad_xs, grad_vars)` back. Define it as "
            "`def grad(upstream, variables=None):` and return `grad_xs, [grad for each variable]`.",
            variable=variable_names[0],
            line=_first_line(grad_fn),
        )
        return None

    rng = np.random.default_rng(seed)
    upstreams = [
        adapter.constant(
            rng.random(meta.shape, dtype=np.float32) * 2 - 1 if meta.floating else np.zeros(meta.shape), meta.dtype
        )
        for meta in output_metas
    ]
    for name, meta in zip(output_names, output_metas):
        findings.rows.append(TensorRow("upstream", f"d{name}", meta.shape, meta.dtype))
    trial = Trial(outputs, output_names, output_metas, variables, variable_names, upstreams)

    arguments, keywords = _gradient_call(adapter, inputs, result[0], upstreams, variables)
    if adapter.backend is not None and not _accepts_call(grad_fn, arguments, keywords, findings, adapter, target):
        return None
    try:
        returned = adapter.call_gradient(grad_fn, arguments, keywords)
    except Exception as error:  # the user's gradient function
        findings.add(
            "grad-error",
            "error",
            _raised("gradient function", target, error, findings.wording, grad_fn, len(upstreams)),
            line=_line_of(error, target),
        )
        return None

    if variables:
        if not (isinstance(returned, (tuple, list)) and len(returned) == 2):
            findings.add(
                "grad-structure",
                "error",
                f"With variables, the gradient function must return `(grad_xs, grad_vars)`; it returned "
                f"{_what(returned)}. Return `grad_xs, [gradient of each of {_listing(variable_names)}]`.",
                line=_first_line(grad_fn),
            )
            return None
        returned, variable_gradients = returned
        variable_gradients = adapter.flatten(variable_gradients)
        if len(variable_gradients) != len(variables):
            findings.add(
                "variable-grad-count",
                "error",
                f"The gradient function returns {len(variable_gradients)} variable gradient"
                f"{'s' if len(variable_gradients) != 1 else ''} for {len(variables)} variable"
                f"{'s' if len(variables) != 1 else ''} ({_listing(variable_names)}): `grad_vars` needs one "
                "entry per variable, in the order of the `variables` list it receives.",
                variable=variable_names[0],
                line=_first_line(grad_fn),
            )
            return None
        trial.variable_gradients = variable_gradients

    if convention.tuple_required and isinstance(returned, list):
        findings.add(
            "grad-list",
            "error",
            f"The gradient function returns a list of {len(returned)}; on Keras's "
            f"{backend_name(adapter.backend or '')} backend {adapter.decorator} needs a tuple "
            f"({_list_failure(adapter.backend or '', len(inputs.leaves))}). Return "
            f"`({', '.join('grad_' + _identifier(n) for n in inputs.names)}{',' if len(inputs.names) == 1 else ''})` "
            "or `tuple(grads)`: a tuple works on every backend.",
            line=_first_line(grad_fn),
        )
        return None
    gradients = adapter.flatten(returned)
    if len(gradients) != len(inputs.leaves):
        findings.add(
            "grad-count",
            "error",
            f"The gradient function returns {len(gradients)} gradient{'s' if len(gradients) != 1 else ''} for "
            f"{len(inputs.leaves)} input{'s' if len(inputs.leaves) != 1 else ''} "
            f"({_listing(inputs.names)}). Return one per input, in order: `return "
            f"{', '.join('grad_' + _identifier(n) for n in inputs.names)}` (None for an input without "
            + (
                "gradient). TensorFlow reports this only when the gradient is taken, and inside tf.function as "
                "an InternalError about 'too few gradients'."
                if adapter.backend in (None, "tensorflow")
                else f"gradient). {findings.wording.framework} reports this only when the gradient is taken."
            ),
            line=_first_line(grad_fn),
        )
        return None
    trial.gradients = gradients

    for role, names, metas, grads in (
        ("input", inputs.names, inputs.metas, gradients),
        ("variable", variable_names, [adapter.meta(v) for v in variables], trial.variable_gradients or []),
    ):
        for name, meta, gradient in zip(names, metas, grads):
            _check_gradient(adapter, role, name, meta, gradient, findings, line=_first_line(grad_fn))
    return trial


def _list_failure(backend: str, inputs: int) -> str:
    """What a list returned by the gradient function does on a Keras backend that needs a tuple (measured)."""
    if backend != "torch":
        return "it fails when the gradient is taken"
    # Keras wraps what is not a tuple as one gradient: backward returns (None, [grads...]).
    if inputs == 1:
        error = "RuntimeError: expected Variable or None (got list)"
    else:
        error = (
            "RuntimeError: function CustomGradientFunctionBackward returned an incorrect number of gradients "
            f"(expected {inputs + 1}, got 2)"
        )
    return f"Keras's torch.autograd.Function takes the list for one gradient, and PyTorch fails with '{error}'"


# The gradient function written so every Keras backend can call it (keras.ops.custom_gradient's documentation).
PORTABLE_FORM = """def grad(*args, upstream=None):
    if upstream is None:
        (upstream,) = args
    return ..."""


def _gradient_call(adapter: Adapter, inputs: CheckInputs, outputs: Any, upstreams: list, variables: list):
    """The positional and keyword arguments the framework passes to the gradient function."""
    convention = adapter.convention
    keywords: dict = {"variables": variables} if variables else {}
    if convention.upstream == "structure":  # JAX: one cotangent shaped like the outputs
        return [adapter.pack(outputs, upstreams)], keywords
    if convention.upstream == "keyword":  # Keras's PyTorch backend: the op's inputs, then upstream=
        return list(inputs.structure), {**keywords, "upstream": upstreams[0] if len(upstreams) == 1 else upstreams}
    return list(upstreams), keywords


def _accepts_call(grad_fn, arguments: list, keywords: dict, findings: Findings, adapter: Adapter, target) -> bool:
    """backend-signature: the gradient function cannot take the arguments this Keras backend passes."""
    try:
        signature = inspect.signature(grad_fn)
    except (TypeError, ValueError):
        return True
    try:
        signature.bind(*arguments, **keywords)
        return True
    except TypeError as error:
        reason = str(error)
    backend = backend_name(adapter.backend or "")
    if adapter.convention.upstream == "keyword":
        how = "`grad(*inputs, upstream=upstream)`: the op's inputs positionally, the upstream gradient as the keyword "
        how += "`upstream`"
    elif adapter.convention.upstream == "structure":
        how = "`grad(upstream)`: one positional argument holding the upstream gradient (shaped like the outputs)"
    else:
        how = "`grad(*upstreams)`: one positional upstream gradient per output"
    findings.add(
        "backend-signature",
        "error",
        f"The gradient function `{getattr(grad_fn, '__name__', 'grad')}{signature}` cannot be called the way Keras's "
        f"{backend} backend calls it, {how} ({reason}). It works on some backends only. Write it the portable way "
        f"from the {adapter.decorator} documentation, which works on TensorFlow, JAX and PyTorch:\n{PORTABLE_FORM}",
        line=_first_line(grad_fn),
    )
    return False


def _closed_over_variables(adapter: Adapter, target: Target, names: list[str], findings: Findings) -> None:
    """closed-over-variable: the forward reads Keras variables that this backend's custom gradient cannot reach."""
    listed = _listing(names)
    if adapter.backend == "torch":
        consequence = (
            "Keras's PyTorch backend runs the forward under torch.no_grad inside a torch.autograd.Function, so "
            f"{'they get' if len(names) > 1 else 'it gets'} no gradient at all, silently (`.grad` stays None "
            "and an optimizer never moves it)"
        )
    else:
        consequence = (
            "jax.custom_gradient gives gradients for the op's explicit inputs only, so differentiating "
            f"{'them' if len(names) > 1 else 'it'} (as a Keras trainer does) fails with JAX's UnexpectedTracerError, "
            "'Encountered an unexpected tracer'"
        )
    findings.add(
        "closed-over-variable",
        "error",
        f"The forward reads the Keras variable{'s' if len(names) > 1 else ''} {listed}, which "
        f"{'are' if len(names) > 1 else 'is'} not an input. On Keras's {backend_name(adapter.backend or '')} "
        f"backend {consequence}. Pass {'them' if len(names) > 1 else 'it'} as input{'s' if len(names) > 1 else ''} "
        f"(`op(x, {', '.join(_identifier(n) for n in names)})`) and return {'their' if len(names) > 1 else 'its'} "
        "gradient with the others; that form works on every backend.",
        variable=names[0],
        line=_first_line(target.raw),
    )


def _check_keyword_inputs(adapter: Adapter, inputs: CheckInputs, findings: Findings) -> None:
    for name, value in inputs.kwargs.items():
        meta = adapter.meta(value)
        if meta is not None and meta.floating:
            findings.add(
                "keyword-input",
                "warning",
                f"The tensor `{name}` is passed by keyword: {adapter.decorator} differentiates positional "
                f"inputs only, so `{name}` gets no gradient. Pass it by position if it needs one.",
                input=name,
            )


def _returns_outputs_and_grad(target: Target, result: Any, findings: Findings) -> bool:
    if isinstance(result, (tuple, list)) and len(result) == 2 and callable(result[1]):
        return True
    if isinstance(result, (tuple, list)) and len(result) > 2 and callable(result[-1]):
        outputs = _returned_names(target, len(result)) or [f"y{i}" for i in range(len(result) - 1)] + ["grad"]
        message = (
            f"`{target.name}` returns {len(result)} values; {findings.wording.decorator} needs exactly two, the "
            f"outputs and the gradient function (it fails with 'too many values to unpack (expected 2)'). "
            f"Group the outputs: `return ({', '.join(outputs[:-1])}), {outputs[-1]}`."
        )
    elif isinstance(result, (tuple, list)) and len(result) == 2:
        message = (
            f"`{target.name}` returns two values but the second is {_what(result[1])}, not the gradient "
            "function: return `outputs, grad` where `grad` is the function computing the gradients."
        )
    else:
        message = (
            f"`{target.name}` returns {_what(result)}; {findings.wording.decorator} needs `(outputs, grad_fn)`: "
            "end the function with `return outputs, grad`."
        )
    findings.add("return-structure", "error", message, line=_return_line(target))
    return False


def _check_gradient(
    adapter: Adapter, role: str, name: str, meta: TensorMeta, gradient: Any, findings: Findings, line: int | None
) -> None:
    where = {"input": name} if role == "input" else {"variable": name}
    kind = "downstream" if role == "input" else "variable-gradient"
    if gradient is None:
        findings.rows.append(TensorRow(kind, f"d{name}", None, None, meta.shape, meta.dtype, meta.floating is False))
        if meta.floating:
            findings.add(
                "none-gradient",
                "warning",
                f"The gradient for {role} `{name}` is None: {findings.wording.framework} treats it as zero. Return "
                f"`{findings.wording.zeros_like}({_identifier(name)})` if that is meant, else compute it.",
                line=line,
                **where,
            )
        else:
            findings.add(
                "not-differentiable",
                "info",
                f"{role.capitalize()} `{name}` is {meta.dtype}: not differentiable, its gradient is ignored.",
                **where,
            )
        return
    gradient_meta = adapter.meta(gradient)
    if gradient_meta is None:
        gradient_meta = adapter.meta(adapter.to_tensors(gradient))
    matches = gradient_meta.shape == meta.shape and gradient_meta.dtype == meta.dtype
    findings.rows.append(
        TensorRow(kind, f"d{name}", gradient_meta.shape, gradient_meta.dtype, meta.shape, meta.dtype, matches)
    )
    if not meta.floating:
        findings.add(
            "not-differentiable",
            "info",
            f"{role.capitalize()} `{name}` is {meta.dtype}: not differentiable, its gradient is ignored.",
            **where,
        )
        return
    if gradient_meta.shape != meta.shape:
        findings.add(
            "grad-shape",
            "error",
            _shape_message(role, name, meta.shape, gradient_meta.shape, findings.wording),
            line=line,
            **where,
        )
    if gradient_meta.dtype != meta.dtype:
        findings.add(
            "grad-dtype",
            "error",
            f"The gradient for {role} `{name}` is {gradient_meta.dtype} but `{name}` is {meta.dtype}. "
            f"Cast it: `{findings.wording.cast}(grad, {_identifier(name)}.dtype)`.",
            line=line,
            **where,
        )
    if gradient_meta.shape == meta.shape:
        _check_finite(
            adapter, gradient, meta, "nonfinite-gradient", f"The gradient for {role} `{name}`", findings, **where
        )


def _shape_message(role: str, name: str, expected: tuple, got: tuple, wording: Wording) -> str:
    message = f"The gradient for {role} `{name}` has shape {list(got)} but `{name}` has shape {list(expected)}; " + (
        "TensorFlow accepts this silently and fails later, far away."
        if wording.framework == "TensorFlow"
        else f"{wording.framework} may accept it and fail later, far away, or fail with an error that does "
        "not name the cause."
    )
    axes = _broadcast_axes(expected, got)
    if axes is not None:
        reduced = f"{wording.reduce_sum}(grad, axis={list(axes)})"
        if len(got) - len(axes) != len(expected):
            reduced = f"{wording.reshape}({reduced}, {list(expected)})"
        message += f" `{name}` was broadcast in the forward: sum the gradient over the broadcast axes, `{reduced}`."
    return message


def _broadcast_axes(shape: tuple, broadcast: tuple) -> tuple[int, ...] | None:
    """Axes of `broadcast` to sum over to get back `shape`, if `shape` broadcasts to `broadcast`."""
    if len(shape) > len(broadcast):
        return None
    lead = len(broadcast) - len(shape)
    axes = list(range(lead))
    for axis, (small, big) in enumerate(zip(shape, broadcast[lead:])):
        if small == big:
            continue
        if small != 1:
            return None
        axes.append(lead + axis)
    return tuple(axes) if axes else None


def _check_finite(
    adapter: Adapter,
    value: Any,
    meta: TensorMeta,
    code: str,
    what: str,
    findings: Findings,
    severity: str = "error",
    advice: str = "",
    **location: Any,
) -> None:
    if not meta.floating:
        return
    array = adapter.to_numpy(value)
    bad = np.argwhere(~np.isfinite(array))
    if not len(bad):
        return
    indices = [tuple(int(i) for i in index) for index in bad[:LISTED]]
    kinds = sorted({"NaN" if np.isnan(array[index]) else "Inf" for index in indices})
    listed = ", ".join(str(list(index)) for index in indices) + (" ..." if len(bad) > LISTED else "")
    findings.add(
        code,
        severity,
        f"{what} has {len(bad)} non-finite element{'s' if len(bad) > 1 else ''} ({'/'.join(kinds)}) at "
        f"{listed}.{advice}",
        index=indices[0],
        **location,
    )


def _accepts_variables(grad_fn: Any) -> bool:
    try:
        parameters = inspect.signature(grad_fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "variables" or p.kind is p.VAR_KEYWORD for p in parameters)


# TensorFlow 1's tf.cond (tf.compat.v1.disable_v2_behavior()) on a vector, when the graph is built.
_VECTOR_COND_V1 = re.compile(r"Shape must be rank 0 but is rank \d+ for '\{\{node [^}]*Switch\}\}")

# What the frameworks say when a Python `if` meets a tensor of several elements (or a traced one).
_AMBIGUOUS_TRUTH = (
    "truth value of an array",  # NumPy, eager TensorFlow and JAX
    "symbolic `tf.Tensor` as a Python `bool`",  # inside tf.function
    "Boolean value of Tensor with more than one value",  # PyTorch
    "Attempted boolean conversion of traced array",  # JAX under a trace
)


def _raised(
    what: str, target: Target, error: Exception, wording: Wording, grad_fn: Any = None, upstream_count: int = 0
) -> str:
    message = f"The {what} of `{target.name}` raised {type(error).__name__}: {_first_lines(error)}"
    text = str(error)
    if any(phrase in text for phrase in _AMBIGUOUS_TRUTH) or _VECTOR_COND_V1.search(text):
        message += (
            " A Python `if` (or `tf.cond`) needs a scalar predicate; for an element-wise choice use "
            f"`{wording.where}(condition, a, b)`, which also keeps the gradient element-wise."
        )
    elif grad_fn is not None and isinstance(error, TypeError) and "positional argument" in text:
        message += (
            f" The gradient function receives one upstream gradient per output ({upstream_count} here), "
            "positionally: give it that many parameters."
        )
    return message


def error_text(error: Exception) -> str:
    """The error's message: for a TensorFlow error raised by a graph that ran, without the stack that created the
    failing op (which `str` appends)."""
    message = getattr(error, "message", None)
    return message if isinstance(message, str) else str(error)


def _first_lines(error: Exception) -> str:
    lines = error_text(error).strip().splitlines()
    text = " ".join(lines[:3]) + (" ..." if len(lines) > 3 else "")
    return text if text.endswith((".", "...", "!", "?")) else text + "."


def _line_of(error: Exception, target: Target) -> int | None:
    """The deepest line of the user's source (the cell) in the exception's traceback.

    An error raised when a graph runs, not where the user's code is, names the
    graph operation that failed: then the line that created that operation.
    """
    line = None
    traceback = error.__traceback__
    while traceback is not None:
        if traceback.tb_frame.f_code.co_filename == target.filename:
            line = traceback.tb_lineno
        traceback = traceback.tb_next
    if line is None:
        frames = getattr(getattr(error, "op", None), "traceback", None) or ()
        lines = [frame.lineno for frame in frames if frame.filename == target.filename]
        line = lines[-1] if lines else None
    return line


def _first_line(function: Any) -> int | None:
    code = getattr(function, "__code__", None)
    return code.co_firstlineno if code else None


def _source_tree(target: Target) -> ast.Module | None:
    """The AST of the file or cell `target.raw` was written in (a cell's magic line blanked)."""
    lines = linecache.getlines(target.filename) if target.filename else []
    if lines and lines[0].startswith("%%"):
        lines = ["\n"] + lines[1:]
    try:
        return ast.parse("".join(lines))
    except SyntaxError:
        return None


def _outer_returns(target: Target) -> list[ast.Return]:
    """The `return` statements of `target.raw` itself, not of functions nested in it."""
    tree = _source_tree(target)
    if tree is None:
        return []
    first = _first_line(target.raw)
    body = tree.body if first == 1 else None  # body form: the cell is the function's body
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.FunctionDef)
            and node.name == target.name
            and first in (node.lineno, *(decorator.lineno for decorator in node.decorator_list))
        ):
            body = node.body
    returns: list[ast.Return] = []
    pending = list(body or [])
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Return):
            returns.append(node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            pending.extend(ast.iter_child_nodes(node))
    return sorted(returns, key=lambda node: node.lineno)


def _returned_names(target: Target, count: int) -> list[str] | None:
    """The expressions of the `return a, b, grad` in the source, when it can be found."""
    for node in _outer_returns(target):
        if isinstance(node.value, ast.Tuple) and len(node.value.elts) == count:
            return [ast.unparse(element) for element in node.value.elts]
    return None


def _return_line(target: Target) -> int | None:
    returns = _outer_returns(target)
    return returns[-1].lineno if returns else _first_line(target.raw)


def _what(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return "None" if value is None else f"a {type(value).__name__}"


def _listing(names: list[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


def _identifier(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name).strip("_")
