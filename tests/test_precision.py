"""Low precision judged at its precision, on TensorFlow and on Keras's TensorFlow, JAX and PyTorch backends.

float16 and bfloat16 ops (and float32 ops computing in float16 inside, as under a `mixed_float16` policy) are
checked with finite differences in float64 where the op accepts it, the eager run against the compiled one judged
against the op's own rounding, and a wrong factor still caught. The cases are quantisers and layers as public code
writes them (Keras's own fake quantiser, the minifloat and binary quantisers of the `quantizers` package behind HGQ,
a learned-step-size quantiser), re-written here.

Each Keras backend runs the whole battery in one fresh Python (`backend_process`), the three started together when
the module's first test asks; TensorFlow's own cases run in the test process.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf
from backend_process import BackendProcess
from conftest import codes, problem

import gradmagic
from gradmagic.checking.differences import rounded_to, step_sizes
from gradmagic.report import Report

BACKENDS = ("tensorflow", "jax", "torch")

# -- the battery, run under each Keras backend ---------------------------------------------------------------------

BATTERY = '''
import itertools
import warnings
import gradmagic, keras
import ml_dtypes
import numpy as np
from keras import ops

BACKEND = keras.backend.backend()
RESULT = {}


def upstream_of(args, upstream):
    if upstream is None:
        (upstream,) = args
    return upstream


def log1pexp(x):
    e = ops.exp(x)
    def grad(*args, upstream=None):
        return upstream_of(args, upstream) * (1.0 - 1.0 / (1.0 + e))
    return ops.log(1.0 + e), grad


def log1pexp_wrong(x):  # a wrong factor, planted
    e = ops.exp(x)
    def grad(*args, upstream=None):
        return upstream_of(args, upstream) * 1.5 * (1.0 - 1.0 / (1.0 + e))
    return ops.log(1.0 + e), grad


CALLS = itertools.count()


def noisy(x):  # Python-side state: a trace freezes its value; each call gets another
    scale = float(1 + next(CALLS))
    def grad(*args, upstream=None):
        return upstream_of(args, upstream) * scale
    return x * scale, grad


def matmul(x, w):
    def grad(*args, upstream=None):
        u = upstream_of(args, upstream)
        return ops.matmul(u, ops.transpose(w)), ops.matmul(ops.transpose(x), u)
    return ops.matmul(x, w), grad


def gelu_of(dtype, factor):  # tanh-GELU with its constants cast to the op's float (Keras's own activations do so)
    def gelu(x):
        c, k = ops.cast(0.7978845608, dtype), ops.cast(0.044715, dtype)
        t = ops.tanh(c * (x + k * x * x * x))
        def grad(*args, upstream=None):
            inner = c * (1 + 3 * k * x * x)  # 3 * k: computed in the op's float, also on float64 inputs
            return upstream_of(args, upstream) * factor * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * inner)
        return 0.5 * x * (1 + t), grad
    return gelu


def in_float16(x):  # takes float32, computes in float16 inside, as a layer's compute dtype under mixed_float16
    h = ops.cast(x, "float16")
    def grad(*args, upstream=None):
        t = ops.tanh(h)
        return ops.cast(ops.cast(upstream_of(args, upstream), "float16") * (t + h * (1.0 - t * t)), x.dtype)
    return ops.cast(ops.tanh(h) * h, x.dtype), grad


def in_float16_wrong(x):
    h = ops.cast(x, "float16")
    def grad(*args, upstream=None):
        t = ops.tanh(h)
        return ops.cast(ops.cast(upstream_of(args, upstream), "float16") * 1.25 * (t + h * (1.0 - t * t)), x.dtype)
    return ops.cast(ops.tanh(h) * h, x.dtype), grad


def fake_quant(x, lo, hi):  # after keras.quantizers.fake_quant_with_min_max_vars: 8 bits, straight-through inside
    step = (hi - lo) / 255.0
    q = ops.round((ops.clip(x, lo, hi) - lo) / step) * step + lo
    inside = ops.logical_and(x >= lo, x <= hi)
    def grad(*args, upstream=None):
        u = upstream_of(args, upstream)
        zero = ops.zeros_like(u)
        return ops.where(inside, u, zero), ops.sum(ops.where(x < lo, u, zero)), ops.sum(ops.where(x > hi, u, zero))
    return q, grad


def binary_quantize(x):  # after the quantizers package's binary quantiser: sign forward, tanh-derivative surrogate
    r = ops.where(x > 0, ops.ones_like(x), -ops.ones_like(x))
    def grad(*args, upstream=None):
        return upstream_of(args, upstream) * (1.0 - ops.tanh(x) ** 2)
    return ops.stop_gradient(r), grad


def lsq(x, s):  # learned step size quantiser (Esser et al.), 3 bits signed
    v = x / s
    q = ops.clip(ops.round(v), -4.0, 3.0)
    def grad(*args, upstream=None):
        u = upstream_of(args, upstream)
        inside = ops.logical_and(v >= -4.0, v <= 3.0)
        return ops.where(inside, u, ops.zeros_like(u)), ops.sum(u * ops.where(inside, q - v, ops.clip(v, -4.0, 3.0)))
    return q * s, grad


def median_clip(x):  # clipped at three median magnitudes (percentile calibration), straight-through inside
    bound = 3.0 * ops.median(ops.abs(x))
    def grad(*args, upstream=None):
        u = upstream_of(args, upstream)
        return ops.where(ops.abs(x) <= bound, u, ops.zeros_like(u))
    return ops.clip(x, -bound, bound), grad


def reversal(x):
    def grad(*args, upstream=None):
        return -upstream_of(args, upstream)
    return x * 1.0, grad


def softmax_passed_through(x):  # a non-linear forward whose gradient is the upstream itself
    def grad(*args, upstream=None):
        return upstream_of(args, upstream)
    return ops.softmax(x), grad


def square_passed_through(x):  # a declared surrogate whose autodiff (2 x) differs from element to element
    def grad(*args, upstream=None):
        return upstream_of(args, upstream)
    return x * x, grad


def closing_over(variable):
    def scaled(x):
        def grad(*args, upstream=None):
            return upstream_of(args, upstream) * variable
        return x * variable, grad
    return scaled


def add_bias(gradient_of_bias):
    def op(x, b):
        def grad(*args, upstream=None):
            u = upstream_of(args, upstream)
            return u, gradient_of_bias(u)
        return x + b, grad
    return op


class Scaled(keras.layers.Layer):
    """A layer whose custom-gradient op takes its kernel as an input and closes over a scale variable."""

    def __init__(self, trainable_scale, **kwargs):
        super().__init__(**kwargs)
        self.trainable_scale = trainable_scale

    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1],), initializer="ones", name="w")
        self.s = self.add_weight(shape=(), initializer=keras.initializers.Constant(2.0), name="s",
                                 trainable=self.trainable_scale)

    def call(self, x):
        s = self.s

        def scaled(x, w):
            def grad(*args, upstream=None):
                u = upstream_of(args, upstream)
                return u * w * s, ops.sum(u * x * s, axis=0)
            return x * w * s, grad

        return ops.custom_gradient(scaled)(x, ops.convert_to_tensor(self.w))


def fit_once(layer):
    """model.fit of one epoch with `layer`: whether it ran, whether the scale moved, what Keras warned."""
    keras.utils.set_random_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:  # TensorFlow fails already when Keras builds the model (it calls the layer)
            model = keras.Sequential([keras.Input((3,)), layer])
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
            before = float(ops.convert_to_numpy(layer.s))
            model.fit(np.ones((4, 3), np.float32), np.zeros((4, 3), np.float32), epochs=1, verbose=0)
        except Exception as error:
            return {"fits": False, "error": f"{type(error).__name__}: {error}"}
    return {
        "fits": True,
        "scale moved": float(ops.convert_to_numpy(layer.s)) != before,
        "warnings": [str(w.message) for w in caught if "Gradients do not exist" in str(w.message)],
    }


def gradients_taken(op, x, b):
    """What the framework itself makes of the op's gradient: the gradients of x and b, or its error."""
    weights = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    try:
        if BACKEND == "jax":
            import jax
            dx, db = jax.grad(lambda x, b: ops.sum(ops.custom_gradient(op)(x, b) * weights), argnums=(0, 1))(x, b)
        elif BACKEND == "torch":
            import torch
            x, b = torch.tensor(x, requires_grad=True), torch.tensor(b, requires_grad=True)
            (ops.custom_gradient(op)(x, b) * torch.tensor(weights)).sum().backward()
            dx, db = x.grad, b.grad
        else:
            import tensorflow as tf
            x, b = tf.constant(x), tf.constant(b)
            with tf.GradientTape() as tape:
                tape.watch([x, b])
                loss = tf.reduce_sum(ops.custom_gradient(op)(x, b) * weights)
            dx, db = tape.gradient(loss, [x, b])
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}
    return {"db shape": list(db.shape), "db dtype": str(ops.convert_to_numpy(db).dtype),
            "db": np.ravel(ops.convert_to_numpy(db)).tolist()}


def summary(report):
    return {
        "verdict": report.verdict,
        "codes": report.codes(),
        "dtype": report.numerics.dtype,
        "pattern": report.surrogate.pattern if report.surrogate else None,
        "report": report.to_dict(),
    }


def check(name, op, *args, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = gradmagic.check(op, *args, framework="keras", **options)
    RESULT[name] = summary(report)
    RESULT[name]["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught if "torch" in w.filename]


x = np.linspace(-3.0, 3.0, 7)
small = np.linspace(-10.0, -8.0, 5)  # 1 + exp(x) rounds to 1 in float16: cancellation inside the op
for dtype in ("float16", "bfloat16"):
    x16 = ops.convert_to_tensor(x, dtype=dtype)
    check(f"log1pexp {dtype}", log1pexp, x16)
    check(f"log1pexp wrong {dtype}", log1pexp_wrong, x16)
    check(f"log1pexp cancellation {dtype}", log1pexp, ops.convert_to_tensor(small, dtype=dtype))
    check(f"noisy {dtype}", noisy, ops.convert_to_tensor(x, dtype=dtype))
    rng = np.random.default_rng(1)
    factors = [ops.convert_to_tensor(rng.standard_normal(shape), dtype=dtype) for shape in ((3, 4), (4, 2))]
    check(f"matmul {dtype}", matmul, *factors)
check("log1pexp ml_dtypes bfloat16", log1pexp, x.astype(ml_dtypes.bfloat16))
for dtype in ("float16", "bfloat16"):
    for factor in (1.0, 1.1, 1.25):
        check(f"gelu {dtype} {factor}", gelu_of(dtype, factor), ops.convert_to_tensor(np.linspace(-3, 3, 13), dtype))
for factor in (1.0, 1.1):  # projection mode (1,000 elements)
    many = ops.convert_to_tensor(np.random.default_rng(2).standard_normal(1000), "float16")
    check(f"gelu projection float16 {factor}", gelu_of("float16", factor), many)
check("in_float16", in_float16, x.astype(np.float32))
check("in_float16 wrong", in_float16_wrong, x.astype(np.float32))
xq = np.array([-1.3, -0.61, -0.23, 0.12, 0.37, 0.83, 1.4])
for dtype in ("float32", "float16", "bfloat16"):
    quantised = ops.convert_to_tensor(xq, dtype=dtype)
    bounds = [ops.convert_to_tensor(v, dtype=dtype) for v in (-1.0, 1.0)]
    check(f"fake_quant {dtype}", fake_quant, quantised, *bounds, surrogate=True)
    check(f"fake_quant undeclared {dtype}", fake_quant, quantised, *bounds)
    check(f"binary {dtype}", binary_quantize, quantised, surrogate=True)
    check(f"lsq {dtype}", lsq, quantised, ops.convert_to_tensor(0.3, dtype=dtype))
    check(f"reversal {dtype}", reversal, quantised)
check("square passed through", square_passed_through, xq.astype(np.float32), surrogate=True)
check("softmax passed through", softmax_passed_through, np.array([0.1, 0.5, -0.3, 1.0], np.float32), surrogate=True)
# ops.median is aten::quantile on PyTorch, which has no batching rule: vmap warns that it loops.
check("median clip", median_clip, np.array([0.1, -0.3, 2.0, 0.25, -0.05, 0.4], np.float32), surrogate=True)

# Closed-over variables: what model.fit does with them, and what the check says.
RESULT["fit"] = {"trainable": fit_once(Scaled(True)), "non-trainable": fit_once(Scaled(False))}
check("closed over non-trainable", closing_over(keras.Variable(np.float32(2.0), trainable=False, name="s")),
      x.astype(np.float32))
check("closed over trainable", closing_over(keras.Variable(np.float32(2.0), name="s")), x.astype(np.float32))

# Gradients of another shape or dtype: what the framework does with them, and what the check says.
x23, b3 = np.ones((2, 3), np.float32), np.arange(3.0, dtype=np.float32)
wrong = {
    "broadcast": add_bias(lambda u: u),
    "reversed": add_bias(lambda u: ops.ones((3, 2))),
    "float64": add_bias(lambda u: ops.cast(ops.sum(u, axis=0), "float64")),
}
RESULT["taken"] = {name: gradients_taken(op, x23, b3) for name, op in wrong.items()}
if BACKEND == "jax":  # float64 exists on JAX only with jax_enable_x64 on
    import jax
    with jax.enable_x64(True):
        RESULT["taken x64"] = {"float64": gradients_taken(wrong["float64"], x23, b3)}
for name, op in wrong.items():
    check(f"bias gradient {name}", op, x23, b3)

# A mixed-precision model trained for a step with a custom-gradient layer, then checked op by op at the float16
# inputs its layer receives.
keras.mixed_precision.set_global_policy("mixed_float16")
FAKE_QUANT, SMOOTH, SMOOTH_WRONG = (ops.custom_gradient(f) for f in (fake_quant, log1pexp, log1pexp_wrong))


class Quantised(keras.layers.Layer):
    def call(self, x):
        lo, hi = ops.cast(-1.0, x.dtype), ops.cast(1.0, x.dtype)
        return SMOOTH(FAKE_QUANT(x, lo, hi))


keras.utils.set_random_seed(0)
model = keras.Sequential(
    [keras.Input((8,)), keras.layers.Dense(16), Quantised(), keras.layers.Dense(1, dtype="float32")]
)
model.compile(optimizer="sgd", loss="mse")
data = np.random.default_rng(2).standard_normal((32, 8)).astype(np.float32)
history = model.fit(data, data[:, :1], epochs=1, batch_size=16, verbose=0)
hidden = model.layers[0](data[:4])
lo, hi = ops.cast(-1.0, hidden.dtype), ops.cast(1.0, hidden.dtype)
RESULT["model"] = {"loss": float(history.history["loss"][0]), "hidden dtype": str(ops.convert_to_numpy(hidden).dtype)}
check("model fake_quant", fake_quant, hidden, lo, hi, surrogate=True)
quantised = FAKE_QUANT(hidden, lo, hi)
check("model smooth", log1pexp, quantised)
check("model smooth wrong", log1pexp_wrong, quantised)
if BACKEND == "tensorflow":  # the watch records every call of a training step and checks each op at its inputs
    with gradmagic.watch() as watch:
        model.fit(data, data[:, :1], epochs=1, batch_size=16, verbose=0)
    RESULT["watched"] = {
        report.op.name: [report.verdict, report.surrogate.pattern if report.surrogate else None,
                         [row.dtype for row in report.tensors if row.role == "input"]]
        for report in watch.report.ops
    }
'''


@pytest.fixture(scope="module")
def battery():
    processes = {backend: BackendProcess(backend, BATTERY, timeout=600) for backend in BACKENDS}
    try:
        yield {backend: process.result() for backend, process in processes.items()}
    finally:
        for process in processes.values():
            process.close()


def report_of(result: dict) -> Report:
    return Report.from_dict(result["report"])


# -- TensorFlow, in this process -----------------------------------------------------------------------------------


@tf.custom_gradient
def log1pexp(x):
    e = tf.exp(x)

    def grad(upstream):
        return upstream * (1 - 1 / (1 + e))

    return tf.math.log(1 + e), grad


@pytest.mark.parametrize("dtype, rounding", [("float16", 3.6e-4), ("bfloat16", 2.6e-3)])
def test_a_16_bit_op_whose_compiled_run_rounds_otherwise_passes(dtype, rounding):
    x = tf.constant(np.linspace(-3, 3, 7), dtype=dtype)
    # TensorFlow's graph optimiser computes log(1 + e) as log1p(e) inside tf.function: the two runs differ, by
    # rounding (what used to be a false graph-mismatch).
    difference = np.max(np.abs(log1pexp(x).numpy().astype(float) - tf.function(log1pexp)(x).numpy().astype(float)))
    assert difference == pytest.approx(rounding, rel=0.1)
    report = gradmagic.check(log1pexp, x)
    assert report.ok and codes(report) == [], report
    assert report.numerics.dtype == "float64"  # the op accepts float64: finite differences there


def _own_float_ops(dtype, factor):
    """Ops whose constants are of their own float, so that TensorFlow refuses any other: checked in it."""

    def constant(value):
        return tf.cast(tf.constant(value, tf.float64), dtype)

    @tf.custom_gradient
    def gelu(x):
        c, k = constant(np.sqrt(2 / np.pi)), constant(0.044715)
        t = tf.tanh(c * (x + k * x * x * x))
        inner = c * (1 + 3 * k * x * x)
        return 0.5 * x * (1 + t), lambda u: u * factor * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * inner)

    @tf.custom_gradient
    def softsign(x):
        d = constant(1.0) + tf.abs(x)
        return x / d, lambda u: u * factor / (d * d)

    @tf.custom_gradient
    def softplus(x):
        e, one = tf.exp(x), constant(1.0)
        return tf.math.log(one + e), lambda u: u * factor * (one - one / (one + e))

    @tf.custom_gradient
    def layer_norm(x):
        centred = x - tf.reduce_mean(x, axis=-1, keepdims=True)
        scale = constant(1.0) / tf.sqrt(tf.reduce_mean(centred * centred, axis=-1, keepdims=True) + constant(1e-3))
        normed = centred * scale

        def grad(u):
            along = tf.reduce_mean(u * normed, axis=-1, keepdims=True)
            return constant(factor) * scale * (u - tf.reduce_mean(u, axis=-1, keepdims=True) - normed * along)

        return normed, grad

    line = np.linspace(-3, 3, 13)
    return {
        "gelu": (gelu, line),
        "softsign": (softsign, line),
        "softplus": (softplus, np.array([-2.0, -0.6, 0.1, 0.7, 1.9, 3.3])),
        "layer norm": (layer_norm, np.random.default_rng(0).standard_normal((4, 16))),
    }


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_an_op_that_stays_in_its_16_bit_float_passes_where_right_and_fails_a_wrong_factor(dtype):
    # Differences at three steps, extrapolated, each element judged by the noise they measure (a fixed rtol and
    # atol of 0.1 passed a gradient 1.25 times the right one in bfloat16).
    for factor in (1.0, 1.25, 2.0) + ((1.1,) if dtype == "float16" else ()):
        for name, (op, x) in _own_float_ops(getattr(tf, dtype), factor).items():
            report = gradmagic.check(op, tf.constant(x, getattr(tf, dtype)))
            assert report.numerics.dtype == dtype and report.numerics.mode == "full", name
            if factor == 1.0:
                assert report.ok and report.codes() == [], (name, report.codes(), report.numerics.max_error)
                assert report.numerics.max_error < 0.8, (name, report.numerics.max_error)
            else:
                assert report.codes() == ["fd-mismatch"], (name, factor, report.numerics.max_error)
    # At twice the right gradient, every diagonal element whose derivative is not within the rounding is named (one
    # of the ten sits where bfloat16's noise, measured along it, is as large as the error; the factor is named).
    gelu, x = _own_float_ops(tf.bfloat16, 2.0)["gelu"]
    message = problem(gradmagic.check(gelu, tf.constant(x, tf.bfloat16)), "fd-mismatch").message
    assert re.search("at (9|10) of 169 Jacobian elements", message), message
    assert message.startswith("dx is 2.0"), message


def test_ml_dtypes_bfloat16_never_reaches_numpy_code_and_an_error_of_gradmagics_own_is_raised_as_its_own(monkeypatch):
    report = gradmagic.check(log1pexp, np.linspace(-3, 3, 7).astype(ml_dtypes.bfloat16))
    assert report.ok, report
    assert [row.dtype for row in report.tensors if row.role == "input"] == ["bfloat16"]

    # A bug of gradmagic's own in the numbers phase: raised, never a finding about the op.
    def broken(*args, **kwargs):
        raise ValueError("a bug in gradmagic")

    monkeypatch.setattr("gradmagic.checking.full.central_differences", broken)
    with pytest.raises(ValueError, match="a bug in gradmagic") as raised:
        gradmagic.check(log1pexp, np.linspace(-3, 3, 7).astype(np.float16))
    assert "error in gradmagic's own code, not in `log1pexp`" in "".join(getattr(raised.value, "__notes__", []))


def test_an_op_failing_at_perturbed_inputs_is_still_the_ops_failure():
    @tf.custom_gradient
    def fragile(x):
        if tf.executing_eagerly() and float(tf.reduce_max(tf.abs(x))) != 1.0:
            raise ValueError("only at the example")
        return x * 2.0, lambda upstream: upstream * 2.0

    report = gradmagic.check(fragile, tf.constant([1.0, -1.0], tf.float16), tf_function=False)
    assert "fd-error" in codes(report) and "only at the example" in problem(report, "fd-error").message


def test_projection_mode_in_float16_states_what_it_can_see_and_calls_no_smooth_op_discontinuous():
    import keras
    from keras import ops

    def in_float16(x):  # a float32 op computing in float16 inside: finite differences at float16 steps
        h = ops.cast(x, "float16")

        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            t = ops.tanh(h)
            return ops.cast(ops.cast(upstream, "float16") * (t + h * (1.0 - t * t)), x.dtype)

        return ops.cast(ops.tanh(h) * h, x.dtype), grad

    assert keras.backend.backend() == "tensorflow"
    x = np.random.default_rng(0).standard_normal(5000).astype(np.float32) * 2
    assert gradmagic.check(log1pexp, tf.constant(x, tf.float16)).ok  # in float64 projections
    report = gradmagic.check(in_float16, x, framework="keras")
    assert report.numerics.mode == "projection" and report.numerics.dtype == "float16"
    assert codes(report) == ["precision-measured", "projection-resolution"], report
    # float16 steps are a tenth of each value: what the projections rule out of the whole gradient is said with its
    # size (a floor of 1000 float16 roundings made that 130 %, and fd-noisy called the op jumpy; measured 41 %).
    message = problem(report, "projection-resolution").message
    bound = float(re.search(r"rules out errors spread over the gradient only beyond (\d+)% of it", message).group(1))
    assert 5 < bound < 60, message


def test_steps_are_exact_in_each_precision():
    values = np.random.default_rng(0).standard_normal(10000).astype(np.float32) * 100
    for precision, dtype in (("bfloat16", ml_dtypes.bfloat16), ("float16", np.float16), ("float32", np.float32)):
        np.testing.assert_array_equal(rounded_to(values, precision), values.astype(dtype).astype(np.float32))
        z = values.astype(dtype).astype(np.float32)[np.abs(values) > 1]  # below 1 the step is set by 1, not z
        steps = step_sizes(z, 2.0**-7, precision)
        for stepped in (z + steps, z - steps):
            np.testing.assert_array_equal(stepped.astype(dtype).astype(np.float32), stepped)
        assert (steps > 0).all()


# -- every Keras backend ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_float16_and_bfloat16_pass_where_they_round_and_fail_where_a_factor_is_wrong(battery, backend):
    results = battery[backend]
    for dtype in ("float16", "bfloat16"):
        right = results[f"log1pexp {dtype}"]
        assert (right["verdict"], right["codes"], right["dtype"]) == ("pass", [], "float64"), right["codes"]
        cancellation = results[f"log1pexp cancellation {dtype}"]
        assert cancellation["verdict"] == "pass", cancellation["codes"]
        wrong = report_of(results[f"log1pexp wrong {dtype}"])
        assert codes(wrong) == ["fd-mismatch"]
        assert "1.5 times the finite differences" in problem(wrong, "fd-mismatch").message
        # Python-side state differs far beyond rounding, and still in float64.
        noisy = report_of(results[f"noisy {dtype}"])
        message = problem(noisy, "graph-mismatch").message
        assert f"where {dtype} rounding allows" in message and "; in float64, " in message, message
        matmul = results[f"matmul {dtype}"]
        assert matmul["verdict"] == "pass" and "grad-nonlinear" not in matmul["codes"], matmul["codes"]
    assert results["log1pexp ml_dtypes bfloat16"]["verdict"] == "pass"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_16_bit_op_is_judged_at_the_precision_its_gradient_is_computed_in(battery, backend):
    # Its constants are of its float: PyTorch mixes them into float64 inputs (its `3 * k` stays a float16 product),
    # JAX narrows (float32), TensorFlow refuses (its own float). The correct op passes wherever its finite
    # differences ran; a wrong factor fails.
    results = battery[backend]
    expected_dtype = {"torch": "float64", "jax": "float32"}
    for dtype in ("float16", "bfloat16"):
        right = results[f"gelu {dtype} 1.0"]
        assert (right["verdict"], right["codes"]) == ("pass", []), (dtype, right["codes"])
        assert right["dtype"] == expected_dtype.get(backend, dtype)
        assert results[f"gelu {dtype} 1.25"]["codes"] == ["fd-mismatch"], dtype
    assert results["gelu float16 1.1"]["codes"] == ["fd-mismatch"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_16_bit_ops_gradient_is_judged_at_its_precision_in_projection_mode_too(battery, backend):
    # The prediction g . d sums each g_i's float16 rounding: a correct op raises no fd-mismatch, 1.1 times still
    # fails where the finite differences run wider than float16 (PyTorch, JAX); in its own float16 (TensorFlow)
    # projection mode says what it cannot rule out.
    results = battery[backend]
    right, wrong = results["gelu projection float16 1.0"], results["gelu projection float16 1.1"]
    assert "fd-mismatch" not in right["codes"] and right["verdict"] in ("pass", "warn"), right["codes"]
    if backend == "tensorflow":
        assert wrong["codes"] == ["projection-resolution"]
    else:
        assert wrong["codes"] == ["fd-mismatch"], wrong["codes"]


def test_no_framework_warning_leaks_from_gradmagics_own_vectorised_calls(battery):
    # PyTorch warns "There is a performance drop because we have not yet implemented the batching rule for
    # aten::quantile" when vmap meets ops.median: gradmagic's vmap, not the user's code.
    for backend in BACKENDS:
        assert battery[backend]["median clip"]["verdict"] == "surrogate"
    assert battery["torch"]["median clip"]["warnings"] == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_float32_op_computing_in_float16_inside_is_judged_in_float16(battery, backend):
    right, wrong = (report_of(battery[backend][name]) for name in ("in_float16", "in_float16 wrong"))
    assert right.ok and codes(right) == ["precision-measured"], right
    assert "computes with float16 precision inside" in problem(right, "precision-measured").message
    assert right.numerics.dtype == "float16"
    assert "fd-mismatch" in codes(wrong)


@pytest.mark.parametrize("backend", BACKENDS)
def test_quantisers_get_the_same_verdict_and_pattern_in_every_precision_and_on_every_backend(battery, backend):
    results = battery[backend]
    expected = {
        "fake_quant": ("surrogate", "straight-through estimator"),
        "fake_quant undeclared": ("fail", "straight-through estimator"),
        "binary": ("surrogate", "stop_gradient-like forward"),
        "lsq": ("fail", "straight-through estimator"),
        "reversal": ("fail", "gradient reversal"),
    }
    for dtype in ("float32", "float16", "bfloat16"):
        for case, (verdict, pattern) in expected.items():
            found = results[f"{case} {dtype}"]
            assert (found["verdict"], found["pattern"]) == (verdict, pattern), (case, dtype, found["codes"])
            same_elsewhere = {battery[other][f"{case} {dtype}"]["pattern"] for other in BACKENDS}
            assert same_elsewhere == {pattern}
            assert found["warnings"] == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_declared_surrogate_quotes_autodiff_next_to_each_element_it_names(battery, backend):
    report = report_of(battery[backend]["square passed through"])
    message = problem(report, "surrogate-differs").message
    number = r"(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)"
    element = (
        rf"d output\[(\d+)\] / d x\[(\d+)\] at x\[\d+\] = {number}: surrogate 1, finite differences {number}, "
        rf"autodiff {number}"
    )
    listed = re.findall(element, message)
    assert len(listed) == 5, message
    x = np.array([-1.3, -0.61, -0.23, 0.12, 0.37, 0.83, 1.4], np.float32)
    for row, column, value, numerical, autodiff in listed:
        assert float(value) == pytest.approx(x[int(column)], abs=1e-2)
        assert row == column and float(autodiff) == pytest.approx(2 * x[int(column)], rel=1e-4)
        assert float(numerical) == pytest.approx(2 * x[int(column)], rel=1e-4)
    assert "agrees with the true derivative there" in message


def test_one_op_gets_one_pattern_on_every_backend_whatever_its_library_ops_stop(battery):
    # JAX's softmax subtracts the stopped maximum (a stop_gradient that changes no derivative): the op is still the
    # upstream passed through a non-linear forward, as on TensorFlow and PyTorch.
    jax_graph = report_of(battery["jax"]["softmax passed through"]).graph
    assert any("stop_gradient" in node.op for node in jax_graph.nodes), [node.op for node in jax_graph.nodes]
    for backend in BACKENDS:
        found = battery[backend]["softmax passed through"]
        assert (found["verdict"], found["pattern"]) == ("surrogate", "straight-through estimator"), backend
        assert "straight-through estimator" in problem(report_of(found), "surrogate-differs").message


#: What model.fit does with a trainable variable a custom-gradient op closes over, measured with Keras 3.15: the
#: error, or that it trains on without moving it (with Keras's warning). A non-trainable one trains on every backend.
CLOSED_OVER_FIT = {
    "tensorflow": "grad_fn must accept keyword argument 'variables'",
    "jax": "UnexpectedTracerError: Encountered an unexpected tracer",
    "torch": None,
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_what_model_fit_does_with_a_closed_over_variable_is_what_the_check_says(battery, backend):
    fit, results = battery[backend]["fit"], battery[backend]
    assert fit["non-trainable"] == {"fits": True, "scale moved": False, "warnings": []}
    assert results["closed over non-trainable"]["verdict"] == "pass"  # a constant of the op, on every backend
    failure = CLOSED_OVER_FIT[backend]
    trainable = report_of(results["closed over trainable"])
    if failure is None:  # PyTorch: trains on, the variable never moves, Keras warns
        assert fit["trainable"]["fits"] and not fit["trainable"]["scale moved"]
        (warned,) = fit["trainable"]["warnings"]
        assert warned.startswith("Gradients do not exist for variables ['sequential/scaled/s'] when minimizing")
    else:
        assert not fit["trainable"]["fits"] and failure in fit["trainable"]["error"]
    if backend == "tensorflow":
        message = problem(trainable, "missing-variables-kwarg").message
        assert "Pass it as an input of the op instead (`op(x, w)`)" in message
        assert "`def grad(*args, upstream=None, variables=None):`" in message
        assert "def grad(upstream, variables=None)" not in message  # a form Keras's PyTorch backend cannot call
        return
    message = problem(trainable, "closed-over-variable").message
    assert "trainable Keras variable `s`" in message and "Pass it as input (`op(x, s)`)" in message
    if backend == "jax":
        assert "which differentiates every trainable variable, fails with JAX's UnexpectedTracerError" in message
    else:
        assert "trains on without moving it, Keras only warning 'Gradients do not exist for variables" in message
    assert message.count("Keras's PyTorch backend") <= 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_gradient_of_another_shape_or_dtype_is_judged_by_what_the_framework_does_with_it(battery, backend):
    taken, results = battery[backend]["taken"], battery[backend]
    broadcast = report_of(results["bias gradient broadcast"])
    reversed_shape = report_of(results["bias gradient reversed"])
    other_dtype = report_of(results["bias gradient float64"])
    shape_message = problem(broadcast, "grad-shape").message
    fix = problem(reversed_shape, "grad-shape").message
    assert "Return one gradient value per element of `b`, in its shape [3]" in fix
    if backend == "torch":
        # PyTorch sums a broadcast gradient back and casts another dtype, measured; it refuses what does not broadcast.
        assert taken["broadcast"] == taken["float64"] == {"db shape": [3], "db dtype": "float32", "db": [3.0, 5.0, 7.0]}
        assert (
            "returned an invalid gradient at index 1 - got [3, 2] but expected shape compatible with [3]"
            in (taken["reversed"]["error"])
        )
        assert (broadcast.verdict, problem(broadcast, "grad-shape").severity) == ("warn", "warning")
        assert "PyTorch sums it back over the broadcast axes itself, so the op works here" in shape_message
        assert "Sum it over the broadcast axes yourself, `ops.sum(grad, axis=[0])`, which works" in shape_message
        assert (other_dtype.verdict, codes(other_dtype)) == ("warn", ["grad-dtype"])
        dtype_message = problem(other_dtype, "grad-dtype").message
        assert "PyTorch casts it to the input's dtype itself" in dtype_message
        # What the other backends do with the float64 gradient, as measured there: TensorFlow keeps it; JAX keeps it
        # with jax_enable_x64 on, and with it off (its default) the cast gives float32 and the op works.
        assert battery["tensorflow"]["taken"]["float64"]["db dtype"] == "float64"
        assert battery["jax"]["taken x64"]["float64"]["db dtype"] == "float64"
        assert battery["jax"]["taken"]["float64"]["db dtype"] == "float32"
        assert (
            "on TensorFlow the gradient stays float64, and on JAX too with jax_enable_x64 on (with it off, JAX's "
            "default, the cast to float64 gives float32, with a warning)" in dtype_message
        )
        assert "on TensorFlow and JAX the gradient keeps the wrong dtype" not in dtype_message
        assert problem(reversed_shape, "grad-shape").severity == "error"
        assert "PyTorch refuses it when the gradient is taken" in fix
        assert "may accept" not in shape_message + fix
    elif backend == "jax":
        refusal = "Custom VJP bwd rule must produce an output with the same type as the args tuple"
        assert refusal in taken["broadcast"]["error"] and refusal in taken["reversed"]["error"]
        assert f"JAX refuses it when the gradient is taken: '{refusal}" in shape_message
        assert "sum the gradient over the broadcast axes, `ops.sum(grad, axis=[0])`" in shape_message
        assert broadcast.verdict == "fail"
    else:
        # TensorFlow passes both on unchanged: a gradient of b in x's shape, and one in float64.
        assert taken["broadcast"]["db shape"] == [2, 3] and taken["float64"]["db dtype"] == "float64"
        assert "TensorFlow accepts this silently" in shape_message and broadcast.verdict == "fail"
        assert "sum the gradient over the broadcast axes, `ops.sum(grad, axis=[0])`" in shape_message
        assert problem(other_dtype, "grad-dtype").severity == "error"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_mixed_precision_model_trains_a_step_and_its_ops_are_checked_at_their_float16_inputs(battery, backend):
    results = battery[backend]
    assert results["model"]["hidden dtype"] == "float16" and np.isfinite(results["model"]["loss"])
    assert (results["model fake_quant"]["verdict"], results["model fake_quant"]["pattern"]) == (
        "surrogate",
        "straight-through estimator",
    )
    assert results["model smooth"]["verdict"] == "pass", results["model smooth"]["codes"]
    wrong = report_of(results["model smooth wrong"])
    assert codes(wrong) == ["fd-mismatch"] and "1.5 times" in problem(wrong, "fd-mismatch").message
    inputs = [row for row in wrong.tensors if row.role == "input"]
    assert [row.dtype for row in inputs] == ["float16"]
    if backend == "tensorflow":  # and watched as model.fit runs: each op checked at the float16 inputs it received
        assert battery[backend]["watched"] == {
            "fake_quant": ["fail", "straight-through estimator", ["float16"] * 3],
            "log1pexp": ["pass", None, ["float16"]],
        }
