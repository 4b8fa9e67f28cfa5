"""An op that ran on several replicas in sync (`tf.distribute`: MirroredStrategy, MultiWorkerMirroredStrategy, Keras's
distributed train step) checked across them, in their context, its collectives included.

Checked on one replica alone, a collective (`all_reduce`) changes nothing, so a gradient that forgets one (a
synchronised batch norm's, say) passes there. Across the replicas, with replica s's output y_s and an upstream
gradient u_s per replica, the function the gradients differentiate is S = sum over s of <u_s, y_s>: replica r's
gradient (taken in its context with its upstream, as training takes it) must predict how S changes along any
direction of replica r's inputs. Both sides are computed by every replica at once, each on its own inputs (a worker
holds only its own replicas' calls), and reduced across all of them, so that every worker computes, and says, the
same.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import tensorflow as tf

#: Relative tolerance of the central differences, by the dtype the op is checked in (float64 where it takes it).
REPLICA_TOLERANCE = {"float64": 1e-6, "float32": 2e-3}


def replica_difference(
    strategy: Any, call: Callable, arguments: dict[int, tuple[tuple, dict]], names: Callable[..., list[str]]
) -> str | None:
    """Where the gradient of the op (its function as recorded, `call`) across the replicas of `strategy` is off, in
    words (None where it is right). `arguments`: this worker's replicas' recorded (args, kwargs), by replica index;
    `names(call, args, kwargs)`: a name for each leaf of the arguments.

    For each replica r, along a random direction d_r of r's floating inputs (seeded by r), the change of S (central
    differences of the forward run on every replica) is compared with <dx_r, d_r>."""
    op = tf.custom_gradient(call)
    count = strategy.num_replicas_in_sync
    layouts = {index: _FloatLeaves(arguments[index]) for index in arguments}
    try:
        dtype: Any = np.float64
        checker = _Checker(strategy, op, layouts, dtype, count)
    except Exception:  # noqa: BLE001 - an op that does not take float64: checked in its own dtype
        dtype = next(iter(layouts.values())).dtype
        checker = _Checker(strategy, op, layouts, dtype, count)
    tolerance = REPLICA_TOLERANCE.get(np.dtype(dtype).name, 2e-3)
    predicted = checker.predicted()
    for index in range(count):
        changed = checker.changed(index)
        if abs(changed - predicted[index]) > tolerance * (abs(changed) + abs(predicted[index]) + 1e-12):
            inputs = next(iter(layouts.values())).names(call, names)
            return (
                f"replica {index}'s gradient is off: along a random direction of replica {index}'s "
                f"{', '.join(inputs)}, replica {index}'s gradient predicts {predicted[index]:.6g} while the forward "
                f"run on all {count} replicas (every replica's outputs) changes by {changed:.6g} (central differences "
                f"in {np.dtype(dtype).name})"
            )
    return None


class _FloatLeaves:
    """The floating-point arrays of a call's (args, kwargs) (its inputs to perturb), and the arguments with others."""

    def __init__(self, arguments: tuple[tuple, dict]):
        self.arguments = arguments
        self.leaves = tf.nest.flatten(arguments)
        self.structure = tf.nest.map_structure(lambda leaf: None, arguments)
        self.picked = [
            i for i, leaf in enumerate(self.leaves) if isinstance(leaf, np.ndarray) and leaf.dtype.kind == "f"
        ]
        self.dtype = self.leaves[self.picked[0]].dtype if self.picked else np.dtype(np.float32)

    def values(self, dtype: Any) -> list[np.ndarray]:
        return [self.leaves[i].astype(dtype) for i in self.picked]

    def with_values(self, values: list) -> tuple[tuple, dict]:
        leaves = list(self.leaves)
        for position, value in zip(self.picked, values):
            leaves[position] = value
        return tf.nest.pack_sequence_as(self.structure, leaves)

    def names(self, call: Callable, names: Callable[..., list[str]]) -> list[str]:
        """The names of the inputs perturbed."""
        every = names(call, *self.arguments)
        return [every[i] for i in self.picked]


class _Checker:
    """The collective computations of a replica check: every replica runs each at once, on its own inputs."""

    def __init__(self, strategy: Any, op: Callable, layouts: dict[int, _FloatLeaves], dtype: Any, count: int):
        self.strategy, self.op, self.layouts, self.dtype, self.count = strategy, op, layouts, dtype, count
        self.values = {index: layout.values(dtype) for index, layout in layouts.items()}
        outputs = self._run(self._outputs, self._each(lambda index: tuple(self.values[index])))
        self.upstream = {
            index: [
                np.random.default_rng([1, index]).standard_normal(np.shape(output)).astype(np.asarray(output).dtype)
                for output in outputs[position]
            ]
            for position, index in enumerate(sorted(layouts))
        }
        self.directions = {
            index: [np.random.default_rng([2, index]).standard_normal(value.shape) for value in values]
            for index, values in self.values.items()
        }
        largest = {
            index: max([float(np.abs(v).max(initial=0)) for v in values] or [0.0])
            for index, values in self.values.items()
        }
        self.largest = self._reduced(lambda index: _one_hot(index, count, largest[index]))  # every replica's

    def predicted(self) -> np.ndarray:
        """<dx_r, d_r> for every replica r, its gradient taken in its context with each replica's upstream."""

        def each(bundle):
            values, upstream, direction, index = bundle
            values = list(values)
            with tf.GradientTape() as tape:
                tape.watch(values)
                outputs = self._outputs_of(values)
            gradients = tape.gradient(outputs, values, output_gradients=list(upstream))
            dot = sum(tf.reduce_sum(tf.cast(g, tf.float64) * d) for g, d in zip(gradients, direction) if g is not None)
            return tf.one_hot(index, self.count, dtype=tf.float64) * tf.cast(dot, tf.float64)

        bundles = self._each(
            lambda index: (
                tuple(self.values[index]),
                tuple(self.upstream[index]),
                tuple(tf.constant(d) for d in self.directions[index]),
                index,
            )
        )
        return self._sum(each, bundles)

    def changed(self, perturbed: int) -> float:
        """How S changes along d_r of replica `perturbed`'s inputs: central differences, every replica running."""
        step = float(np.finfo(self.dtype).eps ** (1 / 3) * max(1.0, self.largest[perturbed]))

        def moved(sign: float) -> float:
            def values(index: int) -> tuple:
                if index != perturbed:
                    return tuple(self.values[index])
                moved_values = [v + sign * step * d for v, d in zip(self.values[index], self.directions[index])]
                return tuple(value.astype(self.dtype) for value in moved_values)

            def each(bundle):
                values, upstream = bundle
                outputs = self._outputs_of(list(values))
                return sum(tf.reduce_sum(tf.cast(o, tf.float64) * u) for o, u in zip(outputs, upstream))

            bundles = self._each(
                lambda index: (values(index), tuple(tf.constant(u, tf.float64) for u in self.upstream[index]))
            )
            return float(self._sum(each, bundles))

        return (moved(1.0) - moved(-1.0)) / (2 * step)

    # -- running on every replica ---------------------------------------------------------------------------------

    def _outputs_of(self, values: list) -> list:
        layout = next(iter(self.layouts.values()))  # every replica's arguments have its structure and other values
        call_args, call_kwargs = layout.with_values(values)
        return tf.nest.flatten(self.op(*call_args, **call_kwargs))

    def _outputs(self, values):
        return tuple(self._outputs_of(list(values)))

    def _each(self, value: Callable[[int], Any]) -> Any:
        """`value(r)` on each of this worker's replicas r, as `strategy.run` takes it."""
        return self.strategy.experimental_distribute_values_from_function(
            lambda context: value(context.replica_id_in_sync_group)
        )

    def _run(self, function: Callable, bundles: Any) -> list:
        """`function` run on every replica; this worker's replicas' results, as NumPy, in replica order."""
        results = traced_once(lambda bundle: self.strategy.run(function, args=(bundle,)))(bundles)
        local = self.strategy.experimental_local_results(results)
        return [[np.asarray(value) for value in tf.nest.flatten(result)] for result in local]

    def _sum(self, function: Callable, bundles: Any) -> Any:
        """`function`'s results summed over every replica (each worker gets the sum)."""

        def reduced(bundle):
            return tf.distribute.get_replica_context().all_reduce("sum", function(bundle))

        return self._run(reduced, bundles)[0][0]

    def _reduced(self, value: Callable[[int], np.ndarray]) -> np.ndarray:
        """`value(r)` of each of this worker's replicas, summed over every replica."""

        def reduced(bundle):
            # A copy made on the replica's device: a value handed in is placed where it was made, which a
            # multi-worker collective cannot reduce from.
            return tf.distribute.get_replica_context().all_reduce("sum", tf.identity(bundle))

        return self._run(reduced, self._each(lambda index: tf.constant(value(index))))[0][0]


def traced_once(function: Callable, **options: Any) -> Any:
    """`function` as a `tf.function` made for one use: TensorFlow's "frequent retracing" warning, which counts traces
    per code object across every such function, is off for it (as for the check engine's own, `tracing.compiled`)."""
    made = tf.function(function, **options)
    made._omit_frequent_tracing_warning = True
    return made


def _one_hot(index: int, count: int, value: float) -> np.ndarray:
    vector = np.zeros(count)
    vector[index] = value
    return vector


def gather_workers(strategy: Any, text: str) -> tuple[int, list[tuple[int, str]]]:
    """Every worker's `text` (each worker calls this with its own), gathered on every worker through the strategy's
    collectives: this worker's index, and (worker index, text) in worker order. A worker's text goes with its first
    replica."""
    count = strategy.num_replicas_in_sync
    task = strategy.cluster_resolver.task_id
    data = np.frombuffer(text.encode(), np.uint8).astype(np.int32)
    first = _first_local_replica(strategy)

    def mine(index: int, value: np.ndarray) -> np.ndarray:
        return value if index == first else np.zeros_like(value)

    def summed(value: Callable[[int], np.ndarray]) -> np.ndarray:
        def reduced(bundle):
            return tf.distribute.get_replica_context().all_reduce("sum", tf.identity(bundle))

        bundles = strategy.experimental_distribute_values_from_function(
            lambda context: tf.constant(value(context.replica_id_in_sync_group))
        )
        results = traced_once(lambda bundle: strategy.run(reduced, args=(bundle,)))(bundles)
        return np.asarray(strategy.experimental_local_results(results)[0])

    lengths = summed(lambda index: mine(index, _one_hot(index, count, data.size).astype(np.int32)))
    tasks = summed(lambda index: mine(index, _one_hot(index, count, task + 1).astype(np.int32)))
    width = int(lengths.max(initial=0))

    def row(index: int) -> np.ndarray:
        rows = np.zeros((count, width), np.int32)
        rows[index, : data.size] = data
        return mine(index, rows)

    rows = summed(row)
    return task, [
        (int(tasks[index]) - 1, bytes(rows[index, : int(lengths[index])].astype(np.uint8)).decode())
        for index in range(count)
        if tasks[index]
    ]


def _first_local_replica(strategy: Any) -> int:
    """The index (among every worker's) of this worker's first replica."""
    found = []
    strategy.experimental_distribute_values_from_function(
        lambda context: found.append(int(context.replica_id_in_sync_group)) or tf.constant(0)
    )
    return min(found)
