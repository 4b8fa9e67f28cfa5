"""The overhead of `gradmagic.watch()` on a replicated training step under `tf.distribute.MultiWorkerMirroredStrategy`
with two worker processes on this machine (TF_CONFIG naming 127.0.0.1 ports), against the same step unwatched.

Each worker trains a small model (Dense 64, a layer calling two custom-gradient ops, one of which all-reduces across
the replicas in its forward and its gradient, Dense 1; a batch of 32 per worker) with a hand-written replicated step
(`strategy.run` in a `tf.function`). Rounds alternate an unwatched epoch and a watched one (`check=False`, recording
only, after an untimed warm-up epoch in the same watch); the chief prints the medians per step and their ratio, then
one watched epoch with the checks at the end (the check across the replicas included), timed apart.

Run: .venv/bin/python benchmarks/bench_watch_workers.py
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

STEPS, ROUNDS = 32, 5


def worker(index: int, ports: list[str]) -> None:
    """One worker's part: train and time, the chief prints."""
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]}, "task": {"type": "worker", "index": index}}
    )
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import statistics
    import time

    import numpy as np
    import tensorflow as tf

    import gradmagic

    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    @tf.custom_gradient
    def center(x):
        context = tf.distribute.get_replica_context()
        count = context.all_reduce("sum", tf.cast(tf.shape(x)[0], x.dtype))
        mean = context.all_reduce("sum", tf.reduce_sum(x, axis=0)) / count
        return x - mean, lambda dy: dy - context.all_reduce("sum", tf.reduce_sum(dy, axis=0)) / count

    @tf.custom_gradient
    def soft_square(x):
        return x * x / (1 + x * x), lambda dy: dy * 2 * x / (1 + x * x) ** 2

    with strategy.scope():
        rng = np.random.default_rng(0)
        w1 = tf.Variable(rng.normal(size=(16, 64)).astype("f4") * 0.1)
        w2 = tf.Variable(rng.normal(size=(64, 1)).astype("f4") * 0.1)

    @tf.function
    def step(x, y):
        def replica(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((soft_square(center(x @ w1)) @ w2 - y) ** 2)
            gradients = tape.gradient(loss, [w1, w2])
            for variable, gradient in zip([w1, w2], gradients):
                variable.assign_sub(0.01 * tf.distribute.get_replica_context().all_reduce("sum", gradient))
            return loss

        return strategy.run(replica, args=(x, y))

    data = np.random.default_rng(index).normal(size=(STEPS, 32, 17)).astype("f4")
    batches = [(tf.constant(batch[:, :16]), tf.constant(batch[:, 16:])) for batch in data]

    def epoch() -> float:
        started = time.perf_counter()
        for x, y in batches:
            step(x, y)
        return (time.perf_counter() - started) / STEPS

    epoch()
    plain, watched = [], []
    for _ in range(ROUNDS):
        plain.append(epoch())
        with gradmagic.watch(check=False):
            epoch()  # the step traced again for the watch
            watched.append(epoch())
    with gradmagic.watch() as checked:
        epoch()
    report = checked.report
    if index == 0:
        print(
            json.dumps(
                {
                    "plain": statistics.median(plain),
                    "watched": statistics.median(watched),
                    "checks": report.timings["checks"],
                    "verdict": report.verdict,
                    "workers": [[w.worker, w.verdict, [[o.name, o.calls] for o in w.ops]] for w in report.workers],
                }
            )
        )


def main() -> None:
    sockets = [socket.socket() for _ in range(2)]
    for each in sockets:
        each.bind(("127.0.0.1", 0))
    ports = [str(each.getsockname()[1]) for each in sockets]
    for each in sockets:
        each.close()
    processes = [
        subprocess.Popen([sys.executable, __file__, str(index), ",".join(ports)], stdout=subprocess.PIPE, text=True)
        for index in range(2)
    ]
    try:
        outputs = [process.communicate(timeout=900)[0] for process in processes]
    finally:
        for process in processes:
            process.kill()
    result = json.loads(outputs[0].strip().splitlines()[-1])
    print(f"two workers (MultiWorkerMirroredStrategy on 127.0.0.1), {STEPS} steps an epoch, median of {ROUNDS}")
    print(
        f"unwatched {result['plain'] * 1e3:.2f} ms a step, watched {result['watched'] * 1e3:.2f} ms "
        f"({result['watched'] / result['plain']:.2f}x); checks at the end {result['checks']:.2f} s; "
        f"verdict {result['verdict']}; workers {result['workers']}"
    )


if __name__ == "__main__":
    if len(sys.argv) == 3:
        worker(int(sys.argv[1]), sys.argv[2].split(","))
    else:
        main()
