"""The options of a check: one object, from `gradmagic.check` and the magics' line and `%config` to every phase.

Each option is validated where the object is made, so a bad value is an
error naming the option as the user gave it (`--rtol`, `%config
GradientMagics.rtol`: `sources`), never a check that silently judges
nothing, or judges with a tolerance that lets every gradient pass.

The rule for tolerances: a tolerance judges a gradient only where a wrong
one could fail it. `rtol` of 0.5 or more passes a gradient twice too large
or half as large anywhere, so it is refused; an `atol` looser than the
dtype's own that is at least half of every finite difference of the op at
its inputs passes a gradient half as large at every element, so such a
check judges nothing and says so ("not checked", `fd-tolerance`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from gradmagic.errors import OptionError
from gradmagic.frameworks import KERAS_BACKENDS, NAMES


@dataclass(frozen=True)
class CheckOptions:
    """Options of `check` (and defaults of `%config GradientMagics`)."""

    framework: str = "tensorflow"  # "tensorflow" (tf.custom_gradient) or "keras" (keras.ops.custom_gradient)
    rtol: float | None = None  # relative tolerance; None: by dtype (float64 1e-5, float32 2e-2)
    atol: float | None = None  # absolute tolerance; None: by dtype (float64 1e-8, float32 1e-3)
    eps: float | None = None  # relative finite-difference step; None: machine epsilon ** (1/3)
    full_threshold: int = 256  # perturbed elements up to which dense Jacobians are compared
    probes: int = 4  # projection mode: random directions
    seed: int = 0  # random upstream gradients and directions
    float64: bool = True  # run finite differences in float64 when the op accepts it
    tf_function: bool = True  # also take the gradient compiled (tf.function, jax.jit) and compare with eager
    graph: bool = True  # trace the forward and the backward and put the graph in the report
    fold_graph: bool = True  # fold framework plumbing (Identity, NoOp, scalar constants) out of the graph
    order: int = 1  # 2: also check the derivative of the custom gradient (full mode)
    numbers: bool = True  # compare with finite differences and autodiff (False: structure, graph only)
    # Full mode: sweep one input element (a scalar input, or an element-wise op). Off by default: it evaluates the op
    # at hundreds of points, for a view the live report computes when asked (its Sweep button).
    sweep: bool = False
    sweep_range: tuple[float, float] | None = None  # the swept element's range; None: around the example
    sweep_points: int = 201
    sweep_element: tuple[str, tuple[int, ...]] | None = None  # (input, index) to sweep; None: the checker chooses
    backends: tuple[str, ...] = ()  # Keras ops: also check on these backends ("all" or names), each in a subprocess
    surrogate: bool = False  # the custom gradient is deliberately not the derivative: a mismatch informs, not fails
    #: How the user gave an option, where it was not by its name in Python: "--atol" (a magic's line),
    #: "%config GradientMagics.atol"; messages name the option so (`label`).
    sources: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.sources, dict) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in self.sources.items()
        ):
            raise OptionError(f"sources must map option names to how they were given, not {self.sources!r}")
        label = self.label
        if self.framework not in NAMES:
            raise OptionError(
                f"{label('framework')} must be one of {', '.join(map(repr, NAMES))}, not {self.framework!r}"
            )
        for name in ("rtol", "atol"):
            self._set(name, _optional_number(label(name), getattr(self, name), minimum=0.0))
        if self.rtol is not None and self.rtol >= 0.5:
            raise OptionError(
                f"{label('rtol')} is a relative tolerance: at 0.5 or more it passes a gradient twice too large or "
                f"half as large (at 1, of any size with the right sign); give a number below 0.5, not {self.rtol!r}"
            )
        self._set("eps", _optional_number(label("eps"), self.eps, minimum=0.0, exclusive=True))
        if self.eps is not None and self.eps >= 1:
            raise OptionError(
                f"{label('eps')} is the relative finite-difference step: give a small positive number, not {self.eps!r}"
            )
        for name, minimum in (("full_threshold", 0), ("probes", 1), ("seed", 0), ("sweep_points", 2)):
            self._set(name, _integer(label(name), getattr(self, name), minimum))
        for name in ("float64", "tf_function", "graph", "fold_graph", "numbers", "sweep", "surrogate"):
            if not isinstance(getattr(self, name), bool):
                raise OptionError(f"{label(name)} must be True or False, not {getattr(self, name)!r}")
        if self.order not in (1, 2) or isinstance(self.order, bool):
            raise OptionError(f"{label('order')} must be 1 or 2, not {self.order!r}")
        if self.sweep_range is not None:
            self._set("sweep_range", _range(self.sweep_range))
        if self.sweep_element is not None:
            self._set("sweep_element", _element(self.sweep_element))
        self._set("backends", parse_backends(self.backends, label("backends")))
        if self.backends and self.framework != "keras":
            raise OptionError(
                f"{label('backends')} checks a keras.ops.custom_gradient op on Keras's backends: make the op with "
                "%%custom_gradient --keras (or %config GradientMagics.framework = 'keras'), or check it with "
                "framework='keras'"
            )

    def label(self, name: str) -> str:
        """The option `name` as the user gave it: "--atol", "%config GradientMagics.atol", or its name."""
        return self.sources.get(name, name)

    @classmethod
    def of(cls, **options: Any) -> CheckOptions:
        """The options from keyword arguments; an unknown name is a TypeError listing the known ones."""
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(
                f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}: the options are "
                f"{', '.join(sorted(known))}"
            )
        return cls(**options)

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)


def parse_backends(value: str | list | tuple, label: str = "backends") -> tuple[str, ...]:
    """`"all"`, `"jax,torch"` or a list of names to backend names, in table order (OptionError if unknown, naming the
    option as `label`)."""
    if not isinstance(value, (str, list, tuple)):
        raise OptionError(f"{label} must be 'all' or a list of backend names, not {value!r}")
    names = value.split(",") if isinstance(value, str) else list(value)
    names = [str(name).strip().lower() for name in names if str(name).strip()]
    if names == ["all"]:
        return KERAS_BACKENDS
    if "all" in names:
        others = [name for name in names if name != "all"]
        raise OptionError(
            f"{label}: 'all' stands alone (every installed backend), not in a list with "
            f"{', '.join(map(repr, others))}: give 'all', or the backends by name ({', '.join(KERAS_BACKENDS)})"
        )
    unknown = [name for name in names if name not in KERAS_BACKENDS]
    if unknown:
        raise OptionError(
            f"{label}: unknown Keras backend{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}: "
            f"give 'all' or some of {', '.join(KERAS_BACKENDS)}"
        )
    return tuple(name for name in KERAS_BACKENDS if name in names)


def _optional_number(name: str, value: Any, minimum: float, exclusive: bool = False) -> float | None:
    """`_number`, or None for None."""
    return None if value is None else _number(name, value, minimum, exclusive)


def _number(name: str, value: Any, minimum: float | None = None, exclusive: bool = False) -> float:
    """`value` as a finite float, at least (or, `exclusive`, above) `minimum`."""
    if isinstance(value, bool) or (not isinstance(value, (int, float)) and not _is_real_scalar(value)):
        raise OptionError(f"{name} must be a number, not {value!r}")
    number = float(value)
    below = minimum is not None and (number < minimum or (exclusive and number == minimum))
    if not math.isfinite(number) or below:
        bound = "" if minimum is None else f" {'greater than' if exclusive else 'at least'} {minimum:g}"
        raise OptionError(f"{name} must be a finite number{bound}, not {value!r}")
    return number


def _integer(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not (isinstance(value, int) or _is_integer_scalar(value)):
        raise OptionError(f"{name} must be a whole number, not {value!r}")
    if int(value) < minimum:
        raise OptionError(f"{name} must be at least {minimum}, not {value!r}")
    return int(value)


def _range(value: Any) -> tuple[float, float]:
    try:
        start, stop = (_number("sweep_range", v) for v in value)
    except (TypeError, ValueError):
        raise OptionError(f"sweep_range must be (start, stop), two numbers, not {value!r}") from None
    if not start < stop:
        raise OptionError(f"sweep_range must be (start, stop) with start < stop, not {value!r}")
    return start, stop


def _element(value: Any) -> tuple[str, tuple[int, ...]]:
    try:
        name, index = value
        return str(name), tuple(int(i) for i in index)
    except (TypeError, ValueError):
        raise OptionError(f"sweep_element must be (input name, index), like ('x', (2,)), not {value!r}") from None


def _is_real_scalar(value: Any) -> bool:
    """NumPy's scalars and 0-d arrays of a real number (without importing NumPy here for the check)."""
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    return kind in ("f", "i", "u") and getattr(value, "shape", None) == ()


def _is_integer_scalar(value: Any) -> bool:
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    return kind in ("i", "u") and getattr(value, "shape", None) == ()
