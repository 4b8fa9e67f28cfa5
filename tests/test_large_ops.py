"""Big ops on the edit loop: an op whose forward runs thousands of ops is traced on its next check, not its first (the
trace would cost 20 to 50 times its eager run), and a gradient graph of thousands of ops is not drawn; both say why."""

import functools
import time

import numpy as np
import pytest
import tensorflow as tf
from conftest import problem
from report_fixtures import chain

import gradmagic
from gradmagic.checking import linearity
from gradmagic.checking.projection import random_signs
from gradmagic.frameworks import get_adapter
from gradmagic.frameworks.base import Directions, Layout, Signs


def many_ops(x, count: int = 1_200):
    """x, after `count` identity ops: a forward of a thousand small ops or more."""
    for _ in range(count):
        x = tf.identity(x)
    return x


def slow_square():
    def slow(x):
        return many_ops(x) * x, lambda upstream: 2 * x * upstream

    return tf.custom_gradient(slow)


def test_an_op_running_thousands_of_ops_is_traced_on_its_next_check():
    op, x = slow_square(), tf.constant([1.0, 2.0])
    first = gradmagic.check(op, x)
    assert first.verdict == "pass" and first.graph is None
    said = problem(first, "graph-unavailable")
    assert said.severity == "info" and "Not traced on this first check" in said.message
    assert "ran 1,201 ops" in said.message and "come with its next check" in said.message
    second = gradmagic.check(op, x)
    assert second.graph is not None and "graph-unavailable" not in second.codes()


def test_an_op_of_a_few_ops_is_traced_on_its_first_check_however_long_it_takes():
    # The deferral is decided by what the op runs, never by a clock: a slow op of few ops (here a sleep, as a busy
    # machine makes any op) is traced at once, as it is on a quiet machine.
    def sleepy(x):
        tf.py_function(lambda: time.sleep(0.2), [], [])
        return x * x, lambda upstream: 2 * x * upstream

    report = gradmagic.check(tf.custom_gradient(sleepy), tf.constant([1.0, 2.0]))
    assert report.graph is not None and "graph-unavailable" not in report.codes()


def test_a_wrong_gradient_of_a_slow_op_is_still_caught_on_its_first_check():
    def slow_wrong(x):
        return many_ops(x) * x, lambda upstream: 3 * x * upstream

    report = gradmagic.check(slow_wrong, tf.constant([1.0, 2.0]))
    assert "fd-mismatch" in report.codes() and "graph-unavailable" in report.codes()


def test_a_gradient_graph_of_thousands_of_ops_is_not_drawn_and_says_why():
    op, x = functools.partial(chain, length=700), tf.constant(np.array([0.1, 0.2, 0.3], np.float32))
    first = gradmagic.check(op, x)  # 1,400 ops in the forward: traced on the next check
    assert "Not traced on this first check" in problem(first, "graph-unavailable").message
    report = gradmagic.check(op, x)
    assert report.verdict == "pass" and report.graph is None
    said = problem(report, "graph-unavailable").message
    assert "too many to draw in a report (over 2,000)" in said and "in the forward" in said and "backward" in said


def test_a_wrong_element_of_a_small_gradient_is_located_among_a_million():
    # log1pexp at x = -4.7: its gradient (0.009) is among the smallest twentieth; 10 % off, it is found in float64,
    # where TensorFlow runs the op cast up throughout (no float32 rounding of the gradient to allow for).
    values = np.random.default_rng(0).standard_normal(1_000_000).astype(np.float32) * 3
    values[123_457] = -4.7
    bump = np.ones(values.size, np.float32)
    bump[123_457] = 1.1

    def one_wrong(x):
        e = tf.exp(x)
        return tf.math.log(1 + e), lambda upstream: upstream * (1 - 1 / (1 + e)) * bump

    report = gradmagic.check(one_wrong, tf.constant(values))
    assert report.numerics.mode == "projection" and report.numerics.dtype == "float64"
    assert report.codes() == ["fd-mismatch"] and [e.index for e in report.numerics.worst] == [(123_457,)]


@pytest.mark.parametrize("size, variable", [(40, False), (40, True), (70_000, False), (70_000, True)])
def test_directions_formed_inside_the_compiled_call_are_the_dense_ones(size, variable):
    # Projection mode hands TensorFlow its directions as factors (signs, steps, weights) at any size: vectorised at
    # small sizes, one after the other above a few tens of thousands of elements, a loop where the forward reads a
    # variable. Each way must give what the dense directions give, and put the variable back.
    adapter = get_adapter("tensorflow")
    x = tf.constant(np.linspace(-2, 2, size))
    w = tf.Variable([0.5, -1.0, 2.0], dtype=tf.float64)
    used = (w,) if variable else ()

    def forward(x):
        e = tf.exp(x)
        y = tf.math.log(1 + e) * (tf.reduce_sum(w * w) if variable else 1.0)
        return y, lambda upstream, variables=None: (upstream, [tf.zeros(3, tf.float64)]) if variable else upstream

    target = adapter.resolve(tf.custom_gradient(forward))
    layout = Layout((x,), {}, (x,), (0,), used)
    elements = size + 3 * variable
    rng = np.random.default_rng(1)
    upstream, gradient = rng.standard_normal(size), rng.standard_normal(elements)
    steps = rng.uniform(1e-5, 1e-4, elements)
    per_element = rng.uniform(0.5, 1.5, (2, elements)).astype(np.float32)
    for weights, rows in ((np.array([[1.0], [1.0], [2.0]], np.float32), [0, 1, 0]), (per_element, [2, 1])):
        signs = Signs.of(random_signs(3, 3, elements))
        directions = Directions(signs, steps, np.array(rows, np.int32), weights, gradient)
        dense = directions.dense()
        along = adapter.evaluate(target, layout, directions, upstream, signs=(1.0, -1.0))
        expected = adapter.evaluate(target, layout, dense, upstream, signs=(1.0, -1.0))
        np.testing.assert_allclose(along[:2], expected, rtol=1e-12)
        np.testing.assert_allclose(along[2], dense @ gradient, rtol=1e-12)
    np.testing.assert_array_equal(w.numpy(), [0.5, -1.0, 2.0])


MILLIONS = 1_100_000  # the linearity probes then take one upstream at a time (linearity.BATCHED)


@pytest.mark.parametrize(
    "name, gradient, expected",
    [
        ("linear", lambda upstream, x: upstream * tf.cos(x), "linear"),
        ("squared upstream", lambda upstream, x: 2 * upstream * upstream * tf.cos(x), "nonlinear"),
        ("clipped", lambda upstream, x: tf.clip_by_value(upstream, -0.1, 0.1) * tf.cos(x), "bounded"),
    ],
)
def test_linearity_in_the_upstream_is_judged_at_millions_of_elements(name, gradient, expected):
    assert (linearity.ROWS - 1) * MILLIONS > linearity.BATCHED
    x = tf.constant(np.random.default_rng(0).uniform(-3, 3, MILLIONS).astype(np.float32))

    def op(x):
        return tf.sin(x), lambda upstream: gradient(upstream, x)

    report = gradmagic.check(tf.custom_gradient(op), x, graph=False)
    if expected == "linear":
        assert report.verdict == "pass" and report.numerics.mode == "projection", report.codes()
    else:
        found = problem(report, "grad-nonlinear")
        assert found.severity == "error"
        assert ("This looks like gradient clipping" in found.message) == (expected == "bounded"), found.message


def relu_at(size: int, within_a_step: int, wrong: int | None = None):
    """A ReLU at `size` elements, one of them (`within_a_step`) closer to zero than its finite-difference step, and
    its gradient 10 % off at `wrong`."""
    values = np.random.default_rng(5).standard_normal(size).astype(np.float32)
    values[within_a_step] = 1e-7
    factor = np.ones(size, np.float32)
    if wrong is not None:
        factor[wrong] = 1.1

    def relu(x):
        return tf.nn.relu(x), lambda upstream: upstream * tf.cast(x > 0, x.dtype) * tf.cast(factor, x.dtype)

    return tf.custom_gradient(relu), tf.constant(values)


def test_a_relu_with_an_element_at_its_kink_passes_among_hundreds_of_thousands():
    # Among a few hundred thousand elements one is likely within a step of zero, where central differences straddle
    # the kink: its block's mismatch is the kink's own (the two sides' mean misses the centre by as much), no wrong
    # gradient, and no warning either.
    op, x = relu_at(200_000, within_a_step=77_777)
    report = gradmagic.check(op, x, graph=False)
    assert report.verdict == "pass", [(p.code, p.message) for p in report.problems]


def test_a_wrong_element_of_a_relu_beside_its_kink_is_located_among_hundreds_of_thousands():
    # The kink raises the measured noise of every random direction, so blocks of elements are probed; the failing
    # block is too large to measure element by element, and is narrowed down by contracted measurements instead.
    op, x = relu_at(200_000, within_a_step=77_777, wrong=123_456)
    report = gradmagic.check(op, x, graph=False)
    assert report.codes() == ["fd-mismatch"] and [e.index for e in report.numerics.worst] == [(123_456,)]
    assert report.numerics.worst[0].custom == pytest.approx(1.1 * report.numerics.worst[0].numerical, rel=1e-3)


def test_a_wrong_element_of_a_float32_only_op_is_narrowed_down_among_a_hundred_thousand():
    # The op mixes in a float32 constant (TensorFlow refuses float64 inputs for it), so blocks of elements are probed
    # with each output compared in float64; the failing block is too large to measure element by element within the
    # budget of evaluated outputs, and is narrowed down by group testing while the budget lasts.
    size, element = 100_000, 4_321
    values = np.random.default_rng(0).standard_normal(size).astype(np.float32)
    factor = np.ones(size, np.float32)
    factor[element] = 3.0

    def float32_only(x):
        e = tf.exp(x)
        return tf.math.log(1.0 + e), lambda upstream: upstream * (1.0 - 1.0 / (1.0 + e)) * tf.constant(factor)

    report = gradmagic.check(tf.custom_gradient(float32_only), tf.constant(values), graph=False)
    assert report.numerics.dtype == "float32"
    assert report.codes() == ["fd-mismatch"] and [e.index for e in report.numerics.worst] == [(element,)]


def test_a_slow_op_behind_functools_partial_is_traced_on_its_next_check_too():
    # A partial (or a callable object) was wrapped anew on every check, so what the first check kept for the next
    # (the trace put off, the compiled functions) was never found again: every check said "not traced".
    def slow_power(x, exponent):
        return many_ops(x) ** exponent, lambda upstream: exponent * x ** (exponent - 1) * upstream

    op, x = functools.partial(slow_power, exponent=3.0), tf.constant([1.0, 2.0])
    first = gradmagic.check(op, x)
    assert first.graph is None and "Not traced on this first check" in problem(first, "graph-unavailable").message
    second = gradmagic.check(op, x)
    assert second.verdict == "pass" and second.graph is not None and "graph-unavailable" not in second.codes()
