"""The interface between gradmagic and a framework, and the plain types it hands back."""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Protocol

import numpy as np


@dataclass(frozen=True)
class TensorMeta:
    """Shape and dtype of a tensor, in framework-neutral terms."""

    shape: tuple[int | None, ...]
    dtype: str
    floating: bool

    @property
    def size(self) -> int:
        return int(np.prod([d or 0 for d in self.shape])) if self.shape else 1


@dataclass(frozen=True)
class GradientConvention:
    """How a framework calls the gradient function `grad` that the forward returns, and what it takes back.

    The structure checks call `grad` this way and explain a mismatch before the
    framework fails far from the cause (or, worse, silently).
    """

    #: "flat": `grad(*upstreams)`, one upstream per flattened output (TensorFlow);
    #: "structure": `grad(upstream)`, one argument shaped like the outputs (JAX);
    #: "keyword": `grad(*inputs, upstream=upstream)`, the op's inputs first (Keras's PyTorch backend).
    upstream: str = "flat"
    #: Several gradients must come back as a tuple; a list fails (JAX, PyTorch).
    tuple_required: bool = False
    #: The op may have one output tensor only (Keras's PyTorch backend).
    single_output: bool = False
    #: "keyword": variables the forward reads are passed as `grad(..., variables=[...])`, which returns
    #: `(grad_xs, grad_vars)` (TensorFlow); "closed-over": the framework gives them no gradient through the
    #: custom gradient (JAX fails when one is differentiated, PyTorch leaves it without gradient).
    variables: str = "keyword"


@dataclass(frozen=True)
class Target:
    """An op resolved for checking: the raw function and the decorated op."""

    raw: Callable  # returns (outputs, grad_fn)
    op: Callable  # the custom-gradient op
    origin: str  # "magic" | "decorated" | "plain"
    name: str
    signature: inspect.Signature | None
    filename: str | None  # where `raw` was written: a cell's linecache name or a file


@dataclass(frozen=True)
class Layout:
    """The inputs of one check, flattened: what is perturbed and in which order.

    The perturbed vector `z` is the perturbable inputs (floating leaves of the
    positional arguments, flattened in order) followed by the variables.
    """

    structure: Any  # the positional arguments, leaves as given
    kwargs: dict
    inputs: tuple[Any, ...]  # flat input leaves (framework tensors)
    perturbable: tuple[int, ...]  # indices into `inputs`
    variables: tuple[Any, ...]  # framework variables read by the forward

    def sizes(self, meta: Callable[[Any], TensorMeta]) -> list[int]:
        return [meta(self.inputs[k]).size for k in self.perturbable] + [meta(v).size for v in self.variables]


@dataclass(frozen=True)
class FullJacobians:
    """Dense results for the full-Jacobian mode, rows are output elements, columns perturbed elements."""

    evaluations: np.ndarray | None  # [2N+1, M]: f(z), then f(z + h_i e_i) for every i, then f(z - h_i e_i)
    custom: np.ndarray  # [M, N] through the custom gradient
    autodiff: np.ndarray | None  # [M, N] through the forward's own ops; None if autodiff failed


@dataclass(frozen=True)
class Projections:
    """Projection-mode results along directions d_t, for the prober's upstream vector u and gradient g."""

    differences: np.ndarray  # [T]: u . (f(z + d_t) - f(z - d_t)) / 2, central differences of u . f along d_t
    rounding: np.ndarray  # [T]: eps * sum |u * f(z)|: the worst-case rounding of the above
    rounding_rms: np.ndarray  # [T]: eps * sqrt(sum (u * f(z))^2): the typical size of independent roundings
    predicted: np.ndarray  # [T]: g . d_t, what the custom gradient predicts
    magnitude: np.ndarray  # [T]: sum |g * d_t|


@dataclass(frozen=True)
class RawOp:
    """One op of a traced forward-and-backward graph, classified by the adapter."""

    name: str  # unique, scoped: "forward/Exp"
    type: str  # the framework's op type: "Exp"
    kind: str  # "input" | "upstream" | "variable" | "capture" | "constant" | "passthrough" | "noop" | "op"
    scope: str | None  # "forward" | "backward" | None
    inputs: tuple[tuple[str, int], ...]  # (producing op, output index) of each data input
    outputs: tuple[tuple[tuple[int | None, ...], str], ...]  # (shape, dtype) of each output
    line: int | None  # the line of the user's source that created it
    passthrough: tuple[int, ...] = ()  # for kind "passthrough": the input each output forwards
    label: str = ""  # variables and placeholders: their name


@dataclass(frozen=True)
class RawGraph:
    """The forward and the backward of an op, traced together, as the framework built them."""

    ops: tuple[RawOp, ...]
    outputs: tuple[tuple[str, int], ...]  # the forward's outputs, flattened
    gradients: tuple[tuple[str, int], ...]  # the downstream gradients: perturbable inputs, then variables


class OpProblem(Exception):
    """A mistake in the user's op that the framework adapter found, raised while running the forward.

    The structure checks turn it into a problem with this code; `op`, a graph
    operation the mistake made (if any), locates it in the user's source.
    """

    def __init__(self, code: str, message: str, op: Any = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.op = op


class Prober(Protocol):
    """Measurements for one projection-mode check (see `Adapter.prober`)."""

    #: The custom vector-Jacobian product g = J^T u, flattened over z.
    custom: np.ndarray
    #: The same through the forward's own ops; None where autodiff is unavailable.
    autodiff: np.ndarray | None
    #: The random upstream vector u, flattened over the floating outputs.
    upstream_vector: np.ndarray

    def direction(self, row: int, element: int) -> float:
        """The value of probe `row`'s direction at `element`: its sign times its step."""

    def measure(self, rows: list[int], weights: np.ndarray, rounding: bool = True) -> Projections:
        """Central differences along d_t = weights_t * signs[rows_t] * steps, in one compiled call.

        `weights` is [T, N] (per element) or [T, 1] (one factor per direction).
        Without `rounding`, the rounding fields are NaN and one evaluation is saved.
        """


class Adapter(Protocol):
    """What gradmagic needs from a framework; the rest of the package imports none."""

    #: Short name, as in `get_adapter(name)`: "tensorflow".
    name: str
    #: Name shown to users: "TensorFlow".
    display_name: str
    #: The framework's version string.
    version: str
    #: The decorator an op is made with, as users write it: "tf.custom_gradient".
    decorator: str
    #: Keras 3's backend ("tensorflow", "jax", "torch") when `name` is "keras", else None.
    backend: str | None
    #: How the gradient function is called and what it may return.
    convention: GradientConvention
    #: The framework's autodiff, as users know it: "tf.GradientTape", "jax.vjp", "torch.autograd".
    autodiff: str
    #: Where the compiled calls run, as users know it: "tf.function", "jax.jit", "eager PyTorch".
    compiled: str
    #: How the op runs: "eager" (ops run as they are called; batches in compiled calls) or "graph"
    #: (TensorFlow 1's graph mode: ops are built into a graph, then run in a tf.compat.v1 Session).
    mode: str

    def check_scope(self, target: Target) -> ContextManager[None]:
        """The context one check of `target` runs in: `check` asks everything else of the adapter inside it.

        Graph mode builds in a graph and session of the op's own there (kept
        for its later checks), and restores what it touched on the way out;
        eager frameworks need nothing.
        """

    def example_scope(self) -> ContextManager[None]:
        """The context the magics evaluate example inputs (`ARG=EXPR`) in.

        Graph mode: a graph of their own, so that `x=tf.constant(...)` adds
        nothing to the user's graph, however often it is evaluated again.
        """

    def decorate(self, function: Callable) -> Callable:
        """Turn `function`, returning `(outputs, grad_fn)`, into a custom-gradient op."""

    def resolve(self, op: Callable) -> Target:
        """Find the raw function behind `op` (made by gradmagic, decorated by hand, or plain)."""

    def to_tensors(self, structure: Any) -> Any:
        """Convert the leaves of `structure` to tensors (TypeError/ValueError if one cannot be)."""

    def flatten(self, structure: Any) -> list:
        """The leaves of a nested structure, `None` included."""

    def pack(self, structure: Any, leaves: list) -> Any:
        """The inverse of `flatten`."""

    def leaf_paths(self, structure: Any) -> list[str]:
        """`[0]['a']`-style paths of the leaves, in `flatten` order ("" for a leaf itself)."""

    def meta(self, value: Any) -> TensorMeta | None:
        """Shape and dtype of a tensor or variable; None for anything else."""

    def to_numpy(self, value: Any) -> np.ndarray:
        """A tensor or variable as a NumPy array."""

    def run_recording_variables(self, call: Callable[[], Any], exclude: list) -> tuple[Any, list]:
        """Run `call()` (eagerly; in graph mode: build it and run it); return its result and the variables it read
        (minus `exclude`), in the order the framework passes them to the gradient function."""

    def call_gradient(self, grad_fn: Callable, args: list, kwargs: dict) -> Any:
        """What `grad_fn(*args, **kwargs)` returns, computed: errors the gradient function raises only when its ops
        run (graph mode) are raised here."""

    def narrows_float64(self, call: Callable[[], Any]) -> bool:
        """Whether `call()` (the forward on float64 inputs) computes some float64 value in a narrower dtype inside.

        Keras on JAX and PyTorch does (`ops.sin` casts float64 to float32);
        finite differences at float64 step sizes would then measure the
        narrower rounding.
        """

    def variable_name(self, variable: Any) -> str:
        """A readable name of a variable."""

    def constant(self, array: np.ndarray, dtype: str) -> Any:
        """A tensor holding `array` in `dtype`."""

    def cast(self, value: Any, dtype: str) -> Any:
        """A floating tensor cast to `dtype`."""

    def machine_epsilon(self, dtype: str) -> float:
        """The machine epsilon of a floating dtype."""

    def initial_vector(self, layout: Layout) -> np.ndarray:
        """z as NumPy: the perturbable inputs then the variables, flattened, in the widest floating dtype among them."""

    def decorated_gradients(self, target: Target, layout: Layout, upstreams: list) -> tuple[list, list]:
        """Outputs and gradients (inputs, then variables) of the decorated op through the framework's own gradient
        machinery, compiled where the framework compiles (`compiled`), as NumPy arrays. `upstreams`: one per
        flattened output."""

    def full_jacobians(self, target: Target, layout: Layout, steps: np.ndarray | None) -> FullJacobians:
        """Finite-difference evaluations (if `steps`) and the custom and autodiff Jacobians, in one compiled call."""

    def second_order(self, target: Target, layout: Layout, steps: np.ndarray, upstream: np.ndarray) -> FullJacobians:
        """For h(z) = J(z)^T u, the custom vector-Jacobian product as a function of z: `evaluations` of h at z and
        z +- steps_i e_i ([2N+1, N]) and `custom`, the Jacobian of h through autodiff of the gradient function."""

    def gradient_graph(self, target: Target, layout: Layout, upstreams: list, arguments: list) -> RawGraph:
        """The op's forward and backward traced together at these inputs.

        `arguments` gives (kind, label) for each input leaf ("input", "x"), then each upstream ("upstream", "doutput").
        """

    def evaluate_points(self, target: Target, layout: Layout, points: np.ndarray) -> np.ndarray:
        """[P, M]: the forward's flat floating outputs at each row of `points` ([P, N] values of z), compiled."""

    def sweep(
        self, target: Target, layout: Layout, points: np.ndarray, row: int, column: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Along the rows of `points` ([P, N] values of z), compiled: flat floating output element `row`, and its
        derivative in z[column] through the custom gradient and through autodiff (None where unavailable)."""

    def vjps(self, target: Target, layout: Layout, upstream: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The custom and the autodiff vector-Jacobian products for `upstream` (flattened over z)."""

    def prober(
        self, target: Target, layout: Layout, steps: np.ndarray, outputs: int, seed: int, signs: np.ndarray
    ) -> Prober:
        """A projection-mode prober for the probes' sign rows (int8 +-1, [probes, N]) and a random upstream
        vector over `outputs` floating output elements, drawn from `seed`."""


class EagerExecution:
    """What an adapter whose ops run eagerly does for the graph-mode parts of `Adapter`: nothing special."""

    mode = "eager"

    def check_scope(self, target: Target) -> ContextManager[None]:
        return contextlib.nullcontext()

    def example_scope(self) -> ContextManager[None]:
        return contextlib.nullcontext()

    def call_gradient(self, grad_fn: Callable, args: list, kwargs: dict) -> Any:
        return grad_fn(*args, **kwargs)
