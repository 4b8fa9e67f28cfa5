"""The check engine's `check`: a check as a sequence of named phases, each a function of its own module that takes
what it needs and returns what it found (see the package's docstring for the phases)."""

from __future__ import annotations

import contextlib
from typing import Callable

from gradmagic.checking.arguments import lay_out, prepare_inputs
from gradmagic.checking.compiled import compile_and_judge
from gradmagic.checking.findings import Findings
from gradmagic.checking.numbers import compare_numbers
from gradmagic.checking.options import CheckOptions
from gradmagic.checking.run import CheckRun, Evidence, Subject
from gradmagic.checking.side_effects import OpEffects
from gradmagic.checking.structure import check_structure
from gradmagic.checking.traced import trace
from gradmagic.errors import GradmagicError
from gradmagic.frameworks import get_adapter
from gradmagic.frameworks.base import Target
from gradmagic.report import Report


def check(
    op: Callable,
    args: tuple,
    kwargs: dict | None = None,
    options: CheckOptions | None = None,
    progress: Callable[[float, str], None] | None = None,
    name_source: Callable[[str | None], str | None] | None = None,
) -> Report:
    """Check the custom gradient of `op` at the example inputs `args` (and keyword arguments `kwargs`).

    `progress`, if given, is called with the fraction done (0 to 1) and the
    phase starting; `name_source` turns the op's file name into what the user
    calls it ("Cell In[3]").
    """
    options = options or CheckOptions()
    adapter = get_adapter(options.framework)
    target = adapter.resolve(op)
    findings = Findings(target.name, adapter.wording, name_source(target.filename) if name_source else target.filename)
    # Graph mode builds and runs in a graph and session of the op's own; what the op's forward changes is undone.
    with _own_errors_noted(target), adapter.check_scope(target), OpEffects(adapter, target.raw) as effects:
        run = CheckRun(adapter, target, options, findings, progress or _no_progress, effects=effects)
        subject = run.phase("structure", 0.0, structure, args, dict(kwargs or {}), timing="structure")
        if subject is None:
            return run.report()
        run.checks(subject)
        evidence = Evidence(run.phase("graph", 0.15, trace, timing="graph"))
        if not run.failed:  # what the numbers need of the compiled phase (the traced run's values let go, compared)
            evidence = run.phase(adapter.compiled, 0.3, compile_and_judge, evidence.traced, timing="tf_function")
        numerics = sweep = None
        if options.numbers and not run.failed:
            numerics, sweep = run.phase("finite differences", 0.45, compare_numbers, evidence, timing="numerics")
        if subject.trial.state is not None:  # the gradient function changed state again in the calls since
            subject.trial.state.restore()
        return run.report(evidence.traced, numerics, sweep)


def structure(run: CheckRun, args: tuple, kwargs: dict) -> Subject | None:
    """The structure phase: the example inputs as tensors (`arguments.py`), the forward and the gradient function
    called once (`structure.py`), z laid out over them; None where the op is too broken to go on."""
    inputs = prepare_inputs(run, args, kwargs)
    if inputs is None:
        return None
    trial = check_structure(run, inputs)
    if trial is None or run.failed:
        return None
    return lay_out(run, inputs, trial)


@contextlib.contextmanager
def _own_errors_noted(target: Target):
    """Exceptions of gradmagic's own code (the op's failures are findings: `OpFailed`, the structure checks) get a
    note saying so."""
    try:
        yield
    except Exception as error:
        if not isinstance(error, GradmagicError) and hasattr(error, "add_note"):  # Python 3.11 on
            error.add_note(f"This is an error in gradmagic's own code, not in `{target.name}`; please report it.")
        raise


def _no_progress(fraction: float, phase: str) -> None:
    pass
