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
