"""Custom-gradient code as people write it, pasted into `%%custom_gradient` (issue 31), in a real IPython shell.

The cells are the shapes public code has: the examples of `tf.custom_gradient`'s own docstring (log1pexp with its
demo tape, `clip_gradients` with `tf.clip_by_norm`), the gradient reversal layer of domain-adversarial training
(Ganin and Lempitsky, 2015: a `@tf.custom_gradient` op returning `-dy`, wrapped in a Keras layer whose `call` applies
it, as in the many public DANN implementations), a straight-through quantiser with a bit count, a dense op with
closed-over variables, `keras.ops.custom_gradient`'s docstring example, and a `tf.RegisterGradient` cell.
"""

import tensorflow as tf
from conftest import problem
from IPython.core.error import UsageError

from gradmagic.frameworks.cache import function_of
from gradmagic.op import info_of

LOG1PEXP_WITH_DEMO = """%%custom_gradient --check x=tf.constant([1.0, 100.0])
@tf.custom_gradient
def log1pexp(x):
    e = tf.exp(x)
    def grad(upstream):
        return upstream * (1 - 1 / (1 + e))
    return tf.math.log(1 + e), grad

x = tf.constant(100.)
with tf.GradientTape() as tape:
    tape.watch(x)
    y = log1pexp(x)
demo = tape.gradient(y, x)
print("demo:", float(demo))
"""


def said(run) -> str:
    """What a cell showed, its wrapped lines joined: a sentence of the report reads as one."""
    return " ".join(run.shown.split())


REVERSAL = """@tf.custom_gradient
def grad_reverse(x):
    y = tf.identity(x)
    def custom_grad(dy):
        return -dy
    return y, custom_grad
"""


def test_a_pasted_decorated_op_with_its_demo_is_bound_as_written_and_the_demo_uses_it(nb):
    run = nb.ok(LOG1PEXP_WITH_DEMO)
    assert "demo: 1.0" in said(run), run.stdout  # the demo ran after the op was bound, with the op
    assert "passes" in said(run) and "cell-definition" in said(run), run.stdout
    assert "`@tf.custom_gradient`, cell line 2): bound as written, not decorated again" in said(run)
    assert info_of(nb.ns["log1pexp"]).example_inputs  # %gradcheck finds its --check inputs
    again = nb.ok("%gradcheck log1pexp")
    assert "passes" in said(again), again.stdout


def test_tf_function_over_tf_custom_gradient_stays_compiled_and_is_checked(nb):
    run = nb.ok("%%custom_gradient --check x=tf.constant([1.0, -2.0])\n@tf.function\n" + REVERSAL)
    assert hasattr(nb.ns["grad_reverse"], "python_function")
    assert "fd-mismatch" in said(run) and "gradient reversal" in said(run), run.stdout
    assert "(`@tf.function`, `@tf.custom_gradient`, cell lines 2, 3): bound as written" in said(run)
    # Checked again once the tf.function has traced (AutoGraph then wraps the op's function): still the cell's line.
    again = nb.ok("%gradcheck grad_reverse")
    assert "autograph" not in said(again) and "Cell In[" in said(again), again.stdout


def test_the_docstrings_clip_gradients_under_jit_compile(nb):
    run = nb.ok(
        "%%custom_gradient --check y=tf.constant([3.0, -4.0])\n"
        "@tf.function(jit_compile=True)\n"
        "def clip_gradients(y):\n"
        "    def backward(dy):\n"
        "        return tf.clip_by_norm(dy, 0.5)\n"
        "    return y, backward\n"
    )
    assert "grad-nonlinear" in said(run) and "gradient clipping" in said(run), run.stdout


def test_a_function_that_calls_an_op_is_checked_as_the_composite(nb):
    nb.ok("%%custom_gradient\n" + REVERSAL)
    run = nb.ok(
        "%%custom_gradient --check x=tf.constant([1.0, -2.0, 3.0])\ndef flipped(x):\n    return grad_reverse(x) * 2.0\n"
    )
    assert "return-structure" not in said(run) and "composite" in said(run), run.stdout
    assert "calls the custom-gradient op `grad_reverse`, so it is bound as written" in said(run)
    assert nb.ns["flipped"](tf.constant([1.0])).numpy().tolist() == [2.0]  # the plain function, not decorated


def test_a_keras_layer_class_is_checked_through_an_instance_and_by_gradcheck(nb):
    nb.ok("%%custom_gradient\n" + REVERSAL)
    layer_class = (
        "class GradientReversal(tf.keras.layers.Layer):\n"
        "    def __init__(self, scale=1.0, **kwargs):\n"
        "        super().__init__(**kwargs)\n"
        "        self.scale = scale\n"
        "    def call(self, x):\n"
        "        return grad_reverse(x) * self.scale\n"
    )
    run = nb.ok("%%custom_gradient --check x=tf.constant([[1.0, -2.0]])\n" + layer_class)
    assert "GradientReversal(x) fails" in said(run), run.stdout  # the input named as `call` names it
    assert "checked through `GradientReversal()`, its `call` taking the --check inputs" in said(run)
    assert isinstance(nb.ns["GradientReversal"], type)
    nb.ok("layer = GradientReversal(scale=2.0)")
    checked = nb.ok("%gradcheck layer x=tf.constant([[1.0, -2.0]])")
    assert "GradientReversal(x) fails" in said(checked) and "composite" in said(checked), checked.stdout


def test_a_class_that_needs_arguments_says_how_to_check_it(nb):
    nb.ok("%%custom_gradient\n" + REVERSAL)
    run = nb.fails(
        "%%custom_gradient --check x=tf.constant([1.0])\n"
        "class Scaled(tf.keras.layers.Layer):\n"
        "    def __init__(self, scale, **kwargs):\n"
        "        super().__init__(**kwargs)\n"
        "        self.scale = scale\n"
        "    def call(self, x):\n"
        "        return grad_reverse(x) * self.scale\n",
        UsageError,
    )
    assert "`Scaled()` failed" in said(run) and "%gradcheck layer x=EXPR" in said(run), run.stderr
    assert "Scaled" not in nb.ns


def test_a_python_int_argument_reaches_the_forward_as_a_python_int(nb):
    quantiser = (
        "def quantize(x, bits):\n"
        "    scale = 2.0 ** bits\n"
        "    def grad(u):\n"
        "        return u, None\n"
        "    return tf.round(x * scale) / scale, grad\n"
    )
    run = nb.ok("%%custom_gradient --check x=tf.constant([0.3, -1.0]) --check bits=8 --surrogate\n" + quantiser)
    # Eagerly the forward gets 8, as a plain call passes it (no "Cannot convert 2.0 to EagerTensor of dtype int32");
    # inside tf.function TensorFlow makes it a tensor, and the report says that and the fix.
    assert "forward-error" not in said(run) and "bits=8 (int32 scalar, 8)" in said(run), run.stdout
    assert "graph-mismatch" in said(run) and "`bits` (the Python int 8) reached the op as a tensor" in said(run)
    assert "make the parameter keyword-only" in said(run)
    fixed = nb.ok(
        "%%custom_gradient --check x=tf.constant([0.3, -1.0]) --check bits=8 --surrogate\n"
        + quantiser.replace("(x, bits)", "(x, *, bits)").replace("return u, None", "return u")
    )
    assert "graph-mismatch" not in said(fixed) and "bits=8 (Python int scalar, 8)" in said(fixed), fixed.stdout


def test_closed_over_variables_are_named_as_the_notebook_names_them(nb):
    nb.ok("w = tf.Variable([0.5, -1.5])\nb = tf.Variable([0.1, 0.2])")
    run = nb.ok(
        "%%custom_gradient --check x=tf.constant([0.3, -1.0])\n"
        "def affine(x):\n"
        "    def grad(u, variables=None):\n"
        "        return u * w, [u * x, u]\n"
        "    return w * x + b, grad\n"
    )
    assert "variable w float32[2]" in said(run) and "variable-gradient db float32[2]" in said(run), run.stdout
    assert "Variable#" not in said(run)


def test_the_cells_annotations_are_its_own(nb):
    run = nb.ok(
        "%%custom_gradient\ndef sincos(x: tf.Tensor) -> tuple:\n    return tf.sin(x), lambda u: u * tf.cos(x)\n"
    )
    assert "'tf.Tensor'" not in said(run) and function_of(nb.ns["sincos"]).__annotations__["x"] is tf.Tensor


def test_an_integer_only_op_names_its_dead_gradient(nb):
    run = nb.ok(
        "%%custom_gradient --check x=tf.constant([[0.3, -1.0, 2.0]])\n"
        "def top(x):\n"
        "    return tf.argmax(x, axis=-1), lambda u: tf.zeros_like(x)\n"
    )
    assert "not checked" in said(run) and "dead-gradient" in said(run), run.stdout
    assert "its gradient function is never called there" in said(run)


def test_keras_ops_custom_gradient_written_in_the_cell_makes_a_keras_op(nb):
    run = nb.ok("import keras\nfrom keras import ops\n")
    run = nb.ok(
        "%%custom_gradient --check x=tf.constant([1.0, 100.0])\n"
        "@ops.custom_gradient\n"
        "def log1pexp(x):\n"
        "    e = ops.exp(x)\n"
        "    def grad(*args, upstream=None):\n"
        "        if upstream is None:\n"
        "            (upstream,) = args\n"
        "        return ops.multiply(upstream, 1.0 - 1.0 / ops.add(1, e))\n"
        "    return ops.log(1 + e), grad\n"
    )
    assert info_of(nb.ns["log1pexp"]).framework == "keras", run.stdout
    assert "passes" in said(run), run.stdout


def test_demo_lines_that_fail_keep_the_previous_op(nb):
    nb.ok("%%custom_gradient\n" + REVERSAL)
    previous = nb.ns["grad_reverse"]
    run = nb.fails("%%custom_gradient\n" + REVERSAL + "grad_reverse(undefined_name)\n", NameError)
    assert "lines after `grad_reverse` failed" in run.shown and nb.ns["grad_reverse"] is previous


def test_a_registered_gradient_is_not_taken_for_an_op(nb):
    run = nb.fails(
        '%%custom_gradient\n@tf.RegisterGradient("ClipGrad")\ndef _clip_grad(unused_op, grad):\n'
        "    return tf.clip_by_value(grad, -0.1, 0.1)\n",
        UsageError,
    )
    assert "is a registered gradient" in said(run) and "not a custom-gradient op" in said(run), run.stderr
    assert "Run it under %%register_gradient" in said(run), run.stderr


def test_a_cell_with_a_helper_and_an_op_picks_the_op(nb):
    run = nb.ok(
        "%%custom_gradient --check x=tf.constant([1.0, 2.0])\n"
        "def helper(x):\n    return 2 * x\n\n"
        "def doubled(x):\n    return helper(x), lambda dy: 2 * dy\n"
    )
    assert "doubled(x) passes" in said(run) and info_of(nb.ns["helper"]) is None, run.stdout


def test_two_ops_in_a_cell_are_listed_with_the_way_to_pick_one(nb):
    run = nb.fails("%%custom_gradient\n" + REVERSAL + "\n" + REVERSAL.replace("grad_reverse", "other"), UsageError)
    assert "2 custom-gradient ops (grad_reverse, other)" in said(run) and "%%custom_gradient other" in said(run)


def test_a_pasted_cell_in_a_real_kernel(kernel):
    """The same in a Jupyter kernel: a decorated op under `@tf.function` with its layer class and demo lines."""
    from conftest import run

    _, client = kernel
    assert run(client, "%load_ext gradmagic\nimport tensorflow as tf")["status"] == "ok"
    pasted = run(
        client,
        "%%custom_gradient --check x=tf.constant([1., -2.])\n@tf.function\n" + REVERSAL + "\n"
        "class GradientReversal(tf.keras.layers.Layer):\n"
        "    def call(self, x):\n"
        "        return grad_reverse(x)\n\n"
        "print('demo', GradientReversal()(tf.constant([3.])).numpy().tolist())\n",
    )
    shown = " ".join(pasted["shown"].split())
    assert pasted["status"] == "ok" and "demo [3.0]" in shown, shown
    assert "grad_reverse(x) fails" in shown and "bound as written" in shown, shown


def test_a_none_gradient_has_one_verdict_and_one_wording_in_both_modes():
    import gradmagic

    def op(x, y):  # y does not enter the output: None, taken as zero, is right
        return x * 2.0, lambda dy: (dy * 2.0, None)

    for size in (3, 5000):  # full mode, projection mode
        ones = tf.ones([size])
        report = gradmagic.check(tf.custom_gradient(op), ones, ones)
        found = problem(report, "none-gradient")
        assert report.verdict == "pass" and found.severity == "info" and "None is right" in found.message, report
        assert all(row.matches for row in report.tensors), report.tensors  # no shape MISMATCH beside it

    def weak(x, y):  # y matters, a millionth as much as x: its None is no info saying "None is right"
        return x * 2.0 + 1e-6 * y, lambda dy: (dy * 2.0, None)

    for size in (3, 5000):
        ones = tf.ones([size])
        report = gradmagic.check(tf.custom_gradient(weak), ones, ones)
        assert problem(report, "none-gradient").severity == "warning" and report.verdict == "fail", report


def test_a_python_int_an_op_decorated_by_hand_gets_as_a_tensor_is_explained():
    import gradmagic

    @tf.custom_gradient
    def quantize(x, bits):
        scale = 2.0**bits
        return tf.round(x * scale) / scale, lambda u: (u, None)

    found = problem(gradmagic.check(quantize, tf.constant([0.3, -1.0]), 8), "graph-mismatch")
    assert "`bits` (the Python int 8) reached the op as a tensor" in found.message, found.message


def test_the_decorator_written_as_a_call_makes_the_op_the_cell_assigns(nb):
    """`clip = tf.custom_gradient(_clip_fn)`, as TensorFlow's own code and many repositories write it."""
    cell = (
        "%%custom_gradient{} --check x=tf.constant([1.0, -2.0])\n"
        "def _clip_grad_fn(x):\n"
        "    def grad(dy):\n"
        "        return tf.clip_by_value(dy, -0.5, 0.5)\n"
        "    return tf.identity(x), grad\n"
        "clip_grad = tf.custom_gradient(_clip_grad_fn)\n"
        "print('demo', clip_grad(tf.constant([3.0])).numpy().tolist())\n"
    )
    for line in ("", " clip_grad"):
        run = nb.ok(cell.format(line))
        assert "demo [3.0]" in said(run) and "_clip_grad_fn(x) fails" in said(run), run.stdout
        made = "`clip_grad` is made in the cell (`clip_grad = tf.custom_gradient(_clip_grad_fn)`, cell line 6): bound"
        assert made in said(run), run.stdout
        assert info_of(nb.ns["clip_grad"]) is not None and info_of(nb.ns["_clip_grad_fn"]) is None
