"""Example inputs written on a magic line as `ARG=EXPR`.

They are parsed, checked against the op's signature, evaluated in the user
namespace and bound into the arguments of one call. `ARG=EXPR` reads like a
keyword argument in a call, with two differences that follow
`tf.custom_gradient`: parameters that can be passed by position are passed by
position (gradients flow only to positional inputs, and graph mode refuses
keywords), and for a `*args` parameter EXPR is a tuple or list spread into
the call.
"""

from __future__ import annotations

import inspect
import keyword
from dataclasses import dataclass

from gradmagic.errors import InputError

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@dataclass(frozen=True)
class ExampleInput:
    """One `ARG=EXPR` from a magic line."""

    name: str
    expression: str

    def __str__(self) -> str:
        return f"{self.name}={self.expression}"


def parse_example_inputs(words: list[str]) -> tuple[ExampleInput, ...]:
    """Parse `ARG=EXPR` words; each EXPR must be a valid Python expression."""
    parsed: dict[str, ExampleInput] = {}
    for word in words:
        name, equals, expression = word.partition("=")
        name, expression = name.strip(), expression.strip()
        if not equals or not name.isidentifier() or keyword.iskeyword(name) or not expression:
            raise InputError(f"`{word}` is not an example input: write ARG=EXPR, e.g. `x=tf.constant([1., 2.])`.")
        if name in parsed:
            raise InputError(f"The example input `{name}` is given twice (`{parsed[name]}` and `{word}`).")
        try:
            compile(expression, f"<{name}=...>", "eval")
        except SyntaxError as error:
            raise InputError(f"In `{word}`, `{expression}` is not a valid Python expression ({error.msg}).") from None
        parsed[name] = ExampleInput(name, expression)
    return tuple(parsed.values())


def check_names(inputs: tuple[ExampleInput, ...], signature: inspect.Signature, op_name: str) -> None:
    """Raise `InputError` if the inputs name unknown parameters or miss required ones."""
    parameters = signature.parameters
    takes_any_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    given = {example.name for example in inputs}
    for example in inputs:
        parameter = parameters.get(example.name)
        if (parameter is None and not takes_any_keyword) or (
            parameter is not None and parameter.kind is inspect.Parameter.VAR_KEYWORD
        ):
            names = ", ".join(p.name for p in parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD)
            raise InputError(
                f"`{op_name}{signature}` has no parameter `{example.name}` (in `{example}`); "
                f"its parameters are: {names or 'none'}."
            )
    for parameter in parameters.values():
        required = parameter.default is inspect.Parameter.empty and parameter.kind in (
            *_POSITIONAL,
            inspect.Parameter.KEYWORD_ONLY,
        )
        if required and parameter.name not in given:
            raise InputError(
                f"No example input for `{parameter.name}` of `{op_name}{signature}`: "
                f"add `--check {parameter.name}=EXPR`."
            )


def evaluate(inputs: tuple[ExampleInput, ...], namespace: dict) -> dict[str, object]:
    """Evaluate each EXPR in `namespace`; a failing EXPR raises `InputError` naming it."""
    values = {}
    for example in inputs:
        try:
            values[example.name] = eval(example.expression, namespace)  # noqa: S307 - the user's own expression
        except Exception as error:
            raise InputError(
                f"Evaluating the example input `{example}` raised {type(error).__name__}: {error}"
            ) from None
    return values


def bind(signature: inspect.Signature, values: dict[str, object]) -> tuple[list, dict]:
    """Turn evaluated inputs into `(args, kwargs)` for one call (see the module docstring)."""
    args: list = []
    kwargs: dict = {}
    skipped_defaults: list = []
    for parameter in signature.parameters.values():
        given = parameter.name in values
        if parameter.kind in _POSITIONAL:
            if given:
                args += skipped_defaults + [values[parameter.name]]
                skipped_defaults = []
            else:
                skipped_defaults.append(parameter.default)
        elif parameter.kind is inspect.Parameter.VAR_POSITIONAL and given:
            spread = values[parameter.name]
            if not isinstance(spread, (tuple, list)):
                raise InputError(
                    f"`{parameter.name}` is the `*{parameter.name}` parameter: give a tuple or list of inputs, "
                    f"e.g. `{parameter.name}=(a, b)`; got a {type(spread).__name__}."
                )
            args += skipped_defaults + list(spread)
            skipped_defaults = []
        elif parameter.kind is inspect.Parameter.KEYWORD_ONLY and given:
            kwargs[parameter.name] = values[parameter.name]
    kwargs.update({name: value for name, value in values.items() if name not in signature.parameters})
    return args, kwargs

