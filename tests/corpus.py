"""A corpus of real-world custom gradients: correct ones, buggy ones and intended surrogates.

Each case is written after public code, cited in its `source` (repository and path, or a documentation page). The
code here is re-written, not copied: names, structure and wording are ours, the mathematics and the pattern (how
the gradient function is called, what it returns, which mistake it makes) are the source's. Where a case plants a
bug into correct public code, its `source` says so.

Expectations (`Case.kind`):

- `correct`: the check passes with no error and no warning (but the warnings listed in `Case.warnings`, which are
  true findings about the op, such as a gradient function that assigns a variable);
- `bug`: the check fails; `Case.codes` are the problem codes that name the mistake precisely, and `Case.element`
  the element it sits at, where it has one;
- `surrogate`: the gradient is deliberately not the derivative. Declared (`options={"surrogate": True}`) the
  verdict is "surrogate"; undeclared, the check fails and names `Case.pattern` in `report.surrogate.pattern`.

`judge(case, report)` says how a report measures up; `benchmarks/bench_corpus.py` prints the table and
`tests/test_corpus.py` asserts every case.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import keras
import numpy as np
import tensorflow as tf
from keras import ops

CORRECT, BUG, SURROGATE = "correct", "bug", "surrogate"

#: Inputs away from the jumps of round/sign (at 0 and the half-integers).
STEP_POINTS = [-1.7, -0.3, 0.2, 0.6, 1.4]


@dataclass(frozen=True)
class Case:
    """One real-world custom gradient and what a trustworthy check says about it."""

    name: str
    source: str  # the public code it is written after
    kind: str  # CORRECT, BUG or SURROGATE
    build: Callable[[], tuple]  # () -> (op, args) or (op, args, kwargs); built fresh for each check
    options: dict = field(default_factory=dict)  # for gradmagic.check
    codes: tuple[str, ...] = ()  # BUG: the error codes that name the mistake
    element: tuple[str, tuple[int, ...]] | None = None  # BUG: (input or variable, index) of the wrong element
    pattern: str | None = None  # undeclared SURROGATE: the pattern to be named
    warnings: tuple[str, ...] = ()  # CORRECT or SURROGATE: warnings that are true findings about the op
    known_failure: str | None = None  # why gradmagic does not meet the expectation yet

    @property
    def declared(self) -> bool:
        return bool(self.options.get("surrogate"))

    @property
    def expectation(self) -> str:
        if self.kind == SURROGATE:
            return "surrogate (declared)" if self.declared else f"surrogate: {self.pattern}"
        if self.kind == BUG:
            return "bug: " + ",".join(self.codes)
        return "correct"


@dataclass(frozen=True)
class Judgement:
    """How one report measures up to its case's expectation."""

    outcome: str  # "right", "caught" (a bug found), "missed" (a bug passed), "false alarm", "wrong"
    met: bool  # the expectation is met in full (for a bug: caught with the precise codes, located where asked)
    precise: bool | None  # BUG: every expected code reported; SURROGATE: the pattern named; else None
    located: bool | None  # BUG with an element: the element named; else None
    detail: str  # what fell short, if anything


def f32(values) -> tf.Tensor:
    return tf.constant(np.asarray(values, np.float32))


def run_case(case: Case, **extra_options: Any):
    """Check one case; returns the report."""
    import gradmagic

    built = case.build()
    op, args = built[0], built[1]
    kwargs = built[2] if len(built) > 2 else None
    return gradmagic.check(op, *args, kwargs=kwargs, **{**case.options, **extra_options})


def judge(case: Case, report) -> Judgement:
    """Compare a report with the case's expectation."""
    errors = [p for p in report.problems if p.severity == "error"]
    warnings = [p for p in report.problems if p.severity == "warning"]
    unexpected_warnings = sorted({p.code for p in warnings} - set(case.warnings))
    if case.kind == CORRECT:
        if errors or unexpected_warnings or report.verdict in ("unchecked", "surrogate"):
            shown = [p.code for p in errors] + unexpected_warnings
            return Judgement("false alarm", False, None, None, f"{report.verdict}: {', '.join(shown)}")
        return Judgement("right", True, None, None, "")
    if case.kind == SURROGATE:
        pattern = report.surrogate.pattern if report.surrogate else None
        if case.declared:
            met = report.verdict == "surrogate" and not unexpected_warnings
            named = case.pattern is None or pattern == case.pattern
            detail = "" if met and named else f"{report.verdict}, pattern {pattern}: {', '.join(report.codes())}"
            return Judgement("right" if met else "false alarm", met and named, named, None, detail)
        named = report.verdict == "fail" and pattern == case.pattern
        outcome = "right" if report.verdict == "fail" else "missed"
        detail = "" if named else f"{report.verdict}, pattern {pattern}: {', '.join(report.codes())}"
        return Judgement(outcome, named, named, None, detail)
    if report.verdict != "fail":
        return Judgement("missed", False, False, False if case.element else None, report.verdict)
    found = {p.code for p in errors}
    precise = set(case.codes) <= found
    located = _located(case, report) if case.element else None
    detail = "" if precise else f"codes {sorted(found)}, expected {list(case.codes)}"
    if located is False:
        detail = (detail + "; " if detail else "") + f"{case.element[0]}{list(case.element[1])} not named"
    return Judgement("caught", precise and located is not False, precise, located, detail)


def _located(case: Case, report) -> bool:
    name, index = case.element
    named = [(p.location.input or p.location.variable, p.location.index) for p in report.problems if p.location]
    named += [(e.input, e.index) for e in report.numerics.worst]
    return (name, tuple(index)) in [(where, tuple(at) if at is not None else None) for where, at in named]


# -- TensorFlow's documentation and tests ---------------------------------------------------------------------


def _docs_log1pexp(points):
    def build():
        @tf.custom_gradient
        def log1pexp(x):
            exp_x = tf.exp(x)

            def backward(upstream):
                return upstream * (1.0 - 1.0 / (1.0 + exp_x))

            return tf.math.log(1.0 + exp_x), backward

        return log1pexp, (f32(points),)

    return build


def _docs_product():
    def product(x, y):
        def backward(upstream):
            return upstream * y, upstream * x

        return x * y, backward

    return tf.custom_gradient(product), (f32([1.5, -2.0, 0.5]), f32([3.0, 0.25, -1.0]))


def _docs_clip_gradients():
    @tf.custom_gradient
    def clip_gradients(y):
        return y, lambda upstream: tf.clip_by_norm(upstream, 0.5)

    return clip_gradients, (f32([1.0, 2.0, 3.0]),)


def _guide_clip_gradient_by_norm():
    @tf.custom_gradient
    def clip_gradient_by_norm(x, norm):
        def backward(upstream):
            return [tf.clip_by_norm(upstream, norm), None]

        return tf.identity(x), backward

    return clip_gradient_by_norm, (f32([3.0, -4.0, 1.0]), tf.constant(1.0))


def _test_multiply_switched():
    @tf.custom_gradient
    def multiply(x1, x2):
        return x1 * x2, lambda upstream: [upstream * x1, upstream * x2]  # the two gradients swapped

    return multiply, (tf.constant(3.0), tf.constant(5.0))


def _test_dense_with_variables():
    kernel = tf.Variable(np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32), name="dense_kernel")

    @tf.custom_gradient
    def dense(x):
        def backward(upstream, variables=None):
            (weights,) = variables
            return tf.matmul(upstream, weights, transpose_b=True), [tf.ones((4, 3))]  # a placeholder, not x^T dy

        return tf.matmul(x, kernel), backward

    return dense, (f32(np.random.default_rng(2).normal(size=(2, 4))),)


def _test_keyword_only_variables():
    captured = tf.Variable(3.0, name="captured")

    @tf.custom_gradient
    def scale_by_captured(x):
        def backward(*upstreams, variables=None):
            (upstream,) = upstreams
            return 4.0 * captured * upstream, [5.0 * x * upstream]  # 4 and 5 where 1 and 1 belong

        return x * captured, backward

    return scale_by_captured, (tf.constant(6.0),)


def _test_recompute_grad():
    return tf.recompute_grad(lambda x: tf.reduce_prod(tf.tanh(x) ** 2)), (f32([0.4, 1.0, -0.7]),)


def _test_grad_pass_through_round():
    return tf.grad_pass_through(tf.round), (f32(STEP_POINTS),)


def _test_identity_times_three():
    @tf.custom_gradient
    def my_identity(x):
        return tf.identity(x), lambda upstream: [3.0 * upstream]

    return my_identity, (f32([1.0, -2.0, 0.5]),)


# -- numerically stable ops ------------------------------------------------------------------------------------


def _stable_softplus():
    @tf.custom_gradient
    def softplus(x):
        return tf.nn.softplus(x), lambda upstream: upstream * tf.sigmoid(x)

    return softplus, (f32([-100.0, -3.0, 0.0, 2.0, 50.0]),)


def _logsumexp(forget_normaliser=False):
    def build():
        @tf.custom_gradient
        def logsumexp(x):
            peak = tf.stop_gradient(tf.reduce_max(x, axis=-1, keepdims=True))
            exps = tf.exp(x - peak)
            total = tf.reduce_sum(exps, axis=-1, keepdims=True)

            def backward(upstream):
                weights = exps if forget_normaliser else exps / total
                return upstream[..., tf.newaxis] * weights

            return tf.squeeze(peak + tf.math.log(total), -1), backward

        rows = np.random.default_rng(3).normal(size=(3, 4)) * 3
        rows[2] = [1000.0, 999.0, 998.5, 990.0]  # the max shift keeps exp finite
        return logsumexp, (f32(rows),)

    return build


def _safe_norm(with_where=True):
    def build():
        @tf.custom_gradient
        def safe_norm(x):
            norm = tf.sqrt(tf.reduce_sum(x * x, axis=-1, keepdims=True))

            def backward(upstream):
                if with_where:
                    safe = tf.where(norm > 0, norm, tf.ones_like(norm))
                    unit = tf.where(norm > 0, x / safe, tf.zeros_like(x))
                else:
                    unit = x / norm  # 0 / 0 at a zero row
                return upstream[..., tf.newaxis] * unit

            return tf.squeeze(norm, -1), backward

        return safe_norm, (f32([[3.0, 4.0], [0.0, 0.0], [1.0, -2.0]]),)

    return build


def _divide_no_nan():
    @tf.custom_gradient
    def divide_no_nan(x, y):
        zero = tf.equal(y, 0.0)
        safe_y = tf.where(zero, tf.ones_like(y), y)
        quotient = tf.where(zero, tf.zeros_like(x), x / safe_y)

        def backward(upstream):
            dx = tf.where(zero, tf.zeros_like(x), upstream / safe_y)
            dy = tf.where(zero, tf.zeros_like(y), -upstream * quotient / safe_y)
            return dx, dy

        return quotient, backward

    return divide_no_nan, (f32([1.0, 0.0, -2.0, 3.0]), f32([2.0, 0.0, 0.5, -1.5]))


def _clip_by_value_gradient():
    @tf.custom_gradient
    def clip(x):
        inside = tf.logical_and(x >= -1.0, x <= 1.0)
        return tf.clip_by_value(x, -1.0, 1.0), lambda upstream: tf.where(inside, upstream, tf.zeros_like(upstream))

    return clip, (f32([-2.0, -0.5, 0.3, 0.9, 1.5]),)


# -- TensorFlow Probability's pattern: vjp_fwd returns (value, aux), vjp_bwd(aux, upstream) -----------------------


def tfp_style_custom_gradient(vjp_fwd, vjp_bwd):
    """TensorFlow Probability's `custom_gradient(vjp_fwd, vjp_bwd)` on TensorFlow: a wrapper that converts the
    arguments and calls an inner `tf.custom_gradient` function of `*args`."""

    def decorator(function):
        @functools.wraps(function)
        def wrapper(*args):
            @tf.custom_gradient
            def inner(*tensors):
                value, aux = vjp_fwd(*tensors)
                return value, lambda upstream: vjp_bwd(aux, upstream)

            return inner(*[tf.convert_to_tensor(a) for a in args])

        return wrapper

    return decorator


def reduce_to_shapes(primals, grads):
    """Sum each gradient over the axes its primal was broadcast along (TFP's fix_gradient_for_broadcasting)."""
    reduced = []
    for index, (primal, grad) in enumerate(zip(primals, grads)):
        others = [tf.shape(p) for i, p in enumerate(primals) if i != index]
        broadcast = functools.reduce(tf.broadcast_dynamic_shape, others, tf.shape(primal))
        axes, _ = tf.raw_ops.BroadcastGradientArgs(s0=tf.shape(primal), s1=broadcast)
        reduced.append(tf.reshape(tf.reduce_sum(grad, axis=axes), tf.shape(primal)))
    return reduced


def _tfp_log_cosh():
    def value(x):
        magnitude = tf.abs(x)
        return magnitude + tf.math.softplus(-2.0 * magnitude) - tf.cast(np.log(2.0), x.dtype)

    @tfp_style_custom_gradient(lambda x: (value(x), x), lambda x, upstream: upstream * tf.tanh(x))
    def log_cosh(x):
        return value(x)

    return log_cosh, (f32([-30.0, -1.0, 0.25, 0.5, 20.0]),)


def _tfp_lbeta(reduce_broadcast=True):
    def build():
        def forward(x, y):
            return tf.math.lgamma(x) + tf.math.lgamma(y) - tf.math.lgamma(x + y), (x, y)

        def backward(aux, upstream):
            x, y = aux
            common = tf.math.digamma(x + y)
            grads = [upstream * (tf.math.digamma(x) - common), upstream * (tf.math.digamma(y) - common)]
            return reduce_to_shapes([x, y], grads) if reduce_broadcast else grads

        @tfp_style_custom_gradient(forward, backward)
        def lbeta(x, y):
            return forward(x, y)[0]

        return lbeta, (f32([0.5, 1.5, 3.0]), f32([[2.0], [4.5]]))

    return build


def _tfp_log_gamma_difference():
    def forward(x, y):
        return tf.math.lgamma(y) - tf.math.lgamma(x + y), (x, y)

    def backward(aux, upstream):
        x, y = aux
        partial_x = -tf.math.digamma(x + y)
        return reduce_to_shapes([x, y], [upstream * partial_x, upstream * (tf.math.digamma(y) + partial_x)])

    @tfp_style_custom_gradient(forward, backward)
    def log_gamma_difference(x, y):
        return forward(x, y)[0]

    return log_gamma_difference, (f32([0.5, 2.0, 3.5]), f32([1.0, 9.0, 4.0]))


def _tfp_lambertw():
    def principal_branch(z):
        w = tf.math.log1p(z)  # a start that Halley's iteration takes to W(z) for z > -1/e
        for _ in range(6):
            ew = tf.exp(w)
            f = w * ew - z
            w = w - f / (ew * (w + 1) - (w + 2) * f / (2 * w + 2))
        return w

    def backward(aux, upstream):
        (z,) = aux
        w = principal_branch(z)
        at_zero = tf.equal(z, 0.0)  # W(z) / (z (1 + W(z))) is 0 / 0 there; its limit is 1
        return upstream * tf.where(at_zero, tf.ones_like(z), w / (tf.where(at_zero, 1.0, z) * (1 + w)))

    @tfp_style_custom_gradient(lambda z: (principal_branch(z), (z,)), backward)
    def lambertw(z):
        return principal_branch(z)

    return lambertw, (f32([-0.2, 0.0, 0.5, 3.0]),)


def _tfp_log1mexp():
    @tf.custom_gradient
    def log1mexp(x):
        magnitude = tf.abs(x)
        value = tf.where(
            magnitude < np.log(2.0), tf.math.log(-tf.math.expm1(-magnitude)), tf.math.log1p(-tf.exp(-magnitude))
        )
        return value, lambda upstream: upstream * tf.sign(x) / tf.math.expm1(magnitude)

    return log1mexp, (f32([0.01, 0.5, 3.0, 20.0]),)


def _tfp_softplus_inverse_wrong():
    @tf.custom_gradient
    def softplus_inverse(x):
        value = x + tf.math.log(-tf.math.expm1(-x))
        return value, lambda upstream: upstream / tf.math.expm1(x)  # 1 / (1 - exp(-x)) is the derivative

    return softplus_inverse, (f32([0.1, 1.0, 2.5, 6.0]),)


def _tfp_log_add_exp():
    @tf.custom_gradient
    def log_add_exp(x, y):
        larger = tf.maximum(x, y)
        value = larger + tf.math.softplus(-tf.abs(x - y))

        def backward(upstream):
            return upstream * tf.sigmoid(x - y), upstream * tf.sigmoid(y - x)

        return value, backward

    return log_add_exp, (f32([-3.0, 0.5, 40.0]), f32([1.0, 0.25, -2.0]))


# -- quantisation and binarised networks ------------------------------------------------------------------------


def larq_sign(x):
    """Larq's sign: -1 or +1, never 0."""
    return tf.sign(tf.sign(x) + 0.1)


def _masked(x, upstream, clip_value=1.0):
    return tf.where(tf.abs(x) <= clip_value, upstream, tf.zeros_like(upstream))


def _larq_ste_sign():
    @tf.custom_gradient
    def ste_sign(x):
        return larq_sign(x), lambda upstream: _masked(x, upstream)

    return ste_sign, (f32(STEP_POINTS),)


def _larq_approx_sign():
    @tf.custom_gradient
    def approx_sign(x):
        def backward(upstream):
            magnitude = tf.abs(x)
            return tf.where(magnitude <= 1.0, 2.0 * (1.0 - magnitude) * upstream, tf.zeros_like(upstream))

        return larq_sign(x), backward

    return approx_sign, (f32(STEP_POINTS),)


def _larq_swish_sign(beta=5.0):
    @tf.custom_gradient
    def swish_sign(x):
        def backward(upstream):
            scaled = beta * x
            return upstream * beta * (2.0 - scaled * tf.tanh(scaled / 2.0)) / (1.0 + tf.cosh(scaled))

        return larq_sign(x), backward

    return swish_sign, (f32(STEP_POINTS),)


def _larq_ste_heaviside():
    @tf.custom_gradient
    def ste_heaviside(x):
        return tf.sign(tf.nn.relu(x)), lambda upstream: _masked(x, upstream)

    return ste_heaviside, (f32(STEP_POINTS),)


def _larq_dorefa(bits=2):
    levels = 2**bits - 1

    def dorefa_activations(x):
        @tf.custom_gradient
        def quantize(v):
            return tf.round(v * levels) / levels, lambda upstream: upstream

        return quantize(tf.clip_by_value(x, 0.0, 1.0))

    return dorefa_activations, (f32([-0.4, 0.1, 0.45, 0.8, 1.3]),)


def _larq_magnitude_aware_sign():
    @tf.custom_gradient
    def ste_sign(x):
        return larq_sign(x), lambda upstream: _masked(x, upstream)

    def magnitude_aware_sign(x):
        scale = tf.stop_gradient(tf.reduce_mean(tf.abs(x), axis=0))
        return scale * ste_sign(x)

    return magnitude_aware_sign, (f32([[-0.7, 0.3, 1.2], [0.4, -0.9, -0.2]]),)


def _bnn_binarize_clipped_upstream():
    @tf.custom_gradient
    def binarize(x):
        return tf.sign(x), lambda upstream: tf.clip_by_value(upstream, -0.1, 0.1)

    return binarize, (f32(STEP_POINTS),)


def _qkeras_quantized_bits(bits=4, integer=1):
    step = 2.0 ** (integer - bits + 1)  # one sign bit, `integer` integer bits, the rest fraction
    limit = 2.0**integer - step

    @tf.custom_gradient
    def quantized_bits(x):
        quantised = tf.clip_by_value(tf.round(x / step) * step, -limit - step, limit)
        return quantised, lambda upstream: upstream

    return quantized_bits, (f32([-2.3, -0.61, 0.07, 0.55, 1.3]),)


def _keras_fake_quant(reduce_min=True):
    def build():
        bits = 8
        quant_max = 2**bits - 1

        @ops.custom_gradient
        def fake_quant(x, min_val, max_val):
            scale = (max_val - min_val) / quant_max
            zero_point = ops.round(ops.clip(-min_val / scale, 0, quant_max))
            nudged_min, nudged_max = -zero_point * scale, (quant_max - zero_point) * scale
            clamped = ops.clip(x, nudged_min, nudged_max)
            result = ops.floor((clamped - nudged_min) / scale + 0.5) * scale + nudged_min
            inside = ops.logical_and(ops.greater_equal(x, nudged_min), ops.less_equal(x, nudged_max))

            def grad(*args, upstream=None):
                if upstream is None:
                    (upstream,) = args
                below = ops.where(ops.less_equal(x, nudged_min), upstream, 0.0)
                above = ops.where(ops.greater_equal(x, nudged_max), upstream, 0.0)
                grad_min = ops.sum(below) if reduce_min else below
                return ops.where(inside, upstream, 0.0), grad_min, ops.sum(above)

            return result, grad

        x = f32([-1.4, -0.33, 0.02, 0.41, 0.77, 1.6])
        return fake_quant, (x, tf.constant(-1.0), tf.constant(1.0))

    return build


def _keras_int8_matmul():
    rng = np.random.default_rng(4)
    kernel = tf.constant(rng.integers(-127, 128, size=(3, 2)), tf.int8)
    kernel_scale = f32([20.0, 35.0])

    @ops.custom_gradient
    def matmul_with_inputs_gradient(inputs, kernel, kernel_scale):
        def grad_fn(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            float_kernel = ops.cast(kernel, "float32") / kernel_scale
            return ops.matmul(upstream, ops.transpose(float_kernel)), None, None

        product = ops.matmul(inputs, ops.cast(kernel, "float32"))
        return product / kernel_scale, grad_fn

    return matmul_with_inputs_gradient, (f32(rng.normal(size=(2, 3))), kernel, kernel_scale)


# -- gradient reversal (DANN) ------------------------------------------------------------------------------------


class GradReverse(keras.layers.Layer):
    """A gradient reversal layer: its call reaches a custom gradient."""

    def call(self, x):
        @tf.custom_gradient
        def reverse(v):
            return tf.identity(v), lambda upstream: -upstream

        return reverse(x)


def _grl_layer():
    return GradReverse(), (f32([0.5, -1.0, 2.0]),)


def _grl_lambda_default():
    @tf.custom_gradient
    def gradient_reverse(x, lamda=1.0):
        return tf.identity(x), lambda upstream: (lamda * -upstream, None)

    return gradient_reverse, (f32([0.5, -1.0, 2.0]), tf.constant(0.5))


def _grl_one_gradient_for_two_inputs():
    @tf.custom_gradient
    def grad_reverse(y, hp_lambda):
        return y, lambda upstream: -upstream * hp_lambda  # hp_lambda gets no gradient: two inputs, one returned

    return grad_reverse, (f32([0.5, -1.0, 2.0]), tf.constant(1.0))


def _grl_lambda_gradient_unreduced():
    @tf.custom_gradient
    def gradient_reversal(x, lamb):
        return tf.identity(x), lambda upstream: [-upstream * lamb, -upstream * lamb]  # lamb's is not summed

    return gradient_reversal, (f32([0.5, -1.0, 2.0]), tf.constant(0.3))


class ScheduledReversal(keras.layers.Layer):
    """DANN's schedule: each backward pass counts itself and updates the reversal strength."""

    def __init__(self, total_calls=100.0):
        super().__init__(trainable=False)
        self.strength = tf.Variable(0.0, trainable=False, name="strength")
        self.calls = tf.Variable(0.0, trainable=False, name="calls")
        self.total_calls = total_calls

    @tf.custom_gradient
    def reversed_gradient(self, x):
        def backward(upstream):
            self.calls.assign_add(1.0)
            progress = self.calls / self.total_calls
            self.strength.assign(2.0 / (1.0 + tf.exp(-10.0 * progress)) - 1.0)
            return -self.strength * upstream

        return tf.identity(x), backward


def _grl_scheduled():
    return ScheduledReversal().reversed_gradient, (f32([0.5, -1.0, 2.0]),)


# -- sparsemax, entmax, straight-through Gumbel-softmax ------------------------------------------------------------


def sparsemax_forward(z):
    """Sparsemax along the last axis (Martins & Astudillo, 2016), as TensorFlow Addons computes it."""
    dims = tf.shape(z)[-1]
    ordered = tf.sort(z, axis=-1, direction="DESCENDING")
    cumulative = tf.cumsum(ordered, axis=-1)
    ranks = tf.cast(tf.range(1, dims + 1), z.dtype)
    support = tf.reduce_sum(tf.cast(1 + ranks * ordered > cumulative, tf.int32), axis=-1)
    threshold = (tf.gather(cumulative, support - 1, batch_dims=1) - 1) / tf.cast(support, z.dtype)
    return tf.maximum(z - threshold[..., tf.newaxis], 0.0)


def _sparsemax(subtract_mean=True):
    def build():
        @tf.custom_gradient
        def sparsemax(z):
            p = sparsemax_forward(z)

            def backward(upstream):
                support = tf.cast(p > 0, upstream.dtype)
                masked = upstream * support
                if not subtract_mean:
                    return masked
                mean = tf.reduce_sum(masked, -1, keepdims=True) / tf.reduce_sum(support, -1, keepdims=True)
                return support * (upstream - mean)

            return p, backward

        return sparsemax, (f32([[0.3, 1.2, -0.5, 0.9, 0.1], [2.0, -1.0, 0.4, 1.7, 1.65]]),)

    return build


def _entmax15():
    def forward(x):
        x = (x - tf.reduce_max(x, -1, keepdims=True)) / 2
        ordered = tf.sort(x, axis=-1, direction="DESCENDING")
        rho = tf.cast(tf.range(1, tf.shape(x)[-1] + 1), x.dtype)
        mean = tf.cumsum(ordered, axis=-1) / rho
        mean_sq = tf.cumsum(ordered**2, axis=-1) / rho
        delta = (1 - rho * (mean_sq - mean**2)) / rho
        tau = mean - tf.sqrt(tf.maximum(delta, 0.0))
        support = tf.reduce_sum(tf.cast(tau <= ordered, tf.int32), axis=-1)
        tau_star = tf.gather(tau, support - 1, batch_dims=1)[..., tf.newaxis]
        return tf.maximum(x - tau_star, 0.0) ** 2

    @tf.custom_gradient
    def entmax15(x):
        y = forward(x)

        def backward(upstream):
            root = tf.sqrt(y)
            scaled = upstream * root
            return scaled - tf.reduce_sum(scaled, -1, keepdims=True) / tf.reduce_sum(root, -1, keepdims=True) * root

        return y, backward

    return entmax15, (f32([[0.3, 1.2, -0.5, 0.9, 0.1], [2.0, -1.0, 0.4, 1.7, 1.2]]),)


def _gumbel_straight_through(temperature=0.5):
    noise = f32(-np.log(-np.log(np.random.default_rng(5).uniform(size=(2, 4)))))

    @tf.custom_gradient
    def gumbel_softmax_hard(logits):
        soft = tf.nn.softmax((logits + noise) / temperature)
        hard = tf.one_hot(tf.argmax(soft, axis=-1), tf.shape(soft)[-1], dtype=soft.dtype)

        def backward(upstream):  # the soft sample's gradient, passed through the hard one
            return soft * (upstream - tf.reduce_sum(upstream * soft, -1, keepdims=True)) / temperature

        return hard, backward

    return gumbel_softmax_hard, (f32([[0.5, 1.5, -0.2, 0.1], [1.0, 0.2, 0.3, -1.0]]),)


# -- matrix ops and normalisation --------------------------------------------------------------------------------


def _matmul(transpose_right=True):
    def build():
        @tf.custom_gradient
        def matmul(a, b):
            def backward(upstream):
                grad_a = tf.matmul(upstream, b, transpose_b=transpose_right)
                return grad_a, tf.matmul(a, upstream, transpose_a=True)

            return tf.matmul(a, b), backward

        rng = np.random.default_rng(6)
        if transpose_right:
            return matmul, (f32(rng.normal(size=(2, 3))), f32(rng.normal(size=(3, 4))))
        return matmul, (f32(rng.normal(size=(3, 3))), f32(rng.normal(size=(3, 3))))

    return build


def _cholesky():
    def lower_half_diagonal(m):
        return tf.linalg.band_part(m, -1, 0) - 0.5 * tf.linalg.diag(tf.linalg.diag_part(m))

    @tf.custom_gradient
    def cholesky(a):
        lower = tf.linalg.cholesky((a + tf.linalg.matrix_transpose(a)) / 2)

        def backward(upstream):
            phi = lower_half_diagonal(tf.matmul(lower, upstream, transpose_a=True))
            left = tf.linalg.triangular_solve(lower, phi, lower=True, adjoint=True)
            grad = tf.linalg.matrix_transpose(
                tf.linalg.triangular_solve(lower, tf.linalg.matrix_transpose(left), lower=True, adjoint=True)
            )
            return (grad + tf.linalg.matrix_transpose(grad)) / 2

        return lower, backward

    rng = np.random.default_rng(7)
    root = rng.normal(size=(3, 3))
    return cholesky, (tf.constant(root @ root.T + 3 * np.eye(3), tf.float64),)


def _matrix_inverse():
    @tf.custom_gradient
    def inverse(a):
        inv = tf.linalg.inv(a)
        return inv, lambda upstream: -tf.matmul(inv, tf.matmul(upstream, inv, transpose_b=True), transpose_a=True)

    rng = np.random.default_rng(8)
    return inverse, (f32(rng.normal(size=(3, 3)) + 3 * np.eye(3)),)


def _logdet_untransposed():
    @tf.custom_gradient
    def logdet(a):
        _, value = tf.linalg.slogdet(a)
        return value, lambda upstream: upstream * tf.linalg.inv(a)  # the derivative is inv(a) transposed

    rng = np.random.default_rng(9)
    return logdet, (f32(rng.normal(size=(3, 3)) + 3 * np.eye(3)),)


def _layer_norm(bug=None):
    def build():
        @tf.custom_gradient
        def layer_norm(x, gamma, beta):
            mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
            inv_std = tf.math.rsqrt(variance + 1e-5)
            normed = (x - mean) * inv_std

            def backward(upstream):
                dnormed = upstream * gamma
                mean_term = tf.reduce_mean(dnormed, -1, keepdims=True)
                projection = normed * tf.reduce_mean(dnormed * normed, -1, keepdims=True)
                if bug == "missing mean term":
                    projection = tf.zeros_like(projection)
                dx = inv_std * (dnormed - mean_term - projection)
                dgamma = upstream * normed if bug == "gamma unreduced" else tf.reduce_sum(upstream * normed, 0)
                return dx, dgamma, tf.reduce_sum(upstream, 0)

            return normed * gamma + beta, backward

        rng = np.random.default_rng(10)
        x = f32(rng.normal(size=(4, 6)) * 2 + 1)
        return layer_norm, (x, f32(rng.normal(size=6) + 1), f32(rng.normal(size=6)))

    return build


# -- several outputs, variables, Keras layers and Keras 3 ops ------------------------------------------------------


def _sin_and_cos():
    @tf.custom_gradient
    def sin_and_cos(x):
        def backward(d_sin, d_cos):
            return d_sin * tf.cos(x) - d_cos * tf.sin(x)

        return (tf.sin(x), tf.cos(x)), backward

    return sin_and_cos, (f32([0.3, -1.2, 2.0]),)


class ScaledDense(keras.layers.Layer):
    """A Keras layer whose call goes through a `tf.custom_gradient` method reading the layer's kernel."""

    def __init__(self, units, wrong_kernel_gradient=False):
        super().__init__()
        self.units, self.wrong_kernel_gradient = units, wrong_kernel_gradient

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), initializer="glorot_uniform")

    @tf.custom_gradient
    def project(self, x):
        kernel = self.kernel.value

        def backward(upstream, variables=None):
            grad_kernel = tf.matmul(x, upstream, transpose_a=True)
            if self.wrong_kernel_gradient:
                grad_kernel = (
                    tf.matmul(
                        tf.reduce_sum(x, 0, keepdims=True), tf.reduce_sum(upstream, 0, keepdims=True), transpose_a=True
                    )
                    / 2
                )
            return tf.matmul(upstream, kernel, transpose_b=True), [grad_kernel for _ in variables]

        return tf.matmul(x, kernel), backward

    def call(self, x):
        return tf.nn.softplus(self.project(x))


def _keras_layer(wrong=False):
    def build():
        keras.utils.set_random_seed(0)
        layer = ScaledDense(3, wrong_kernel_gradient=wrong)
        x = f32(np.random.default_rng(11).normal(size=(2, 4)))
        layer.build(x.shape)
        return layer, (x,)

    return build


def _keras_log1pexp(multiply_upstream=True):
    def build():
        @ops.custom_gradient
        def log1pexp(x):
            e = ops.exp(x)

            def grad(*args, upstream=None):
                if upstream is None:
                    (upstream,) = args
                slope = 1.0 - 1.0 / ops.add(1, e)
                return ops.multiply(upstream, slope) if multiply_upstream else slope

            return ops.log(1 + e), grad

        return log1pexp, (f32([-5.0, 0.0, 3.0, 20.0]),)

    return build


class Log1PExpLayer(keras.layers.Layer):
    """Keras's own test layer: a non-trainable variable through a custom-gradient op, plus the inputs."""

    def __init__(self):
        super().__init__()
        self.v = keras.Variable(5.0, trainable=False)

    def call(self, inputs):
        @ops.custom_gradient
        def log1pexp(x):
            e = ops.exp(x)

            def grad(*args, upstream=None):
                if upstream is None:
                    (upstream,) = args
                return ops.multiply(upstream, 1.0 - 1.0 / ops.add(1, e))

            return ops.log(1 + e), grad

        return log1pexp(self.v) + inputs


# -- issue 18's classes: what a checker trusted too much -------------------------------------------------------------


def _one_wrong_element_float32(size=20_000):
    def build():
        @tf.custom_gradient
        def leaky_softsign(x):
            slope = tf.where(x > 0, 1.0, 0.1)  # Python floats: this op runs in float32 only
            value = tf.where(x > 0, x, 0.1 * x) / (1.0 + tf.abs(x))

            def backward(upstream):
                local = (slope * (1.0 + tf.abs(x)) - tf.where(x > 0, x, 0.1 * x) * tf.sign(x)) / (1.0 + tf.abs(x)) ** 2
                grad = upstream * local
                return tf.concat([grad[:-1], tf.zeros([1], grad.dtype)], 0)  # off by one: the last element dropped

            return value, backward

        x = np.random.default_rng(12).normal(size=size)
        x[-1] = 0.3  # a typical gradient (0.59) there: one the check must see at this size
        return leaky_softsign, (f32(x),)

    return build


def _gather_duplicates_overwritten():
    indices = tf.constant([[0], [2], [2], [4]])

    @tf.custom_gradient
    def gather(params):
        def backward(upstream):  # update, not add: the two rows gathered from params[2] do not accumulate
            return tf.tensor_scatter_nd_update(tf.zeros_like(params), indices, upstream)

        return tf.gather_nd(params, indices), backward

    return gather, (f32([0.5, -1.0, 2.0, 0.3, 1.1, -0.7]),)


def _float64_gradient():
    @tf.custom_gradient
    def gelu_tanh(x):
        inner = np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)
        t = tf.tanh(inner)

        def backward(upstream):
            wide = tf.cast(x, tf.float64)  # computed in float64 for accuracy, and returned so
            t64 = tf.cast(t, tf.float64)
            local = 0.5 * (1 + t64) + 0.5 * wide * (1 - t64**2) * np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * wide**2)
            return tf.cast(upstream, tf.float64) * local

        return 0.5 * x * (1 + t), backward

    return gelu_tanh, (f32([-1.5, 0.2, 0.9]),)


def _jacobian_instead_of_vjp():
    @tf.custom_gradient
    def tanh(x):
        y = tf.tanh(x)
        return y, lambda upstream: tf.linalg.diag(1 - y * y)  # d y / d x, not upstream times it

    return tanh, (f32([0.5, -1.0, 2.0]),)


def _forgotten_upstream():
    @tf.custom_gradient
    def tanh(x):
        y = tf.tanh(x)
        return y, lambda upstream: 1 - y * y  # the chain rule's `upstream *` is missing

    return tanh, (f32([0.5, -1.0, 2.0]),)


def _sigmoid_sign_error():
    @tf.custom_gradient
    def sigmoid(x):
        y = tf.sigmoid(x)
        return y, lambda upstream: upstream * y * (y - 1)

    return sigmoid, (f32([0.5, -1.0, 2.0]),)


def _forgotten_inner_factor():
    @tf.custom_gradient
    def tanh_of_double(x):
        y = tf.tanh(2 * x)
        return y, lambda upstream: upstream * (1 - y * y)  # the inner derivative 2 is missing

    return tanh_of_double, (f32([0.5, -1.0, 0.2]),)


TF_DOCS = "tensorflow/tensorflow tensorflow/python/ops/custom_gradient.py (tf.custom_gradient's docstring)"
TF_TESTS = "tensorflow/tensorflow tensorflow/python/ops/gradients_test.py"
LARQ = "larq/larq larq/quantizers.py"
TFP_SPECIAL = "tensorflow/probability tensorflow_probability/python/math/special.py"
TFP_GENERIC = "tensorflow/probability tensorflow_probability/python/math/generic.py"
KERAS_QUANT = "keras-team/keras keras/src/quantizers/quantizers.py (fake_quant_with_min_max_vars, non-TF backends)"
GRL_SO = "https://stackoverflow.com/questions/56841166 (gradient reversal layer in TF 2), as used in public DANN code"

CASES: list[Case] = [
    # TensorFlow's documentation and tests
    Case("tf docs log1pexp", TF_DOCS, CORRECT, _docs_log1pexp([-5.0, 0.0, 3.0, 20.0])),
    Case(
        "tf docs log1pexp at x=100",
        TF_DOCS + ": the forward overflows in float32 there",
        CORRECT,
        _docs_log1pexp([100.0]),
        warnings=("nonfinite-output",),
    ),
    Case("tf docs bar(x, y) = x * y", TF_DOCS + " (two inputs, two gradients)", CORRECT, _docs_product),
    Case(
        "tf guide clip_gradients, declared",
        "tensorflow/docs site/en/guide/advanced_autodiff.ipynb (Custom gradients)",
        SURROGATE,
        _docs_clip_gradients,
        {"surrogate": True},
    ),
    Case(
        "tf guide clip_gradients, undeclared",
        "tensorflow/docs site/en/guide/advanced_autodiff.ipynb",
        SURROGATE,
        _docs_clip_gradients,
        pattern="gradient clipping",
    ),
    Case(
        "tf guide clip_gradient_by_norm(x, norm)",
        "tensorflow/docs site/en/r1/guide/eager.ipynb (Custom gradients)",
        SURROGATE,
        _guide_clip_gradient_by_norm,
        {"surrogate": True},
    ),
    Case(
        "tf test MyMultiply, gradients swapped",
        TF_TESTS + " (CustomGradientTest.testCustomGradient)",
        BUG,
        _test_multiply_switched,
        codes=("fd-mismatch",),
    ),
    Case(
        "tf test dense with variables, placeholder kernel gradient",
        TF_TESTS + " (testCustomGradientWithVariables: `ones((4, 3))` for the kernel)",
        BUG,
        _test_dense_with_variables,
        codes=("grad-nonlinear",),
    ),  # a constant gradient does not scale with upstream
    Case(
        "tf test keyword-only variables, factors 4 and 5",
        TF_TESTS + " (testCustomGradientVariablesKwonlyArgs: grad_fn(*dys, variables=None))",
        BUG,
        _test_keyword_only_variables,
        codes=("fd-mismatch",),
    ),
    Case(
        "tf test recompute_grad, second order",
        TF_TESTS + " (testCustomGradientRecomputeGradHigherOrder)",
        CORRECT,
        _test_recompute_grad,
        {"order": 2},
    ),  # the second order by nested eager tapes, as TensorFlow's test
    Case(
        "tf.grad_pass_through(tf.round), declared",
        TF_TESTS + " (GradPassThroughTest); tensorflow/python/ops/custom_gradient.py grad_pass_through",
        SURROGATE,
        _test_grad_pass_through_round,
        {"surrogate": True},
    ),
    Case(
        "tf test MyIdentity, 3 * dy",
        TF_TESTS + " (testCustomGradientTrivial)",
        SURROGATE,
        _test_identity_times_three,
        pattern="scaled gradient",
    ),
    # numerically stable ops
    Case(
        "softplus, sigmoid gradient",
        "tensorflow/tensorflow tensorflow/python/ops/nn_grad.py (_SoftplusGrad)",
        CORRECT,
        _stable_softplus,
    ),
    Case(
        "logsumexp, max-shifted",
        "tensorflow/tensorflow tensorflow/python/ops/math_ops.py (reduce_logsumexp)",
        CORRECT,
        _logsumexp(),
    ),
    Case(
        "logsumexp, softmax not normalised",
        "tensorflow/tensorflow tensorflow/python/ops/math_ops.py, bug planted",
        BUG,
        _logsumexp(forget_normaliser=True),
        codes=("fd-mismatch",),
    ),
    Case(
        "safe norm, where at 0",
        "https://www.tensorflow.org/api_docs/python/tf/where (the NaN-gradient note)",
        CORRECT,
        _safe_norm(),
        warnings=("nondifferentiable-point",),
    ),  # true: the norm has a cone at 0
    Case(
        "norm without the where, NaN at 0",
        "tensorflow/tensorflow issue 12071 (tf.norm gradient NaN at zero)",
        BUG,
        _safe_norm(with_where=False),
        codes=("nonfinite-gradient",),
        element=("x", (1, 0)),
    ),
    Case(
        "divide_no_nan",
        "tensorflow/tensorflow tensorflow/python/ops/math_grad.py (_DivNoNanGrad)",
        CORRECT,
        _divide_no_nan,
    ),
    Case(
        "clip_by_value, masked gradient",
        "tensorflow/tensorflow tensorflow/python/ops/math_grad.py (_ClipByValueGrad)",
        CORRECT,
        _clip_by_value_gradient,
    ),
    # TensorFlow Probability
    Case(
        "tfp log_cosh (vjp_fwd/vjp_bwd)",
        TFP_GENERIC + " (log_cosh); tensorflow_probability/python/internal/custom_gradient.py",
        CORRECT,
        _tfp_log_cosh,
    ),
    Case(
        "tfp lbeta, broadcast inputs",
        TFP_SPECIAL + " (_lbeta_bwd with fix_gradient_for_broadcasting)",
        CORRECT,
        _tfp_lbeta(),
    ),
    Case(
        "tfp lbeta, broadcast not reduced",
        TFP_SPECIAL + " (_lbeta_bwd), fix_gradient_for_broadcasting left out",
        BUG,
        _tfp_lbeta(reduce_broadcast=False),
        codes=("grad-shape",),
    ),
    Case("tfp log_gamma_difference", TFP_SPECIAL + " (_log_gamma_difference_bwd)", CORRECT, _tfp_log_gamma_difference),
    Case("tfp lambertw, where at z = 0", TFP_SPECIAL + " (_lambert_bwd)", CORRECT, _tfp_lambertw),
    Case("tfp log1mexp", TFP_GENERIC + " (log1mexp), its derivative by hand", CORRECT, _tfp_log1mexp),
    Case(
        "tfp softplus_inverse, 1/expm1(x)",
        TFP_GENERIC + " (softplus_inverse), a wrong derivative planted",
        BUG,
        _tfp_softplus_inverse_wrong,
        codes=("fd-mismatch",),
    ),
    Case("tfp log_add_exp", TFP_GENERIC + " (log_add_exp), its derivative by hand", CORRECT, _tfp_log_add_exp),
    # quantisation and binarised networks
    Case(
        "larq ste_sign, declared",
        LARQ + " (ste_sign, _clipped_gradient)",
        SURROGATE,
        _larq_ste_sign,
        {"surrogate": True},
    ),
    Case(
        "larq ste_sign, undeclared",
        LARQ + " (ste_sign)",
        SURROGATE,
        _larq_ste_sign,
        pattern="straight-through estimator",
    ),
    Case("larq approx_sign, declared", LARQ + " (approx_sign)", SURROGATE, _larq_approx_sign, {"surrogate": True}),
    Case("larq swish_sign, declared", LARQ + " (swish_sign)", SURROGATE, _larq_swish_sign, {"surrogate": True}),
    Case(
        "larq ste_heaviside, undeclared",
        LARQ + " (ste_heaviside); larq/math.py heaviside",
        SURROGATE,
        _larq_ste_heaviside,
        pattern="straight-through estimator",
    ),
    Case(
        "larq DoReFa activations, declared",
        LARQ + " (DoReFa.call: clip, then _k_bit_with_identity_grad)",
        SURROGATE,
        _larq_dorefa,
        {"surrogate": True},
    ),
    Case(
        "larq magnitude-aware sign, declared",
        LARQ + " (MagnitudeAwareSign.call)",
        SURROGATE,
        _larq_magnitude_aware_sign,
        {"surrogate": True},
    ),
    Case(
        "BNN binarize, clipped upstream",
        "carlomarxdk/BNN binary_neuron/utils.py (binarize)",
        SURROGATE,
        _bnn_binarize_clipped_upstream,
        pattern="gradient clipping",
    ),
    Case(
        "qkeras quantized_bits STE, declared",
        "google/qkeras qkeras/quantizers.py (quantized_bits, _round_through; written here with tf.custom_gradient)",
        SURROGATE,
        _qkeras_quantized_bits,
        {"surrogate": True},
    ),
    Case(
        "keras fake_quant min/max, declared",
        KERAS_QUANT,
        SURROGATE,
        _keras_fake_quant(),
        {"surrogate": True, "framework": "keras"},
    ),
    Case(
        "keras fake_quant, min gradient not summed",
        KERAS_QUANT + ", ops.sum left out",
        BUG,
        _keras_fake_quant(reduce_min=False),
        {"surrogate": True, "framework": "keras"},
        codes=("grad-shape",),
    ),
    # None for kernel_scale, which the output depends on: no gradient on purpose (Keras does not train the scale).
    Case(
        "keras int8 Dense matmul_with_inputs_gradient, declared",
        "keras-team/keras keras/src/layers/core/dense.py (_int8_call)",
        SURROGATE,
        _keras_int8_matmul,
        {"framework": "keras", "surrogate": True},
        warnings=("none-gradient",),
    ),
    # gradient reversal
    Case(
        "GradReverse layer, declared",
        "mycal-tucker/fair-baselines models/flip_gradient_tf.py",
        SURROGATE,
        _grl_layer,
        {"surrogate": True},
    ),
    Case(
        "GradReverse layer, undeclared",
        "mycal-tucker/fair-baselines models/flip_gradient_tf.py",
        SURROGATE,
        _grl_layer,
        pattern="gradient reversal",
    ),
    Case(
        "gradient_reverse(x, lamda), declared",
        "takumi0shibata/Adversarial-AES custom_layers/gradient_reversal.py",
        SURROGATE,
        _grl_lambda_default,
        {"surrogate": True},
    ),
    Case(
        "grad_reverse(y, hp_lambda), one gradient",
        GRL_SO + ": hp_lambda an input, one gradient returned",
        BUG,
        _grl_one_gradient_for_two_inputs,
        codes=("grad-count",),
    ),
    Case(
        "gradient_reversal(x, lamb), lamb's gradient unreduced",
        GRL_SO + ": [-dy * lamb, -dy * lamb]",
        BUG,
        _grl_lambda_gradient_unreduced,
        codes=("grad-shape",),
    ),
    Case(
        "scheduled reversal, state updated in grad",
        GRL_SO + ": GradientReversalLayer updating calls and lambda",
        SURROGATE,
        _grl_scheduled,
        {"surrogate": True},
        warnings=("grad-side-effect",),
    ),
    # sparsemax, entmax, Gumbel-softmax
    Case(
        "sparsemax, custom backward",
        "tensorflow/addons tensorflow_addons/activations/sparsemax.py (forward); "
        "deep-spin/entmax entmax/activations.py (SparsemaxFunction.backward)",
        CORRECT,
        _sparsemax(),
    ),
    Case(
        "sparsemax, mean not subtracted",
        "deep-spin/entmax entmax/activations.py (SparsemaxFunction.backward), the v_hat term left out",
        BUG,
        _sparsemax(subtract_mean=False),
        codes=("fd-mismatch",),
    ),
    Case(
        "entmax-1.5, custom backward", "deep-spin/entmax entmax/activations.py (Entmax15Function)", CORRECT, _entmax15
    ),
    Case(
        "straight-through Gumbel-softmax, declared",
        "tensorflow/probability tensorflow_probability/python/distributions/relaxed_onehot_categorical.py; the "
        "straight-through form of Jang et al. 2017",
        SURROGATE,
        _gumbel_straight_through,
        {"surrogate": True},
    ),
    Case(
        "straight-through Gumbel-softmax, undeclared",
        "Jang et al. 2017 (straight-through Gumbel-softmax)",
        SURROGATE,
        _gumbel_straight_through,
        pattern="straight-through estimator",
    ),
    # matrix ops and normalisation
    Case("matmul", "tensorflow/tensorflow tensorflow/python/ops/math_grad.py (_MatMulGrad)", CORRECT, _matmul()),
    Case(
        "matmul, transpose left out",
        "tensorflow/tensorflow tensorflow/python/ops/math_grad.py (_MatMulGrad), bug planted",
        BUG,
        _matmul(transpose_right=False),
        codes=("fd-mismatch",),
    ),
    Case(
        "cholesky by hand",
        "tensorflow/tensorflow tensorflow/python/ops/linalg_grad.py (_CholeskyGrad)",
        CORRECT,
        _cholesky,
    ),
    Case(
        "matrix inverse",
        "tensorflow/tensorflow tensorflow/python/ops/linalg_grad.py (_MatrixInverseGrad)",
        CORRECT,
        _matrix_inverse,
    ),
    Case(
        "log-determinant, transpose left out",
        "tensorflow/tensorflow tensorflow/python/ops/linalg_grad.py (_LogMatrixDeterminantGrad), bug planted",
        BUG,
        _logdet_untransposed,
        codes=("fd-mismatch",),
    ),
    Case(
        "layer norm backward by hand",
        "keras-team/keras keras/src/layers/normalization/layer_normalization.py "
        "(forward); NVIDIA/apex csrc/layer_norm_cuda_kernel.cu (backward)",
        CORRECT,
        _layer_norm(),
    ),
    Case(
        "layer norm, gamma's gradient unreduced",
        "as above, the batch sum of dgamma left out",
        BUG,
        _layer_norm("gamma unreduced"),
        codes=("grad-shape",),
    ),
    Case(
        "layer norm, projection term left out",
        "as above, the mean(dxhat * xhat) term left out",
        BUG,
        _layer_norm("missing mean term"),
        codes=("fd-mismatch",),
    ),
    # several outputs, variables, Keras
    Case(
        "sin and cos, two outputs",
        TF_TESTS + " (testCustomGradientMultipleRaggedTensors: Grad(*grad))",
        CORRECT,
        _sin_and_cos,
    ),
    Case(
        "Keras layer, custom-gradient method with variables",
        "keras-team/keras keras/src/layers/core/dense.py (a custom gradient inside a layer's call); "
        + TF_TESTS
        + " (testCustomGradientWithVariablesEager)",
        CORRECT,
        _keras_layer(),
    ),
    Case(
        "Keras layer, wrong kernel gradient",
        "as above, the kernel gradient summed over the batch first",
        BUG,
        _keras_layer(wrong=True),
        codes=("fd-mismatch",),
    ),
    Case(
        "keras.ops log1pexp, grad(*args, upstream=None)",
        "keras-team/keras keras/src/ops/core.py (custom_gradient docstring)",
        CORRECT,
        _keras_log1pexp(),
        {"framework": "keras"},
    ),
    Case(
        "keras.ops log1pexp, upstream ignored",
        "keras-team/keras keras/src/ops/core.py, `upstream` not multiplied",
        BUG,
        _keras_log1pexp(multiply_upstream=False),
        {"framework": "keras"},
        codes=("grad-nonlinear",),
    ),
    Case(
        "keras Log1PExpLayer, variable through the op",
        "keras-team/keras keras/src/ops/core_test.py (test_custom_gradient with use_variable)",
        CORRECT,
        lambda: (Log1PExpLayer(), (f32([0.5, -2.0]),)),
    ),
    # issue 18's classes
    Case(
        "1 of 20,000 float32 elements dropped",
        "a hand-written gradient's off-by-one slice (issue 18)",
        BUG,
        _one_wrong_element_float32(),
        codes=("fd-mismatch",),
        element=("x", (19_999,)),
    ),
    Case(
        "gather, duplicate indices overwritten",
        "tensorflow/tensorflow tensorflow/python/ops/array_grad.py "
        "(_GatherV2Grad accumulates repeated indices), scatter-update in place of scatter-add",
        BUG,
        _gather_duplicates_overwritten,
        codes=("fd-mismatch",),
        element=("params", (2,)),
    ),
    Case(
        "gelu gradient returned in float64",
        "a float32 op's gradient computed and returned in float64",
        BUG,
        _float64_gradient,
        codes=("grad-dtype",),
    ),
    Case(
        "tanh, Jacobian returned",
        "the Jacobian instead of the vector-Jacobian product",
        BUG,
        _jacobian_instead_of_vjp,
        codes=("grad-shape",),
    ),
    Case(
        "tanh, upstream forgotten",
        "the chain rule's upstream factor missing",
        BUG,
        _forgotten_upstream,
        codes=("grad-nonlinear",),
    ),
    Case("sigmoid, sign error", "y (y - 1) for y (1 - y)", BUG, _sigmoid_sign_error, codes=("fd-mismatch",)),
    Case(
        "tanh(2x), inner factor forgotten",
        "the inner derivative of a composed function missing",
        BUG,
        _forgotten_inner_factor,
        codes=("fd-mismatch",),
    ),
]
