"""gradmagic.check against tf.test.compute_gradient, in one run, on the same ops.

1. Element-wise log1pexp at N = 1,000 and N = 10,000 (both in projection mode,
   above the default full_threshold of 256): the check of a new op (its first,
   cold, with gradmagic's own code warm) and warm (median of 5 once its
   compiled functions are traced), against one call of
   tf.test.compute_gradient. Targets (issue 20): at N = 1,000 the first check at
   least 10x faster, warm at least 30x.
2. N = 1,000,000 (projection mode): verdict, and for a planted bug the located
   element, against one plain forward + backward of the op (tf.function,
   warm). Target: within 20x of it, warm. compute_gradient cannot run there:
   its two dense Jacobians need 2 x N^2 x 4 bytes = 8 TB.
3. Peak memory of a new op's first check at N = 5,000,000 (float32, 19 MB),
   in a fresh process: the highest resident memory while the check runs
   (sampled every millisecond) over what the process held just before it
   (after one plain forward + backward at that size), and the same for the
   op's next check. Targets (issue 28): at most 16x the input's size, the
   first at most 2x the next.
4. A 1,000-op chain (sin, multiply, add, 3,000 forward ops; its gradient
   taken by a tape inside the gradient function): the first check of a new
   op against one tf.test.compute_gradient of another new op. Target: within
   5x.
5. Planted bugs, each to be caught (and located where it has a place), and
   correct ops in float32 and float64, saturating sigmoids and values near
   zero included, to raise no false alarm, in both modes.
6. Failing checks against passing ones (issue 28): an op of 200,000 to
   1,000,000 elements with a bug (gradients of two inputs swapped, a flipped
   sign, one element 10 % off among a million) against the same op with the
   bug removed, each a new op's first check and warm (median of 3), in one
   process per framework: TensorFlow, Keras on JAX, Keras on PyTorch.
   Target: locating costs at most 3x the passing check; the one wrong
   element is still named.
7. Float32-only ops (issue 30): smooth ops that refuse float64 (a float32
   weight or constant inside, as every Keras layer's), each with a gradient
   right and wrong by a factor of 0.1 % to 3 %, checked by gradmagic.check on
   TensorFlow and, the anchor, by JAX's `check_grads` on the same op written
   with `jax.custom_vjp` in float32. Target: every factor of 1 % or more
   fails (goal 0.1 %); no correct op fails.

Run: .venv/bin/python benchmarks/bench_check.py
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import gradmagic  # noqa: E402
from gradmagic.errors import OptionError  # noqa: E402

tf.get_logger().setLevel("ERROR")
RNG = np.random.default_rng(0)


def log1pexp(x):
    e = tf.exp(x)
    return tf.math.log(1 + e), lambda dy: dy * (1 - 1 / (1 + e))


def warm_and_cold(op, *args, repeats: int = 5, settle: int = 8):
    """(median warm seconds, cold seconds, last report): the op's first check, then the median of `repeats` checks
    after `settle` more (by then every compiled function a check of it uses is traced: a check traces a small batch
    after it ran eagerly five times, one such trace a check)."""
    start = time.perf_counter()
    gradmagic.check(op, *args)
    cold = time.perf_counter() - start
    for _ in range(settle):
        gradmagic.check(op, *args)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        report = gradmagic.check(op, *args)
        times.append(time.perf_counter() - start)
    return statistics.median(times), cold, report


def speed() -> None:
    print("1. Element-wise log1pexp: gradmagic.check vs tf.test.compute_gradient (one process, a new op per size)")
    print(
        f"   {'N':>7} {'mode':>10} {'check cold':>11} {'check warm':>11} {'compute_gradient':>17} {'ratio cold':>11}"
        f" {'ratio warm':>11} targets"
    )
    gradmagic.check(tf.custom_gradient(log1pexp), tf.constant([1.0, 2.0]))  # gradmagic's own code warm
    for n, cold_target, warm_target in ((1_000, 10, 30), (10_000, None, None)):
        op = tf.custom_gradient(log1pexp)  # a new op: its first check is the cold one
        x = tf.constant(RNG.standard_normal(n).astype(np.float32))
        warm, cold, report = warm_and_cold(op, x)
        start = time.perf_counter()
        tf.test.compute_gradient(op, [x])
        anchor = time.perf_counter() - start
        verdict = ""
        if cold_target:
            met = anchor / cold >= cold_target and anchor / warm >= warm_target
            verdict = f">= {cold_target}x cold, {warm_target}x warm: {'met' if met else 'MISSED'}"
        print(
            f"   {n:>7} {report.numerics.mode:>10} {cold * 1e3:9.1f}ms {warm * 1e3:9.1f}ms {anchor * 1e3:15.0f}ms"
            f" {anchor / cold:10.1f}x {anchor / warm:10.1f}x {verdict}"
        )


def one_wrong_element(n: int, element: int):
    bump = np.ones(n, np.float32)
    bump[element] = 1.1

    def one_wrong(x):
        e = tf.exp(x)
        return tf.math.log(1 + e), lambda dy: dy * (1 - 1 / (1 + e)) * bump

    return tf.custom_gradient(one_wrong)


def at_a_million() -> None:
    n, element = 1_000_000, 123_457
    x = tf.constant(RNG.standard_normal(n).astype(np.float32) * 3)
    correct = tf.custom_gradient(log1pexp)

    @tf.function
    def forward_and_backward(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = correct(x)
        return y, tape.gradient(y, x)

    def plain():
        y, g = forward_and_backward(x)
        return y.numpy(), g.numpy()

    def eager():  # as a notebook cell runs it: the op and its tape, no tf.function
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = correct(x)
        return y.numpy(), tape.gradient(y, x).numpy()

    plain(), eager()
    anchor = statistics.median(_seconds(plain) for _ in range(7))
    eager_anchor = statistics.median(_seconds(eager) for _ in range(7))
    print(
        f"\n2. N = {n:,} (projection mode; compute_gradient would need {2 * n * n * 4 / 1e12:.0f} TB); one plain "
        f"forward + backward, warm: {anchor * 1e3:.1f} ms in a tf.function (the target's anchor), "
        f"{eager_anchor * 1e3:.1f} ms eagerly"
    )
    for name, op in (("correct log1pexp", correct), (f"x[{element}] off by 10%", one_wrong_element(n, element))):
        warm, cold, report = warm_and_cold(op, x)
        located = ", ".join(f"{e.input}{list(e.index)}" for e in report.numerics.worst) or "-"
        print(
            f"   {name:24s} verdict {report.verdict:4s} located {located:14s} warm {warm * 1e3:6.0f} ms "
            f"= {warm / anchor:5.1f}x ({warm / eager_anchor:4.1f}x eager; first check {cold:.2f} s)  target <= 20x: "
            f"{'met' if warm / anchor <= 20 else 'MISSED'}"
        )


def _seconds(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


PEAK = """
import os, sys, threading, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np, tensorflow as tf, gradmagic

def log1pexp(x):
    e = tf.exp(x)
    return tf.math.log(1 + e), lambda dy: dy * (1 - 1 / (1 + e))

def resident():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

gradmagic.check(tf.custom_gradient(log1pexp), tf.constant(np.linspace(-3, 3, 2000).astype(np.float32)))  # code warm
x = tf.constant(np.random.default_rng(0).standard_normal(N).astype(np.float32) * 3)
with tf.GradientTape() as tape:  # the user's own forward and backward at that size, as a notebook has run them
    tape.watch(x)
    y = tf.custom_gradient(log1pexp)(x)
tape.gradient(y, x).numpy()
del y, tape
op = tf.custom_gradient(log1pexp)  # a new op: its first check at this size is the one an edited cell makes

def peak(call):
    before, highest, done = resident(), [0], threading.Event()

    def sample():  # the resident memory every millisecond while the check runs
        while not done.is_set():
            highest[0] = max(highest[0], resident())
            time.sleep(0.001)

    sampler = threading.Thread(target=sample)
    sampler.start()
    report = call()
    done.set()
    sampler.join()
    return max(highest[0], resident()) - before, report

first, report = peak(lambda: gradmagic.check(op, x))
warm, _ = peak(lambda: gradmagic.check(op, x))
print(first, warm, x.numpy().nbytes, report.verdict, report.numerics.mode)
"""


def peak_memory() -> None:
    import subprocess
    import sys

    n = 5_000_000
    completed = subprocess.run(
        [sys.executable, "-c", PEAK.replace("N)", f"{n})")], capture_output=True, text=True, check=True
    )
    first, warm, size, verdict, mode = completed.stdout.split()
    ratio, warm_ratio = int(first) / int(size), int(warm) / int(size)
    print(
        f"\n3. Peak memory of a new op's first check at N = {n:,} (float32, {int(size) / 2**20:.0f} MB), fresh "
        f"process: the resident memory rose {int(first) / 2**20:.0f} MB = {ratio:.1f}x the input ({verdict}, "
        f"{mode}), the next check {int(warm) / 2**20:.0f} MB = {warm_ratio:.1f}x over what the first left; "
        f"targets <= 16x: {'met' if ratio <= 16 else 'MISSED'}, first <= 2x the next: "
        f"{'met' if ratio <= 2 * warm_ratio else 'MISSED'}"
    )


def chain_op(length: int = 1_000):
    """A new op of `length` sin-multiply-add links, its gradient by a tape over the same chain."""

    def chain(x):
        def forward(value):
            for _ in range(length):
                value = tf.sin(value) * 1.0001 + 0.001
            return value

        def grad(dy):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = forward(x)
            return tape.gradient(y, x, output_gradients=dy)

        return forward(x), grad

    return tf.custom_gradient(chain)


def deep_chain() -> None:
    x = tf.constant([0.1, 0.2, 0.3])
    gradmagic.check(chain_op(10), x)  # gradmagic's own code warm; the long op is new
    start = time.perf_counter()
    report = gradmagic.check(chain_op(), x)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    tf.test.compute_gradient(chain_op(), [x])
    anchor = time.perf_counter() - start
    print(
        f"\n4. A 1,000-op chain, first check of a new op: {cold:.2f} s ({report.verdict}; graph "
        f"{len(report.graph.nodes) if report.graph else 0} nodes drawn) against compute_gradient {anchor:.2f} s: "
        f"{cold / anchor:.1f}x  target <= 5x: {'met' if cold / anchor <= 5 else 'MISSED'}"
    )


def planted_bugs() -> None:
    print("\n5. Planted bugs (each must be caught) and correct ops (none may raise a false alarm)")

    def scaled(x):
        e = tf.exp(x)
        return tf.math.log(1 + e), lambda dy: dy * (1 - 1 / (1 + e)) * 1.001

    def sign_flip(x):
        return tf.sin(x), lambda dy: -dy * tf.cos(x)

    def transposed(a, b):
        return a @ b, lambda dy: (dy @ b, tf.transpose(a) @ dy)

    def unreduced_broadcast(x, b):
        return x + b, lambda dy: (dy, dy)

    weights = tf.Variable(RNG.standard_normal(5).astype(np.float32), name="weights")

    def wrong_variable_gradient(x):
        def grad(dy, variables=None):
            return dy * weights, [2 * dy * x]

        return x * weights, grad

    def two_outputs(x, y):
        return (x * y, y * y), lambda dz, dw: (dz * y, dz * x + 2 * dw * y)

    square_matrix = RNG.standard_normal((4, 4)).astype(np.float32)
    bugs = [
        ("gradient scaled by 1.001", tf.custom_gradient(scaled), [RNG.standard_normal(1000).astype(np.float32)], None),
        ("1 of 1,000 off by 10%", one_wrong_element(1000, 417), [RNG.standard_normal(1000).astype(np.float32)], (417,)),
        (
            "1 of 1,000,000 off by 10%",
            one_wrong_element(1_000_000, 765_432),
            [RNG.standard_normal(1_000_000).astype(np.float32)],
            (765_432,),
        ),
        ("sign flip", tf.custom_gradient(sign_flip), [RNG.standard_normal(1000).astype(np.float32)], None),
        ("transposed matrix", tf.custom_gradient(transposed), [square_matrix, square_matrix.T * 2 + 1], None),
        (
            "unreduced broadcast",
            tf.custom_gradient(unreduced_broadcast),
            [np.ones((2, 3), np.float32), np.ones(3, np.float32)],
            None,
        ),
        (
            "wrong variable gradient",
            tf.custom_gradient(wrong_variable_gradient),
            [RNG.standard_normal(5).astype(np.float32)],
            None,
        ),
    ]
    bugs += verdict_bugs()
    print(f"   {'planted bug':36s} {'gradmagic':44s} compute_gradient")
    for name, op, inputs, element, *options in bugs:
        try:
            report = gradmagic.check(op, *[tf.constant(x) for x in inputs], **(options[0] if options else {}))
        except OptionError as error:
            print(f"   {name:36s} {'caught: OptionError (' + str(error)[:30] + ')':44s} {_anchor(op, inputs)}")
            continue
        caught = [p.code for p in report.problems if p.severity in ("error", "warning")]
        if report.verdict == "unchecked":
            caught.append("verdict: not checked")
        where = ""
        if element is not None:
            found = [e.index for e in report.numerics.worst if report.numerics.mode == "projection"] or [
                p.location.index for p in report.problems if p.code == "fd-mismatch"
            ]
            where = f" at {list(found[0])}" if found and found[0] == element else " NOT LOCATED"
        anchor = _anchor(op, inputs)
        print(f"   {name:36s} {('caught: ' + ','.join(caught) + where) if caught else 'MISSED':44s} {anchor}")

    def saturating_sigmoid(x):
        y = tf.sigmoid(x)
        return y, lambda dy: dy * y * (1 - y)

    def square(x):
        return x * x, lambda dy: 2 * x * dy

    correct = [
        ("log1pexp", log1pexp, lambda n, d: RNG.standard_normal(n).astype(d) * 5),
        ("saturating sigmoid", saturating_sigmoid, lambda n, d: np.linspace(-40, 40, n).astype(d)),
        ("square near zero", square, lambda n, d: (RNG.standard_normal(n) * 1e-6).astype(d)),
    ]
    false_alarms = 0
    rows = []
    for name, op, inputs in verdict_correct():
        report = gradmagic.check(op, *[tf.constant(x) for x in inputs])
        false_alarms += not report.ok or any(p.severity == "warning" for p in report.problems)
        rows.append(f"{name}: {report.verdict} ({report.numerics.mode}, {report.numerics.dtype})")
    for name, function, make in correct:
        for dtype in (np.float32, np.float64):
            for n in (1000, 100_000):
                report = gradmagic.check(tf.custom_gradient(function), tf.constant(make(n, dtype)))
                false_alarms += not report.ok
                rows.append(f"{name} {np.dtype(dtype).name} N={n}: {report.verdict} ({report.numerics.mode})")
    print(f"   correct ops: {len(rows)} checked, {false_alarms} false alarm{'s' * (false_alarms != 1)}")
    for row in rows:
        print(f"     {row}")
    report = gradmagic.check(tf.custom_gradient(two_outputs), tf.constant(2.0), tf.constant(3.0))
    print(
        f"   two outputs, correct: gradmagic {report.verdict}; compute_gradient: "
        f"{_anchor(tf.custom_gradient(two_outputs), [np.float32(2.0), np.float32(3.0)])}"
    )


def verdict_bugs() -> list:
    """Issue 18's classes: what a gradient checker trusted too much. (name, op, inputs, element, options)."""

    @tf.custom_gradient
    def squared_upstream(x):  # right on one-hot upstreams: u * u = u
        return x * x, lambda dy: dy * dy * 2 * x

    @tf.custom_gradient
    def clip_undeclared(x):  # TensorFlow's clip_gradients example, not declared a surrogate
        return tf.identity(x), lambda dy: tf.clip_by_norm(dy, 0.5)

    @tf.custom_gradient
    def jacobian_not_vjp(x):
        return 3.0 * x, lambda dy: 3.0 * tf.eye(tf.size(x))  # the Jacobian, not dy times it

    @tf.custom_gradient
    def complex_wrong(z):
        return z * z, lambda dy: dy * 3.0 * z  # 2 z: a complex gradient passed before

    def float32_only(n, element):
        bump = np.ones(n, np.float32)
        bump[element] = 2.0

        @tf.custom_gradient
        def leaky(x):  # tf.where with Python floats: refuses float64
            slope = tf.where(x > 0, 1.0, 0.1)
            return tf.where(x > 0, x, 0.1 * x), lambda dy: dy * slope * bump

        return leaky

    @tf.custom_gradient
    def missing_term(x):
        e = tf.exp(x)
        return tf.math.log1p(e), lambda dy: dy * e

    class Layer(tf.Module):
        @tf.custom_gradient
        def twice(self, x):
            return 2.0 * x, lambda dy: 3.0 * dy

    counter = tf.Variable(0.0, name="calls")

    @tf.custom_gradient
    def counting(x):
        def grad(dy):
            counter.assign_add(1.0)
            return dy * tf.cos(x)

        return tf.sin(x), grad

    @tf.custom_gradient
    def five_thirds(x):
        return x * x, lambda dy: dy * 2 * x * 5 / 3

    vector = RNG.standard_normal(6).astype(np.float32)
    return [
        ("upstream squared (not linear)", squared_upstream, [vector], None),
        ("clip_by_norm, undeclared", clip_undeclared, [vector], None),
        ("Jacobian instead of VJP", jacobian_not_vjp, [vector], None),
        ("complex gradient, wrong", complex_wrong, [vector.astype(np.complex64)], None),
        (
            "float32-only op, 1 of 10,000 x2",
            float32_only(10_000, 4321),
            [RNG.standard_normal(10_000).astype(np.float32)],
            (4321,),
        ),
        ("lambda around a wrong op", lambda x: missing_term(x) * 2.0, [vector], None),
        ("tf.function around a wrong op", tf.function(missing_term), [vector], None),
        ("bound method, wrong", Layer().twice, [vector], None),
        ("gradient with a side effect", counting, [vector], None),
        ("5/3 too large, eps=0", five_thirds, [vector], None, {"eps": 0.0}),
        ("5/3 too large, rtol=-1", five_thirds, [vector], None, {"rtol": -1.0}),
        ("5/3 too large, rtol=1e6", five_thirds, [vector], None, {"rtol": 1e6}),
        ("5/3 too large, eps=1e-15 (rounding)", five_thirds, [vector.astype(np.float64)], None, {"eps": 1e-15}),
        ("float32-only, 1 of 10,000 x1.1, small gradient", *float32_only_small(10_000, 7), (7,)),
        ("layer reaching a wrong-shaped gradient", WrongShapeLayer(), [vector[:3]], None),
        ("sqrt at 0, wrong elsewhere (projection)", wrong_sqrt, [sqrt_inputs], None),
    ]


def float32_only_small(n: int, element: int):
    """(op, inputs): tf.where with Python floats (float32 only); `element` has a gradient ten times smaller (x < 0)
    and 1.1 times too large."""
    values = RNG.standard_normal(n).astype(np.float32)
    values[element] = -abs(values[element])

    @tf.custom_gradient
    def leaky(x):
        slope = tf.where(x > 0, 1.0, 0.1)

        def grad(u):
            return tf.tensor_scatter_nd_update(u * slope, [[element]], [u[element] * slope[element] * 1.1])

        return x * slope, grad

    return leaky, [values]


class WrongShapeLayer(tf.Module):
    """A layer whose call reaches a custom gradient returning [1, 3] for a [3] input (as many elements)."""

    @tf.custom_gradient
    def op(self, x):
        return x * x, lambda dy: dy * 2.0 * x[None, :]

    def __call__(self, x):
        return self.op(x) * 1.0


@tf.custom_gradient
def wrong_sqrt(x):  # 0.6 where 0.5 is right; at 0 the finite differences are NaN
    y = tf.sqrt(x)
    return y, lambda dy: dy * tf.where(x > 0, 0.6 / tf.sqrt(tf.where(x > 0, x, 1.0)), 0.0)


sqrt_inputs = np.abs(RNG.standard_normal(1000)) + 0.1
sqrt_inputs[[3, 500]] = 0.0


def verdict_correct() -> list:
    """Correct ops of issue 18's kinds: none may raise a false alarm. (name, op, inputs)."""

    @tf.custom_gradient
    def float32_inside(x):  # float64 in and out, float32 inside (as Keras's quantised layers)
        inside = tf.cast(x, tf.float32)
        return tf.cast(tf.sin(inside), tf.float64), lambda dy: dy * tf.cast(tf.cos(inside), tf.float64)

    @tf.custom_gradient
    def softplus(x):
        e = tf.exp(x)
        return tf.math.log1p(e), lambda dy: dy * e / (1 + e)

    big = RNG.standard_normal(10_000).astype(np.float32)
    return [
        ("float64 op computing in float32, N=7", float32_inside, [np.linspace(-1, 1, 7)]),
        ("float64 op computing in float32, N=10,000", float32_inside, [big.astype(np.float64)]),
        ("lambda around an op", lambda x: softplus(x) * 2.0, [big[:50]]),
        ("tf.recompute_grad", tf.recompute_grad(lambda x: softplus(x) * 2.0), [big[:50]]),
        ("tf.function around an op", tf.function(softplus), [big]),
    ]


def _anchor(op, inputs) -> str:
    """What tf.test.compute_gradient gives for the op: no verdict, at best two Jacobians to compare by hand."""
    if any(np.size(x) > 10_000 for x in inputs):
        return "cannot run (dense N x N Jacobians)"
    try:
        theoretical, numerical = tf.test.compute_gradient(op, [tf.constant(x) for x in inputs])
    except Exception as error:  # noqa: BLE001 - we report what the anchor does
        return f"raises {type(error).__name__}"
    worst = max(float(np.max(np.abs(t - n))) for t, n in zip(theoretical, numerical))
    return f"no verdict; max |theoretical - numerical| = {worst:.3g}"


FAILING = r"""
import json, os, statistics, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np
import gradmagic

BACKEND = sys.argv[1]
if BACKEND == "tensorflow":
    import tensorflow as tf
    ops, decorate, framework = tf.math, tf.custom_gradient, "tensorflow"
else:
    import keras
    ops, decorate, framework = keras.ops, keras.ops.custom_gradient, "keras"
RNG = np.random.default_rng(0)

def upstream_of(args, upstream):
    return args[0] if upstream is None else upstream

def swapped(bug):
    def op(a, b):
        y = a * ops.sin(b)
        def grad(*args, upstream=None):
            u = upstream_of(args, upstream)
            ga, gb = u * ops.sin(b), u * a * ops.cos(b)
            return (gb, ga) if bug else (ga, gb)
        return y, grad
    return op

def flipped(bug):
    def op(x):
        def grad(*args, upstream=None):
            return (-1.0 if bug else 1.0) * upstream_of(args, upstream) * ops.cos(x)
        return ops.sin(x), grad
    return op

def one_wrong(bug):
    factor = np.ones(1_000_000, np.float32)
    factor[123_457] = 1.1 if bug else 1.0
    def op(x):
        e = ops.exp(x)
        def grad(*args, upstream=None):
            return upstream_of(args, upstream) * (1 - 1 / (1 + e)) * factor
        return ops.log(1 + e), grad
    return op

CASES = [
    ("gradients of two inputs swapped", swapped, [RNG.standard_normal(307_200).astype(np.float32) for _ in range(2)]),
    ("sign flipped", flipped, [RNG.standard_normal(200_000).astype(np.float32)]),
    ("x[123457] 10 % off", one_wrong, [RNG.standard_normal(1_000_000).astype(np.float32) * 3]),
]

def check(op, args):
    start = time.perf_counter()
    report = gradmagic.check(op, *args, framework=framework)
    return time.perf_counter() - start, report

check(decorate(flipped(False)), [np.linspace(-1, 1, 300).astype(np.float32)])  # gradmagic's own code warm
for name, make, args in CASES:
    row = {"case": name}
    for kind, bug in (("passing", False), ("failing", True)):
        op = decorate(make(bug))  # a new op: its first check is the cold one
        cold, report = check(op, args)
        warm = statistics.median(check(op, args)[0] for _ in range(3))
        row[kind] = dict(cold=cold, warm=warm, verdict=report.verdict,
                         located=[f"{e.input}{list(e.index)}" for e in report.numerics.worst][:3])
    print(json.dumps(row), flush=True)
"""


def failing_checks() -> None:
    import json
    import subprocess
    import sys

    print(
        "\n6. Failing checks against passing ones, a new op's first check and warm; target: failing <= 3x passing"
        f"\n   {'framework':20} {'case':32} {'passing cold/warm':>19} {'failing cold/warm':>19} {'ratios':>12}  located"
    )
    for backend in ("tensorflow", "jax", "torch"):
        environment = {**os.environ, "KERAS_BACKEND": backend}
        completed = subprocess.run(
            [sys.executable, "-c", FAILING, backend], capture_output=True, text=True, env=environment, check=False
        )
        if completed.returncode:
            print(f"   {backend}: failed: {completed.stderr.strip().splitlines()[-1:]}")
            continue
        for line in completed.stdout.splitlines():
            row = json.loads(line)
            passing, failing = row["passing"], row["failing"]
            cold, warm = failing["cold"] / passing["cold"], failing["warm"] / passing["warm"]
            met = "met" if max(cold, warm) <= 3 and failing["verdict"] == "fail" else "MISSED"
            label = backend if backend == "tensorflow" else f"keras on {backend}"
            print(
                f"   {label:20} {row['case']:32} {passing['cold']:8.2f}/{passing['warm']:.2f} s "
                f"{failing['cold']:8.2f}/{failing['warm']:.2f} s {cold:5.1f}x/{warm:.1f}x  "
                f"{', '.join(failing['located']) or '-'} ({passing['verdict']}, {failing['verdict']}) {met}"
            )


class Namespace:
    """The few array functions the float32-only ops use, for TensorFlow or JAX."""

    def __init__(self, module: str):
        if module == "tf":
            self.sin, self.cos, self.exp, self.tanh, self.sqrt = tf.sin, tf.cos, tf.exp, tf.tanh, tf.sqrt
            self.sigmoid, self.softplus, self.matmul = tf.sigmoid, tf.math.softplus, tf.matmul
            self.mean = lambda x: tf.reduce_mean(x, axis=-1, keepdims=True)
            self.sum = lambda x: tf.reduce_sum(x, axis=-1, keepdims=True)
            self.softmax, self.transpose = tf.nn.softmax, tf.transpose
            self.constant = lambda value: tf.constant(value, tf.float32)
        else:
            import jax
            import jax.numpy as jnp

            self.sin, self.cos, self.exp, self.tanh, self.sqrt = jnp.sin, jnp.cos, jnp.exp, jnp.tanh, jnp.sqrt
            self.sigmoid, self.softplus, self.matmul = jax.nn.sigmoid, jax.nn.softplus, jnp.matmul
            self.mean = lambda x: jnp.mean(x, axis=-1, keepdims=True)
            self.sum = lambda x: jnp.sum(x, axis=-1, keepdims=True)
            self.softmax, self.transpose = jax.nn.softmax, jnp.transpose
            self.constant = lambda value: jnp.asarray(value, jnp.float32)


WEIGHTS = {
    "w": RNG.uniform(0.5, 1.5, (3, 4)).astype(np.float32),
    "W": (RNG.standard_normal((4, 5)) * 0.5).astype(np.float32),
    "b": (RNG.standard_normal(5) * 0.1).astype(np.float32),
    "gamma": RNG.uniform(0.5, 1.5, 4).astype(np.float32),
}
X32 = RNG.uniform(-2, 2, (3, 4)).astype(np.float32)


def float32_ops(m: Namespace) -> dict:
    """Smooth ops with float32 weights or constants: name -> (forward(x), vjp(x, u)), both in `m`'s framework."""
    w, W, b, gamma = (m.constant(WEIGHTS[name]) for name in ("w", "W", "b", "gamma"))
    c, k, log2 = m.constant(0.7978845608), m.constant(0.044715), m.constant(np.log(2))

    def gelu(x):
        return 0.5 * x * (1 + m.tanh(c * (x + k * x**3)))

    def gelu_vjp(x, u):
        t = m.tanh(c * (x + k * x**3))
        return u * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * k * x * x))

    def layer_norm(x):
        centred = x - m.mean(x)
        return gamma * centred / m.sqrt(m.mean(centred * centred) + 1e-3)

    def layer_norm_vjp(x, u):
        centred = x - m.mean(x)
        inverse = 1 / m.sqrt(m.mean(centred * centred) + 1e-3)
        normal, g = centred * inverse, u * gamma
        return inverse * (g - m.mean(g) - normal * m.mean(g * normal))

    def softmax_vjp(x, u):
        y = m.softmax(x * w)
        return w * y * (u - m.sum(u * y))

    def dense_vjp(x, u):
        y = m.tanh(m.matmul(x, W) + b)
        return m.matmul(u * (1 - y * y), m.transpose(W))

    return {
        "w * sin(x)": (lambda x: w * m.sin(x), lambda x, u: u * w * m.cos(x)),
        "log(2) softplus(x)": (lambda x: log2 * m.softplus(x), lambda x, u: u * log2 * m.sigmoid(x)),
        "w exp(-x^2)": (lambda x: w * m.exp(-x * x), lambda x, u: -2 * u * w * x * m.exp(-x * x)),
        "GELU (tanh)": (gelu, gelu_vjp),
        "layer norm, gamma": (layer_norm, layer_norm_vjp),
        "softmax(w x)": (lambda x: m.softmax(x * w), softmax_vjp),
        "tanh(x W + b)": (lambda x: m.tanh(m.matmul(x, W) + b), dense_vjp),
    }


FACTORS = (1.0, 1.001, 1.003, 1.01, 1.015, 1.03)


def float32_resolution() -> None:
    print(
        "\n7. Float32-only ops, the gradient right (1.0) or wrong by a factor: gradmagic.check (TensorFlow) / JAX's"
        " check_grads; the correct op's worst error over gradmagic's tolerance, and the finite differences' dtype"
    )
    _float32_table(X32, "full mode")
    _float32_table(RNG.uniform(-2, 2, (500, *X32.shape)).astype(np.float32), "projection mode")


def _float32_table(x: np.ndarray, mode: str) -> None:
    import jax
    from jax.test_util import check_grads

    print(
        f"   x of {x.size:,} elements ({mode})\n   {'op':22} "
        + " ".join(f"{factor:>10}" for factor in FACTORS)
        + "  correct  dtype"
    )
    tf_ops, jax_ops = float32_ops(Namespace("tf")), float32_ops(Namespace("jax"))
    misses = {"gradmagic": 0, "check_grads": 0}
    alarms = {"gradmagic": 0, "check_grads": 0}
    for name, (forward, vjp) in tf_ops.items():
        jax_forward, jax_vjp = jax_ops[name]
        cells = []
        for factor in FACTORS:
            def op(x, forward=forward, vjp=vjp, factor=factor):
                return forward(x), lambda u: vjp(x, u) * factor

            report = gradmagic.check(tf.custom_gradient(op), tf.constant(x), graph=False)
            ours = report.verdict == "fail"
            jax_op = jax.custom_vjp(jax_forward)
            jax_op.defvjp(lambda x, f=jax_forward: (f(x), x), lambda x, u, g=jax_vjp, k=factor: (g(x, u) * k,))
            try:
                check_grads(jax_op, (jax.numpy.asarray(x),), order=1, modes=["rev"])
                theirs = False
            except AssertionError:
                theirs = True
            for tool, failed in (("gradmagic", ours), ("check_grads", theirs)):
                if factor == 1.0:
                    alarms[tool] += failed
                elif not failed:
                    misses[tool] += abs(factor - 1) >= 0.01
            mark = {True: "fail", False: "pass"}
            cells.append(f"{mark[ours]}/{mark[theirs]}")
            if factor == 1.0:
                correct = f"{report.numerics.max_error or 0:7.2f}  {report.numerics.dtype}"
        print(f"   {name:22} " + " ".join(f"{cell:>10}" for cell in cells) + f"  {correct}")
    for tool in misses:
        print(f"   {tool}: factors of 1 % or more passed: {misses[tool]}; false alarms on correct ops: {alarms[tool]}")
    met = misses["gradmagic"] == 0 and alarms["gradmagic"] == 0
    print(f"   target: every factor >= 1 % fails, no false alarm: {'met' if met else 'MISSED'}")


if __name__ == "__main__":
    speed()
    at_a_million()
    peak_memory()
    deep_chain()
    planted_bugs()
    failing_checks()
    float32_resolution()
