"""The seed documents' examples, written with %%custom_gradient and run with real TensorFlow.

Each gradient is taken through `tf.GradientTape`, eagerly and inside
`tf.function`, and compared with the known derivative.
"""

import numpy as np
import pytest

LOG1PEXP_DEFINITION = """%%custom_gradient
def log1pexp(x):
    e = tf.exp(x)
    def grad(upstream):
        return upstream * (1 - 1 / (1 + e))
    return tf.math.log(1 + e), grad
"""

LOG1PEXP_BODY = """%%custom_gradient log1pexp(x)
e = tf.exp(x)
def grad(upstream):
    return upstream * (1 - 1 / (1 + e))
return tf.math.log(1 + e), grad
"""

# The helper `gradients(op, *inputs)` taken in the notebook, eagerly or in tf.function.
GRADIENT_HELPERS = """
def gradients(op, *inputs):
    inputs = [tf.convert_to_tensor(x) for x in inputs]
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        outputs = op(*inputs)
        total = tf.add_n([tf.reduce_sum(y) for y in tf.nest.flatten(outputs)])
    return tape.gradient(total, inputs)

gradients_in_function = tf.function(gradients)
"""


@pytest.fixture(params=["eager", "tf.function"])
def take_gradients(request, nb):
    nb.ok(GRADIENT_HELPERS)
    name = "gradients" if request.param == "eager" else "gradients_in_function"

    def take(op_name: str, *input_exprs: str) -> list[np.ndarray]:
        nb.ok(f"result = [g.numpy() for g in {name}({op_name}, {', '.join(input_exprs)})]")
        return nb.ns["result"]

    return take


@pytest.mark.parametrize("cell", [LOG1PEXP_DEFINITION, LOG1PEXP_BODY], ids=["definition form", "body form"])
def test_log1pexp_gradient_is_one_at_100(nb, take_gradients, cell):
    nb.ok("def naive(x):\n    return tf.math.log(1 + tf.exp(x))")
    assert np.isnan(take_gradients("naive", "tf.constant(100.)")[0])

    nb.ok(cell)

    (gradient,) = take_gradients("log1pexp", "tf.constant(100.)")
    assert gradient == pytest.approx(1.0)
    (gradients,) = take_gradients("log1pexp", "tf.constant([-5., 0., 3.])")
    np.testing.assert_allclose(gradients, 1 / (1 + np.exp(-np.array([-5.0, 0.0, 3.0]))), rtol=1e-5)


def test_element_wise_square(nb, take_gradients):
    nb.ok(
        """%%custom_gradient --check x=tf.constant([1.0, 2.0, 3.0])
def my_custom_op(x):
    y = tf.square(x)
    def grad(dy):
        return dy * 2 * x
    return y, grad
"""
    )
    (gradient,) = take_gradients("my_custom_op", "tf.constant([1.0, 2.0, 3.0])")
    np.testing.assert_allclose(gradient, [2.0, 4.0, 6.0])


def test_two_inputs_two_outputs_written_correctly(nb, take_gradients):
    nb.ok(
        """%%custom_gradient --check x=tf.constant(2.0) --check y=tf.constant(3.0)
def complex_op(x, y):
    z = tf.multiply(x, y) + tf.sin(x)
    w = tf.square(y)
    def grad(dy_dz, dy_dw):
        grad_x = dy_dz * (y + tf.cos(x))
        grad_y = dy_dz * x + dy_dw * 2 * y
        return grad_x, grad_y
    return (z, w), grad
"""
    )
    grad_x, grad_y = take_gradients("complex_op", "tf.constant(2.0)", "tf.constant(3.0)")
    assert grad_x == pytest.approx(3.0 + np.cos(2.0))
    assert grad_y == pytest.approx(2.0 + 2 * 3.0)


def test_non_differentiable_point_rewritten_with_where(nb, take_gradients):
    nb.ok(
        """%%custom_gradient --check x=tf.constant([-1.0, 0.0, 1.0])
def non_diff_op(x):
    y = tf.where(x > 0, x * 2, x)
    def grad(dy):
        return tf.where(x > 0, dy * 2, dy)
    return y, grad
"""
    )
    (gradient,) = take_gradients("non_diff_op", "tf.constant([-1.0, 0.0, 1.0])")
    np.testing.assert_allclose(gradient, [1.0, 1.0, 2.0])


@pytest.mark.parametrize("mode", ["eager", "tf.function"])
def test_op_reading_a_variable_gets_variable_gradients(nb, mode):
    nb.ok("w = tf.Variable([1.0, 2.0, 3.0])")
    nb.ok(
        """%%custom_gradient --check x=tf.constant([4.0, 5.0, 6.0])
def scale_by_w(x):
    y = x * w
    def grad(dy, variables=None):
        return dy * w, [dy * x]
    return y, grad
"""
    )
    nb.ok(
        f"""
def both_gradients(x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(scale_by_w(x))
    return tape.gradient(y, [x, w])
take = {"tf.function(both_gradients)" if mode == "tf.function" else "both_gradients"}
grad_x, grad_w = [g.numpy() for g in take(tf.constant([4.0, 5.0, 6.0]))]
"""
    )
    np.testing.assert_allclose(nb.ns["grad_x"], [1.0, 2.0, 3.0])
    np.testing.assert_allclose(nb.ns["grad_w"], [4.0, 5.0, 6.0])


def test_op_works_with_xla(nb):
    nb.ok(LOG1PEXP_DEFINITION)
    nb.ok(GRADIENT_HELPERS)
    nb.ok("compiled = tf.function(gradients, jit_compile=True)\n(g,) = compiled(log1pexp, tf.constant(100.))")
    assert float(nb.ns["g"]) == pytest.approx(1.0)


def test_second_order_through_nested_tapes(nb):
    nb.ok(
        """%%custom_gradient
def cube(x):
    def grad(dy):
        return dy * 3 * x * x
    return x * x * x, grad
"""
    )
    nb.ok(
        """x = tf.constant(2.0)
with tf.GradientTape() as outer:
    outer.watch(x)
    with tf.GradientTape() as inner:
        inner.watch(x)
        y = cube(x)
    dy = inner.gradient(y, x)
d2y = outer.gradient(dy, x)
"""
    )
    assert float(nb.ns["dy"]) == pytest.approx(12.0)
    assert float(nb.ns["d2y"]) == pytest.approx(12.0)
