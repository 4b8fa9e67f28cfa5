"""Bad input, class by class: each gets a message naming its cause and where it came from (the cell line, the magic
line, `%config`), nothing of the user's is blamed on gradmagic, no option or input turns a wrong gradient into a pass,
and nothing a check runs is left behind in the notebook."""

import pytest
from conftest import problem

# -- what the gradient function returns ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "returned, what",
    [("(g for g in [dy * 2])", "returns a generator, not the gradients"), ("object()", "is an object, not a tensor")],
)
def test_a_gradient_that_is_no_tensor_is_named_at_its_line_never_blamed_on_gradmagic(nb, returned, what):
    shown = nb.ok(
        f"%%custom_gradient --check x=tf.constant([1., 2.])\ndef op(x):\n    def grad(dy):\n        return {returned}\n"
        "    return x * 2, grad\n"
    ).shown
    report = nb.ns["_"]
    found = problem(report, "grad-type")
    assert found.severity == "error" and what in found.message and found.location.line == 3, found
    assert report.verdict == "fail" and "gradmagic's own code" not in shown and "ValueError" not in shown
    assert callable(nb.ns["op"])  # bound, to be inspected


# -- example inputs ------------------------------------------------------------------------------------------------


def test_a_gradient_function_never_called_for_integer_inputs_is_not_failed(nb):
    nb.ok(
        "%%custom_gradient --check x=tf.constant([1, 2])\ndef squared(x):\n    def grad(dy):\n"
        "        return dy * 2 * x\n    return tf.cast(x, tf.float32) ** 2, grad\n"
    )
    report = nb.ns["_"]
    assert report.verdict == "unchecked" and report.ok, report
    found = problem(report, "grad-error")
    assert found.severity == "info" and "TensorFlow never calls it for these inputs" in found.message
    assert found.location.line == 4
    # With a floating input beside it, the gradient is asked for: its failure is the op's.
    nb.ok(
        "%%custom_gradient --check n=tf.constant([1, 2]) --check y=tf.constant([1., 2.])\ndef mixed(n, y):\n"
        "    def grad(dy):\n        return dy * n, dy\n    return tf.cast(n, tf.float32) * y, grad\n"
    )
    assert problem(nb.ns["_"], "grad-error").severity == "error"
