"""Gradients registered for op types (`tf.RegisterGradient`) and the overrides that apply them
(`Graph.gradient_override_map`).

TensorFlow's gradient registry is global and refuses a name twice ("Registering two gradient with name 'STE'"), so a
notebook cell that registers one cannot run again; `register` replaces a registration a notebook (or gradmagic) made,
never one of TensorFlow's own. An override marks the ops of exactly the op type it names built in the graph it was
entered on, and only TensorFlow's graph gradients read the mark: `tf.gradients` (TensorFlow 1), and the gradient of a
`tf.function` taken from outside it (a tape around its call, or the enclosing function's); a `GradientTape` inside
the same graph ignores it (measured with TensorFlow 2.21). One keyed on a type the graph never builds (`Matmul` for
`MatMul`), or entered where ops run eagerly, does nothing, without a word.
`recording` notes every override a forward enters and what was built under it (`Override`); `bypassed` leaves them
out (the forward with the op types' own gradients, autodiff's reference); `RegisteredGradient` is what
`%%register_gradient` binds in the notebook.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import inspect
import sys
from typing import Any, Callable, Iterator

import tensorflow as tf
from tensorflow.python.framework import func_graph, op_callbacks, op_def_registry, ops

from gradmagic.errors import GradmagicError
from gradmagic.frameworks.base import Override
from gradmagic.frameworks.tensorflow.tracing import TENSORFLOW_FILES

_REGISTRY = ops._gradient_registry  # what tf.RegisterGradient writes and gradients read (`ops.get_gradient_function`)


# -- the registry --------------------------------------------------------------------------------------------------


def registered(name: str) -> Callable | None:
    """The gradient function registered under `name` (an op type, or a name an override maps one to), else None."""
    entry = _REGISTRY._registry.get(name)
    return entry["type"] if entry is not None else None


def is_tensorflows(function: Any) -> bool:
    """Whether `function` is one of TensorFlow's own gradient functions (as against one a user registered)."""
    code = getattr(inspect.unwrap(function), "__code__", None) if callable(function) else None
    return code is not None and code.co_filename.startswith(TENSORFLOW_FILES)


def register(name: str, function: Callable) -> bool:
    """Register `function` as the gradient named `name`, replacing one a notebook registered before (a cell run
    again); True when it replaced one. GradmagicError where `name` is TensorFlow's own gradient of an op type."""
    previous = registered(name)
    if previous is not None and is_tensorflows(previous):
        raise GradmagicError(
            f"`{name}` names TensorFlow's own gradient of {name} ops: registering another under that name would "
            f"change every {name} op in the process. Register yours under a name of its own and apply it to {name} "
            f"ops with an override: `%%register_gradient {name}` above a def `(op, grad)` does both."
        )
    if _JOURNALS and name not in _JOURNALS[-1]:
        _JOURNALS[-1][name] = _REGISTRY._registry.get(name)
    if previous is not None:
        del _REGISTRY._registry[name]
    _REGISTRY.register(function, name)
    return previous is not None


@contextlib.contextmanager
def taken(given: Callable[[str, Callable], Callable]) -> Iterator[None]:
    """Within: each time TensorFlow takes a gradient a user registered (not one of its own) from the registry, to build
    a backward (a graph's) or run one (eagerly), it gets `given(name, function)` in its place; `given` must not
    raise."""
    kind = type(_REGISTRY)  # its instances take no attributes of their own
    lookup = kind.lookup
    users: dict[Callable, bool] = {}  # whether a function taken is a user's (an eager backward takes one an op)

    def looked_up(registry, name):
        function = lookup(registry, name)
        if registry is not _REGISTRY or function is None:  # None: registered as not differentiable
            return function
        user = users.get(function)
        if user is None:
            user = users[function] = callable(function) and not is_tensorflows(function)
        return given(name if isinstance(name, str) else name.decode(), function) if user else function

    kind.lookup = looked_up
    try:
        yield
    finally:
        kind.lookup = lookup


#: For each `registering` running, what each name it registered held before (None: nothing), to put back on failure.
_JOURNALS: list[dict] = []


@contextlib.contextmanager
def registering() -> Iterator[list[tuple[str, Callable, bool]]]:
    """Within: `tf.RegisterGradient(name)` replaces what a notebook registered under `name` before, instead of
    raising; (name, function, whether it replaced one) for each, as a list filled as they are. When the block
    raises, every registration made inside (`register` too) is undone: the registry is as it was."""
    made: list[tuple[str, Callable, bool]] = []
    original = ops.RegisterGradient.__call__

    def replacing(self, function):
        if not isinstance(self._op_type, str):
            return original(self, function)
        made.append((self._op_type, function, register(self._op_type, function)))
        return function

    ops.RegisterGradient.__call__ = replacing
    _JOURNALS.append({})
    try:
        yield made
    except BaseException:
        for name, entry in _JOURNALS[-1].items():
            if entry is None:
                _REGISTRY._registry.pop(name, None)
            else:
                _REGISTRY._registry[name] = entry
        raise
    finally:
        _JOURNALS.pop()
        ops.RegisterGradient.__call__ = original


# -- overrides, recorded or left out --------------------------------------------------------------------------------


@contextlib.contextmanager
def recording() -> Iterator[list[Override]]:
    """Within: every gradient override entered (`Graph.gradient_override_map`) is noted, with what was built (or run,
    eagerly) under it, as a list of `Override`s filled as each override ends."""
    global _RECORDING
    found: list[Override] = []
    original = ops.Graph.gradient_override_map

    shared = _Shared()

    def recorded(graph, op_type_map):
        caller = sys._getframe(1)
        return _Recorded(original(graph, op_type_map), graph, dict(op_type_map), caller, found, shared)

    ops.Graph.gradient_override_map = recorded
    _RECORDING += 1
    try:
        yield found
    finally:
        _RECORDING -= 1
        ops.Graph.gradient_override_map = original


#: How many `recording`s and `bypassed`s are running (a check's): an override a forward enters eagerly (a
#: `tf.function`'s Python function, run eagerly by the check) is then entered and noted as in a graph, not refused.
_RECORDING = 0


@contextlib.contextmanager
def bypassed() -> Iterator[None]:
    """Within: gradient overrides apply to nothing (the ops built keep their op types' own gradients)."""
    original = ops.Graph.gradient_override_map
    global _RECORDING
    ops.Graph.gradient_override_map = lambda graph, op_type_map: contextlib.nullcontext()
    _RECORDING += 1
    try:
        yield
    finally:
        _RECORDING -= 1
        ops.Graph.gradient_override_map = original


class _Recorded:
    """One override, entered: TensorFlow's own context, and what was built under it noted when it ends.

    `shared` is the recording's, across nested overrides: `taken`, the (graph, op name) of ops an inner override of
    their type applies to (TensorFlow replaces the map inside: the innermost applies); `checking`, those of the ops
    built by calling a registered gradient to check it, which are none of the forward's."""

    def __init__(self, context, graph, mapping: dict, caller, found: list, shared: _Shared):
        self.context, self.graph, self.mapping, self.found, self.shared = context, graph, mapping, found, shared
        self.where = (caller.f_code.co_filename, caller.f_lineno)
        self.eagerly = False
        self.before = 0
        self.run: list[str] = []

    def _noted(self, op_type, inputs, attrs, outputs, op_name=None, graph=None):
        self.run.append(op_type)

    def __enter__(self):
        self.eagerly = tf.executing_eagerly()
        if self.eagerly:
            op_callbacks.add_op_callback(self._noted)
        else:
            self.before = len(self.graph.get_operations())
        return self.context.__enter__()

    def __exit__(self, *exc_info):
        try:
            return self.context.__exit__(*exc_info)
        finally:
            if self.eagerly:
                op_callbacks.remove_op_callback(self._noted)
                self._note(self.run, [], [], exc_info[0] is None)
            else:
                key = id(self.graph)
                # Ops without inputs (constants, placeholders, captured values) take no gradient: no override is
                # for them.
                built = [
                    op
                    for op in self.graph.get_operations()[self.before :]
                    if op.inputs and (key, op.name) not in self.shared.checking
                ]
                own = [op for op in built if (key, op.name) not in self.shared.taken]
                taken = [op.type for op in built if (key, op.name) in self.shared.taken]
                self.shared.taken.update((key, op.name) for op in own if op.type in self.mapping)
                self._note([op.type for op in built], own, taken, exc_info[0] is None)

    def _note(self, types: list[str], own: list, taken: list[str], completed: bool) -> None:
        """One `Override` per key of the map: `types`, what was built (or run) under it; `own`, the ops it applies
        to; `taken`, the types of those an inner override took."""
        applied = [op.type for op in own] if not self.eagerly else types
        for op_type, gradient in self.mapping.items():
            function = registered(gradient) if isinstance(gradient, str) else None
            first = next((op for op in own if op.type == op_type), None)
            mistake = None
            if function is not None and first is not None and completed:
                before = len(self.graph.get_operations())
                with self.graph.as_default():
                    mistake = gradient_mistake(first, function, str(gradient))
                made = self.graph.get_operations()[before:]
                self.shared.checking.update((id(self.graph), op.name) for op in made)
            self.found.append(
                Override(
                    str(op_type),
                    str(gradient),
                    applied.count(op_type),
                    tuple(dict.fromkeys(types)),
                    self.eagerly,
                    function is not None,
                    self.where,
                    getattr(function, "__name__", None),
                    mistake,
                    taken.count(op_type),
                )
            )


@dataclasses.dataclass
class _Shared:
    """What the overrides entered under one `recording` share (see `_Recorded`)."""

    taken: set = dataclasses.field(default_factory=set)
    checking: set = dataclasses.field(default_factory=set)


def as_built(call: Callable[[], Any], entered: list[Override]) -> tuple[Override, ...]:
    """The overrides `call()` entered as it ran eagerly (`entered`), with what it builds under them in a graph: ops
    running eagerly are not the ops a graph holds (`tf.numpy_function` runs its Python function directly, with no
    `PyFunc` op), so the types are taken from `call()` built once more, in a graph of its own (its captures read,
    nothing run). Where that build fails, what ran eagerly is kept."""
    if not entered or not any(override.eagerly for override in entered):
        return merged(entered)
    scratch = func_graph.FuncGraph("gradmagic_overrides")
    with recording() as built, scratch.as_default():
        try:
            call()
        except Exception:  # noqa: BLE001 - what ran eagerly stands
            return merged(entered)
    # Matched by op type and line, not by gradient: the recipe registers a new random name at every call.
    in_graph = {(o.op_type, o.where): o for o in merged(built)}
    return tuple(
        dataclasses.replace(
            override, built=found.built, types=found.types, mistake=found.mistake, superseded=found.superseded
        )
        if found is not None
        else override
        for override in merged(entered)
        for found in [in_graph.get((override.op_type, override.where))]
    )


def gradient_mistake(op, function: Callable, name: str) -> tuple[str, str] | None:
    """Call the gradient registered as `name` on `op` (an op built under its override) as TensorFlow does, with an
    upstream gradient of ones for each output, and say what it returns wrong: not one gradient per op input
    (`grad-count`), a gradient of another shape (`grad-shape`) or dtype (`grad-dtype`) than its input, a gradient for
    an input that has none (an integer's, `none-gradient`); an error it raises (`grad-error`). None when it is
    right."""
    inputs = list(op.inputs)
    labels = _input_labels(op)
    called = f"The gradient registered as `{name}`"
    try:
        returned = function(op, *[tf.ones_like(output) for output in op.outputs])
    except Exception as error:  # noqa: BLE001 - the user's gradient function: its failure is the finding
        return "grad-error", f"{called} raised {type(error).__name__} when called on a {op.type} op: {error}"
    gradients = list(returned) if isinstance(returned, (list, tuple)) else [returned]
    if len(gradients) != len(inputs):
        expected = ", ".join(labels)
        return (
            "grad-count",
            f"{called} returns {len(gradients)} gradient{'s' if len(gradients) != 1 else ''} for a {op.type} op, which "
            f"has {len(inputs)} input{'s' if len(inputs) != 1 else ''} ({expected}): it must return one per op "
            "input, in their order (None for an input that gets no gradient).",
        )
    for label, tensor, gradient in zip(labels, inputs, gradients):
        if gradient is None:
            continue
        if not (tensor.dtype.is_floating or tensor.dtype.is_complex):
            return (
                "none-gradient",
                f"{called} returns a gradient for `{label}`, a {tensor.dtype.name} input of the {op.type} op, which "
                "has none: return None for it.",
            )
        gradient = tf.convert_to_tensor(gradient)
        if not gradient.shape.is_compatible_with(tensor.shape):
            return (
                "grad-shape",
                f"{called} returns a gradient of shape {gradient.shape.as_list()} for `{label}` of the {op.type} op, "
                f"whose shape is {tensor.shape.as_list()}: TensorFlow accepts it here and fails later, far away. "
                "Sum a broadcast gradient back to the input's shape (tf.reduce_sum, then tf.reshape).",
            )
        if gradient.dtype != tensor.dtype:
            return (
                "grad-dtype",
                f"{called} returns a {gradient.dtype.name} gradient for `{label}` of the {op.type} op, a "
                f"{tensor.dtype.name} input: cast it (tf.cast) to the input's dtype.",
            )
    return None


def _input_labels(op) -> list[str]:
    """The names of `op`'s inputs as its op definition gives them (`a`, `b`), numbered where a list input repeats."""
    names = [argument.name for argument in op.op_def.input_arg]
    if len(names) == len(op.inputs):
        return names
    return [f"input {k}" for k in range(len(op.inputs))]


def merged(overrides: list[Override]) -> tuple[Override, ...]:
    """One `Override` per override written (its op type, gradient and line): a forward built twice, or an override
    entered in a loop, counts the most ops one of its builds put under it."""
    by_key: dict[tuple, Override] = {}
    for override in overrides:
        key = (override.op_type, override.gradient, override.where)
        kept = by_key.get(key)
        if kept is None or override.built > kept.built:
            by_key[key] = override
    return tuple(by_key.values())


# -- what %%register_gradient binds ---------------------------------------------------------------------------------


class RegisteredGradient:
    """A gradient function registered for op types, as `%%register_gradient` binds it in the notebook.

    Called, it is the gradient function `(op, *grads)`. `with it:` applies it to the ops of its op types built in the
    block (TensorFlow's `gradient_override_map`), where TensorFlow applies overrides (see the module's docstring);
    `it.override_map` is that map, for code that enters it itself; `it.forward` is the function its check calls (the
    cell's forward, or the op type's own op), its ops built under the override.
    """

    def __init__(
        self, name: str, function: Callable, op_types: tuple[str, ...], forward: Callable | None, replaced: bool
    ):
        self.name = name
        self.function = function
        self.op_types = op_types
        self.forward = forward
        self.replaced = replaced  # it replaced a registration under its name (the cell ran before)
        self.__name__ = getattr(function, "__name__", name)
        self.__qualname__ = getattr(function, "__qualname__", self.__name__)
        self.__doc__ = getattr(function, "__doc__", None)
        self.checked: Callable | None = None

    @property
    def __signature__(self) -> inspect.Signature:
        """What `%gradcheck NAME x=...` binds its inputs to: the forward it is checked through."""
        if self.forward is None or not self.op_types:
            raise ValueError(
                f"`{self.__name__}` is the gradient registered as `{self.name}` for "
                f"{' and '.join(self.op_types) or 'no op type'}, with no forward to check it through: name one op "
                "type on its %%register_gradient line (it is then checked through one op of that type), or define a "
                "forward in its cell"
            )
        return inspect.signature(self.forward)

    @property
    def override_map(self) -> dict[str, str]:
        """{op type: the registered name} for each of its op types."""
        return {op_type: self.name for op_type in self.op_types}

    def __call__(self, op, *grads):
        return self.function(op, *grads)

    def __enter__(self):
        if tf.executing_eagerly() and not _RECORDING:  # (a check runs a tf.function's Python function eagerly)
            raise RuntimeError(eager_message(self.name, self.op_types, self.__name__))
        self._entered = tf.compat.v1.get_default_graph().gradient_override_map(self.override_map)
        return self._entered.__enter__()

    def __exit__(self, *exc_info):
        return self._entered.__exit__(*exc_info)

    def __repr__(self) -> str:
        types = ", ".join(self.op_types) or "no op type"
        return f"<registered gradient {self.name!r} ({self.__name__}) for {types}>"


def bound(name: str, function: Callable, op_types: tuple[str, ...], forward: Callable | None, replaced: bool):
    """The registered gradient `%%register_gradient` binds: checked through `forward` with its ops built under the
    override, or, without one, through one op of its only op type."""
    if forward is None and len(op_types) == 1:
        forward = primitive(op_types[0])
    gradient = RegisteredGradient(name, function, op_types, forward, replaced)
    if forward is not None and op_types:
        gradient.checked = applying(forward, gradient)
    return gradient


def describe(gradient: RegisteredGradient, forward: str | None) -> str:
    """What `%%register_gradient` did, in a sentence or three."""
    function = gradient.__name__
    types = " and ".join(gradient.op_types)
    replaced = (
        " It replaced what was registered under that name before (a tf.function whose gradient was taken before "
        "keeps the gradient it built then: trace it again, a new tf.function, to use this one)."
        if gradient.replaced
        else ""
    )
    if not gradient.op_types:
        return (
            f"`{function}` is registered as `{gradient.name}`, for no op type yet: apply it with "
            f"`gradient_override_map({{'OpType': {gradient.name!r}}})`, or name the op types on the magic line."
            + replaced
        )
    applied = f" `{forward}` is bound with it applied, wherever it is called." if forward else ""
    return (
        f"`{function}` is registered as `{gradient.name}` for {types} ops. `with {function}:` applies it to the ops "
        f"built in the block inside a tf.function whose gradient is taken outside it, or in TensorFlow 1's graph "
        f"mode (`{function}.override_map` is {gradient.override_map})." + applied + replaced
    )


def check_op_type(op_type: str) -> None:
    """GradmagicError naming the op types meant where TensorFlow has no op type `op_type`."""
    if op_def_registry.get(op_type) is None:
        raise GradmagicError(unknown_type_message(op_type))


def eager_message(name: str, op_types: tuple[str, ...], bound: str) -> str:
    types = " and ".join(op_types) or "its op types"
    return (
        f"TensorFlow 2's eager mode has no gradient overrides: ops run as they are called and take their op type's own "
        f"gradient, so the gradient registered as `{name}` cannot apply to {types} ops here. Build them inside a "
        f"tf.function whose gradient is taken outside it (a tape around its call: a tape inside the same tf.function "
        f"ignores overrides too), where `with {bound}:` applies it, or in TensorFlow 1's graph mode."
    )


def applying(function: Callable, gradient: RegisteredGradient) -> Callable:
    """`function` with its ops built under `gradient`'s override, where TensorFlow applies it wherever it is called:
    in TensorFlow 2 a `tf.function` (its gradient, taken from outside it by a tape around its call or by the
    enclosing function's, is built by TensorFlow's graph gradients, which apply overrides; a tape inside one graph
    ignores them), in TensorFlow 1's graph mode the function itself (`tf.gradients` applies them)."""

    def applied(*args, **kwargs):
        if tf.executing_eagerly() and not _RECORDING:  # its Python function, run eagerly: no override applies
            return function(*args, **kwargs)
        with tf.compat.v1.get_default_graph().gradient_override_map(gradient.override_map):
            return function(*args, **kwargs)

    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(applied, attribute, getattr(function, attribute, None))
    applied.__wrapped__ = function  # type: ignore[attr-defined]  # inspect.signature follows it
    return tf.function(applied) if tf.executing_eagerly() else applied


def primitive(op_type: str) -> Callable:
    """A function that builds one op of `op_type` (`tf.raw_ops`): its inputs positional parameters, its attributes
    keyword-only ones (with the op's defaults). GradmagicError where TensorFlow has no such op type."""
    definition = op_def_registry.get(op_type)
    raw = getattr(tf.raw_ops, op_type, None)
    if definition is None or raw is None:
        raise GradmagicError(unknown_type_message(op_type))
    defaults = {
        name: parameter.default
        for name, parameter in inspect.signature(raw).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }
    inputs = [argument.name for argument in definition.input_arg]
    inferred = {argument.type_attr for argument in definition.input_arg} | {
        argument.number_attr for argument in definition.input_arg
    }
    attributes = [a.name for a in definition.attr if a.name not in inferred and a.name in defaults]

    def op(*args, **kwargs):
        return raw(**dict(zip(inputs, args)), **kwargs)

    parameters = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in inputs]
    parameters += [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=defaults[name]) for name in attributes
    ]
    op.__name__ = op.__qualname__ = op_type
    op.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]  # read by inspect.signature
    return op


def unknown_type_message(op_type: str) -> str:
    close = close_types(op_type, [name for name in dir(tf.raw_ops) if not name.startswith("_")])
    hint = f" (did you mean {' or '.join(f'`{name}`' for name in close)}?)" if close else ""
    return (
        f"TensorFlow has no op type `{op_type}`{hint}: an override is keyed on the op type exactly as TensorFlow "
        "spells it, `op.type` (`MatMul`, `Sign`, `Identity`, `PyFunc`)."
    )


def close_types(op_type: str, types: list[str] | tuple[str, ...]) -> list[str]:
    """The op types among `types` that `op_type` was probably meant to be (its case or a letter off)."""
    same = [name for name in types if name.lower() == op_type.lower() and name != op_type]
    return same or difflib.get_close_matches(op_type, types, n=2, cutoff=0.8)
