"""The watch under `tf.distribute.MultiWorkerMirroredStrategy`: two worker processes on this machine (TF_CONFIG naming
127.0.0.1 ports), started and stopped here. Each worker trains as without the watch, bit for bit; its op is checked
across both workers' replicas, in their context; every worker's watch is gathered on each, the chief's included."""

import json
import os
import socket
import subprocess
import sys

import pytest
from conftest import ISOLATED_ENV, ROOT

WORKER = '''
import json, os, sys
index, ports, all_reduce = int(sys.argv[1]), sys.argv[2].split(","), sys.argv[3] == "1"
os.environ["TF_CONFIG"] = json.dumps(
    {"cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]}, "task": {"type": "worker", "index": index}}
)
import numpy as np, tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
import gradmagic


@tf.custom_gradient
def center(x):
    """x minus the mean over every replica's batch; its gradient must take the upstream's mean over every replica."""
    context = tf.distribute.get_replica_context()
    count = context.all_reduce("sum", tf.cast(tf.shape(x)[0], x.dtype))
    mean = context.all_reduce("sum", tf.reduce_sum(x, axis=0)) / count

    def grad(dy):
        total = tf.reduce_sum(dy, axis=0)
        return dy - (context.all_reduce("sum", total) if all_reduce else total) / count

    return x - mean, grad


def fit(watched):
    """Four steps of a hand-written replicated training loop (Keras 3's model.fit fails under this strategy here,
    with or without the watch: it hands a PerReplica value to a tensor conversion)."""
    with strategy.scope():
        w = tf.Variable(np.linspace(-1, 1, 9).reshape(3, 3).astype("f4"))

    @tf.function
    def step(x):
        def replica(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(center(x @ w) ** 3)
            w.assign_sub(0.01 * tf.distribute.get_replica_context().all_reduce("sum", tape.gradient(loss, w)))
            return loss

        return strategy.run(replica, args=(x,))

    batches = np.random.default_rng(index).normal(size=(4, 8, 3)).astype("f4")  # each worker its own data
    watch = gradmagic.watch()
    if watched:
        with watch:
            for batch in batches:
                step(tf.constant(batch))
    else:
        for batch in batches:
            step(tf.constant(batch))
    return [w.numpy()], watch.report if watched else None


plain, _ = fit(False)
weights, report = fit(True)
(op,) = report.watched
print(json.dumps({
    "identical": all(np.array_equal(a, b) for a, b in zip(plain, weights)),
    "op": [op.name, op.calls, op.replicas, op.verdict, [finding.code for finding in op.findings]],
    "worker": report.worker,
    "workers": [[w.worker, w.verdict, [[o.name, o.calls, o.verdict] for o in w.ops]] for w in report.workers],
    "ok": report.ok,
}))
'''


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for each in sockets:
            each.bind(("127.0.0.1", 0))
        return [each.getsockname()[1] for each in sockets]
    finally:
        for each in sockets:
            each.close()


def two_workers(tmp_path, all_reduce: bool) -> list[dict]:
    """Both workers' results (worker 0, the chief, first)."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    ports = ",".join(map(str, free_ports(2)))
    env = {**os.environ, **ISOLATED_ENV}
    workers = [
        subprocess.Popen(
            [sys.executable, str(script), str(index), ports, "1" if all_reduce else "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for index in range(2)
    ]
    try:
        outputs = [worker.communicate(timeout=300) for worker in workers]
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    for worker, (_, errors) in zip(workers, outputs):
        assert worker.returncode == 0, errors[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]


@pytest.fixture(scope="module")
def forgotten(tmp_path_factory):
    return two_workers(tmp_path_factory.mktemp("workers"), all_reduce=False)


def test_two_workers_train_bit_for_bit_as_without_the_watch(forgotten):
    assert [result["identical"] for result in forgotten] == [True, True]


def test_the_forgotten_all_reduce_fails_on_every_worker_checked_across_both(forgotten):
    for result in forgotten:
        name, calls, replicas, verdict, codes = result["op"]
        assert (name, calls, replicas, verdict) == ("center", 4, 2, "fail") and "watch-replica-gradient" in codes
        assert not result["ok"]


def test_every_workers_watch_is_gathered_on_the_chief_and_names_its_calls(forgotten):
    chief, other = forgotten
    assert (chief["worker"], other["worker"]) == ("worker 0", "worker 1")
    expected = [["worker 0", "fail", [["center", 4, "fail"]]], ["worker 1", "fail", [["center", 4, "fail"]]]]
    assert chief["workers"] == expected and other["workers"] == expected


def test_a_right_collective_gradient_passes_on_both_workers(tmp_path):
    for result in two_workers(tmp_path, all_reduce=True):
        assert result["identical"] and result["op"][3] == "pass" and result["ok"]
        assert [worker[1] for worker in result["workers"]] == ["pass", "pass"]
