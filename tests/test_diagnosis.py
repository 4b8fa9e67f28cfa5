"""A mismatch leads with what is wrong, in one sentence (issue 30, point 4): which gradient, by what factor or pattern,
where (the element with its input's value), and for an op from a module its file and line; then the evidence."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import tensorflow as tf
from conftest import problem

import gradmagic


def message(op, *args) -> str:
    return problem(gradmagic.check(tf.custom_gradient(op), *args, graph=False), "fd-mismatch").message


def test_a_constant_factor_leads_and_names_the_gradient_and_its_scope():
    def scaled(x):
        return tf.sin(x), lambda u: 1.5 * u * tf.cos(x)

    said = message(scaled, tf.constant([0.3, 1.0, 2.0]))
    assert said.startswith("dx is 1.5 times the finite differences at every element: a constant factor is off. ")
    assert "d output[0] / d x[0] at x[0] = 0.3: custom 1.433, finite differences 0.955" in said


def test_a_sign_flipped_where_an_input_is_negative_says_where():
    def abs_sign(x):  # |x| in the gradient where x belongs: right for x > 0, the opposite sign for x < 0
        return x * x, lambda u: 2 * u * tf.abs(x)

    said = message(abs_sign, tf.constant([-1.0, -2.0, 0.5, 3.0]))
    assert said.startswith("dx has the opposite sign where x < 0: a sign is flipped. ")


def test_one_element_off_is_named_with_its_value_in_both_modes():
    factor = np.ones(4, np.float32)
    factor[2] = 1.1

    def one(x):
        return tf.sin(x), lambda u: u * tf.cos(x) * factor[: x.shape[0]]

    said = message(one, tf.constant([0.3, 1.0, 2.0, 0.5]))
    assert said.startswith("dx is 1.1 times the finite differences (10 % off) at x[2] = 2 alone")

    big = np.ones(5000, np.float32)
    big[1234] = 1.1
    x = tf.constant(np.linspace(-2, 2, 5000, dtype=np.float32))

    def one_of_many(x):
        return tf.sin(x), lambda u: u * tf.cos(x) * big

    said = message(one_of_many, x)
    assert said.startswith(f"dx is 1.1 times the finite differences (10 % off) at x[1234] = {float(x[1234]):.4g} alone")


def test_a_missing_term_says_the_gradient_is_zero_where_it_is_not():
    def product(x, y):
        return x * y, lambda u: (u * y, tf.zeros_like(y))

    said = message(product, tf.constant(2.0), tf.constant(3.0))
    assert said.startswith("dy is zero at y = 3 where the finite differences give 2: a term is missing")


def test_an_op_from_a_module_is_placed_at_its_gradient_functions_file_and_line(tmp_path, monkeypatch):
    (tmp_path / "layer_ops.py").write_text(
        textwrap.dedent(
            """
            import tensorflow as tf

            @tf.custom_gradient
            def scaled_sin(x):
                def grad(upstream):
                    return 1.5 * upstream * tf.cos(x)
                return tf.sin(x), grad
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import layer_ops

    try:
        for x in (tf.constant([0.3, 1.0]), tf.random.stateless_normal([5000], seed=[1, 2])):
            found = problem(gradmagic.check(layer_ops.scaled_sin, x, graph=False), "fd-mismatch")
            assert (found.location.filename, found.location.line) == (str(tmp_path / "layer_ops.py"), 6), found
    finally:
        sys.modules.pop("layer_ops", None)
