"""The check engine: `check(op, args, kwargs, options)` turns a custom gradient into a `Report`.

`check` (`engine.py`) is a sequence of named phases, each in its own module, passing
one `CheckRun` along (as `torch.autograd.gradcheck` calls its checks in turn):

1. inputs (`arguments.py`): the example inputs as tensors, named;
2. structure (`structure.py`): the forward and the gradient function called
   once, what the framework accepts silently or reports far away;
3. compiled (`compiled.py`): the gradient taken as the framework takes it,
   compiled, against that direct call;
4. graph (`graph.py`): the forward and the backward traced together;
5. numbers: finite differences against the custom gradient and autodiff,
   with dense Jacobians (`full.py`) or random projections (`projection.py`),
   in float64 where the op accepts it (`precision.py`); the second order
   (`second_order.py`); the sweep (`sweep.py`). A mismatch is told from an
   intended surrogate gradient (`surrogate.py`, `linearity.py`).

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
