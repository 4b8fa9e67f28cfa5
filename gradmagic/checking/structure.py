"""Structure checks: what the framework accepts silently, or reports far from the cause, found before any number.

The op's raw function and its gradient function are called once, eagerly,
on the example inputs and a random upstream gradient, the way the framework
calls them (`GradientConvention`); what they return is compared with what the
decorator (`tf.custom_gradient`, `keras.ops.custom_gradient` on the backend
at hand) needs.
"""

from __future__ import annotations

import collections.abc
import difflib
import functools
import inspect
import types
from dataclasses import dataclass
from typing import Any

import numpy as np

from gradmagic.checking.findings import LISTED, Findings, identifier, joined, listing, plural
from gradmagic.checking.run import CheckInputs, CheckRun, Trial, known_shape, tensor_meta
from gradmagic.checking.side_effects import StateWatch, code_names, unwrapped
from gradmagic.checking.source_lines import decorator_names, error_line, first_line, return_line, returned_names
from gradmagic.frameworks.base import Adapter, ForwardRun, Layout, OpProblem, Override, Target, TensorMeta, given
from gradmagic.report import Severity, TensorRole, TensorRow, element_label

# The gradient function written so every Keras backend can call it (keras.ops.custom_gradient's documentation).
PORTABLE_FORM = """def grad(*args, upstream=None):
    if upstream is None:
        (upstream,) = args
    return ..."""


def check_structure(run: CheckRun, inputs: CheckInputs) -> Trial | None:
    """Run the forward and the gradient function once on `inputs`; record problems and the shapes table; the trial,
    when the op is well-formed enough to go on."""
    adapter, target, findings = run.adapter, run.target, run.findings
    _kin_hint(run)
    _check_keyword_inputs(adapter, inputs, findings)
    if _nonfinite_inputs(run, "input", inputs.names, inputs.metas, inputs.leaves):
        return None
    try:
        forward = adapter.run_forward(lambda: target.raw(*inputs.as_given, **inputs.kwargs), exclude=inputs.leaves)
    except OpProblem as found:  # a mistake the framework reports far away, or not at all, found by the adapter
        findings.add(found.code, "error", found.message, line=error_line(found, target, findings.wording))
        return None
    except (Exception, SystemExit) as error:  # the user's forward: any exception (sys.exit() too) is a finding
        message = _raised("forward", findings, error) + python_numbers_hint(inputs, findings)
        findings.add("forward-error", "error", message, line=error_line(error, target, findings.wording))
        return None
    result, variables = forward.result, forward.variables
    variable_metas = [tensor_meta(adapter, v) for v in variables]
    in_code = _names_in_code(target.raw, variables)
    variable_names = _distinct(
        [_variable_name(findings, meta.name, in_code.get(id(v))) for v, meta in zip(variables, variable_metas)]
    )
    if _nonfinite_inputs(run, "variable", variable_names, variable_metas, variables):
        return None
    composite = target.origin == "composite" or (target.origin == "plain" and not _attempts_pair(result))
    if composite:
        as_composite = _as_composite(run, forward)
        if as_composite is None:
            return None
        target = as_composite
    elif not _returns_outputs_and_grad(run, result):
        return None
    named = _outputs(run, result if composite else result[0])
    if named is None:
        return None
    outputs, output_names, output_metas = named
    for name, meta in zip(variable_names, variable_metas):
        findings.rows.append(TensorRow("variable", name, meta.shape, meta.dtype))
    if composite:  # the framework takes the gradient: no gradient function of the user's to call
        upstreams = _upstreams(run, output_names, output_metas)
        return Trial(
            outputs,
            output_names,
            output_metas,
            variables,
            variable_names,
            upstreams,
            reached=forward.custom_gradients,
            target=target,
        )
    grad_fn = result[1]
    if not _fits_convention(run, outputs, output_names, variable_names, grad_fn):
        return None
    upstreams = _upstreams(run, output_names, output_metas)
    trial = Trial(outputs, output_names, output_metas, variables, variable_names, upstreams, ops=forward.ops)

    arguments, keywords = _gradient_call(adapter, inputs.structure, result[0], upstreams, variables)
    if adapter.convention.signature_checked and not _accepts_call(run, grad_fn, arguments, keywords):
        return None
    watch = StateWatch(adapter, grad_fn)
    try:
        returned = adapter.call_gradient(grad_fn, arguments, keywords)
    except (Exception, SystemExit) as error:  # the user's gradient function (sys.exit() too)
        if _upstream_left_none(adapter, grad_fn, arguments, keywords):
            _missing_upstream_fallback(run, grad_fn, f"raised {type(error).__name__}")
            return None
        asked = _asks_for_gradient(inputs.metas, variables)
        message = _raised("gradient function", findings, error, grad_fn, len(upstreams))
        if not asked:  # no input the framework differentiates: its failure here is no failure of the op
            message += (
                f" But {findings.wording.framework} never calls it for these inputs: none is floating and the forward "
                "reads no variable, so no gradient is asked for. Check the op at floating inputs to judge its gradient."
            )
        where = error_line(error, target, findings.wording)
        findings.add("grad-error", "error" if asked else "info", message, line=where)
        if asked:
            return None
        returned = (None,) * len(inputs.names)
    finally:
        trial.state = _side_effects(run, watch, grad_fn)
    if returned is None and _upstream_left_none(adapter, grad_fn, arguments, keywords):
        _missing_upstream_fallback(run, grad_fn, "returned None")
        return None
    line = trial.gradient_line = first_line(grad_fn)
    if variables:
        returned = _split_variable_gradients(run, trial, returned, line)
        if returned is None:
            return None
    gradients = _input_gradients(run, inputs.names, returned, line)
    if gradients is None:
        return None
    trial.gradients = gradients
    for role, names, metas, grads in (
        ("input", inputs.names, inputs.metas, gradients),
        ("variable", variable_names, variable_metas, trial.variable_gradients or []),
    ):
        for name, meta, gradient in zip(names, metas, grads):
            _check_gradient(adapter, role, name, meta, gradient, findings, line, [m.shape for m in output_metas])
    return trial


def direct_call(run: CheckRun, layout: Layout, upstreams: list) -> tuple[list, list | None]:
    """The op's flat outputs and gradients (the perturbable inputs', then the variables'; None for a composite)
    when the forward and the gradient function are called directly at `layout`, as the structure checks call them
    (which found them well-formed)."""
    adapter, target = run.adapter, run.target
    given = run.inputs.from_python  # Python numbers as given, as the structure checks pass them
    structure = tuple(given[k][1] if k in given else arg for k, arg in enumerate(layout.structure))
    forward = adapter.run_forward(lambda: target.raw(*structure, **layout.kwargs), exclude=list(layout.inputs))
    outputs, _ = adapter.flatten(target.outputs_of(forward.result))
    if target.origin == "composite":
        return outputs, None
    arguments, keywords = _gradient_call(adapter, layout.structure, forward.result[0], upstreams, forward.variables)
    returned = adapter.call_gradient(forward.result[1], arguments, keywords)
    variable_gradients: list = []
    if forward.variables:
        returned, variable_gradients = returned
        variable_gradients, _ = adapter.flatten(variable_gradients)
    gradients, _ = adapter.flatten(returned)
    return outputs, [gradients[k] for k in layout.perturbable] + list(variable_gradients)


def _outputs(run: CheckRun, structure: Any) -> tuple[list, list[str], list[TensorMeta]] | None:
    """The forward's flat outputs, their names and metas, recorded in the shapes table (nonfinite ones warned);
    None after a `return-structure` problem (an output that is not a tensor)."""
    adapter, findings = run.adapter, run.findings
    outputs, paths = adapter.flatten(structure)
    output_names = [f"output{path}" for path in paths]
    output_metas = []
    for name, output in zip(output_names, outputs):
        meta = adapter.meta(output)
        if meta is None:
            findings.add(
                "return-structure",
                "error",
                f"`{run.target.name}` returns a {type(output).__name__} as {name}; the outputs must be tensors.",
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
    return outputs, output_names, output_metas


def _upstreams(run: CheckRun, output_names: list[str], output_metas: list[TensorMeta]) -> list:
    """A random upstream gradient per output (zeros for integer and boolean outputs, empty strings for string ones),
    recorded in the shapes table."""
    rng = np.random.default_rng(run.options.seed)

    def upstream(meta: TensorMeta) -> np.ndarray:
        shape = known_shape(meta)
        if meta.floating:
            return rng.random(shape, dtype=np.float32) * 2 - 1
        return np.full(shape, b"", dtype=object) if meta.dtype == "string" else np.zeros(shape)

    upstreams = [run.adapter.constant(upstream(meta), meta.dtype) for meta in output_metas]
    for name, meta in zip(output_names, output_metas):
        run.findings.rows.append(TensorRow("upstream", f"d{name}", meta.shape, meta.dtype))
    return upstreams


def _attempts_pair(result: Any) -> bool:
    """Whether the forward's result is meant as `(outputs, grad_fn)` (rightly or not): a sequence holding a
    callable or a non-tensor, as against outputs alone."""
    return isinstance(result, (tuple, list)) and any(callable(value) or value is None for value in result)


def _as_composite(run: CheckRun, forward: ForwardRun) -> Target | None:
    """A callable that returns outputs, not `(outputs, grad_fn)`: a function reaching custom-gradient ops, or entering
    gradient overrides that apply to its ops, is checked as one (the composite, returned, noted); any other gets
    `return-structure` saying what was expected (None)."""
    adapter, target, findings = run.adapter, run.target, run.findings
    reached = forward.custom_gradients
    applied = _overrides(run, forward.overrides)
    composite = target
    if target.origin == "plain" or applied:
        if reached or applied:
            try:
                given_function = target.op if target.origin == "composite" else target.raw
                composite = adapter.resolve(given_function, composite=True, overrides=bool(applied))
            except NotImplementedError:
                reached = None
    if not applied and (not reached if target.origin == "plain" else reached is not None and not reached):
        if not forward.overrides:  # an override that did nothing is said already
            findings.add("return-structure", "error", _neither(run, reached, forward.result), line=return_line(target))
        return None
    wording = findings.wording
    if applied:
        findings.add(
            "composite",
            "info",
            f"`{target.name}` applies {_registered(applied)} through {wording.override}: its gradient, which "
            f"{wording.framework} takes through {'them' if len(applied) > 1 else 'it'}, is compared with finite "
            f"differences. Autodiff, here, is the same function without the override "
            f"({joined(sorted({o.op_type for o in applied}))}'s own gradient).",
        )
        return composite
    names = listing(list(reached or ())) if reached else "custom-gradient ops"
    findings.add(
        "composite",
        "info",
        f"`{target.name}` is not a custom-gradient op itself but a function that reaches "
        f"{plural(len(reached or ()), 'custom-gradient op') if reached else 'custom gradients'} ({names}): its "
        f"gradient, which {wording.autodiff} takes through their custom gradients, is compared with finite "
        "differences. Autodiff, here, is the same function with those custom gradients replaced by autodiff of "
        "their own forwards.",
    )
    return composite


def _registered(applied: list[Override]) -> str:
    """ "the gradient registered as `STE` (`ste_grad`) to its 2 Sign ops", for each override that applied."""
    parts = []
    for override in applied:
        function = f" (`{override.function}`)" if override.function and override.function != override.gradient else ""
        ops = f"{override.op_type} op" if override.built == 1 else plural(override.built, f"{override.op_type} op")
        parts.append(f"the gradient registered as `{override.gradient}`{function} to its {ops}")
    return joined(parts)


def _overrides(run: CheckRun, overrides: tuple[Override, ...]) -> list[Override]:
    """The gradient overrides the forward entered that apply to its ops; the others said: one that applied to no op
    (`override-unused`, naming the op types it did see), one naming no registered gradient (`override-unregistered`),
    one entered where ops run eagerly, where no override applies (`override-eager`, when the op is checked there)."""
    target, findings = run.target, run.findings
    wording = findings.wording
    applied = []
    # An override map that applied a gradient to one op type may well map others to the same gradient for ops built
    # elsewhere (the recipe's `PyFunc` and `PyFuncStateless`): those keys are said, not failed. A key of its own
    # gradient that applied to nothing fails, whatever else the map applied.
    used = {(override.where, override.gradient) for override in overrides if override.built or override.superseded}
    for override in overrides:
        written = f"`{wording.override}({{{override.op_type!r}: {override.gradient!r}}})`"
        line = override.where[1] if override.where and override.where[0] == target.filename else None
        if not override.built and override.superseded:  # an override inside it, of the same type, applies instead
            continue
        if not override.built:
            message = _unused(written, override)
            if (override.where, override.gradient) in used:
                findings.add("override-unused", "info", message, line=line)
            else:
                findings.add("override-unused", "error", message, line=line)
            continue
        if not override.registered:
            findings.add(
                "override-unregistered",
                "error",
                f"{written} maps {override.op_type} ops to `{override.gradient}`, under which no gradient is "
                f"registered: {wording.framework} fails when it takes their gradient. Register one "
                f"(`@{wording.registers}({override.gradient!r})` above a def `(op, grad)`, or that def under "
                f"%%register_gradient {override.op_type}), or name the one you registered.",
                line=line,
            )
            continue
        if override.mistake is not None:
            code, message = override.mistake
            findings.add(code, "warning" if code == "none-gradient" else "error", message, line=line)
            if code != "none-gradient":
                continue
        if override.eagerly and not target.graph:
            findings.add(
                "override-eager",
                "warning",
                f"`{target.name}` enters {written} while its ops run eagerly, and {wording.override} applies only "
                f"{wording.override_scope}: called as it is, its {override.op_type} ops take their own gradient, not "
                f"`{override.gradient}`. Checked here as it is built in a graph, where the override applies; call "
                "it that way to get that gradient.",
                line=line,
            )
        applied.append(override)
    return applied


def _unused(written: str, override: Override) -> str:
    """Why an override applied to no op: what was built under it, and the op type probably meant."""
    types = [name for name in override.types if name != override.op_type]
    if not types:
        seen = "no op at all was built under it"
    else:
        close = [name for name in types if name.lower() == override.op_type.lower()] or difflib.get_close_matches(
            override.op_type, types, n=1, cutoff=0.6
        )
        seen = f"the ops built under it are of types {joined(types[:12])}" + (
            f" (did you mean `{close[0]}`?)" if close else ""
        )
        calls = [name for name in types if name.endswith("PartitionedCall")]
        if calls:
            seen += (
                f"; the {joined(calls)} ops are calls of functions traced on their own, whose ops the override "
                "does not reach"
            )
    return (
        f"{written} did nothing: no op of type {override.op_type} was built under it; {seen}. An override is keyed on "
        "the op type exactly as the framework spells it (`op.type`), and applies only to ops built in the graph it "
        "was entered on."
    )


def _neither(run: CheckRun, reached: tuple | None, result: Any) -> str:
    """What a callable that is neither a custom-gradient op nor reaches one was expected to be."""
    target, wording = run.target, run.findings.wording
    meta = run.adapter.meta(result)
    what = f"a {meta.dtype} tensor of shape {list(meta.shape)}" if meta is not None else _what(result)
    returned = f"`{target.name}` returns {what}"
    needs = f"{wording.decorator} needs `(outputs, grad_fn)`: end the function with `return outputs, grad`"
    if reached is None:
        return (
            f"{returned}; {needs}. (On {wording.runs_on}, gradmagic checks custom-gradient ops themselves, not the "
            "functions that call them: check the op itself.)"
        )
    return (
        f"{returned} and reaches no custom gradient. To define one, {needs}. gradmagic checks a custom-gradient op, "
        "a function returning `(outputs, grad_fn)`, or a function that calls custom-gradient ops (its gradient "
        "through them): this is none of these."
    )


def _distinct(names: list[str]) -> list[str]:
    """Variable names told apart: two variables named `w` (Keras layers, `tf.Variable`s made in a loop) become `w#1`
    and `w#2`, in the order the gradient function receives them."""
    repeated = {name for name in names if names.count(name) > 1}
    seen: dict[str, int] = {}
    distinct = []
    for name in names:
        if name in repeated:
            seen[name] = seen.get(name, 0) + 1
            name = f"{name}#{seen[name]}"
        distinct.append(name)
    return distinct


def _side_effects(run: CheckRun, watch: StateWatch, grad_fn: Any) -> StateWatch | None:
    """grad-side-effect (warning): the gradient function changed state it can reach; put back, and named. The watch,
    where it did (the check puts the state back again at its end)."""
    changed = watch.changed()
    if not changed:
        return None
    restored = watch.restore()
    what = ", ".join(f"`{name}` ({'assigned' if kind == 'variable' else 'changed'})" for name, kind in changed)
    run.findings.add(
        "grad-side-effect",
        "warning",
        f"The gradient function changes state: {what}. A framework calls it once per gradient taken, again in every "
        "trace of a compiled function, and not at all when no gradient is asked for, so such state counts nothing "
        "reliable. "
        + ("gradmagic put it back after each call it made. " if restored else "")
        + "Compute gradients only; keep state in the forward, or outside the op.",
        line=first_line(grad_fn),
    )
    return watch


def _fits_convention(run: CheckRun, outputs: list, output_names: list[str], variable_names: list[str], grad_fn) -> bool:
    """What this framework's convention refuses before the gradient function is called: closed-over variables it
    cannot differentiate, several outputs where it takes one, a gradient function without `variables`."""
    adapter, findings, target = run.adapter, run.findings, run.target
    convention, wording = adapter.convention, findings.wording
    if variable_names and convention.variables == "closed-over":
        several = len(variable_names) > 1
        them, s = ("them", "s") if several else ("it", "")
        findings.add(
            "closed-over-variable",
            "error",
            f"The forward reads the trainable Keras variable{s} {listing(variable_names)}, which "
            f"{'are' if several else 'is'} not an input. {wording.closed_over_consequence(several)}. Pass {them} as "
            f"input{s} "
            f"(`op(x, {', '.join(identifier(n) for n in variable_names)})`) and return "
            f"{'their' if several else 'its'} gradient with the others; that form works on every backend.",
            variable=variable_names[0],
            line=first_line(target.raw),
        )
        return False
    if convention.single_output and len(outputs) > 1:
        findings.add(
            "backend-outputs",
            "error",
            f"`{target.name}` returns {len(outputs)} output tensors ({listing(output_names)}); on "
            f"{wording.runs_on} {adapter.decorator} supports one: {wording.several_outputs(len(outputs))}. Return "
            "one tensor (stack or concatenate the outputs and split them after the op), or make one op per output.",
            line=return_line(target),
        )
        return False
    if variable_names and not _accepts_variables(grad_fn):
        several = len(variable_names) > 1
        findings.add(
            "missing-variables-kwarg",
            "error",
            f"The forward reads the variable{'s' if several else ''} {listing(variable_names)}, which "
            f"{'are' if several else 'is'} not an input, so {adapter.decorator} calls the gradient function "
            f"with `variables=[...]` and expects `(grad_xs, grad_vars)` back. {wording.variables_advice}",
            variable=variable_names[0],
            line=first_line(grad_fn),
        )
        return False
    return True


def _gradient_call(adapter: Adapter, structure: tuple, outputs: Any, upstreams: list, variables: list):
    """The positional and keyword arguments the framework passes to the gradient function."""
    convention = adapter.convention
    keywords: dict = {"variables": variables} if variables else {}
    if convention.upstream == "structure":  # JAX: one cotangent shaped like the outputs
        return [adapter.pack(outputs, upstreams)], keywords
    if convention.upstream == "keyword":  # Keras's PyTorch backend: the op's inputs, then upstream=
        return list(structure), {**keywords, "upstream": upstreams[0] if len(upstreams) == 1 else upstreams}
    return list(upstreams), keywords


def _accepts_call(run: CheckRun, grad_fn, arguments: list, keywords: dict) -> bool:
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
    adapter = run.adapter
    if adapter.convention.upstream == "keyword":
        how = "`grad(*inputs, upstream=upstream)`: the op's inputs positionally, the upstream gradient as the keyword "
        how += "`upstream`"
    elif adapter.convention.upstream == "structure":
        how = "`grad(upstream)`: one positional argument holding the upstream gradient (shaped like the outputs)"
    else:
        how = "`grad(*upstreams)`: one positional upstream gradient per output"
    run.findings.add(
        "backend-signature",
        "error",
        f"The gradient function `{getattr(grad_fn, '__name__', 'grad')}{signature}` cannot be called the way "
        f"{run.findings.wording.runs_on} calls it, {how} ({reason}). It works on some backends only. Write it the "
        f"portable way from the {adapter.decorator} documentation, which works on TensorFlow, JAX and PyTorch:\n"
        f"{PORTABLE_FORM}",
        line=first_line(grad_fn),
    )
    return False


def _asks_for_gradient(metas: list[TensorMeta], variables: list) -> bool:
    """Whether the framework asks the gradient function for anything: some input it differentiates (a floating or
    complex one), or a variable the forward reads."""
    return bool(variables) or any(meta.floating or meta.dtype.startswith("complex") for meta in metas)


def _upstream_left_none(adapter: Adapter, grad_fn: Any, arguments: list, keywords: dict) -> bool:
    """Whether a Keras backend that passes the upstream gradient positionally (TensorFlow, JAX) leaves a keyword-only
    `upstream` parameter, `grad(*args, upstream=None)` as PyTorch's backend calls it, at its default."""
    if adapter.convention.upstream == "keyword" or not adapter.convention.signature_checked:
        return False
    try:
        bound = inspect.signature(grad_fn).bind(*arguments, **keywords)
    except (TypeError, ValueError):
        return False
    parameter = bound.signature.parameters.get("upstream")
    return parameter is not None and parameter.kind is parameter.KEYWORD_ONLY and "upstream" not in bound.arguments


def _missing_upstream_fallback(run: CheckRun, grad_fn: Any, outcome: str) -> None:
    """backend-signature: `grad(*args, upstream=None)` without the fallback to the positional upstream gradient."""
    adapter = run.adapter
    run.findings.add(
        "backend-signature",
        "error",
        f"{run.findings.wording.runs_on} passes the upstream gradient positionally, in `*args`, so `upstream` keeps "
        f"its default None here, and the gradient function {outcome}. (Keras's PyTorch backend passes "
        f"`upstream=`.) Start it with the fallback from the {adapter.decorator} documentation, which works on "
        f"TensorFlow, JAX and PyTorch:\n{PORTABLE_FORM}",
        line=first_line(grad_fn),
    )


def _split_variable_gradients(run: CheckRun, trial: Trial, returned: Any, line: int | None) -> Any:
    """`(grad_xs, grad_vars)`: the variable gradients recorded in the trial, `grad_xs` returned; None on a mistake."""
    findings, names = run.findings, trial.variable_names
    if not (isinstance(returned, (tuple, list)) and len(returned) == 2):
        findings.add(
            "grad-structure",
            "error",
            f"With variables, the gradient function must return `(grad_xs, grad_vars)`; it returned "
            f"{_what(returned)}. Return `grad_xs, [gradient of each of {listing(names)}]`.",
            line=line,
        )
        return None
    returned, variable_gradients = returned
    variable_gradients, _ = run.adapter.flatten(variable_gradients)
    if len(variable_gradients) != len(names):
        findings.add(
            "variable-grad-count",
            "error",
            f"The gradient function returns {plural(len(variable_gradients), 'variable gradient')} for "
            f"{plural(len(names), 'variable')} ({listing(names)}): `grad_vars` needs one entry per variable, in the "
            "order of the `variables` list it receives.",
            variable=names[0],
            line=line,
        )
        return None
    trial.variable_gradients = variable_gradients
    return returned


def _input_gradients(run: CheckRun, names: list[str], returned: Any, line: int | None) -> list | None:
    """One gradient per input leaf (named `names`), or None after recording why not (a list where a tuple is needed,
    a count)."""
    adapter, findings = run.adapter, run.findings
    if isinstance(returned, collections.abc.Iterator):  # a generator expression, `map`, `zip`: no gradients yet
        findings.add(
            "grad-type",
            "error",
            f"The gradient function returns {_what(returned)}, not the gradients: {adapter.decorator} takes it as it "
            "is, unchecked, and it fails later, far away. Return a tuple of gradients (one per input, None for an "
            "input without one): `tuple(...)` around a generator expression, or the tensor itself for one input.",
            line=line,
        )
        return None
    if adapter.convention.tuple_required and isinstance(returned, list):
        findings.add(
            "grad-list",
            "error",
            f"The gradient function returns a list of {len(returned)}; on {findings.wording.runs_on} "
            f"{adapter.decorator} needs a tuple ({findings.wording.list_failure(len(names))}). Return "
            f"`({', '.join('grad_' + identifier(n) for n in names)}{',' if len(names) == 1 else ''})` "
            "or `tuple(grads)`: a tuple works on every backend.",
            line=line,
        )
        return None
    gradients, _ = adapter.flatten(returned)
    if len(gradients) != len(names):
        returns = (
            f"Return one per input, in order: `return {', '.join('grad_' + identifier(n) for n in names)}` (None for "
            "an input without gradient)."
            if names
            else "Return no gradient: `return ()`, or give the op tensor inputs."
        )
        findings.add(
            "grad-count",
            "error",
            f"The gradient function returns {plural(len(gradients), 'gradient')} for {plural(len(names), 'input')}"
            f"{f' ({listing(names)})' if names else ''}. {returns}{_partial_note(run.target.raw)} "
            f"{findings.wording.wrong_count}",
            line=line,
        )
        return None
    return gradients


def _partial_note(raw: Any) -> str:
    """For an op given as a `functools.partial` that binds arguments by position: what that does to its inputs."""
    raw = given(raw)
    if not isinstance(raw, functools.partial) or not raw.args:
        return ""
    return (
        f" The op is a functools.partial that binds {plural(len(raw.args), 'argument')} by position: a bound "
        "argument is a constant of the op, not one of its inputs, and gets no gradient. Give the inputs to the check "
        "instead (bind only the options, by keyword: `partial(op, scale=2.0)`)."
    )


def _nonfinite_inputs(run: CheckRun, role: str, names: list[str], metas: list[TensorMeta], values: list) -> bool:
    """nonfinite-input: example inputs (or variables the forward reads) holding NaN or Inf, each named with its
    elements; the check stops there ("not checked"), before anything blames the op for what they make of it."""
    found = []
    for name, meta, value in zip(names, metas, values):
        if meta is None or not meta.floating:
            continue
        array = run.adapter.to_numpy(value)
        bad = np.argwhere(~np.isfinite(array))
        if not len(bad):
            continue
        indices = [tuple(int(i) for i in index) for index in bad[:LISTED]]
        kinds = sorted({"NaN" if np.isnan(array[index]) else "Inf" for index in indices})
        elements = [element_label(name, index) for index in indices]
        found += elements
        what = f"The example input `{name}`" if role == "input" else f"The variable `{name}`, which the forward reads,"
        run.findings.add(
            "nonfinite-input",
            "warning",
            f"{what} has {plural(len(bad), 'non-finite element')} ({'/'.join(kinds)}): "
            f"{', '.join(elements)}{' ...' if len(bad) > LISTED else ''}. At such a point the outputs and the "
            "gradients are not finite because the input is not, and finite differences cannot step from it: nothing "
            f"can be judged there. Check the op at finite {'inputs' if role == 'input' else 'variable values'}.",
            index=indices[0],
            **{role: name},
        )
    if found:
        what = "example inputs" if role == "input" else "variables the forward reads"
        run.findings.stopped = (
            f"the {what} are NaN/Inf at {', '.join(found[:LISTED])}{' ...' if len(found) > LISTED else ''}"
        )
    return bool(found)


def _check_keyword_inputs(adapter: Adapter, inputs, findings: Findings) -> None:
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


def _kin_hint(run: CheckRun) -> None:
    """framework-hint (info): the op's code uses a module that says it may be another decorator's op, one this
    framework runs too (`Wording.kin`: a Keras op checked as TensorFlow's)."""
    function, _ = unwrapped(run.target.raw)
    code, namespace = getattr(function, "__code__", None), getattr(function, "__globals__", None)
    if code is None or not isinstance(namespace, dict):
        return
    # A hand-decorated op's own decorator (`@keras.ops.custom_gradient`) says it too.
    names = code_names(code) | (decorator_names(run.target) if run.target.origin == "decorated" else set())
    for module, sentence in run.findings.wording.kin:
        used = set()
        for name in names:
            value = namespace.get(name)
            owner = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
            if isinstance(owner, str) and (owner == module or owner.startswith(module + ".")):
                used.add(f"`{name}`" if isinstance(value, types.ModuleType) else f"`{name}` from {owner}")
        if used:
            modules = ", ".join(sorted(used)[:3])
            run.findings.add("framework-hint", "info", sentence.format(op=run.findings.name, modules=modules))


def python_numbers_hint(inputs: CheckInputs, findings: Findings) -> str:
    """For an error where positional Python ints or bools became tensors (`--check bits=8`): which, and the fix."""
    if not inputs.from_python:
        return ""
    given = ", ".join(
        f"`{name}` (the Python {type(value).__name__} {value})" for name, value in inputs.from_python.values()
    )
    return (
        f" {given} reached the op as {'a tensor' if len(inputs.from_python) == 1 else 'tensors'} here, as every "
        f"positional input does {findings.wording.compiled}: if the op needs a Python number there, make the "
        "parameter keyword-only (`def op(x, *, bits)`: keyword arguments stay Python values and get no gradient), "
        "or convert it in the op (a cast to the float it computes in)."
    )


def _variable_name(findings: Findings, own: str | None, in_code: str | None) -> str:
    """A variable's name in the report: the framework's (`dense/w`, a scope's or a layer's path), unless that is a
    default the user never chose (`Wording.default_variable_name`): then the name the op's code reads it under
    (`w`)."""
    if own and not findings.wording.default_name(own):
        return own
    return in_code or own or "variable"


def _names_in_code(function: Any, variables: list) -> dict[int, str]:
    """The names the op's code reads each variable under (a notebook's `w`, a closure's `bias`), by the variable's
    id: what the user calls it, where the framework's own name is a default (`Variable`)."""
    function, _ = unwrapped(function)
    code = getattr(function, "__code__", None)
    if code is None or not variables:
        return {}
    wanted = {id(v) for v in variables}
    found: dict[int, str] = {}
    cells = zip(code.co_freevars, getattr(function, "__closure__", None) or ())
    scope = [(name, cell.cell_contents) for name, cell in cells if _filled(cell)]
    namespace = getattr(function, "__globals__", {})
    scope += [(name, namespace[name]) for name in sorted(code_names(code)) if name in namespace]
    for name, value in scope:
        if id(value) in wanted and id(value) not in found:
            found[id(value)] = name
    return found


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # a closure's variable not assigned yet
        return False
    return True


def _returns_outputs_and_grad(run: CheckRun, result: Any) -> bool:
    target, findings = run.target, run.findings
    if isinstance(result, (tuple, list)) and len(result) == 2 and callable(result[1]):
        return True
    if isinstance(result, (tuple, list)) and len(result) > 2 and callable(result[-1]):
        outputs = returned_names(target, len(result)) or [f"y{i}" for i in range(len(result) - 1)] + ["grad"]
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
    findings.add("return-structure", "error", message, line=return_line(target))
    return False


def _check_gradient(
    adapter: Adapter,
    role: str,
    name: str,
    meta: TensorMeta,
    gradient: Any,
    findings: Findings,
    line: int | None,
    output_shapes: list[tuple],
) -> None:
    where = {"input": name} if role == "input" else {"variable": name}
    kind: TensorRole = "downstream" if role == "input" else "variable-gradient"
    wording = findings.wording
    if gradient is None:
        # No mismatch of shapes: what a None gradient means (zero, right or wrong) is the problem's to say, once.
        findings.rows.append(TensorRow(kind, f"d{name}", None, None, meta.shape, meta.dtype, True))
        if meta.floating:
            findings.add(
                "none-gradient",
                "warning",
                f"The gradient for {role} `{name}` is None: {wording.framework} treats it as zero. Return "
                f"`{wording.zeros_like}({identifier(name)})` if that is meant, else compute it.",
                line=line,
                **where,
            )
        else:
            _not_compared(role, name, meta, findings, where)
        return
    gradient_meta = adapter.meta(gradient)
    if gradient_meta is None:
        try:
            gradient_meta = tensor_meta(adapter, adapter.to_tensors(gradient))
        except Exception:  # noqa: BLE001 - what the user's gradient function returned is no tensor at all
            findings.add(
                "grad-type",
                "error",
                f"The gradient for {role} `{name}` is {_what(gradient)}, not a tensor: {wording.framework} takes it "
                f"as it is, unchecked, and fails later, far away. Return a tensor of `{name}`'s shape "
                f"{list(meta.shape)} (or None for no gradient).",
                line=line,
                **where,
            )
            return
    matches = gradient_meta.shape == meta.shape and gradient_meta.dtype == meta.dtype
    findings.rows.append(
        TensorRow(kind, f"d{name}", gradient_meta.shape, gradient_meta.dtype, meta.shape, meta.dtype, matches)
    )
    if not meta.floating:
        _not_compared(role, name, meta, findings, where)
        return
    fixes = adapter.convention.fixes_gradients
    if gradient_meta.shape != meta.shape:
        jacobian = _jacobian_of(meta.shape, gradient_meta.shape, output_shapes)
        # A framework that sums a broadcast gradient back (PyTorch) gets it right, though the op is not portable: the
        # numbers then judge the summed gradient. A full Jacobian it would sum too, wrongly.
        fixed = fixes and jacobian is None and _broadcast_axes(meta.shape, gradient_meta.shape) is not None
        message = _shape_message(role, name, meta.shape, gradient_meta.shape, jacobian, fixed, findings)
        findings.add("grad-shape", "warning" if fixed else "error", message, line=line, **where)
    if gradient_meta.dtype != meta.dtype:
        fixed = fixes and gradient_meta.floating
        consequence = f" {wording.fixed_gradient('dtype', gradient_meta.dtype)}" if fixed else ""
        findings.add(
            "grad-dtype",
            "warning" if fixed else "error",
            f"The gradient for {role} `{name}` is {gradient_meta.dtype} but `{name}` is {meta.dtype}.{consequence} "
            f"Cast it: `{wording.cast}(grad, {identifier(name)}.dtype)`.",
            line=line,
            **where,
        )
    if gradient_meta.shape == meta.shape:
        what = f"The gradient for {role} `{name}`"
        _check_finite(adapter, gradient, meta, "nonfinite-gradient", what, findings, "error", **where)


def _not_compared(role: str, name: str, meta: TensorMeta, findings: Findings, where: dict) -> None:
    """An input or variable whose gradient is not compared: complex (not checked yet), or not differentiable."""
    if meta.dtype.startswith("complex"):
        findings.add(
            "complex-unchecked",
            "info",
            f"{role.capitalize()} `{name}` is {meta.dtype}: gradmagic does not check gradients of complex inputs yet "
            "(TensorFlow gives them the conjugate convention); only its shape and dtype are checked.",
            **where,
        )
        return
    findings.add(
        "not-differentiable",
        "info",
        f"{role.capitalize()} `{name}` is {meta.dtype}: not differentiable, its gradient is ignored.",
        **where,
    )


@dataclass(frozen=True)
class _Jacobian:
    """A gradient shaped as the Jacobian of an output in its input: `batch` leading axes shared by both (a
    per-example Jacobian; none for the full one), then the output's other axes and the input's (`output_first`), or
    the input's and the output's."""

    output: tuple
    batch: int
    output_first: bool


def _jacobian_of(expected: tuple, got: tuple, output_shapes: list[tuple]) -> _Jacobian | None:
    """How a gradient of shape `got` for an input of shape `expected` is a Jacobian of one of the outputs, if it is:
    d output / d input whole, or batched over leading axes the input and the output share."""
    for output in output_shapes:
        output = tuple(output)
        for batch in range(min(len(expected), len(output)) + 1):
            if expected[:batch] != output[:batch]:
                break
            inner, outer = tuple(expected[batch:]), output[batch:]
            if not inner:  # a scalar's Jacobian has the output's shape, as its unreduced broadcast has: that
                break  # mistake is by far the likelier
            if got == expected[:batch] + outer + inner:
                return _Jacobian(output, batch, True)
            if got == expected[:batch] + inner + outer:
                return _Jacobian(output, batch, False)
    return None


def _shape_message(
    role: str, name: str, expected: tuple, got: tuple, jacobian: _Jacobian | None, fixed: bool, findings: Findings
) -> str:
    """What a gradient of shape `got` for an input of shape `expected` does here, and its fix: `jacobian`, how it is
    the Jacobian of an output; `fixed`, the framework sums the broadcast back itself."""
    wording = findings.wording
    consequence = wording.fixed_gradient("shape") if fixed else wording.wrong_shape
    message = f"The gradient for {role} `{name}` has shape {list(got)} but `{name}` has shape {list(expected)}; "
    message += consequence
    if jacobian is None:
        return message + shape_advice(name, expected, got, fixed, wording)
    contraction = _contraction(jacobian, expected, wording)
    if not jacobian.batch:
        return message + (
            f" Its shape is the output's {list(jacobian.output)} and the {role}'s {list(expected)} together: the "
            f"gradient function returns the full Jacobian d output / d {name}, not the vector-Jacobian product. Return "
            f"the upstream gradient times the Jacobian, summed over the output's axes (`{contraction}`), or better, "
            "that product without building the Jacobian."
        )
    batch = list(expected[: jacobian.batch])
    parts = [
        f"the output's {list(jacobian.output[jacobian.batch :])}",
        f"the {role}'s {list(expected[jacobian.batch :])}",
    ]
    if not jacobian.output_first:
        parts.reverse()
    return message + (
        f" Its shape is the batch axes {batch} that the {role} and the output share, then {parts[0]}, then "
        f"{parts[1]}: the gradient function returns one Jacobian d output / d {name} per example, not the "
        "vector-Jacobian product. Return the upstream gradient times each example's Jacobian, summed over the "
        f"output's axes (`{contraction}`), or better, that product without building the Jacobians."
    )


def _contraction(jacobian: _Jacobian, expected: tuple, wording) -> str:
    """The call that turns the (batched) Jacobian into the vector-Jacobian product: an einsum over its axes."""
    batch = "abcdefgh"[: jacobian.batch]
    outer = "ijklmn"[: len(jacobian.output) - jacobian.batch]
    inner = "pqrstu"[: len(expected) - jacobian.batch]
    axes = batch + (outer + inner if jacobian.output_first else inner + outer)
    return f'{wording.einsum}("{batch + outer},{axes}->{batch + inner}", upstream, jacobian)'


def shape_advice(name: str, expected: tuple, got: tuple, fixed: bool, wording) -> str:
    """How to turn a gradient of shape `got` into one of `name`'s shape `expected` (a sentence, with a leading space);
    `fixed`: the framework sums a broadcast back itself, for portability only."""
    axes = _broadcast_axes(expected, got)
    if axes is not None:
        reduced = f"{wording.reduce_sum}(grad, axis={list(axes)})"
        if len(got) - len(axes) != len(expected):
            reduced = f"{wording.reshape}({reduced}, {list(expected)})"
        if fixed:
            return f" Sum it over the broadcast axes yourself, `{reduced}`, which works on every backend."
        return f" `{name}` was broadcast in the forward: sum the gradient over the broadcast axes, `{reduced}`."
    fix = f" Return one gradient value per element of `{name}`, in its shape {list(expected)}"
    if len(got) > 1 and tuple(got) == tuple(reversed(expected)):
        return fix + ": its shape is reversed, a transpose is missing or one too many."
    if int(np.prod(got)) == int(np.prod(expected)):
        return fix + f"; if it holds the right values in another layout, `{wording.reshape}(grad, {list(expected)})`."
    return fix + f": it has {int(np.prod(got))} elements where `{name}` has {int(np.prod(expected))}."


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
    severity: Severity = "error",
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


def _raised(what: str, findings: Findings, error: BaseException, grad_fn: Any = None, upstream_count: int = 0) -> str:
    wording = findings.wording
    message = f"The {what} of `{findings.name}` raised {type(error).__name__}: {_first_lines(wording.message(error))}"
    if wording.is_ambiguous_truth(error):
        message += (
            f" {wording.conditional} needs a scalar predicate; for an element-wise choice use "
            f"`{wording.where}(condition, a, b)`, which also keeps the gradient element-wise."
        )
    elif grad_fn is not None and isinstance(error, TypeError) and "positional argument" in str(error):
        message += (
            f" The gradient function receives one upstream gradient per output ({upstream_count} here), "
            "positionally: give it that many parameters."
        )
    return message


def _first_lines(text: str) -> str:
    lines = text.strip().splitlines()
    text = " ".join(lines[:3]) + (" ..." if len(lines) > 3 else "")
    return text if text.endswith((".", "...", "!", "?")) else text + "."


def _what(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    kind = type(value).__name__
    return "None" if value is None else f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}"
