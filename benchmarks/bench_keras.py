"""gradmagic.check on each Keras 3 backend against that backend's own gradient checker, in one run per backend.

Keras fixes its backend at import, so each backend runs in its own process
(KERAS_BACKEND), the anchor measured in that same process on the same op:

- TensorFlow: `tf.test.compute_gradient` (dense Jacobians, theoretical and numerical);
- JAX: `jax.test_util.check_grads(..., order=1, modes=["rev"])` (random projections, pass/fail only);
- PyTorch: `torch.autograd.gradcheck` (dense Jacobians, float64 inputs).

For each: the seed's log1pexp at N = 1,000 (full-Jacobian mode) and
N = 10,000 (projection mode), gradmagic warm (median of 5 after a first
call) and cold, and the anchor; then N = 1,000,000 with one wrong element,
which gradmagic must locate (the anchors cannot run there or cannot locate).
Finally the portability check, `backends="all"`, from the TensorFlow process:
its wall time, the other backends' processes included.

Run: .venv/bin/python benchmarks/bench_keras.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

CODE = r'''
import json, statistics, time
import numpy as np
import keras
from keras import ops
import gradmagic

backend = keras.backend.backend()

def log1pexp(x):
    e = ops.exp(x)
    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        return ops.multiply(upstream, 1.0 - 1.0 / ops.add(1, e))
    return ops.log(1 + e), grad

op = ops.custom_gradient(log1pexp)

def anchor(x):
    """The anchor's own verdict on the correct op: "runs" (no verdict), "passes", or the error it raised."""
    try:
        if backend == "tensorflow":
            import tensorflow as tf
            tf.test.compute_gradient(op, [tf.constant(x)])
            return "runs"
        if backend == "jax":
            from jax.test_util import check_grads
            check_grads(op, (x,), order=1, modes=["rev"])
        else:
            import torch
            torch.autograd.gradcheck(op, (torch.tensor(x.astype(np.float64), requires_grad=True),))
        return "passes"
    except Exception as error:
        return f"raises {type(error).__name__} (a false alarm)"

def timed(call):
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result

rng = np.random.default_rng(0)
rows = []
for n in (1_000, 10_000):
    x = rng.standard_normal(n).astype(np.float32)
    cold, report = timed(lambda: gradmagic.check(op, x, framework="keras"))
    warm = statistics.median(timed(lambda: gradmagic.check(op, x, framework="keras"))[0] for _ in range(5))
    anchor_seconds, anchor_says = timed(lambda: anchor(x)) if n <= 1_000 or backend != "torch" else (None, None)
    rows.append({"n": n, "mode": report.numerics.mode, "ok": report.ok, "cold": cold, "warm": warm,
                 "anchor": anchor_seconds, "anchor_says": anchor_says})

n, element = 1_000_000, 123_457
bump = np.ones(n, np.float32)
bump[element] = 1.1
def one_wrong(x):
    e = ops.exp(x)
    def grad(*args, upstream=None):
        upstream = upstream if upstream is not None else args[0]
        return upstream * (1 - 1 / (1 + e)) * bump
    return ops.log(1 + e), grad
x = rng.standard_normal(n).astype(np.float32)
first, _ = timed(lambda: gradmagic.check(one_wrong, x, framework="keras"))
again, report = timed(lambda: gradmagic.check(one_wrong, x, framework="keras"))
found = [p for p in report.problems if p.code == "fd-mismatch"]
located = found[0].location.index if found else None
result = {"backend": backend, "version": report.op.framework_version, "rows": rows,
          "million": {"first": first, "again": again, "located": located}}
if backend == "tensorflow":
    x = np.array([-5.0, 0.0, 100.0])
    wall, report = timed(lambda: gradmagic.check(log1pexp, x, framework="keras", backends="all"))
    result["portability"] = {"wall": wall, "verdicts": {b.backend: b.verdict for b in report.backends}}
print("@@bench@@" + json.dumps(result))
'''


def run(backend: str) -> dict:
    environment = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    # A script file, not `-c`: the portability check sends the op to the other backends as its source.
    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "bench_keras_backend.py")
        with open(script, "w") as file:
            file.write(CODE)
        completed = subprocess.run([sys.executable, script], env=environment, capture_output=True, text=True)
    if "@@bench@@" not in completed.stdout:
        raise SystemExit(f"{backend} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.rsplit("@@bench@@", 1)[1])


def main() -> None:
    anchors = {
        "tensorflow": "tf.test.compute_gradient",
        "jax": "jax.test_util.check_grads",
        "torch": "torch.autograd.gradcheck",
    }
    for backend in ("tensorflow", "jax", "torch"):
        start = time.perf_counter()
        result = run(backend)
        print(f"{backend}: {result['version']} (process {time.perf_counter() - start:.1f} s)")
        print(f"   {'N':>9} {'mode':>10} {'warm':>9} {'cold':>9} {anchors[backend]:>27} {'anchor / warm':>13}")
        for row in result["rows"]:
            anchor = row["anchor"]
            ratio = f"{anchor / row['warm']:12.1f}x" if anchor else "           –"
            anchor_text = f"{anchor * 1e3:25.0f}ms" if anchor else f"{'(not run: N^2 Jacobian)':>27}"
            print(
                f"   {row['n']:>9,} {row['mode']:>10} {row['warm'] * 1e3:7.1f}ms {row['cold'] * 1e3:7.0f}ms "
                f"{anchor_text} {ratio}  gradmagic {'passes' if row['ok'] else 'FAILS'}, anchor "
                f"{row['anchor_says'] or 'not run'}"
            )
        million = result["million"]
        print(
            f"   1,000,000, one wrong element at x[123457]: first {million['first']:.2f} s, again "
            f"{million['again']:.2f} s, located at {million['located']}"
        )
        if "portability" in result:
            portability = result["portability"]
            print(
                f"   portability check, backends='all', from this process: {portability['wall']:.1f} s wall, "
                f"verdicts {portability['verdicts']}"
            )
    print(
        textwrap.dedent("""
        The anchors differ in what they say: compute_gradient and gradcheck build dense Jacobians (N^2), check_grads
        draws random projections and says pass or fail; none locates the wrong element or runs at N = 1,000,000
        with a dense Jacobian.""")
    )


if __name__ == "__main__":
    main()
