"""TensorFlow 2: `tf.custom_gradient` ops run eagerly; a check's batches run inside `tf.function`s, traced once per
op and input layout (see `tracing`). Importing this module imports TensorFlow."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import weakref
from typing import Any, Callable

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import op_callbacks  # counts the ops a forward runs (see `_counting_ops`)
from tensorflow.python.util import nest  # for flatten_with_tuple_paths, which tf.nest lacks

from gradmagic.frameworks.base import (
    Adapter,
    Directions,
    ForwardRun,
    GradientConvention,
    Layout,
    RawGraph,
    Target,
    TensorMeta,
    Vjps,
    native,
)
from gradmagic.frameworks.cache import cache_of, made_from
from gradmagic.frameworks.tensorflow import building, overrides, tracing, watching
from gradmagic.frameworks.tensorflow import composite as _composite
from gradmagic.frameworks.tensorflow.traced_ops import raw_op
from gradmagic.frameworks.tensorflow.wording import KERAS_ON_TENSORFLOW, TENSORFLOW


def executes_eagerly() -> bool:
    """Whether TensorFlow runs ops as they are called here (else it builds graphs: TensorFlow 1's graph mode)."""
    return tf.executing_eagerly()


class TensorFlowAdapter(Adapter):
    """`tf.custom_gradient` ops, called eagerly or inside `tf.function`."""

    name = "tensorflow"
    display_name = "TensorFlow"
    version = tf.__version__
    decorator = "tf.custom_gradient"
    convention = GradientConvention()
    autodiff = "tf.GradientTape"
    compiled = "tf.function"
    graph_compiles = True
    wording = TENSORFLOW
    keeps_unchanged_ops = True
    takes_directions = True

    @contextlib.contextmanager
    def check_scope(self, target: Target):
        """A check of the op traces at most one of its small batches (see `_run`); its calls of the op are not the
        watched code's: a running watch does not record them."""
        cache = cache_of(target.raw)
        before = cache.get(_TRACES_LEFT)
        cache[_TRACES_LEFT] = 1
        try:
            with watching.unrecorded():
                yield
        finally:
            if before is None:
                del cache[_TRACES_LEFT]
            else:
                cache[_TRACES_LEFT] = before

    def by_reference(self, value: Any) -> bool:
        return isinstance(value, (tf.Tensor, tf.Variable, tf.DType, tf.TensorShape))

    def decorate(self, function: Callable) -> Callable:
        """Decorate with `tf.custom_gradient`; the op also works where TensorFlow's alone fails.

        * Keyword arguments: eagerly, `tf.custom_gradient` passes them through
          as constants that get no gradient; inside `tf.function` it refuses
          them ("supports keywords arguments only when eager execution is
          enabled"). Here graph mode gets the eager behaviour.
        * AutoGraph: TensorFlow's op exposes the user's function as
          `__wrapped__`, and a `tf.function` that receives the op as an
          argument follows it and calls the raw function, which returns
          `(outputs, grad_fn)` instead of outputs. This op exposes its
          signature (`__signature__`) but not the raw function, and every call
          it makes to the user's code goes through `tf.custom_gradient`, which
          AutoGraph leaves unconverted: the user's code runs as written.
        """
        op = tf.custom_gradient(function)

        def custom_gradient_op(*args, **kwargs):
            __tracebackhide__ = True
            if kwargs and not tf.executing_eagerly():
                with_keywords = functools.partial(function, **kwargs)
                with_keywords.__name__ = function.__name__
                return tf.custom_gradient(with_keywords)(*args)
            return op(*args, **kwargs)

        for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(custom_gradient_op, attribute, getattr(function, attribute))
        custom_gradient_op.__signature__ = inspect.signature(function)
        return made_from(custom_gradient_op, function)

    def resolve(self, op: Callable, composite: bool = False, overrides: bool = False) -> Target:
        """Also: a `tf.function` that no custom-gradient decorator made is a composite (it returns outputs, not
        `(outputs, grad_fn)`), its Python function run where the structure checks run the forward, so that what it
        builds is seen again however often it traced before (its gradient overrides)."""
        return super().resolve(op, composite or _composite.is_compiled_function(op), overrides)

    def _unwrap(self, op: Callable) -> tuple[Callable, str] | None:
        return _composite.unwrap(op)

    def _composite(self, function: Callable, overrides: bool) -> Target | None:
        """A `tf.function`'s gradient is its own (its overrides applied where it traced); a function that enters
        overrides and runs eagerly is checked inside a `tf.function` of its own, where they apply."""
        python = _composite.python_function(function)
        graph = python is not function
        op = _composite.in_graph(function) if overrides and not graph else function
        return self._target(python, op, "composite", python, _composite.without_custom(python), graph, overrides)

    # -- values ---------------------------------------------------------------------------------------------------

    def to_tensors(self, structure: Any) -> Any:
        """The leaves as tensors; a `tf.Variable` stays one, as `tf.custom_gradient` passes it to the forward eagerly
        (inside `tf.function` TensorFlow reads it into a tensor first, and so do the check's compiled calls)."""
        return tf.nest.map_structure(_tensor_or_variable, structure)

    def flatten(self, structure: Any) -> tuple[list, list[str]]:
        flat = nest.flatten_with_tuple_paths(structure)
        return [leaf for _, leaf in flat], ["".join(f"[{step!r}]" for step in path) for path, _ in flat]

    def pack(self, structure: Any, leaves: list) -> Any:
        return tf.nest.pack_sequence_as(structure, leaves)

    def meta(self, value: Any) -> TensorMeta | None:
        if not isinstance(value, (tf.Tensor, tf.Variable, np.ndarray)):
            return None
        dtype = tf.as_dtype(value.dtype)
        name = value.name.removesuffix(":0") if isinstance(value, tf.Variable) else None
        return TensorMeta(tuple(value.shape), dtype.name, dtype.is_floating, name)

    def to_numpy(self, value: Any) -> np.ndarray:
        if isinstance(value, tf.IndexedSlices):  # a gradient of a gather (an embedding's): its dense values, summed
            value = tf.convert_to_tensor(value)
        if isinstance(value, tf.Tensor):
            return native(np.asarray(_numpy(value)))
        return native(np.asarray(value.numpy() if hasattr(value, "numpy") else value))

    def constant(self, array: np.ndarray, dtype: str) -> Any:
        """A tensor of `array` (gradmagic's own, not written again): a large one of that dtype shares its memory."""
        shared = isinstance(array, np.ndarray) and array.dtype.name == dtype
        return _tensor(array) if shared else tf.constant(array, dtype=dtype)

    # -- running --------------------------------------------------------------------------------------------------

    def run_forward(self, call: Callable[[], Any], exclude: list) -> ForwardRun:
        # The trainable variables a tape watches are those tf.custom_gradient hands to grad_fn. TensorFlow does not
        # mix dtypes implicitly: an explicit tf.cast to float32 shows in the outputs.
        with (
            tf.GradientTape() as tape,
            _composite.custom_gradients(bypass=False) as reached,
            overrides.recording() as entered,
            _counting_ops() as ops,
        ):
            result = call()
        variables = [v for v in tape.watched_variables() if not any(v is other for other in exclude)]
        return ForwardRun(
            result,
            variables,
            custom_gradients=_composite.once_each(reached),
            ops=ops[0],
            overrides=overrides.as_built(call, entered),
        )

    def evaluate(self, target, layout, offsets, upstream=None, signs=(1.0,)) -> np.ndarray:
        if isinstance(offsets, Directions):
            return self._along(target, layout, offsets, upstream, signs)
        skeleton = _skeleton(layout)  # what the compiled function keeps: no input values

        def compute(inputs, offsets, signs, *upstream):
            z = building.z_vector(skeleton, inputs, offsets.dtype)

            def at(offset):
                outputs = _forward_at(target, skeleton, inputs, z + offset)
                return tf.tensordot(outputs, upstream[0], 1) if upstream else outputs

            # A loop over the signs (one or two), each sign's points at once, or one after the other when they are
            # large (each is work enough for both cores, and its temporaries stay one point's): no S x P x N block of
            # points, and no P x N block per sign either.
            large = (offsets.shape[1] or 0) > building.LARGE_ROWS
            if tf.executing_eagerly():
                return tf.stack([_map(skeleton, lambda offset: at(sign * offset), offsets) for sign in signs])
            return tf.map_fn(
                lambda sign: _map(skeleton, lambda offset: at(sign * offset), offsets, vectorize=not large),
                signs,
                parallel_iterations=1 if large else None,
            )

        signature = [_specs(layout.inputs), tf.TensorSpec([None, offsets.shape[1]], offsets.dtype)]
        signature += [tf.TensorSpec([None], offsets.dtype)] * (2 if upstream is not None else 1)
        extra = [_tensor(upstream.astype(offsets.dtype, copy=False))] if upstream is not None else []
        arguments = (list(layout.inputs), _tensor(offsets), tf.constant(signs, offsets.dtype), *extra)
        kind = f"evaluate/{upstream is not None}"
        return self._run(target, layout, kind, compute, signature, arguments, len(offsets) * len(signs)).numpy()

    def _along(self, target: Target, layout: Layout, directions: Directions, upstream: np.ndarray, signs: tuple):
        """`evaluate` along `Directions`: each direction formed inside the compiled call from its factors, the
        forward at z plus each sign times it contracted with `upstream`, and its product with the gradient; no
        [T, N] block of directions or points. At millions of elements the directions run one after the other."""
        skeleton = _skeleton(layout)  # what the compiled function keeps: no input values
        dtype = tf.as_dtype(directions.steps.dtype)
        size, count = directions.steps.size, len(signs)
        with_gradient = directions.gradient is not None

        def compute(inputs, bits, steps, rows, weights, sign_values, upstream, *gradient):
            z = building.z_vector(skeleton, inputs, dtype)

            def along(t):
                # The row's packed signs unpacked once into +-1 bytes (each byte's eight looked up: shifting and
                # masking every byte costs twice as much); each point's direction formed from them anew, gone (with
                # the product with the gradient, taken from the first) before the forward runs: at millions of
                # elements one float64 vector less alive at the forward's peak.
                sign = tf.reshape(tf.gather(_SIGNS_OF_BYTE, tf.cast(bits[rows[t]], tf.int32)), [-1])[:size]
                values, along_gradient = [], []
                for k in range(count):  # one sign after the other: one point's temporaries at a time
                    with tf.control_dependencies(values[-1:]):
                        direction = tf.cast(sign, dtype) * (sign_values[k] * tf.cast(weights[t], dtype) * steps)
                        if gradient and k == 0:
                            along_gradient.append(tf.tensordot(direction, gradient[0], 1) / sign_values[0])
                        point = z + direction
                    values.append(tf.tensordot(_forward_at(target, skeleton, inputs, point), upstream, 1))
                return tf.stack(values + along_gradient)

            if tf.executing_eagerly():
                return tf.stack([along(t) for t in range(rows.shape[0])], axis=1)
            large = size > building.LARGE_ROWS
            indices = tf.range(tf.shape(rows)[0])
            if large or skeleton.variables:
                values = tf.map_fn(
                    along,
                    indices,
                    fn_output_signature=tf.TensorSpec([count + with_gradient], dtype),
                    parallel_iterations=1 if large else None,
                )
            else:
                values = tf.vectorized_map(along, indices, fallback_to_while_loop=True)
            return tf.transpose(values)

        signature = [
            _specs(layout.inputs),
            tf.TensorSpec([None, directions.signs.packed.shape[1]], tf.uint8),
            tf.TensorSpec([size], dtype),
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([None, None], tf.float32),
            tf.TensorSpec([count], dtype),
            tf.TensorSpec([None], dtype),
        ] + [tf.TensorSpec([size], dtype)] * with_gradient
        arguments = (
            list(layout.inputs),
            _tensor(directions.signs.packed),
            _tensor(directions.steps),
            tf.constant(directions.rows, tf.int32),
            _tensor(directions.weights.astype(np.float32, copy=False)),
            tf.constant(signs, dtype),
            _tensor(upstream.astype(directions.steps.dtype, copy=False)),
        ) + ((_tensor(directions.gradient.astype(directions.steps.dtype, copy=False)),) if with_gradient else ())
        kind = f"directions/{count}/{with_gradient}"
        work = len(directions) * count
        return self._run(target, layout, kind, compute, signature, arguments, work).numpy()

    def vjps(self, target, layout, points, upstreams, autodiff=True, jacobian=False) -> Vjps:
        skeleton = _skeleton(layout)  # what the compiled function keeps: no input values
        one_point, count = len(points) == 1, len(upstreams)
        dtype = tf.as_dtype(points.dtype)

        def compute(inputs, points, upstreams):
            def at(point):
                leaves = _leaves_at(skeleton, inputs, point)
                outputs, custom = _outputs_and_vjps(skeleton, leaves, target.op, upstreams, dtype, jacobian)
                if not autodiff:
                    return outputs, custom
                # Autodiff after the custom gradient, not beside it: at millions of elements the two passes'
                # temporaries are not alive at once.
                with tf.control_dependencies([custom]):
                    plain_vjps = building.autodiff_or_nan(
                        lambda: _outputs_and_vjps(skeleton, leaves, target.forward, upstreams, dtype, jacobian)[1],
                        custom,
                    )
                return outputs, custom, plain_vjps

            if one_point:
                return [result[None] for result in at(points[0])]
            return _map(skeleton, at, points, results=3 if autodiff else 2, vectorize=count == 1 and not jacobian)

        signature = [
            _specs(layout.inputs),
            tf.TensorSpec([1 if one_point else None, points.shape[1]], dtype),
            tf.TensorSpec([count if count <= 1 else None, upstreams.shape[1]], dtype),
        ]
        kind = f"vjps/{one_point}/{min(count, 2)}/{autodiff}/{jacobian}"
        arguments = (list(layout.inputs), _tensor(points), _tensor(upstreams.astype(points.dtype, copy=False)))
        rows = count + (upstreams.shape[1] if jacobian else 0)  # with the Jacobian, one more row per output element
        work = len(points) * (1 + 2 * rows) * (2 if autodiff else 1)
        results = self._run(target, layout, kind, compute, signature, arguments, work)
        return Vjps.of(_numpy(results[0]), _numpy(results[1]), _numpy(results[2]) if autodiff else None)

    def second_order(self, target: Target, layout: Layout, upstream: np.ndarray) -> np.ndarray:
        """The Jacobian of the custom VJP J(z)^T u, by an outer tape around the gradient function's ops."""
        skeleton = _skeleton(layout)  # what the compiled function keeps: no input values
        dtype = tf.as_dtype(upstream.dtype)

        def compute(inputs, upstream):
            watched = [inputs[k] for k in skeleton.perturbable]
            with tf.GradientTape(persistent=tf.executing_eagerly()) as outer:
                outer.watch(watched)
                gradient = _outputs_and_vjps(skeleton, inputs, target.op, upstream[None], dtype)[1][0]
            if tf.executing_eagerly():  # nested eager tapes, a row at a time (as TensorFlow's own tests take them)

                def row(one_hot):
                    sources = building.sources(skeleton, inputs)
                    rows = outer.gradient(
                        gradient, sources, output_gradients=one_hot, unconnected_gradients=tf.UnconnectedGradients.ZERO
                    )
                    return building.flat_gradients(rows, dtype)

                return building.over_rows(row, tf.eye(tf.size(gradient), dtype=dtype))
            blocks = outer.jacobian(
                gradient,
                building.sources(skeleton, inputs),
                unconnected_gradients=tf.UnconnectedGradients.ZERO,
                experimental_use_pfor=False,
            )
            return tf.concat([tf.reshape(tf.cast(block, dtype), [tf.size(gradient), -1]) for block in blocks], axis=1)

        arguments = (list(layout.inputs), tf.constant(upstream))
        size = sum(int(np.prod(source.shape)) for source in building.sources(layout, list(layout.inputs)))
        return self._run(target, layout, "second_order", compute, None, arguments, 2 * (size + 1)).numpy()

    def gradient_graph(self, target: Target, layout: Layout, upstreams: list, arguments: list) -> RawGraph:
        """Trace forward (name scope "forward") and backward ("backward") in one graph and classify its ops. A
        composite is traced through its Python function (a `tf.function`'s own ops drawn, not one call of it), and
        one whose ops take overridden gradients differentiated by TensorFlow's graph gradients (`tf.gradients`),
        which apply overrides as the gradient of its `tf.function` does (a tape inside one graph ignores them)."""
        skeleton = _skeleton(layout)  # what the compiled function keeps: no input values
        op = target.raw if target.origin == "composite" else target.op

        def traced(inputs, upstreams):
            watched = [inputs[k] for k in skeleton.perturbable]
            with tf.name_scope("forward"):
                with tf.GradientTape() as tape:
                    tape.watch(watched)
                    outputs = tf.nest.flatten(building.call(op, skeleton, inputs))
            with tf.name_scope("backward"):
                sources = watched + list(skeleton.variables)
                if target.overrides:
                    gradients = tf.gradients(
                        outputs, sources, grad_ys=upstreams, unconnected_gradients=tf.UnconnectedGradients.ZERO
                    )
                else:
                    gradients = tape.gradient(
                        outputs, sources, output_gradients=upstreams, unconnected_gradients=tf.UnconnectedGradients.ZERO
                    )
            return outputs, gradients

        concrete = self._compiled(target, layout, "gradient_graph", traced).get_concrete_function(
            _specs(layout.inputs), _specs(upstreams)
        )
        graph = concrete.graph
        placeholders = {tensor.op.name: kind_and_label for tensor, kind_and_label in zip(graph.inputs, arguments)}
        variables = {
            internal.op.name: variable
            for external, internal in graph.captures
            for variable in layout.variables
            if external is variable.handle
        }
        ops = [raw_op(op, target.filename, placeholders, variables) for op in graph.get_operations()]
        flat = [(t.op.name, t.value_index) for t in concrete.outputs]
        count = len(tf.nest.flatten(concrete.structured_outputs[0]))
        with _unoptimised(len(ops) > OPTIMISED_OPS):
            outputs, gradients = concrete(list(layout.inputs), list(upstreams))
        dtype = building.z_dtype(layout, list(layout.inputs))
        run = Vjps(
            _numpy(building.flat_outputs(outputs, dtype))[None],
            _numpy(building.flat_gradients(gradients, dtype))[None, None],
            None,
        )
        return RawGraph(tuple(ops), tuple(flat[:count]), tuple(flat[count:]), run)

    def _run(
        self, target: Target, layout: Layout, kind: str, compute: Callable, signature: list, arguments: tuple, work: int
    ) -> Any:
        """`compute(*arguments)` compiled, or eagerly (traced never) while a small batch (its work in forward
        evaluations, a vector-Jacobian product counting two) has run eagerly for less than `tracing.EAGER_RUNS`
        runs' cost for this op (a run at `EAGER_ELEMENTS` elements costing two): a cold op's check needs few
        evaluations, and a trace costs several of them; an op checked again and again gets its compiled functions
        (see `Compiled.worth_tracing`), one small batch's a check, so that no check waits for all of their traces at
        once."""
        compiled = self._compiled(target, layout, kind, compute, signature)
        cache = cache_of(target.raw)
        traces_left = cache.get(_TRACES_LEFT, 1)
        elements = sum(int(np.prod(leaf.shape)) for leaf in layout.perturbed)
        if elements >= COMPILED_ELEMENTS:
            work = max(work, EAGER_WORK + 1)
        if compiled.worth_tracing(
            *arguments,
            work=work,
            eager_work=EAGER_WORK,
            may_trace=traces_left > 0,
            run_cost=1 + elements / EAGER_ELEMENTS,
        ):
            if not compiled.traced_for(*arguments) and work <= EAGER_WORK:
                cache[_TRACES_LEFT] = traces_left - 1
            with _VariablesRestored(layout):
                return compiled(*arguments)

        def eagerly():
            # In gradmagic's TensorFlow thread, as traces are: TensorFlow keeps the Python stacks some eager calls
            # (tape.gradient, jacobians) are made from, with the code objects in them, for good; there they start at
            # gradmagic's code, not at the user's cell. Variables are put back there too, also when Ctrl-C abandons it.
            with _VariablesRestored(layout):
                return compute(*arguments)

        return tracing.in_tensorflow_thread(eagerly)

    def _compiled(
        self, target: Target, layout: Layout, kind: str, function: Callable, input_signature: list | None = None
    ) -> tracing.Compiled:
        """`function` compiled for this op and input layout (and its signature's dtypes: a float32 op's points are
        float32 in one phase, float64 in another), traced once and reused by later checks."""
        dtypes = tuple(spec.dtype.name for spec in tf.nest.flatten(input_signature or []))
        key = (
            kind,
            dtypes,
            id(target.op),
            str(tf.nest.map_structure(lambda leaf: (tuple(leaf.shape), leaf.dtype.name), layout.structure)),
            layout.perturbable,
            tuple(id(v) for v in layout.variables),
            tuple(sorted((name, id(value)) for name, value in layout.kwargs.items())),
        )
        return tracing.compiled(function, target.raw, key, input_signature)


class KerasTensorFlowAdapter(TensorFlowAdapter):
    """`keras.ops.custom_gradient` on Keras 3's TensorFlow backend, where it is `tf.custom_gradient` itself.

    Ops are decorated and checked as TensorFlow's; only the names differ.
    """

    name = "keras"
    display_name = "Keras 3 (TensorFlow backend)"
    decorator = "keras.ops.custom_gradient"
    backend = "tensorflow"
    convention = GradientConvention(signature_checked=True)
    wording = KERAS_ON_TENSORFLOW

    @property
    def version(self) -> str:
        import keras

        return f"keras {keras.__version__}, tensorflow {tf.__version__}"


# -- the pieces of the compiled functions --------------------------------------------------------------------------


#: Above this many ops, the gradient graph runs without Grappler's optimisation on its first (and only) run: at
#: thousands of ops Grappler takes tens of seconds (44 s for a 1,000-op chain and its tape, measured), more than the
#: run itself; what is compared (Python-side state, graph-only failures) does not depend on it.
OPTIMISED_OPS = 2000


@contextlib.contextmanager
def _unoptimised(unoptimised: bool):
    """Grappler off for the functions first run inside (TensorFlow's options are global: put back after)."""
    if not unoptimised:
        yield
        return
    before = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options({**before, "disable_meta_optimizer": True})
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options(
            {**before, "disable_meta_optimizer": before.get("disable_meta_optimizer", False)}
        )


@contextlib.contextmanager
def _counting_ops():
    """A one-element list counting the ops TensorFlow runs (or builds into a graph) in this thread meanwhile."""
    count = [0]

    def counted(op_type, inputs, attrs, outputs, op_name=None, graph=None):
        count[0] += 1

    op_callbacks.add_op_callback(counted)
    try:
        yield count
    finally:
        op_callbacks.remove_op_callback(counted)


#: The key in an op's cache (`cache_of`) of how many small batches its check in progress may still trace.
_TRACES_LEFT = "traces left"
#: From this many elements on, every batch runs compiled: eagerly each op's result is a new buffer, while a compiled
#: graph reuses its inputs' (a float64 forward at 5,000,000 elements kept 147 MB of temporaries eagerly, 71 MB
#: compiled, measured), and a trace costs little beside evaluations of that size.
COMPILED_ELEMENTS = 1 << 21
#: The input size at which an eager batch's cost per element equals its fixed cost (measured on log1pexp from 10,000
#: to 1,000,000 elements: 3.3 ms an evaluation plus 15 ns an element): a batch at a million elements costs about
#: five small ones, and is traced after its first eager runs, not its fifth.
EAGER_ELEMENTS = 1 << 18
#: Work up to which a cold op's batch runs eagerly: tracing a `tf.function` costs as much as 15 to 60 eager
#: vector-Jacobian products of the same op (measured, from 3 to 300 ops), and most checks of a small op need fewer.
EAGER_WORK = 64


def _skeleton(layout: Layout) -> Layout:
    """`layout` with its inputs as specs: what a compiled function's closure keeps of it between checks (the values
    come as its arguments), so that no cast-up copy of a large input stays alive with the op."""
    specs = [tf.TensorSpec.from_tensor(leaf) if isinstance(leaf, tf.Tensor) else leaf for leaf in layout.inputs]
    return dataclasses.replace(layout, inputs=tuple(specs), structure=tf.nest.pack_sequence_as(layout.structure, specs))


def _tensor_or_variable(value: Any) -> Any:
    return value if isinstance(value, tf.Variable) else tf.convert_to_tensor(value)


def _specs(tensors) -> list:
    return [tf.TensorSpec(t.shape, t.dtype) for t in tensors]


#: Arrays from this size on reach TensorFlow without a copy (DLPack); a copy of millions of points costs more than
#: the forward on them.
_SHARED_BYTES = 1 << 20


#: The eight signs (+-1) of each byte of `Signs`, the first the high bit (a NumPy array: a TensorFlow constant made at
#: import would be an op of the user's graph in TensorFlow 1's graph mode).
_SIGNS_OF_BYTE = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.int8) * 2 - 1


#: TensorFlow's tensors start on this boundary (Eigen's alignment); one that does not would abort the process.
_ALIGNMENT = 64


def _numpy(tensor: Any) -> np.ndarray:
    """A tensor's values as NumPy: a large float32 or float64 one read-only and without a copy (its memory, kept
    alive by the array), others copied."""
    if tensor.dtype in (tf.float32, tf.float64) and tensor.dtype.size * tensor.shape.num_elements() >= _SHARED_BYTES:
        array = np.asarray(memoryview(tensor))
        if len(_EXPORTED) > 64:
            for address in [address for address, entry in _EXPORTED.items() if entry() is None]:
                del _EXPORTED[address]
        _EXPORTED[array.ctypes.data] = weakref.ref(tensor)
        return array
    return tensor.numpy()


def _tensor(array: np.ndarray) -> tf.Tensor:
    """`array` as a TensorFlow tensor; a large, aligned, C-contiguous, writeable one shares its memory instead of a
    copy, and one that is a whole tensor's memory read by `_numpy` is that tensor again."""
    source = _source_tensor(array)
    if source is not None:
        return source
    shared = (
        array.nbytes >= _SHARED_BYTES
        and array.flags.c_contiguous
        and array.flags.writeable  # DLPack cannot say read-only: NumPy refuses to export such an array
        and array.ctypes.data % _ALIGNMENT == 0
    )
    return tf.experimental.dlpack.from_dlpack(array.__dlpack__()) if shared else tf.constant(array)


def _source_tensor(array: np.ndarray) -> tf.Tensor | None:
    """The tensor whose memory `array` is, all of it and in its order (as `_numpy` handed it out, reshaped or not),
    while that tensor lives; else None."""
    entry = _EXPORTED.get(array.ctypes.data)
    tensor = entry() if entry is not None else None
    if (
        tensor is not None
        and array.flags.c_contiguous
        and array.size == tensor.shape.num_elements()
        and array.dtype == tensor.dtype.as_numpy_dtype
    ):
        return tf.reshape(tensor, array.shape)
    return None


#: The tensors whose memory `_numpy` handed out, by the address of their data (weakly): `_tensor` takes them back
#: without a copy (a custom gradient of millions of elements passed to the next compiled call, say).
_EXPORTED: dict[int, Any] = {}


def _outputs_and_vjps(
    layout: Layout, leaves: list, forward: Callable, upstreams: tf.Tensor, dtype: tf.DType, jacobian: bool = False
) -> tuple[tf.Tensor, tf.Tensor]:
    """The flat floating outputs of `forward` at the leaves, and [K, N]: its VJP for each upstream row, then with
    `jacobian` the Jacobian's M rows."""
    watched = [leaves[k] for k in layout.perturbable]
    count = upstreams.shape[0]
    with tf.GradientTape(persistent=count != 1 or jacobian) as tape:
        tape.watch(watched)
        flat = building.flat_outputs(building.call(forward, layout, leaves), dtype)
    targets = watched + list(layout.variables)

    def vjp(upstream: tf.Tensor) -> tf.Tensor:
        gradients = tape.gradient(
            flat, targets, output_gradients=upstream, unconnected_gradients=tf.UnconnectedGradients.ZERO
        )
        return building.flat_gradients(gradients, dtype)

    rows = []
    if count == 1:
        rows.append(vjp(upstreams[0])[None])
    elif count != 0:
        rows.append(building.over_rows(vjp, upstreams))
    if jacobian and tf.executing_eagerly():  # a loop of one-hot rows (pfor would trace, tape.jacobian checks shapes)
        rows.append(building.over_rows(vjp, tf.eye(tf.size(flat), dtype=dtype)))
    elif jacobian:  # by pfor over the outputs, with no identity matrix of M x M
        try:
            blocks = tape.jacobian(flat, targets, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        except ValueError:  # pfor cannot vectorise some op: a loop, still in one compiled call
            blocks = tape.jacobian(
                flat, targets, unconnected_gradients=tf.UnconnectedGradients.ZERO, experimental_use_pfor=False
            )
        size = tf.size(flat)
        rows.append(tf.concat([tf.cast(tf.reshape(block, [size, -1]), dtype) for block in blocks], axis=1))
    return flat, rows[0] if len(rows) == 1 else tf.concat(rows, axis=0)


def _leaves_at(layout: Layout, inputs: list, z: tf.Tensor) -> list:
    """The input leaves at the point z; the variables are assigned from z's tail."""
    leaves, offset = building.input_leaves_at(layout, inputs, z)
    for variable, value in building.variable_values(layout, z, offset):
        variable.assign(value)
    return leaves


def _forward_at(target: Target, layout: Layout, inputs: list, z: tf.Tensor) -> tf.Tensor:
    """The raw forward at the point z, flattened, in z's dtype."""
    return building.flat_outputs(building.call(target.forward, layout, _leaves_at(layout, inputs, z)), z.dtype)


def _map(layout: Layout, function: Callable, points: tf.Tensor, results: int = 1, vectorize: bool = True) -> Any:
    """`function` over the rows of `points` in one compiled call: vectorised, or a loop when the points assign
    variables (or `vectorize` is off). It returns `results` tensors in z's dtype."""
    if tf.executing_eagerly():  # a loop in Python: vectorising or a while loop would trace a graph
        return _stacked([function(point) for point in points], results)
    if vectorize and not layout.variables:
        return tf.vectorized_map(function, points, fallback_to_while_loop=True)
    signature = tuple(tf.TensorSpec(None, points.dtype) for _ in range(results))
    large = (points.shape[1] or 0) > building.LARGE_ROWS  # one after the other: bounded temporaries
    return tf.map_fn(
        function,
        points,
        fn_output_signature=signature[0] if results == 1 else signature,
        parallel_iterations=1 if large else None,
    )


def _stacked(values: list, results: int) -> Any:
    """Per-point results stacked along a new first axis: one tensor, or a list of `results` tensors."""
    if results == 1:
        return tf.stack(values)
    return [tf.stack([value[k] for value in values]) for k in range(results)]


class _VariablesRestored:
    """Put the variables back exactly as they were, whatever happens in between."""

    def __init__(self, layout: Layout):
        self.saved = [(v, v.numpy()) for v in layout.variables]

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        for variable, value in self.saved:
            variable.assign(value)
        return False


ADAPTER = TensorFlowAdapter()
