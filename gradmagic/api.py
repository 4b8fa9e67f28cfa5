"""gradmagic's Python API: `check`, `assert_gradient`, `gradient_graph`, and the context a check ran in.

Above the check engine (`gradmagic.checking`): a check here is the engine's
check in this process, then, for a Keras op with `backends`, the same op on
Keras's other backends in processes of their own (`gradmagic.portability`).
The context is remembered for the report's widget, so that a report left as
a cell's value can check again.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable

from gradmagic import checking, portability
from gradmagic import inputs as example_inputs
from gradmagic.checking.options import CheckOptions
from gradmagic.errors import GradmagicError, InputError, interrupts_in_user_frames
from gradmagic.frameworks import get_adapter
from gradmagic.magic_line import split_words
from gradmagic.notebook import contexts, display
from gradmagic.notebook.kernel import source_label, user_namespace
from gradmagic.render.text import render_text
from gradmagic.report import CheckedInput, Graph, Problem, Report


@dataclasses.dataclass(frozen=True)
class CheckContext:
    """What a check was asked: the op, its options, and its inputs (typed as `ARG=EXPR`, or given as values)."""

    op: Callable
    options: CheckOptions
    examples: tuple[example_inputs.ExampleInput, ...] = ()  # as typed (magics); evaluated again on re-check
    arguments: tuple[list, dict] | None = None  # as given (gradmagic.check), used when no inputs are typed
    #: Where the inputs came from, as the report says it: "the cell's --check", "%gradcheck", ...
    inputs_from: str = "gradmagic.check's arguments"
    rechecked: bool = False  # the inputs are a Re-check's, typed in the report, not those `inputs_from` gave
    #: How a `%%custom_gradient` cell made its op, when not from a plain def: said in the report (`cell-definition`).
    cell_note: str | None = None

    @property
    def inputs_said(self) -> str:
        return f"Re-check, not {self.inputs_from}" if self.rechecked else self.inputs_from

    @property
    def inputs_text(self) -> str:
        return " ".join(str(example) for example in self.examples)

    def run(self, args: list, kwargs: dict, progress: Callable[[float, str], None] | None = None) -> Report:
        """Check the op at these inputs (on the other Keras backends too, if asked); remember this context."""
        step = progress or (lambda fraction, phase: None)
        report = checking.check(self.op, tuple(args), kwargs, self.options, step, name_source=source_label)
        if self.options.backends:
            step(0.9, "other backends")
            report = portability.with_backends(report, self.op, tuple(args), kwargs, self.options, source_label)
        step(1.0, "done")
        report = dataclasses.replace(report, inputs=self._typed(report.inputs), inputs_from=self.inputs_said)
        if self.cell_note is not None:
            noted = Problem("cell-definition", "info", self.cell_note)
            report = dataclasses.replace(report, problems=(noted, *report.problems))
        contexts.remember(report, self)
        return report

    def _typed(self, inputs: tuple[CheckedInput, ...]) -> tuple[CheckedInput, ...]:
        """The inputs the check ran at, each with the expression it was typed as (an argument's leaves, `pair[0]`,
        with the argument's)."""
        typed = {example.name: example.expression for example in self.examples}
        return tuple(dataclasses.replace(found, expression=typed.get(found.name.split("[")[0])) for found in inputs)

    def recheck(self, text: str, overrides: dict, progress: Callable[[float, str], None] | None = None) -> Report:
        """Check again with the inputs typed in `text` (`x=EXPR y=EXPR`; empty: the same inputs) and `overrides`."""
        examples = example_inputs.parse_example_inputs(split_words(text)) if text.strip() else self.examples
        if examples:
            signature = inspect.signature(self.op)
            example_inputs.check_names(examples, signature, getattr(self.op, "__name__", "op"))
            with get_adapter(self.options.framework).example_scope():
                values = example_inputs.evaluate(examples, user_namespace())
            arguments = example_inputs.bind(signature, values)
        elif self.arguments is not None:
            arguments = self.arguments
        else:
            raise InputError("Type the example inputs to check at: x=EXPR y=EXPR ...")
        given = {name for name in ("rtol", "atol", "eps") if overrides.get(name) is not None}
        sources = {name: label for name, label in self.options.sources.items() if name not in overrides}
        sources.update({name: f"the Re-check's {'step (eps)' if name == 'eps' else name}" for name in given})
        context = dataclasses.replace(
            self,
            options=dataclasses.replace(self.options, **overrides, sources=sources),
            examples=examples,
            arguments=None if examples else arguments,
            rechecked=self.rechecked or examples != self.examples,
        )
        return context.run(*arguments, progress=progress)


@interrupts_in_user_frames
def check(
    op: Callable,
    *args: Any,
    kwargs: dict | None = None,
    framework: str = "tensorflow",
    progress: Callable[[float, str], None] | None = None,
    **options: Any,
) -> Report:
    """Check the custom gradient of `op` at the example inputs `args`; never raises because the op is broken.

    `op` may be an op made by `%%custom_gradient`, a function decorated with
    `tf.custom_gradient` (or, with `framework="keras"`, `keras.ops.custom_gradient`)
    by hand, or a plain function returning `(outputs, grad_fn)`. With
    `framework="keras"` the op runs on the Keras backend of this process, and
    `backends=[...]` (or `"all"`) also checks it on other backends, each in a
    subprocess. `kwargs` are keyword arguments for the op (they get no
    gradient). `options` are the fields of `CheckOptions`. `progress`, if
    given, is called with the fraction done (0 to 1) and the phase starting.
    In Jupyter, the report left as a cell's value shows as a widget whose
    Re-check button runs the check again.

    Arguments that cannot be what they name raise a TypeError or ValueError
    saying which: an `op` that is not callable, inputs that do not fit its
    signature, `kwargs` that are not keyword arguments, a `progress` that
    cannot be called with `(fraction, phase)`, an unknown option or framework.
    """
    return check_given(op, args, kwargs, framework, progress, options, "gradmagic.check's arguments")


def check_given(
    op: Callable,
    args: tuple,
    kwargs: dict | None,
    framework: str,
    progress: Callable[[float, str], None] | None,
    options: dict,
    inputs_from: str,
) -> Report:
    """`check`, its report saying where its inputs came from (`inputs_from`: "a watched training's call 3")."""
    settings = _options(op, kwargs, progress, framework, options, args)
    display.register()
    context = CheckContext(op, settings, arguments=(list(args), dict(kwargs or {})), inputs_from=inputs_from)
    return context.run(list(args), dict(kwargs or {}), progress=progress)


@interrupts_in_user_frames
def assert_gradient(op: Callable, *args: Any, **options: Any) -> Report:
    """`check` for test suites: raise AssertionError with the report's text unless it passes."""
    __tracebackhide__ = True
    report = check(op, *args, **options)
    if not report.ok:
        raise AssertionError(render_text(report))
    return report


@interrupts_in_user_frames
def gradient_graph(
    op: Callable, *args: Any, kwargs: dict | None = None, framework: str = "tensorflow", fold: bool = True
) -> Graph:
    """The forward and the backward of `op` at `args`, as traced: what the report's `graph` holds.

    Raises GradmagicError, with the report's text, when the op is too broken to trace.
    """
    settings = _options(
        op, kwargs, None, framework, dict(tf_function=False, numbers=False, sweep=False, fold_graph=fold), args
    )
    display.register()
    report = checking.check(op, args, kwargs, settings, name_source=source_label)
    if report.graph is None:
        raise GradmagicError(f"The gradient graph of `{report.op.name}` cannot be traced:\n{render_text(report)}")
    return report.graph


def _options(op: Any, kwargs: Any, progress: Any, framework: Any, options: dict, args: tuple = ()) -> CheckOptions:
    """The check's options, validated, after the arguments that are not options (a TypeError or ValueError naming
    the argument that cannot be what it names)."""
    if not callable(op):
        raise TypeError(
            f"op must be a custom-gradient op or a function returning (outputs, grad_fn), not {_shown(op)}"
            + (": give the op first, then its inputs, check(op, x)" if op is None and args else "")
        )
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(f"kwargs must be a dict of keyword arguments for the op, not {_shown(kwargs)}")
    for key in kwargs or {}:
        if not isinstance(key, str) or not key.isidentifier():
            raise TypeError(f"kwargs must name the op's keyword arguments, not {_shown(key)}")
    if progress is not None and not _takes_two(progress):
        raise TypeError(f"progress must be a callable(fraction, phase), not {_shown(progress)}")
    options = dict(options)
    sources = options.pop("sources", None) or {}  # how the caller's options were given (the watch: `%config`)
    # The others, as the report names them (by their names): those that are not the defaults.
    defaults = CheckOptions()
    given = {name: name for name, value in options.items() if getattr(defaults, name, object()) != value}
    settings = CheckOptions.of(framework=framework, **options, sources={**given, **sources})
    _check_call(op, args, kwargs or {})
    return settings


def _check_call(op: Callable, args: tuple, kwargs: dict) -> None:
    """TypeError unless `op` can take these inputs (where its signature can be read)."""
    try:
        signature = inspect.signature(op)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as error:
        name = getattr(op, "__name__", type(op).__name__)
        raise TypeError(
            f"The inputs do not fit `{name}{signature}`: {error}. Give the op's inputs after it, check(op, x, y), "
            "and its keyword arguments as kwargs={...}"
        ) from None


def _takes_two(function: Callable) -> bool:
    """Whether `function(fraction, phase)` can be called (True where its signature cannot be read)."""
    try:
        inspect.signature(function).bind(0.0, "")
    except TypeError:
        return False
    except ValueError:
        return True
    return True


def _shown(value: Any) -> str:
    """A value as an error message names it, at most a line."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
