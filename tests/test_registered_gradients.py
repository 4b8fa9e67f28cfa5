"""Registered gradients (issue 32): `tf.RegisterGradient` and `gradient_override_map`, written, re-run and checked.

The patterns are public code's: the straight-through estimator of binarised and quantised networks
(`gradient_override_map({"Sign": "STE"})`, `{"Round": "Identity"}`), a gradient-clipping `Identity` override, and
the "py_func with gradient" recipe (a `tf.numpy_function` / `tf.compat.v1.py_func` forward and a gradient registered
under a random name, applied with `gradient_override_map({"PyFunc": name})`); the mistakes are the silent ones: an
override keyed on a type the graph never builds (`Matmul` for `MatMul`), one entered eagerly, a wrong registered
gradient (a factor of 1.1). In a real IPython shell, in TensorFlow 2's `tf.function`, in TensorFlow 1's graph mode (a
fresh Python, see test_tf1_graph.py) and in a real Jupyter kernel.
"""

import numpy as np
import tensorflow as tf
from conftest import codes, problem
from IPython.core.error import UsageError
from test_tf1_graph import in_notebook, in_script

import gradmagic

STE_CELL = """%%register_gradient Sign --check x=tf.constant([-1.5, 0.3, 2.0], tf.float64) --surrogate
@tf.RegisterGradient("STE")
def ste(op, grad):
    return grad
"""

# The recipe as the magic takes it: the gradient of a Python forward, planted 10 % wrong.
PY_FUNC_CELL = """%%register_gradient PyFunc --check x=tf.constant([1., 2., 3.], tf.float64)
def square_grad(op, grad):
    x = op.inputs[0]
    return grad * {factor} * x

def square(x):
    return tf.numpy_function(np.square, [x], tf.float64)
"""

# The recipe as it is pasted from public code (TensorFlow 2 spelling): a random name registered at each call.
RECIPE = """
def py_func(func, inp, Tout, stateful=True, name=None, grad=None):
    rnd_name = "PyFuncGrad" + str(np.random.randint(0, 1e8))
    tf.RegisterGradient(rnd_name)(grad)
    g = tf.compat.v1.get_default_graph()
    with g.gradient_override_map({"PyFunc": rnd_name, "PyFuncStateless": rnd_name}):
        return tf.compat.v1.py_func(func, inp, Tout, stateful=stateful, name=name)

def _cube_grad(op, grad):
    x = op.inputs[0]
    return grad * FACTOR * x * x

def cube(x, name=None):
    return py_func(lambda v: v ** 3, [x], tf.float64, name=name, grad=_cube_grad)
"""


def said(run) -> str:
    return " ".join(run.shown.split())


def test_the_magic_registers_checks_and_runs_again(nb):
    first = nb.ok(STE_CELL)
    assert "Sign(x) surrogate gradient (declared)" in said(first), first.stdout
    assert "registered as `STE` for Sign ops" in said(first) and "surrogate-differs" in said(first), first.stdout
    again = nb.ok(STE_CELL)  # TensorFlow alone: KeyError, "Registering two gradient with name 'STE'"
    assert "It replaced what was registered under that name before" in said(again), again.stdout
    assert nb.ns["ste"].override_map == {"Sign": "STE"}
    used = nb.ok(
        "@tf.function\ndef binarise(x):\n    with ste:\n        return tf.sign(x)\n"
        "x = tf.constant([-1.0, 2.0])\nwith tf.GradientTape() as tape:\n    tape.watch(x)\n    y = binarise(x)\n"
        "print('gradient', tape.gradient(y, x).numpy().tolist())"
    )
    assert "gradient [1.0, 1.0]" in used.stdout, used.shown
    eager = nb.fails("with ste:\n    tf.sign(tf.constant([1.0]))", RuntimeError)
    assert "eager mode has no gradient overrides" in said(eager), eager.shown
    again = nb.ok("%gradcheck ste")  # the cell's --check inputs, kept with the gradient; --surrogate too
    assert "surrogate gradient (declared)" in said(again), again.stdout


def test_a_wrong_registered_gradient_of_a_python_forward_fails_and_the_forward_gets_it(nb):
    run = nb.ok(PY_FUNC_CELL.format(factor=2.2))
    report = run.result.result
    assert report.verdict == "fail" and "a constant factor is off" in problem(report, "fd-mismatch").message, run.stdout
    assert "1.1 times" in problem(report, "fd-mismatch").message
    fixed = nb.ok(PY_FUNC_CELL.format(factor=2.0))
    assert fixed.result.result.verdict == "pass", fixed.stdout
    # The bound forward applies it wherever it is called: eagerly under a tape, and inside a training step's
    # tf.function with its tape inside, where an override entered in the step itself would do nothing.
    used = nb.ok(
        "x = tf.constant([3.0], tf.float64)\nwith tf.GradientTape() as tape:\n    tape.watch(x)\n    y = square(x)\n"
        "print('eager', tape.gradient(y, x).numpy().tolist())\n"
        "@tf.function\ndef step(x):\n    with tf.GradientTape() as tape:\n        tape.watch(x)\n"
        "        y = square(x)\n    return tape.gradient(y, x)\n"
        "print('step', step(x).numpy().tolist())"
    )
    assert "eager [6.0]" in used.stdout and "step [6.0]" in used.stdout, used.shown


def test_the_pasted_recipe_with_its_random_names_is_checked_in_a_tf_function(nb):
    nb.ok(RECIPE.replace("FACTOR", "3.3"))
    run = nb.ok("%gradcheck tf.function(cube) x=tf.constant([1., 2., 3.], tf.float64)")
    report = run.result.result
    assert "composite" in codes(report) and "PyFunc" in problem(report, "composite").message, run.stdout
    assert report.verdict == "fail" and "1.1 times" in problem(report, "fd-mismatch").message, run.stdout
    nb.ok(RECIPE.replace("FACTOR", "3"))
    assert nb.run("%gradcheck tf.function(cube) x=tf.constant([1., 2., 3.], tf.float64)").result.result.ok


def test_an_override_keyed_on_a_type_never_built_did_nothing_and_says_which_were(nb):
    nb.ok(
        '@tf.RegisterGradient("HalfMatMulGrad")\ndef half(op, grad):\n'
        "    a, b = op.inputs\n    return tf.matmul(grad, b, transpose_b=True), tf.matmul(a, grad, transpose_a=True)\n"
        "@tf.function\ndef product(a, b):\n"
        '    with tf.compat.v1.get_default_graph().gradient_override_map({"Matmul": "HalfMatMulGrad"}):\n'
        "        return tf.matmul(a, b)\n"
    )
    run = nb.ok("%gradcheck product a=tf.ones([2, 3], tf.float64) b=tf.ones([3, 2], tf.float64)")
    found = problem(run.result.result, "override-unused")
    assert found.severity == "error" and "did you mean `MatMul`?" in found.message, found.message
    assert "gradient_override_map({'Matmul': 'HalfMatMulGrad'})" in found.message and found.location.line == 7
    # A misspelled key fails beside one that applied: the map's other gradient took effect, this one did not.
    nb.ok(
        "@tf.function\ndef binarised_product(a, b):\n"
        '    with tf.compat.v1.get_default_graph().gradient_override_map({"Sign": "Identity", "Matmul": '
        '"HalfMatMulGrad"}):\n        return tf.matmul(tf.sign(a), b)\n'
    )
    mixed = nb.ok("%gradcheck binarised_product a=tf.ones([2, 3], tf.float64) b=tf.ones([3, 2], tf.float64)")
    unused = [p for p in mixed.result.result.problems if p.code == "override-unused"]
    assert [p.severity for p in unused] == ["error"] and "'Matmul'" in unused[0].message, mixed.stdout
    in_cell = nb.fails(  # the cell's own map names a type TensorFlow lacks, and no forward: nothing to build
        '%%register_gradient --check x=tf.ones([2])\n@tf.RegisterGradient("TypoGrad")\ndef typo(op, grad):\n'
        "    return grad\n\n"
        'MAP = {"Matmul": "TypoGrad"}  # tf.compat.v1.get_default_graph().gradient_override_map(MAP) elsewhere\n'
        '_ = lambda g: g.gradient_override_map({"Matmul": "TypoGrad"})\n',
        UsageError,
    )
    assert "no op type `Matmul` (did you mean `MatMul`?)" in said(in_cell) and "typo" not in nb.ns, in_cell.shown
    wrong_line = nb.fails("%%register_gradient Matmul\ndef g(op, grad):\n    return grad, grad\n", UsageError)
    assert "no op type `Matmul` (did you mean `MatMul`?)" in said(wrong_line), wrong_line.shown
    assert "g" not in nb.ns  # nothing bound, nothing registered


def test_overrides_of_tf_functions_and_of_eager_functions():
    @tf.RegisterGradient("ClipGradRegistered")
    def clip(unused_op, grad):
        return tf.clip_by_value(grad, -0.1, 0.1)

    @tf.function
    def clipped(x):
        with tf.compat.v1.get_default_graph().gradient_override_map({"Identity": "ClipGradRegistered"}):
            return tf.identity(x * 2.0)

    x = tf.constant([-1.3, 0.5, 2.1], tf.float64)
    clipped(x)  # traced before the check: the check still sees what it builds
    report = gradmagic.check(clipped, x, surrogate=True)
    assert report.verdict == "surrogate" and "gradient clipping" in problem(report, "surrogate-differs").message
    assert "ClipGradRegistered" in problem(report, "composite").message
    assert not gradmagic.check(clipped, x).ok  # undeclared: 0.2 where the derivative is 2

    def rounded(x):  # eagerly, as TensorFlow 2 runs it: the override does nothing there
        with tf.compat.v1.get_default_graph().gradient_override_map({"Round": "Identity"}):
            return tf.round(x)

    report = gradmagic.check(rounded, tf.constant([-1.3, 0.2, 2.1], tf.float64), surrogate=True)
    eager = problem(report, "override-eager")
    assert eager.severity == "warning" and "take their own gradient, not `Identity`" in eager.message
    assert report.verdict == "surrogate", report  # checked as built in a graph, where the override applies


def test_a_registered_name_of_tensorflows_own_gradient_is_not_replaced(nb):
    run = nb.fails("%%register_gradient --name Sign\ndef mine(op, grad):\n    return grad\n", UsageError)
    assert "TensorFlow's own gradient of Sign ops" in said(run), run.shown
    lonely = nb.ok("%%register_gradient\ndef lonely(op, grad):\n    return grad\n")
    assert nb.ns["lonely"].op_types == () and "for no op type yet" in said(lonely), lonely.stdout


def test_graph_mode_magic_and_check():
    result = in_notebook(
        """
        r = report('''%%register_gradient Sign --check x=tf.constant([-1.5, 0.3, 2.0], tf.float64) --surrogate
        @tf.RegisterGradient("STE")
        def ste(op, grad):
            return grad
        ''')
        RESULT["first"] = r["verdict"]
        RESULT["again"] = report('''%%register_gradient Sign --surrogate --check x=np.array([-1.5, .3, 2.])
        @tf.RegisterGradient("STE")
        def ste(op, grad):
            return grad * 1.0
        ''')["verdict"]
        cell('''
        x = tf.constant([-1.0, 2.0])
        with ste:
            y = tf.sign(x)
        g = tf.gradients(y, x)[0]
        with tf.compat.v1.Session() as session:
            used = session.run(g).tolist()
        ''')
        RESULT["used"] = shell.user_ns["used"]
        bad = report('''%%register_gradient PyFunc --check x=tf.constant([1., 2., 3.], tf.float64)
        def square_grad(op, grad):
            return grad * 2.2 * op.inputs[0]

        def square(x):
            return tf.compat.v1.py_func(np.square, [x], tf.float64)
        ''')
        RESULT["bad"] = [p["code"] for p in bad["problems"] if p["severity"] == "error"]
        RESULT["bad_message"] = [p["message"] for p in bad["problems"] if p["code"] == "fd-mismatch"]
        """,
    )
    assert result["first"] == "surrogate" and result["again"] == "surrogate", result
    assert result["used"] == [1.0, 1.0], result
    assert result["bad"] == ["fd-mismatch"] and "1.1 times" in result["bad_message"][0], result


def test_graph_mode_functions_using_overrides():
    result = in_script(
        """
        @tf.RegisterGradient("ClipGradG")
        def clip_grad(op, grad):
            return tf.clip_by_value(grad, -0.1, 0.1)

        def clipped(x):
            with tf.compat.v1.get_default_graph().gradient_override_map({"Identity": "ClipGradG"}):
                return tf.identity(x * 2.0)

        def product(a):
            with tf.compat.v1.get_default_graph().gradient_override_map({"Matmul": "ClipGradG"}):
                return tf.matmul(a, a)

        def quantised(x):
            with tf.compat.v1.get_default_graph().gradient_override_map({"Round": "Identity"}):
                return tf.round(x * 4.0) / 4.0

        RESULT = {}
        x = tf.constant([-1.3, 0.55, 2.1], tf.float64)
        RESULT["clipped"] = gradmagic.check(clipped, x, surrogate=True).verdict
        RESULT["clipped_undeclared"] = gradmagic.check(clipped, x).verdict
        unused = gradmagic.check(product, tf.ones([2, 2], tf.float64))
        RESULT["unused"] = [p.message for p in unused.problems if p.code == "override-unused"]
        RESULT["quantised"] = gradmagic.check(quantised, x, surrogate=True).verdict
        """
    )
    assert result["clipped"] == "surrogate" and result["clipped_undeclared"] == "fail", result
    assert result["unused"] and "did you mean `MatMul`?" in result["unused"][0], result
    assert result["quantised"] == "surrogate", result


def test_register_gradient_in_a_real_kernel(kernel):
    from conftest import run

    _, client = kernel
    assert run(client, "%load_ext gradmagic\nimport tensorflow as tf")["status"] == "ok"
    for _ in range(2):  # the second run replaces the first registration
        ran = run(client, STE_CELL)
        shown = " ".join(ran["shown"].split())
        assert ran["status"] == "ok" and "Sign(x) surrogate gradient (declared)" in shown, shown
    assert "It replaced what was registered" in shown, shown


def test_what_the_registered_gradient_returns_is_checked_against_the_op(nb):
    cell = (
        "%%register_gradient MatMul --check a=tf.ones([2, 3], tf.float64) --check b=tf.ones([3, 2], tf.float64)\n"
        "def matmul_grad(op, grad):\n    a, b = op.inputs\n    return {returned}\n"
    )
    right = "tf.matmul(grad, b, transpose_b=True), tf.matmul(a, grad, transpose_a=True)"
    assert nb.ok(cell.format(returned=right)).result.result.verdict == "pass"
    one = nb.ok(cell.format(returned="tf.matmul(grad, b, transpose_b=True)")).result.result
    assert "returns 1 gradient for a MatMul op, which has 2 inputs (a, b)" in problem(one, "grad-count").message
    shaped = nb.ok(cell.format(returned="tf.matmul(grad, b, transpose_b=True), tf.matmul(grad, a)")).result.result
    assert "of shape [2, 3] for `b`" in problem(shaped, "grad-shape").message, problem(shaped, "grad-shape")
    raised = nb.ok(cell.format(returned="1 / 0")).result.result
    assert "raised ZeroDivisionError when called on a MatMul op" in problem(raised, "grad-error").message


def test_without_the_surrogate_flag_a_straight_through_gradient_is_named(nb):
    run = nb.ok(STE_CELL.replace(" --surrogate", ""))
    found = problem(run.result.result, "fd-mismatch")
    assert "This looks like a straight-through estimator: `sign` is piecewise constant" in found.message, found


def test_a_failing_cell_leaves_the_registry_and_the_notebook_as_they_were(nb):
    nb.ok(STE_CELL)
    before = nb.ns["ste"]
    nb.fails(
        '%%register_gradient Sign\n@tf.RegisterGradient("STE")\ndef ste(op, grad):\n    return 2 * grad\n\n'
        '@tf.RegisterGradient("FreshName")\ndef fresh(op, grad):\n    return grad\n\n1 / 0\n',
        ZeroDivisionError,
    )
    assert nb.ns["ste"] is before and "fresh" not in nb.ns
    used = nb.ok(  # STE is still the first cell's gradient (1, not 2), and FreshName is free for a plain cell
        '@tf.RegisterGradient("FreshName")\ndef fresh(op, grad):\n    return grad\n\n'
        "@tf.function\ndef binarise(x):\n    with ste:\n        return tf.sign(x)\n"
        "x = tf.constant([-1.0, 2.0])\nwith tf.GradientTape() as tape:\n    tape.watch(x)\n    y = binarise(x)\n"
        "print('gradient', tape.gradient(y, x).numpy().tolist())"
    )
    assert "gradient [1.0, 1.0]" in used.stdout, used.shown
    lonely = nb.ok("%%register_gradient\ndef lonely(op, grad):\n    return grad\n")
    assert "for no op type yet" in said(lonely)
    refused = nb.fails("%gradcheck lonely x=tf.constant([1.0])", UsageError)
    assert "with no forward to check it through: name one op type" in said(refused), refused.shown


# Gradient clipping as TensorFlow 1 code wrote it: the op type comes from the cell's own override map.
CLIP_CELL = """%%register_gradient --surrogate --check x=tf.constant([3., -4., 0.05], tf.float64)
@tf.RegisterGradient("ClipGradIdentity")
def _clip_grad(unused_op, grad):
    return tf.clip_by_value(grad, -0.1, 0.1)

def clip_layer(x):
    g = tf.compat.v1.get_default_graph()
    with g.gradient_override_map({"Identity": "ClipGradIdentity"}):
        return tf.identity(x)
"""


def test_the_op_types_of_a_pasted_cell_come_from_its_own_override_map(nb):
    run = nb.ok(CLIP_CELL)
    report = run.result.result
    assert nb.ns["_clip_grad"].op_types == ("Identity",), nb.ns["_clip_grad"]
    assert report.verdict == "surrogate" and "gradient clipping" in problem(report, "surrogate-differs").message
    assert "clip_layer(x) surrogate gradient (declared)" in said(run), run.stdout


def test_a_py_function_forward_with_an_override_of_its_own_gradient(nb):
    first = nb.ok(
        "%%register_gradient EagerPyFunc --check x=tf.constant([0.5, 1.0, 2.0], tf.float64)\n"
        "def exp_grad(op, grad):\n    return grad * tf.exp(op.inputs[0]) * 1.01\n\n"
        "def py_exp(x):\n    return tf.py_function(lambda v: tf.exp(v), [x], tf.float64)\n"
    )
    report = first.result.result
    assert report.verdict == "fail" and "1.01 times" in problem(report, "fd-mismatch").message, first.stdout
    again = nb.ok("%gradcheck exp_grad")
    assert "1.01 times the finite differences" in said(again), again.stdout


def test_bad_cells_say_what_is_wrong(nb):
    empty = nb.fails("%%register_gradient Sign\nx = 1\n", UsageError)
    assert "defines no gradient function" in said(empty) and "(op, grad)" in said(empty), empty.shown
    syntax = nb.fails("%%register_gradient Sign\ndef g(op, grad)\n    return grad\n", UsageError)
    assert "SyntaxError" in said(syntax) and "line 2" in said(syntax), syntax.shown
    several = nb.fails(
        "%%register_gradient Sign --check x=tf.constant([1.0])\n"
        "def g(op, grad):\n    return grad\n\ndef f(x):\n    return tf.sign(x)\n\ndef h(x):\n    return tf.sign(x)\n",
        UsageError,
    )
    assert "`--forward NAME`" in said(several) and "nothing was (re)registered" in said(several).lower()
    assert "g" not in nb.ns and "f" not in nb.ns
    chosen = nb.ok(
        "%%register_gradient Sign --forward h --surrogate --check x=tf.constant([1.0, -2.0])\n"
        "def g(op, grad):\n    return grad\n\ndef f(x):\n    return tf.sign(x)\n\ndef h(x):\n    return tf.sign(x)\n"
    )
    assert "h(x) surrogate gradient (declared)" in said(chosen), chosen.stdout
    helpers = nb.ok(  # without --check nothing needs choosing: the gradient is checked later through one Sign op
        "%%register_gradient Sign\ndef g2(op, grad):\n    return grad\n\ndef f2(x):\n    return tf.sign(x)\n\n"
        "def h2(x):\n    return tf.sign(x)\n"
    )
    assert nb.ns["g2"].op_types == ("Sign",) and "registered as `g2` for Sign ops" in said(helpers), helpers.stdout
    assert "Sign(x) surrogate gradient" in said(nb.ok("%gradcheck g2 x=tf.constant([1.0, -2.0]) --surrogate"))


def test_the_whole_recipe_pasted_under_the_magic_is_checked_through_its_forward(nb):
    cell = "%%register_gradient --check x=tf.constant([1., 2., 3.], tf.float64)\n" + RECIPE
    for factor, verdict in (("3.3", "fail"), ("3", "pass")):  # run twice: the registration is replaced
        report = nb.ok(cell.replace("FACTOR", factor)).result.result
        assert report.verdict == verdict, report
        assert nb.ns["_cube_grad"].op_types == ("PyFunc", "PyFuncStateless")
        assert not [p for p in report.problems if p.code == "override-unused" and p.severity == "error"], report
    again = nb.ok("%gradcheck _cube_grad")  # through its forward, at the cell's inputs
    assert again.result.result.verdict == "pass", again.stdout


def test_gradwatch_records_and_checks_the_registered_gradients_a_cell_takes(nb):
    """Under %%gradwatch, the magic's registered gradient (applied with `with ste:` in a tf.function) is recorded where
    TensorFlow takes it and checked through its Sign op, as declared on its cell (--surrogate); a wrong one registered
    by hand (a factor of 1.1) fails there, named as registered and defined in its cell."""
    nb.ok(STE_CELL)
    nb.ok(
        '@tf.RegisterGradient("TooSteepSquare")\n'
        "def too_steep(op, grad):\n"
        "    return 1.1 * 2.0 * grad * op.inputs[0]\n"
    )
    defined = nb.last_cell_number
    nb.ok(
        "@tf.function\n"
        "def binarize(x):\n"
        "    with ste, tf.compat.v1.get_default_graph().gradient_override_map({'Square': 'TooSteepSquare'}):\n"
        "        return tf.sign(x) + tf.square(x)\n"
    )
    run = nb.ok(
        "%%gradwatch watched\n"
        "for values in ([0.5, -1.5], [2.0, 0.25]):\n"
        "    x = tf.constant(values)\n"
        "    with tf.GradientTape() as tape:\n"
        "        tape.watch(x)\n"
        "        y = binarize(x)\n"
        "    gradient = tape.gradient(y, x)\n"
    )
    report = nb.ns["watched"]
    assert run.result.result is report and sorted(op.name for op in report.watched) == ["STE", "TooSteepSquare"]
    ste = report["STE"]
    assert (ste.calls, ste.gradient_calls, ste.verdict) == (2, 2, "surrogate"), said(run)
    steep = report["TooSteepSquare"]
    assert steep.verdict == "fail" and steep.where == f"Cell In[{defined}], line 1" and steep.calls == 2
    assert "1.1 times the finite differences" in problem(steep.report, "fd-mismatch").message
    np.testing.assert_allclose(nb.ns["gradient"], [1.0 + 1.1 * 4.0, 1.0 + 1.1 * 0.5], rtol=1e-6)  # as unwatched
