"""TensorFlow 1's graph mode: the graph and session an op's checks build in and run, kept with the op.

What a check builds for an input layout, later checks run again with new
feeds. The user's graph gets no operation and the user's session runs
nothing but reads; their resource variables are mirrored here (see
`Workspace.mirror`).
"""

from __future__ import annotations

import collections
import contextlib
from typing import Any, Callable

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import record  # VariableWatcher: the variables a call reads, as tf.custom_gradient sees
from tensorflow.python.framework import func_graph  # FuncGraph: captures what a call takes from other graphs
from tensorflow.python.ops import resource_variable_ops

from gradmagic.frameworks.base import Layout, OpProblem
from gradmagic.frameworks.tensorflow.tracing import gradient_registry, unregister

# A workspace serves an op's checks until its graph holds this many operations; then the next check starts a new
# one. Each check builds the forward and the gradient function once more, for the structure checks, and its session
# keeps what it prepared to run them: about 0.16 MB a check for the seed's op, 12 operations (measured).
KEPT_OPERATIONS = 2_000

_GLOBAL = tf.compat.v1.GraphKeys.GLOBAL_VARIABLES
_LOCAL = tf.compat.v1.GraphKeys.LOCAL_VARIABLES
_TRAINABLE = tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES


class Workspace:
    """The graph and session an op's checks build in and run, kept with the op as the eager adapter keeps its
    compiled functions: what a check builds for an input layout, later checks run again with new feeds.

    Per check (`checking`): the user's graph guarded, their variables pointed at their copies here and back, the
    values at the example point.
    """

    def __init__(self):
        self.graph = tf.Graph()
        self.session: tf.compat.v1.Session | None = None
        self.placeholders: dict = {}  # (dtype, shape, n) -> the n-th input placeholder of that dtype and shape
        self.built_computations: dict = {}
        self.copies: dict = {}  # user variable key -> (its copy here, the placeholder that initialises it)
        self.private_values: dict = {}  # key of a variable the op created here -> its value (kept between runs)
        self.scanned = 0  # operations already looked at by `_refuse_vector_conds`
        self.restorers: dict = {}
        self.checking_now = False
        self.refused = False  # the graph holds what must never run: the next check starts afresh
        self._start_check()

    def _start_check(self) -> None:
        self.user_graph = tf.compat.v1.get_default_graph()
        self.user_session = tf.compat.v1.get_default_session()
        self.feeds: dict = {}  # the input placeholders and their values, fed in every run
        self.known: dict = dict(self.private_values)  # tensor or variable key -> its value at the example point
        self.handed_out: collections.Counter = collections.Counter()  # input placeholders given, by signature
        self.swapped: dict = {}  # user variable key -> (the variable, its saved attributes)
        self.mirrored_names: dict = {}  # a mirrored variable's name in the user's graph -> the variable
        self.user_handles: set = set()  # the user graph's handles of mirrored variables
        self.scratch_sessions: dict = {}  # sessions of our own on the user's graphs, for values computed alone
        self.pending_mirrors: list = []  # (initializer, its placeholder, the user's value) of copies to set

    @property
    def full(self) -> bool:
        return self.refused or len(self.graph.get_operations()) > KEPT_OPERATIONS

    @contextlib.contextmanager
    def checking(self):
        """One check: this graph the default, the user's graph finalized, mirrored variables restored after."""
        self._start_check()
        self.checking_now = True
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(self.graph.as_default())
                stack.enter_context(
                    tf.compat.v1.variable_scope(
                        tf.compat.v1.get_variable_scope(),
                        reuse=tf.compat.v1.AUTO_REUSE,  # the forward is built more than once
                        custom_getter=self._get_variable,
                    )
                )
                if not self.user_graph.finalized:
                    self.user_graph.finalize()
                    stack.callback(self.user_graph._unsafe_unfinalize)
                registry = gradient_registry()
                registered = set(registry)
                # Each graph-mode call of a custom-gradient op registers its gradient function for good; what this
                # check built has its gradients already.
                stack.callback(lambda: unregister([name for name in list(registry) if name not in registered]))
                stack.callback(self._restore_user_variables)
                stack.callback(self._close_scratch_sessions)
                yield self
        finally:
            self.checking_now = False

    # -- values ---------------------------------------------------------------------

    def input_tensor(self, leaf: Any) -> Any:
        """An example input as a placeholder of this graph, fed with its value in every run of this check."""
        if getattr(leaf, "graph", None) is self.graph:  # the check's own (a gradient, given to `to_tensors`)
            return tf.convert_to_tensor(leaf)
        if isinstance(leaf, (tf.Tensor, tf.Variable)):
            value, dtype = self.outside_value(leaf), leaf.dtype.base_dtype
        else:
            proto = tf.make_tensor_proto(leaf)
            value, dtype = tf.make_ndarray(proto), tf.as_dtype(proto.dtype)
        signature = (dtype.name, value.shape)
        key = signature + (self.handed_out[signature],)
        self.handed_out[signature] += 1
        if key not in self.placeholders:
            with self.graph.name_scope(None):
                self.placeholders[key] = tf.compat.v1.placeholder(dtype, value.shape, name="example")
        placeholder = self.placeholders[key]
        self.feeds[placeholder] = value
        self.known[value_key(placeholder)] = value
        return placeholder

    def outside_value(self, tensor: Any) -> np.ndarray:
        """The value of a tensor or variable of the user's graph, read in the user's default session (or, without
        one on that graph, computed alone): ValueError saying why when it has none."""
        name = tensor.name if isinstance(tensor, tf.Tensor) else tensor.name.removesuffix(":0")
        if isinstance(tensor, tf.Tensor) and tensor.op.type in ("Placeholder", "PlaceholderV2"):
            raise ValueError(
                f"`{name}` is a tf.compat.v1.placeholder: it has no value to check the op at. Give the value you "
                "would feed it (a NumPy array or Python numbers), e.g. `x=np.array([...], np.float32)`."
            )
        try:
            return np.asarray(self.session_for(tensor.graph).run(tensor))
        except tf.errors.OpError as error:
            cause = _cause(error)
            if isinstance(error, tf.errors.FailedPreconditionError):
                advice = (
                    "it reads a variable your default session has not initialised: initialise it, and make that "
                    "session the default (`tf.compat.v1.InteractiveSession()`, or `with sess.as_default():`)"
                )
            else:
                advice = "give its value instead (a NumPy array), e.g. the array you would feed"
            raise ValueError(f"`{name}` has no value here ({cause}): {advice}.") from None

    def session_for(self, graph: tf.Graph) -> tf.compat.v1.Session:
        """The user's default session if it runs `graph`, else a session of our own on it (nothing to initialise)."""
        if self.user_session is not None and self.user_session.graph is graph:
            return self.user_session
        if graph not in self.scratch_sessions:
            self.scratch_sessions[graph] = tf.compat.v1.Session(graph=graph)
        return self.scratch_sessions[graph]

    def constant(self, array: np.ndarray, dtype: str) -> tf.Tensor:
        tensor = tf.constant(array, dtype=dtype)
        self.known[value_key(tensor)] = np.asarray(array).astype(tensor.dtype.as_numpy_dtype)
        return tensor

    def value(self, value: Any) -> np.ndarray:
        """A tensor or variable of this graph (or a NumPy or Python value) as NumPy."""
        if not isinstance(value, (tf.Tensor, tf.Variable, tf.IndexedSlices)):
            return np.asarray(value)
        key = value_key(value)
        if key not in self.known:
            self.known[key] = self.run(tf.convert_to_tensor(value))
        return self.known[key]

    def known_shape(self, value: Any) -> tuple | None:
        """The shape of a tensor whose value this check has seen (for shapes only running the graph tells)."""
        known = self.known.get(value_key(value))
        return known.shape if known is not None else None

    def evaluate(self, tensors: list) -> None:
        """Run `tensors` (in one session.run) and remember their values; errors the op raises at run time surface."""
        missing = list({value_key(t): t for t in tensors if value_key(t) not in self.known}.values())
        if missing:
            for tensor, value in zip(missing, self.run(missing)):
                self.known[value_key(tensor)] = value

    # -- running ----------------------------------------------------------------------

    def built(self, kind: tuple, layout: Layout, build: Callable[[], Any]) -> Any:
        """`build()` for this layout, built once and kept for later checks."""
        key = kind + (layout.perturbable, tuple(map(id, layout.inputs)), tuple(map(id, layout.variables)))
        key += (tuple(sorted((name, id(value)) for name, value in layout.kwargs.items())),)
        if key not in self.built_computations:
            self.built_computations[key] = (build(), layout)  # the layout keeps the ids in the key alive
        return self.built_computations[key][0]

    def run(self, fetches: Any, feeds: dict | None = None, perturbs: tuple = ()) -> Any:
        """One session.run of this graph, the example inputs fed. If it may perturb variables (`perturbs`) and
        fails, they are put back."""
        self._initialise_variables()
        self._refuse_vector_conds()
        try:
            return self._session().run(fetches, {**self.feeds, **(feeds or {})})
        except BaseException as error:
            if perturbs:
                self._restore_variables(perturbs)
            if isinstance(error, tf.errors.OpError):  # the cause, not TensorFlow's framing; `op` keeps the line
                raise type(error)(error.node_def, error.op, _cause(error)) from None
            raise

    def _session(self) -> tf.compat.v1.Session:
        if self.session is None:
            self.session = tf.compat.v1.Session(graph=self.graph)
        return self.session

    def _refuse_vector_conds(self) -> None:
        """Raise where a tf.cond has a vector predicate: running it aborts the process (measured with TF 2.21)."""
        operations = self.graph.get_operations()
        for op in operations[self.scanned :]:
            predicate = op.inputs[0].shape if op.type in ("If", "StatelessIf") else None
            if predicate is not None and predicate.rank not in (None, 0):
                self.refused = True
                raise tf.errors.InvalidArgumentError(
                    None,
                    op,
                    f"tf.cond got a predicate of shape {predicate.as_list()}: it needs a scalar (one boolean). In a "
                    f"tf.compat.v1 Session TensorFlow {tf.__version__} raises no error for this: running the graph "
                    "aborts the whole Python process (a failed CHECK in its graph optimizer), which would end the "
                    "notebook's kernel, so gradmagic did not run it. For an element-wise choice use "
                    "`tf.where(condition, a, b)`, which also keeps the gradient element-wise.",
                )
        self.scanned = len(operations)

    def close(self) -> None:
        """Free the session (its graph goes with this workspace)."""
        if self.session is not None:
            self.session.close()

    def _close_scratch_sessions(self) -> None:
        for session in self.scratch_sessions.values():
            session.close()

    # -- the forward and its variables -----------------------------------------------

    def run_forward(self, call: Callable[[], Any], exclude: list) -> tuple[Any, list]:
        """Build `call()` here and run it; (its result, the trainable variables it reads, sorted by name)."""
        before = {value_key(v) for v in self._variables()}  # the discovery may create the op's variables already
        self._discover(call)
        try:
            with record.VariableWatcher() as watcher:
                result = call()
        except (RuntimeError, ValueError) as error:
            if "Graph is finalized" in str(error) or "must be from the same graph" in str(error):
                raise OpProblem("closed-over-tensor", _outside_message(str(error))) from None
            raise
        created = [v for v in self._variables() if value_key(v) not in before]
        for variable in created:
            if not resource_variable_ops.is_resource_variable(variable):
                raise OpProblem("non-resource-variable", _created_reference_message(variable), variable.op)
        self.evaluate([t for t in tf.nest.flatten(result) if isinstance(t, tf.Tensor)])
        variables = [v for v in watcher.watched_variables() if not any(v is other for other in exclude)]
        return result, sorted(variables, key=lambda v: v.name)

    def _discover(self, call: Callable[[], Any]) -> None:
        """Build `call()` once in a FuncGraph, which captures what it reads from other graphs without adding to
        them; mirror the user's resource variables it reads, and refuse what cannot be mirrored."""
        scratch = func_graph.FuncGraph("gradmagic_discovery")
        with scratch.as_default(), record.VariableWatcher() as watcher:
            try:
                call()
            except OpProblem:
                raise
            except Exception:  # the real build reports it, with its line
                pass
        for variable in watcher.watched_variables():
            if variable.graph is not self.graph and resource_variable_ops.is_resource_variable(variable):
                self.mirror(variable)
        for external, internal in scratch.captures:
            if external.graph is self.graph or value_key(external) in self.user_handles:
                continue
            consumer = next(iter(internal.consumers()), None)
            variable = self._variable_of(external)
            if variable is not None and resource_variable_ops.is_resource_variable(variable):
                self.mirror(variable)
            elif variable is not None:
                raise OpProblem("non-resource-variable", _read_reference_message(variable), consumer)
            else:
                raise OpProblem("closed-over-tensor", _outside_message(external.name), consumer)

    def _variables(self) -> list:
        return self.graph.get_collection(_GLOBAL) + self.graph.get_collection(_LOCAL)

    def _user_variables(self, graph: tf.Graph) -> list:
        return graph.get_collection(_GLOBAL) + graph.get_collection(_LOCAL)

    def _variable_of(self, tensor: tf.Tensor) -> Any:
        """The user's variable whose handle (resource variable) or value (reference variable) `tensor` is."""
        for variable in self._user_variables(tensor.graph):
            if resource_variable_ops.is_resource_variable(variable):
                if variable.handle is tensor:
                    return variable
            elif any(tensor is getattr(variable, name, None) for name in ("_variable", "_snapshot")):
                return variable
        return None

    def _get_variable(self, getter: Callable, name: str, *args, **kwargs) -> Any:
        """`get_variable` in the check's graph: the user's resource variable of that name, mirrored, if there is
        one; else a variable of the check's graph (reused when the forward is built again)."""
        existing = self.mirrored_names.get(name)
        if existing is None:
            existing = next((v for v in self._user_variables(self.user_graph) if v.op.name == name), None)
        if existing is None:
            return getter(name, *args, **kwargs)
        if not resource_variable_ops.is_resource_variable(existing):
            raise OpProblem("non-resource-variable", _read_reference_message(existing))
        return self.mirror(existing)

    def mirror(self, variable: Any) -> Any:
        """Point the user's resource variable at its copy in this graph, set to the user's value, until the check
        ends; the same object, so tf.custom_gradient sees one variable, as in the user's graph."""
        key = value_key(variable)
        if key in self.swapped:
            return variable
        value = self._user_value(variable)
        if key not in self.copies:
            with tf.init_scope(), self.graph.as_default(), self.graph.name_scope(None):
                initial = tf.compat.v1.placeholder(variable.dtype.base_dtype, variable.shape, name="mirrored_value")
                copy = resource_variable_ops.ResourceVariable(
                    initial_value=initial, name=variable.op.name, trainable=False, collections=[]
                )
            self.copies[key] = (copy, initial)
            # tf.custom_gradient looks the variables it finds in the graph up by name in these collections.
            self.graph.add_to_collection(_GLOBAL, variable)
            if variable.trainable:
                self.graph.add_to_collection(_TRAINABLE, variable)
        copy, initial = self.copies[key]
        self.swapped[key] = (variable, {name: getattr(variable, name) for name in _MIRRORED_ATTRIBUTES})
        self.mirrored_names[variable.op.name] = variable
        self.user_handles.add(value_key(variable.handle))
        for name in _MIRRORED_ATTRIBUTES:
            setattr(variable, name, getattr(copy, name))
        self.pending_mirrors.append((copy.initializer, initial, value))
        self.known[key] = value
        return variable

    def _user_value(self, variable: Any) -> np.ndarray:
        """The value of the user's variable in their default session; its initial value if it has none there."""
        if self.user_session is not None and self.user_session.graph is variable.graph:
            try:
                return np.asarray(self.user_session.run(variable))
            except tf.errors.FailedPreconditionError:  # not initialised in that session
                pass
        try:
            return np.asarray(self.session_for(variable.graph).run(variable.initial_value))
        except tf.errors.OpError as error:
            raise OpProblem(
                "forward-error",
                f"The forward reads the variable `{variable.name.removesuffix(':0')}`, which no default session "
                f"holds and whose initial value cannot be computed alone ({_cause(error)}). "
                "Initialise it in your session and make that session the default "
                "(`tf.compat.v1.InteractiveSession()`, or `with sess.as_default():`).",
            ) from None

    def _restore_user_variables(self) -> None:
        for variable, saved in self.swapped.values():
            for name, value in saved.items():
                setattr(variable, name, value)

    def _initialise_variables(self) -> None:
        """Set the copies to the user's values and initialise the variables the op created in this graph, noting
        the latter's values: one run, before the first run that needs them."""
        fresh = [
            v for v in self._variables() if value_key(v) not in self.private_values and value_key(v) not in self.copies
        ]
        if not fresh and not self.pending_mirrors:
            return
        initializers = [v.initializer for v in fresh] + [initializer for initializer, _, _ in self.pending_mirrors]
        with tf.init_scope(), tf.control_dependencies(initializers):
            reads = [tf.identity(v.read_value()) for v in fresh]
        values = self._session().run(
            [reads, initializers], {placeholder: value for _, placeholder, value in self.pending_mirrors}
        )[0]
        self.pending_mirrors = []
        for variable, value in zip(fresh, values):
            self.private_values[value_key(variable)] = self.known[value_key(variable)] = value

    def _restore_variables(self, variables: tuple) -> None:
        """Put the variables back to their values at the example point (after a run that failed midway)."""
        key = tuple(map(value_key, variables))
        if key not in self.restorers:
            values = [tf.compat.v1.placeholder(v.dtype.base_dtype, v.shape) for v in variables]
            self.restorers[key] = (values, [v.assign(value, read_value=False) for v, value in zip(variables, values)])
        values, assignments = self.restorers[key]
        self._session().run(assignments, {p: self.known[value_key(v)] for p, v in zip(values, variables)})


# What the user's variable object reads and writes through: pointed at its copy while a check runs.
_MIRRORED_ATTRIBUTES = ("_handle", "_graph_element", "_cached_value", "_initializer_op")


def _cause(error: tf.errors.OpError) -> str:
    """What went wrong, from a session.run error: the lines after TensorFlow's "Node: '...'" framing."""
    lines = [line.strip() for line in error.message.strip().splitlines()]
    after = [i for i, line in enumerate(lines) if line.startswith("Node: ")]
    lines = lines[after[-1] + 1 :] if after else lines
    return " ".join(line for line in lines if line and not line.startswith("[[")) or error.message


def value_key(value: Any) -> Any:
    """What identifies a tensor or variable in the workspace's tables."""
    return value.ref() if hasattr(value, "ref") else id(value)


def _created_reference_message(variable: Any) -> str:
    return (
        f"The forward creates `{variable.name.removesuffix(':0')}` as a reference variable (a RefVariable), in a "
        "variable scope with `use_resource=False` (or TensorFlow 1's default after "
        '`tf.compat.v1.disable_v2_behavior()`). tf.custom_gradient needs ResourceVariables: "if the decorated '
        'function uses Variables, the enclosing variable scope must be using ResourceVariables"; calling the op '
        "raises `TypeError: All variables used by a function wrapped with @custom_gradient must be "
        "`ResourceVariable`s`. Create it with `tf.compat.v1.get_variable(..., use_resource=True)`, or inside "
        "`tf.compat.v1.variable_scope(..., use_resource=True)`."
    )


def _read_reference_message(variable: Any) -> str:
    return (
        f"The forward reads `{variable.name.removesuffix(':0')}`, a reference variable (a RefVariable, made by a "
        "variable scope with `use_resource=False` or after `tf.compat.v1.disable_v2_behavior()`). "
        'tf.custom_gradient needs ResourceVariables: "if the decorated function uses Variables, the enclosing '
        'variable scope must be using ResourceVariables" (TensorFlow 2.21 does not check a variable created '
        "outside the op, and gradmagic cannot copy it into the graph it checks in). Create it with "
        "`tf.compat.v1.get_variable(..., use_resource=True)`, or inside "
        "`tf.compat.v1.variable_scope(..., use_resource=True)`."
    )


def _outside_message(what: str) -> str:
    return (
        f"The forward uses a tensor of your graph that is not one of its inputs ({what}). gradmagic checks the op "
        "in a graph of its own, so that yours stays exactly as it is, and only variables can be copied there. "
        "Pass the tensor to the op as an input (by keyword if it needs no gradient), or create it inside the op."
    )
