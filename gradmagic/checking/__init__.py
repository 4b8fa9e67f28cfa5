"""The check engine: `check(op, args, kwargs, options)` turns a custom gradient into a `Report`.

`check` (`engine.py`) is a short sequence of named phases, each a function of
its own module that takes what it needs and returns what it found (as
`torch.autograd.gradcheck` calls its checks in turn); `run.py` holds the
context they share (`CheckRun`) and the values they hand on:

1. structure (`engine.structure`): the example inputs as tensors, named
   (`arguments.py`); the forward and the gradient function called once, what
   the framework accepts silently or reports far away (`structure.py`); z laid
   out over them: a `Subject`;
2. graph (`traced.py`): the forward and the backward traced together, drawn
   (`graph.py`, `graph_layout.py`): `Traced`;
3. compiled (`compiled.py`): the gradient taken as the framework takes it,
   compiled, against that direct call, and its linearity in the upstream
   (`linearity.py`): the `Evidence` the numbers read;
4. numbers (`numbers.py`): finite differences against the custom gradient and
   autodiff, with dense Jacobians (`full.py`) or random projections
   (`projection/`), in float64 where the op accepts it (`precision.py`); the
   second order (`second_order.py`); the sweep (`sweep.py`). A mismatch is
   told from an intended surrogate gradient (`surrogate.py`).

The algorithms are written once, in NumPy, over the adapter's batched
primitives (`frameworks.base.Adapter`). `check` never raises because the
user's op is broken: every failure becomes a problem in the report.
"""

__all__ = ["CheckOptions", "check"]


def __getattr__(name):
    # The engine is imported when a check first runs: `CheckOptions` alone (the magics' defaults) stays light.
    if name == "check":
        from gradmagic.checking.engine import check

        return check
    if name == "CheckOptions":
        from gradmagic.checking.options import CheckOptions

        return CheckOptions
    raise AttributeError(f"module 'gradmagic.checking' has no attribute {name!r}")
