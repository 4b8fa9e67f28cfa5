"""The interface between the check engine and a framework, and the plain types it hands back.

The engine (`gradmagic.checking`) writes every algorithm once, in NumPy, over
z: the op's floating inputs, then the variables its forward reads, flattened
into one vector. An adapter holds what knows its framework: how ops are
decorated and found behind a callable, how values convert, how the forward
runs (and which variables it reads), its wording, and four batched
primitives that run in the framework's compiled form (`tf.function`,
`jax.jit`, a `tf.compat.v1` Session, eager PyTorch):

* `evaluate`: the forward alone at a batch of points z;
* `vjps`: vector-Jacobian products at a batch of points for a batch of
  upstream vectors, through the custom gradient and through autodiff;
* `second_order`: the Jacobian of the custom vector-Jacobian product;
* `gradient_graph`: the forward and the backward traced together.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, ContextManager

import numpy as np

from gradmagic.frameworks.cache import cache_of, function_of
from gradmagic.frameworks.wording import Wording


@dataclass(frozen=True)
class TensorMeta:
    """Shape and dtype of a tensor or variable, in framework-neutral terms; `name` for a variable."""

    shape: tuple[int | None, ...]
    dtype: str
    floating: bool
    name: str | None = None

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
    #: Several gradients must come back as a tuple; a list fails (PyTorch).
    tuple_required: bool = False
    #: The op may have one output tensor only (Keras's PyTorch backend).
    single_output: bool = False
    #: "keyword": trainable variables the forward reads are passed as `grad(..., variables=[...])`, which returns
    #: `(grad_xs, grad_vars)` (TensorFlow); "closed-over": the framework gives them no gradient through the
    #: custom gradient (JAX fails when one is differentiated, PyTorch leaves it without gradient). Non-trainable
    #: variables are constants of the op everywhere.
    variables: str = "keyword"
    #: The framework itself sums a gradient shaped like a broadcast of its input back to the input's shape, and casts
    #: a gradient of another floating dtype to the input's (PyTorch's autograd): such a gradient works here.
    fixes_gradients: bool = False
    #: The gradient function must be callable the way this framework calls it, which differs between Keras's
    #: backends: its signature is checked (Keras), or left to the call (TensorFlow, whose call it is).
    signature_checked: bool = False


@dataclass(frozen=True)
class Target:
    """An op resolved for checking: the raw function and the decorated op."""

    raw: Callable  # returns (outputs, grad_fn); for a composite, the callable itself (returns outputs)
    op: Callable  # the custom-gradient op; for a composite, the callable itself
    #: "magic" | "decorated" | "plain" (a function returning (outputs, grad_fn), decorated here) | "composite" (a
    #: differentiable function that reaches custom-gradient ops inside: a wrapper, a layer, `tf.recompute_grad`)
    origin: str
    name: str
    signature: inspect.Signature | None
    filename: str | None  # where `raw` was written: a cell's linecache name or a file
    #: A composite's forward with every custom gradient it reaches replaced by autodiff of that op's own forward
    #: (and every gradient override it enters left out).
    without_custom: Callable | None = None
    #: The op builds a graph where the user calls it (a `tf.function`; TensorFlow 1's graph mode): gradient overrides
    #: entered while it runs apply there.
    graph: bool = False
    #: A composite whose ops take gradients registered for their op types (gradient overrides): its gradient is
    #: taken where the framework applies them.
    overrides: bool = False

    def outputs_of(self, result: Any) -> Any:
        """The outputs in what `raw` returned."""
        return result if self.origin == "composite" else result[0]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The forward alone, without its custom gradient: what autodiff and finite differences see."""
        if self.without_custom is not None:
            return self.without_custom(*args, **kwargs)
        return self.raw(*args, **kwargs)[0]


@dataclass(frozen=True)
class Layout:
    """The inputs of one check, flattened: what is perturbed and in which order.

    z, the perturbed vector, is the perturbable inputs (floating leaves of the
    positional arguments, flattened in order) followed by the variables.
    """

    structure: Any  # the positional arguments, leaves as given
    kwargs: dict
    inputs: tuple[Any, ...]  # flat input leaves (framework tensors)
    perturbable: tuple[int, ...]  # indices into `inputs`
    variables: tuple[Any, ...]  # framework variables read by the forward

    @property
    def perturbed(self) -> list:
        """The perturbable input leaves, in z's order."""
        return [self.inputs[k] for k in self.perturbable]

    def with_perturbed(self, values: list) -> list:
        """All input leaves, the perturbable ones replaced by `values`."""
        leaves = list(self.inputs)
        for k, value in zip(self.perturbable, values):
            leaves[k] = value
        return leaves


@dataclass(frozen=True)
class ForwardRun:
    """What running the forward once (the structure checks' run) returned, and what the framework saw of it."""

    result: Any  # what the raw function returned: (outputs, grad_fn) if the user wrote it right
    variables: list  # the variables it read, in the order the framework passes them to the gradient function
    #: Some float64 value of the forward was computed in a narrower float inside (Keras's `ops.sin` on JAX casts
    #: float64 to float32): finite differences at float64 steps would measure the narrower rounding.
    narrows_float64: bool = False
    #: The custom-gradient ops the call reached (their functions' names, in order, once each); None where the
    #: framework cannot tell.
    custom_gradients: tuple[str, ...] | None = None
    #: How many of the framework's ops the forward ran (eagerly), where the adapter counts them: what tracing it
    #: would cost, told without a clock.
    ops: int | None = None
    #: The gradient overrides the forward entered (see `Override`), once each.
    overrides: tuple[Override, ...] = ()


@dataclass(frozen=True)
class Override:
    """A gradient override the forward entered (TensorFlow's `gradient_override_map`): the ops of `op_type` built
    under it take the gradient registered as `gradient` instead of their op type's own."""

    op_type: str
    gradient: str  # the name the override maps the op type to
    built: int  # how many ops of `op_type` were built (or, eagerly, run) under it
    types: tuple[str, ...]  # the op types built (or run) under it, in the order first seen
    eagerly: bool  # entered where ops run eagerly, where no override applies
    registered: bool  # whether a gradient is registered under `gradient`
    where: tuple[str, int] | None = None  # the file and line that entered it
    function: str | None = None  # the name of the function registered under `gradient`
    #: What calling the registered gradient on an op built under the override showed wrong, as the structure checks
    #: name it: (code, message), e.g. ("grad-count", "..."); None where nothing was, or it was not called.
    mistake: tuple[str, str] | None = None
    #: Ops of `op_type` built under it that an override of the same type entered inside it took instead (the
    #: innermost applies): not counted in `built`.
    superseded: int = 0


@dataclass(frozen=True)
class Vjps:
    """Vector-Jacobian products at P points for K upstream vectors (see `Adapter.vjps`), as NumPy in z's dtype."""

    outputs: np.ndarray  # [P, M]: the forward's flat floating outputs at each point
    custom: np.ndarray  # [P, K, N]: through the custom gradient (K + M rows with the Jacobian)
    autodiff: np.ndarray | None  # the same through the forward's own ops; None where autodiff fails

    @classmethod
    def of(cls, outputs: np.ndarray, custom: np.ndarray, autodiff: Any) -> Vjps:
        """From a compiled call's results; `autodiff` None where it was not taken, or where the framework could not
        take it (it fills the result with NaN inside compiled code)."""
        if autodiff is not None:
            autodiff = np.asarray(autodiff)
            if autodiff.size and np.isnan(autodiff).all():
                autodiff = None
        return cls(outputs, custom, autodiff)


@dataclass(frozen=True)
class Signs:
    """R rows of random signs (+1 or -1) over N elements, packed eight to a byte: at millions of elements an eighth
    of their int8 values' memory."""

    packed: np.ndarray  # [R, ceil(N / 8)] uint8: np.packbits of (sign > 0) per row, the first element the high bit
    size: int  # N

    @classmethod
    def of(cls, signs: np.ndarray) -> Signs:
        """From [R, N] values of +-1."""
        return cls(np.packbits(np.asarray(signs) > 0, axis=1), int(np.shape(signs)[1]))

    def __len__(self) -> int:
        return len(self.packed)

    def rows(self, rows: np.ndarray | list[int]) -> np.ndarray:
        """[T, N] int8 of +-1: the signs of these rows."""
        values = np.unpackbits(self.packed[np.asarray(rows, np.intp)], axis=1, count=self.size).view(np.int8)
        values *= 2
        values -= 1
        return values

    def row(self, row: int) -> np.ndarray:
        """[N] int8 of +-1."""
        return self.rows([row])[0]

    def at(self, row: int, element: int) -> int:
        """The sign of one element of one row."""
        return 1 if (int(self.packed[row, element >> 3]) >> (7 - (element & 7))) & 1 else -1


@dataclass(frozen=True)
class Directions:
    """T directions in z given by their factors, for `Adapter.evaluate` at millions of elements: direction t is
    `weights[t] * signs[rows[t]] * steps`, so that no [T, N] block of float64 values is built where the framework can
    form each direction inside its compiled call (`Adapter.takes_directions`); `dense` builds them elsewhere."""

    signs: Signs
    steps: np.ndarray  # [N], in z's dtype
    rows: np.ndarray  # [T] int32: the row of `signs` each direction takes
    weights: np.ndarray  # [T, N] (per element) or [T, 1] (one factor per direction), float32
    #: [N] in z's dtype, or None: contracted with each direction too (`gradient . d_t`, a custom gradient's prediction)
    gradient: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def dense(self) -> np.ndarray:
        """[T, N]: the directions' values, in the steps' dtype."""
        values = self.signs.rows(self.rows).astype(self.steps.dtype)
        values *= self.steps
        values *= self.weights
        return values


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
    #: What the op does, where it tells an intended surrogate gradient from a mistake, in the framework's own
    #: spelling normalised by the adapter: "round", "sign", "floor", "ceil", "argmax" (argmin too: an index, picked
    #: by value, as a one-hot Gumbel-softmax sample does), "clip", "minimum", "maximum",
    #: "stop_gradient", "python_function" (a call into Python, with no gradient: `tf.numpy_function`),
    #: "eager_python_function" (a call into Python whose gradient is autodiff of the Python function as it ran:
    #: `tf.py_function`), "cast", "custom_gradient" (where a
    #: custom-gradient op takes its gradient); None for any other op.
    meaning: str | None = None


@dataclass(frozen=True)
class RawGraph:
    """The forward and the backward of an op, traced together, as the framework built them."""

    ops: tuple[RawOp, ...]
    outputs: tuple[tuple[str, int], ...]  # the forward's outputs, flattened
    gradients: tuple[tuple[str, int], ...]  # the downstream gradients: perturbable inputs, then variables
    #: The traced graph run once at the example inputs for the given upstreams, where tracing is how the framework
    #: compiles the op (`Adapter.graph_compiles`): [1, M] flat floating outputs, [1, 1, N] the custom gradient (z's
    #: order), no autodiff. None where the adapter does not run it.
    run: Vjps | None = None


class OpProblem(Exception):
    """A mistake in the user's op that the adapter found, raised while running the forward.

    The structure checks turn it into a problem with this code; `op`, a graph
    operation the mistake made (if any), locates it in the user's source.
    """

    def __init__(self, code: str, message: str, op: Any = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.op = op


class Adapter(abc.ABC):
    """What the check engine needs from a framework; the rest of the package imports none.

    Subclasses set the attributes and implement the abstract methods; the
    defaults fit frameworks whose ops run eagerly.
    """

    #: Short name, as in `get_adapter(name)`: "tensorflow", "keras".
    name: str
    #: Whether `gradient_graph` traces the op as the framework compiles it (`tf.function`) and runs that graph
    #: (`RawGraph.run`): its failure is then the op failing compiled, and its run is what the structure checks' direct
    #: call is compared with. Elsewhere `vjps` runs compiled and gives that.
    graph_compiles: bool = False
    #: Name shown to users: "TensorFlow".
    display_name: str
    #: The framework's version string.
    version: str
    #: The decorator an op is made with, as users write it: "tf.custom_gradient".
    decorator: str
    #: Keras 3's backend ("tensorflow", "jax", "torch") when `name` is "keras", else None.
    backend: str | None = None
    #: How the gradient function is called and what it may return.
    convention: GradientConvention
    #: The framework's autodiff, as users know it: "tf.GradientTape", "jax.vjp", "torch.autograd".
    autodiff: str
    #: Where the compiled calls run, as users know it: "tf.function", "jax.jit", "eager PyTorch".
    compiled: str
    #: How the op runs: "eager" (ops run as they are called; batches in compiled calls) or "graph"
    #: (TensorFlow 1's graph mode: ops are built into a graph, then run in a tf.compat.v1 Session).
    mode: str = "eager"
    #: How messages name this framework's things, and what its own messages mean.
    wording: Wording
    #: Whether a `%%custom_gradient` cell run again unchanged keeps its op, and with it the op's traces (see
    #: `source.unchanged_definition`; the values it reads pinned with `by_reference`).
    keeps_unchanged_ops: bool = False
    #: Whether the framework mixes a narrower float into wider arithmetic as it is (PyTorch's and JAX's type
    #: promotion): an op gradmagic casts up may then keep constants of its own precision in its gradient function.
    #: TensorFlow refuses mixed floats, so an op it runs cast up computes in the wider float throughout.
    mixes_floats: bool = False
    #: Whether `evaluate` takes `Directions` and forms each direction inside its compiled call; elsewhere the check
    #: engine hands it the dense directions (`CheckRun.evaluate`).
    takes_directions: bool = False

    # -- ops ----------------------------------------------------------------------------------------------------

    @abc.abstractmethod
    def decorate(self, function: Callable) -> Callable:
        """Turn `function`, returning `(outputs, grad_fn)`, into a custom-gradient op."""

    def resolve(self, op: Callable, composite: bool = False, overrides: bool = False) -> Target:
        """The raw function behind `op`: an op made by gradmagic, one decorated by hand (a function, a bound method,
        inside `functools.partial` or the framework's compiled-function wrapper), or a plain function returning
        `(outputs, grad_fn)` (decorated here, once). With `composite`, `op` is taken as a differentiable function
        that reaches custom-gradient ops inside (NotImplementedError where this adapter cannot check those); with
        `overrides` too, one that enters gradient overrides, its gradient taken where the framework applies them."""
        if composite:
            target = self._composite(op, overrides)
            if target is None:
                raise NotImplementedError(
                    f"{self.display_name} checks custom-gradient ops themselves here, not functions that call them"
                )
            return target
        if isinstance(op, functools.partial):
            inner = self.resolve(op.func)
            if inner.origin in ("magic", "decorated"):
                raw: Callable = functools.partial(inner.raw, *op.args, **op.keywords)
                return self._target(raw, op, inner.origin, inner.raw)
        function = function_of(op)
        if function is not None:
            return self._target(function, op, "magic")
        unwrapped = self._unwrap(op)
        if unwrapped is not None:
            raw, origin = unwrapped
            if origin == "composite":
                return self.resolve(raw, composite=True)
            return self._target(raw, op, origin)
        if isinstance(op, functools.partial) or not hasattr(op, "__name__"):
            # Kept on the callable, so that its next check finds its decorated op and compiled functions again.
            named = cache_of(op)
            raw = named.get("named") or named.setdefault("named", _named(op))
        else:
            raw = op
        cache, key = cache_of(raw), ("decorated", self.name, self.backend)
        decorated = cache.get(key) or cache.setdefault(key, self.decorate(raw))
        return self._target(raw, decorated, "plain")

    def by_reference(self, value: Any) -> bool:
        """Whether `value` is one of the framework's values that an op reads the same while it is the same object:
        an immutable tensor, or a variable (read when the op runs, by reference when it is traced)."""
        return False

    def _target(
        self,
        raw: Callable,
        op: Callable,
        origin: str,
        named: Callable | None = None,
        without_custom=None,
        graph: bool = False,
        overrides: bool = False,
    ) -> Target:
        named = named or raw
        try:
            signature = inspect.signature(raw)
        except (TypeError, ValueError):
            signature = None
        code = getattr(_innermost(named), "__code__", None)
        name = _name_of(named)
        filename = code.co_filename if code else None
        return Target(raw, op, origin, name, signature, filename, without_custom, graph, overrides)

    @abc.abstractmethod
    def _unwrap(self, op: Callable) -> tuple[Callable, str] | None:
        """What an op this framework's decorator made holds: (the user's function, "decorated"), or (a callable to
        check, "composite") for a wrapper whose gradient comes from custom gradients inside (`tf.recompute_grad`);
        None for anything else."""

    def _composite(self, function: Callable, overrides: bool) -> Target | None:
        """`function` as a composite (see `resolve`): its `without_custom` has each custom gradient it reaches
        replaced by autodiff of that op's forward (the reference its gradient is compared with); None where the
        adapter cannot check it."""
        return None

    def check_scope(self, target: Target) -> ContextManager[None]:
        """The context one check of `target` runs in: the engine asks everything else of the adapter inside it.

        Graph mode builds in a graph and session of the op's own there (kept
        for its later checks), and restores what it touched on the way out;
        eager frameworks need nothing.
        """
        return contextlib.nullcontext()

    def example_scope(self) -> ContextManager[None]:
        """The context the magics evaluate example inputs (`ARG=EXPR`) in.

        Graph mode: a graph of their own, so that `x=tf.constant(...)` adds
        nothing to the user's graph, however often it is evaluated again.
        """
        return contextlib.nullcontext()

    # -- values -------------------------------------------------------------------------------------------------

    @abc.abstractmethod
    def to_tensors(self, structure: Any) -> Any:
        """Convert the leaves of `structure` to tensors (TypeError/ValueError if one cannot be)."""

    @abc.abstractmethod
    def flatten(self, structure: Any) -> tuple[list, list[str]]:
        """The leaves of a nested structure (`None` included), and their `[0]['a']`-style paths ("" for a leaf)."""

    @abc.abstractmethod
    def pack(self, structure: Any, leaves: list) -> Any:
        """The inverse of `flatten`."""

    @abc.abstractmethod
    def meta(self, value: Any) -> TensorMeta | None:
        """Shape and dtype of a tensor or variable (and a variable's readable name); None for anything else."""

    @abc.abstractmethod
    def to_numpy(self, value: Any) -> np.ndarray:
        """A tensor or variable as a NumPy array of a dtype NumPy has (`native`: bfloat16 as float32)."""

    @abc.abstractmethod
    def constant(self, array: np.ndarray, dtype: str) -> Any:
        """A tensor holding `array` in `dtype` (a name: "float32", "bfloat16"); it may keep `array`'s memory
        (gradmagic's own arrays, never written again)."""

    # -- running ------------------------------------------------------------------------------------------------

    @abc.abstractmethod
    def run_forward(self, call: Callable[[], Any], exclude: list) -> ForwardRun:
        """Run `call()`, the raw forward, as the framework runs it inside the op (eagerly; in graph mode: built and
        run); what it returned, the variables it read (minus `exclude`), and whether it narrows float64."""

    def assign(self, variable: Any, value: np.ndarray) -> None:
        """Set a variable of the user's to `value` (state a gradient function changed, put back); NotImplementedError
        where the adapter cannot (graph mode: the user's values live in their session)."""
        variable.assign(value)

    def call_gradient(self, grad_fn: Callable, args: list, kwargs: dict) -> Any:
        """What `grad_fn(*args, **kwargs)` returns, computed: errors the gradient function raises only when its
        ops run (graph mode) are raised here."""
        return grad_fn(*args, **kwargs)

    @abc.abstractmethod
    def evaluate(
        self,
        target: Target,
        layout: Layout,
        offsets: np.ndarray | Directions,
        upstream: np.ndarray | None = None,
        signs: tuple[float, ...] = (1.0,),
    ) -> np.ndarray:
        """The forward alone (`target.forward`, no custom gradient) at the layout's example point z displaced by each
        row of `offsets` ([P, N]) times each of `signs`, in one compiled call: [S, P, M], the floating outputs
        flattened in z's dtype; with `upstream` ([M]), each contracted with it: [S, P], so that millions of outputs
        need not come back. A point sets the variables from its tail; they are put back after.

        Where `takes_directions`, `offsets` may be `Directions` (with `upstream`): [S, P], and with their `gradient`
        one more row, each direction's product with it."""

    @abc.abstractmethod
    def vjps(
        self,
        target: Target,
        layout: Layout,
        points: np.ndarray,
        upstreams: np.ndarray,
        autodiff: bool = True,
        jacobian: bool = False,
    ) -> Vjps:
        """Vector-Jacobian products in one compiled call, at each row of `points` ([P, N]) for each row of
        `upstreams` ([K, M], flat over the floating outputs, in z's dtype) and, with `jacobian`, every one-hot
        upstream after them (the rows of the Jacobian, [M, N]): through the custom gradient (the decorated op, by
        the framework's own gradient machinery) and, with `autodiff`, through the forward's own ops."""

    @abc.abstractmethod
    def second_order(self, target: Target, layout: Layout, upstream: np.ndarray) -> np.ndarray:
        """[N, N]: the Jacobian in z of the custom vector-Jacobian product J(z)^T u at the layout's own point, by
        differentiating the gradient function (what nested tapes compute); `upstream` in z's dtype."""

    @abc.abstractmethod
    def gradient_graph(self, target: Target, layout: Layout, upstreams: list, arguments: list) -> RawGraph:
        """The op's forward and backward traced together at these inputs.

        `arguments` gives (kind, label) for each input leaf ("input", "x"), then each upstream ("upstream", "doutput").
        """


def native(array: np.ndarray) -> np.ndarray:
    """`array` in a dtype of NumPy's own: a float NumPy has only through ml_dtypes (bfloat16, float8) becomes float32,
    which holds it exactly, so that no NumPy function meets it (`np.finfo` refuses it, `np.result_type` mixes it)."""
    return array.astype(np.float32) if array.dtype.kind == "V" else array


def given(raw: Callable) -> Callable:
    """What the user gave for a target's raw function: the callable (a `functools.partial`, a callable object) that
    `Adapter.resolve` wrapped in a named function to decorate it, else `raw` itself."""
    return getattr(raw, "_gradmagic_wraps", raw)


def _innermost(function: Any) -> Any:
    """The Python function that locates a callable: a partial's, a bound method's, a callable object's `call` (a
    Keras layer) or `__call__`."""
    for _ in range(8):
        if isinstance(function, functools.partial):
            function = function.func
        elif inspect.ismethod(function):
            function = function.__func__
        elif hasattr(function, "_gradmagic_wraps"):
            function = function._gradmagic_wraps
        elif inspect.isfunction(function) or inspect.isclass(function):
            break
        else:
            function = getattr(function, "call", None) or getattr(type(function), "__call__", function)
    return function


def _name_of(callable_: Any) -> str:
    """What users call it: a function's name, a callable object's class."""
    while isinstance(callable_, functools.partial) or hasattr(callable_, "_gradmagic_wraps"):
        callable_ = getattr(callable_, "_gradmagic_wraps", None) or callable_.func
    if inspect.isfunction(callable_) or inspect.ismethod(callable_):
        return callable_.__name__
    return getattr(callable_, "__name__", type(callable_).__name__)


def _named(op: Callable) -> Callable:
    """A callable without `__name__` (a partial, a callable object) as a function with its name, for decorating."""

    def function(*args, **kwargs):
        return op(*args, **kwargs)

    function.__name__ = function.__qualname__ = _name_of(op)
    function._gradmagic_wraps = op  # type: ignore[attr-defined]  # a function's attributes are open; mypy knows its own
    try:
        function.__signature__ = call_signature(op)  # type: ignore[attr-defined]  # read by inspect.signature
    except (TypeError, ValueError):
        pass
    return function


def is_op(adapter: Adapter, value: Any) -> bool:
    """Whether `value` is a custom-gradient op of `adapter`'s framework: one gradmagic made, or one decorated by hand
    (also under the framework's compiled-function wrapper)."""
    try:
        return function_of(value) is not None or adapter._unwrap(value) is not None
    except Exception:  # an object of the user's whose attributes raise: no op
        return False


def call_signature(op: Any) -> inspect.Signature:
    """The signature `op` is called with: a Keras layer's `call`'s (its `__call__` takes `*args, **kwargs` and hands
    them on), else `op`'s own. Raises TypeError or ValueError as `inspect.signature` does."""
    call = getattr(op, "call", None)
    if not inspect.isfunction(op) and not inspect.ismethod(op) and inspect.ismethod(call):
        own = inspect.signature(op)
        if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in own.parameters.values()):
            return inspect.signature(call)
        return own
    return inspect.signature(op)
