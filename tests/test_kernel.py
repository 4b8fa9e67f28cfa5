"""In a real Jupyter kernel: Ctrl-C (an interrupt request) stops a hanging check and the kernel stays usable."""

from conftest import interrupted, run


def test_ctrl_c_interrupts_a_hanging_check_and_the_kernel_stays_usable(kernel):
    manager, client = kernel
    setup = run(
        client,
        """
%load_ext gradmagic
import time
import tensorflow as tf
weights = tf.Variable([1.0, 2.0], name="weights")

def hangs_when_traced(x):
    if not tf.executing_eagerly():  # fine eagerly; hangs when the check compiles it
        time.sleep(3600)
    def grad(dy, variables=None):
        return dy * weights, [dy * x]
    return x * weights, grad
op = tf.custom_gradient(hangs_when_traced)
""",
    )
    assert setup["status"] == "ok", setup["shown"]

    interrupted(manager, client, "%gradcheck op x=tf.constant([3.0, 4.0])", after=8)  # into the finite differences
    after = run(client, "print(weights.numpy().tolist(), 40 + 2)")
    assert after["status"] == "ok" and "[1.0, 2.0] 42" in after["shown"]
    again = run(
        client,
        """
def fine(x):
    def grad(dy, variables=None):
        return dy * weights, [dy * x]
    return x * weights, grad
%gradcheck fine x=tf.constant([3.0, 4.0])
""",
    )
    assert again["status"] == "ok" and "passes" in again["shown"], again["shown"]


def test_a_cell_run_again_unchanged_reuses_its_code_and_a_changed_cell_does_not(kernel):
    """TensorFlow keeps every distinct Python stack it traces ops from, for good: the same code adds nothing."""
    _, client = kernel
    cell = "%%custom_gradient --no-check\ndef twice(x):\n    return 2 * x, lambda dy: {} * dy\n"
    code = "print(id(twice._gradmagic_function.__code__))"
    assert run(client, "%load_ext gradmagic\nimport tensorflow as tf")["status"] == "ok"
    codes = []
    for factor in ("2", "2", "2.0"):
        assert run(client, cell.format(factor))["status"] == "ok"
        codes.append(run(client, code)["shown"].strip())
    assert codes[0] == codes[1] != codes[2]


SCALED = """%%custom_gradient --check x=tf.constant([-1., 0., 2.])
def scaled(x):
    def grad(dy):
        return dy * SCALE * FACTORS[0]
    return x * SCALE * FACTORS[0], grad
"""


def test_a_cell_run_again_unchanged_keeps_its_op_until_what_it_reads_changes(kernel):
    """Kept, the op keeps its traces (a trace bakes in the Python values it read): only while every global the
    function and its gradient read has the same value (numbers and tuples by value, modules and tensors by identity).
    In a kernel, as ipykernel names a cell's code by its text: an unchanged cell compiles to the same file name."""
    _, client = kernel

    def ok(code: str) -> str:
        reply = run(client, code)
        assert reply["status"] == "ok", reply["shown"]
        return reply["shown"]

    def op_id(cell: str = SCALED) -> str:
        shown = ok(cell)
        assert "scaled(x) passes" in shown, shown
        return ok("print(id(scaled))").strip()

    def value() -> float:
        return float(ok("print(float(scaled(tf.constant([1.0]))[0]))").strip())

    ok("%load_ext gradmagic\nimport tensorflow as tf\nSCALE = 2.0\nFACTORS = (1.0,)")
    op = op_id()
    assert op_id() == op
    ok("SCALE = 2.0")  # a new float of the same value
    assert op_id() == op
    ok("SCALE = 3.0")
    assert op_id() != op and value() == 3.0
    op = op_id()
    ok("FACTORS = [1.0]")  # a list is read by value, as it is now
    assert op_id() != op
    op = op_id()
    assert op_id() == op
    ok("FACTORS[0] = 5.0")  # changed in place
    assert op_id() != op and value() == 15.0
    ok("FACTORS = (tf.constant(1.0),)")
    op = op_id()
    assert op_id() == op  # the same tensor
    ok("FACTORS = (tf.constant(1.0),)")
    assert op_id() != op  # another tensor, even of the same value
    op = op_id()
    assert op_id(SCALED.replace("dy * SCALE", "dy * 1 * SCALE")) != op  # an edited cell
