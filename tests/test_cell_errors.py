"""Errors point at the user's own cell lines (the magic line is line 1), and a failing cell loses nothing."""

import re

import pytest
from IPython.core.error import UsageError

from gradmagic.op import info_of

PREVIOUS = """%%custom_gradient
def op(x):
    return x * 3, lambda dy: dy * 3
"""

GRAD_USING_A_MISSING_NAME = """%%custom_gradient
def op(x):
    def grad(dy):
        return dy * missing_name
    return x * 2, grad
"""


@pytest.fixture
def previous_op(nb):
    """An op and a variable defined before the failing cell, which must survive it."""
    nb.ok(PREVIOUS)
    nb.ok("weights = tf.Variable([1., 2.])")
    return nb.ns["op"], nb.ns["weights"]


def assert_unchanged(nb, previous):
    op, weights = previous
    assert nb.ns["op"] is op and nb.ns["weights"] is weights
    nb.ok("assert float(tf.reduce_sum(op(tf.constant([1., 1.])))) == 6.0")  # the kernel still works


def cell_frame(run, nb, line: int) -> bool:
    """True when the output shows `Cell In[N], line L` for the cell just run."""
    return f"Cell In[{nb.last_cell_number}], line {line}" in run.shown


def test_syntax_error_in_definition_form_names_the_cell_line(nb, previous_op):
    run = nb.fails(
        """%%custom_gradient
def op(x):
    def grad(dy)
        return dy
    return x, grad
""",
        UsageError,
    )
    assert f"SyntaxError in Cell In[{nb.last_cell_number}], line 3: expected ':'" in run.stderr
    assert "    def grad(dy)\n                ^" in run.stderr
    assert_unchanged(nb, previous_op)


def test_syntax_error_in_body_form_names_the_cell_line(nb, previous_op):
    run = nb.fails("%%custom_gradient op(x)\ny = x *\nreturn y, None", UsageError)
    assert f"SyntaxError in Cell In[{nb.last_cell_number}], line 2" in run.stderr
    assert_unchanged(nb, previous_op)


def test_syntax_error_in_the_signature_points_at_line_one(nb, previous_op):
    run = nb.fails("%%custom_gradient op(x, x)\nreturn x, None", UsageError)
    assert f"Cell In[{nb.last_cell_number}], line 1: duplicate argument 'x'" in run.stderr
    assert "    %%custom_gradient op(x, x)" in run.stderr
    run = nb.fails("%%custom_gradient op(x,, y)\nreturn x, None", UsageError)
    assert f"Cell In[{nb.last_cell_number}], line 1: invalid signature on the magic line" in run.stderr
    assert "    %%custom_gradient op(x,, y)\n" + " " * (4 + len("%%custom_gradient op(x,")) + "^" in run.stderr
    assert_unchanged(nb, previous_op)


def test_exception_in_a_helper_statement_rolls_the_whole_cell_back(nb, previous_op):
    run = nb.fails(
        """%%custom_gradient
weights = "rebound by the failing cell"
NEW_NAME = 1
1 / 0
def op(x):
    return x, lambda dy: dy
""",
        ZeroDivisionError,
    )
    assert cell_frame(run, nb, 4) and "----> 4 1 / 0" in run.shown
    assert "`op` was not (re)defined" in run.shown
    assert "NEW_NAME" not in nb.ns
    assert_unchanged(nb, previous_op)


def test_forward_failing_on_the_example_inputs_is_reported_with_its_cell_line(nb, previous_op):
    """The cell defines the op; its check at the example inputs reports where the forward fails."""
    run = nb.ok(
        """%%custom_gradient --check x=tf.constant([1., 2.])
def op(x):
    e = tf.exp(x)
    y = tf.math.log(1 + e) + undefined_name
    return y, lambda dy: dy
"""
    )
    assert f"forward-error (Cell In[{nb.last_cell_number}], line 4)" in run.stdout
    assert "NameError: name 'undefined_name' is not defined." in run.stdout
    assert nb.ns["op"] is not previous_op[0] and nb.ns["weights"] is previous_op[1]


def test_exception_in_grad_names_the_line_eagerly(nb):
    nb.ok(GRAD_USING_A_MISSING_NAME)
    defining_cell = nb.last_cell_number
    run = nb.fails(
        """x = tf.constant(1.)
with tf.GradientTape() as tape:
    tape.watch(x)
    y = op(x)
tape.gradient(y, x)
""",
        NameError,
    )
    assert f"Cell In[{defining_cell}], line 4, in grad" in run.shown
    assert "----> 4         return dy * missing_name" in run.shown


def test_exception_in_grad_inside_tf_function_names_the_line(nb):
    nb.ok(GRAD_USING_A_MISSING_NAME)
    defining_cell = nb.last_cell_number
    filename = info_of(nb.ns["op"]).filename
    run = nb.fails(
        """@tf.function
def take(x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = op(x)
    return tape.gradient(y, x)
take(tf.constant(1.))
""",
        NameError,
    )
    assert f"Cell In[{defining_cell}], line 4, in grad" in run.shown or f'File "{filename}", line 4' in run.shown
    assert "return dy * missing_name" in run.shown


def test_runtime_error_inside_tf_function_points_at_the_cell_line(nb):
    """A TensorFlow op failing when the graph runs: TF's message names the line that created it."""
    nb.ok(
        """%%custom_gradient
def op(x):
    checked = tf.debugging.assert_positive(x, message="x must be positive")
    with tf.control_dependencies([checked]):
        y = tf.math.log(x)
    return y, lambda dy: dy / x
"""
    )
    filename = info_of(nb.ns["op"]).filename
    run = nb.fails("tf.function(op)(tf.constant([1., -1.]))")
    assert "x must be positive" in run.shown
    assert re.search(rf'File "{re.escape(filename)}", line 3, in op', run.shown), run.shown


def test_cell_rebinding_the_op_name_is_refused(nb, previous_op):
    run = nb.fails("%%custom_gradient\ndef op(x):\n    return x, None\nop = 42", UsageError)
    assert "`op` is a int, not what the cell defines: a later statement in the cell rebinds that name" in run.stderr
    assert_unchanged(nb, previous_op)
