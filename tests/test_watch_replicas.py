"""The watch in replicated training (`tf.distribute.MirroredStrategy` over two logical CPUs): an op whose gradient
talks across replicas is checked across them, in their context, so a gradient that forgets its `all_reduce` fails
naming the replica; training runs bit for bit as without the watch. TensorFlow's logical devices are set before it
starts, so each case runs in a fresh Python."""

import json

import pytest
from conftest import run_python

SETUP = """
import json
import numpy as np, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
import gradmagic

ALL_REDUCE = {all_reduce}


@tf.custom_gradient
def center(x):
    '''x minus the mean over every replica's batch (as a synchronised batch norm centres); its gradient must take the
    mean of the upstream gradient over every replica too.'''
    context = tf.distribute.get_replica_context()
    count = context.all_reduce("sum", tf.cast(tf.shape(x)[0], x.dtype))
    mean = context.all_reduce("sum", tf.reduce_sum(x, axis=0)) / count

    def grad(dy):
        total = tf.reduce_sum(dy, axis=0)
        if ALL_REDUCE:
            total = context.all_reduce("sum", total)
        return dy - total / count

    return x - mean, grad


@tf.custom_gradient
def doubled(x):
    '''Local to its replica, its gradient twice what it should be.'''
    return tf.sin(x), lambda dy: 2 * dy * tf.cos(x)


def train(watched):
    with strategy.scope():
        w = tf.Variable(np.linspace(-1, 1, 9).reshape(3, 3).astype("f4"))

    @tf.function
    def step(xs):
        def replica(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(center(x @ w) ** 3) + tf.reduce_sum(doubled(x @ w))
            gradient = tf.distribute.get_replica_context().all_reduce("sum", tape.gradient(loss, w))
            w.assign_sub(0.01 * gradient)
            return loss
        return strategy.run(replica, args=(xs,))

    data = np.random.default_rng(0).normal(size=(32, 3)).astype("f4")
    batches = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(data).batch(8))
    watch = gradmagic.watch()
    if watched:
        with watch:
            for xs in batches:
                step(xs)
    else:
        for xs in batches:
            step(xs)
    return w.numpy(), watch.report if watched else None


plain, _ = train(False)
weights, report = train(True)
result = {{
    "identical": bool(np.array_equal(plain, weights)),
    "ops": {{
        op.name: [op.calls, op.replicas, op.verdict, [finding.code for finding in op.findings],
                  [finding.message for finding in op.findings], list(op.report.codes())]
        for op in report.watched
    }},
    "ok": report.ok,
}}
print(json.dumps(result))
"""


def replicated(all_reduce: bool) -> dict:
    output = run_python(SETUP.format(all_reduce=all_reduce), timeout=300)
    return json.loads(output.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def forgotten():
    return replicated(all_reduce=False)


def test_a_gradient_that_forgets_its_all_reduce_fails_naming_the_replica(forgotten):
    calls, replicas, verdict, codes, messages, _ = forgotten["ops"]["center"]
    assert (calls, replicas, verdict) == (8, 2, "fail") and "watch-replica-gradient" in codes
    message = " ".join(messages[codes.index("watch-replica-gradient")].split())
    assert "ran on 2 replicas in sync" in message and "replica 0's gradient is off" in message
    assert "should all_reduce" in message and "Checked on one replica alone" in message
    assert not forgotten["ok"]


def test_replicated_training_runs_bit_for_bit_as_without_the_watch(forgotten):
    assert forgotten["identical"]


def test_an_op_local_to_its_replica_is_checked_as_before_and_a_correct_collective_passes():
    result = replicated(all_reduce=True)
    assert result["identical"]
    calls, replicas, verdict, codes, _, report_codes = result["ops"]["center"]
    assert (calls, replicas, verdict, codes) == (8, 2, "pass", [])
    calls, replicas, verdict, codes, _, report_codes = result["ops"]["doubled"]
    assert (calls, replicas, verdict) == (8, 2, "fail") and "fd-mismatch" in report_codes
    assert "watch-replica-gradient" not in codes  # a local factor 2: its own check names it, nothing more
