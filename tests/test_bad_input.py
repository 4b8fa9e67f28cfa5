"""Bad input, class by class: each gets a message naming its cause and where it came from (the cell line, the magic
line, `%config`), nothing of the user's is blamed on gradmagic, no option or input turns a wrong gradient into a pass,
and nothing a check runs is left behind in the notebook."""

import re
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import codes, interrupted, problem, run
from IPython.core.error import UsageError

import gradmagic
from gradmagic.errors import GradmagicError, OptionError

FIVE_TIMES = """%%custom_gradient --check x=tf.constant([1., 2.]){}
def five_times(x):
    def grad(dy):
        return dy * 10 * x
    return x * x, grad
"""


@pytest.fixture
def previous(nb):
    """An op and a variable defined before the cell under test, which a failing cell must leave as they were."""
    nb.ok("%%custom_gradient\ndef kept(x):\n    return x * 3, lambda dy: dy * 3")
    nb.ok("weights = tf.Variable([1., 2.])")
    return nb.ns["kept"], nb.ns["weights"]


def assert_kept(nb, previous):
    assert nb.ns["kept"] is previous[0] and nb.ns["weights"] is previous[1]
    nb.ok("assert float(tf.reduce_sum(kept(tf.constant([1., 1.])))) == 6.0")


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


# -- tolerances: a tolerance that judges nothing is "not checked", never "passes" ---------------------------------


def test_an_atol_above_the_gradients_scale_is_not_checked_naming_where_it_was_given(nb):
    nb.ok(FIVE_TIMES.format(" --atol 1e9"))
    report = nb.ns["_"]
    assert report.verdict == "unchecked" and codes(report) == ["fd-tolerance"], report
    message = problem(report, "fd-tolerance").message
    assert message.startswith("--atol = 1e+09 is at least half of every finite difference here (the largest is 4")
    assert "a gradient half as large would pass" in message
    assert "--atol = 1e+09" in report.numerics.skipped_because

    nb.ok("%config GradientMagics.atol = 1e300")
    try:
        report = nb.ok("%gradcheck five_times").result.result
        assert report.verdict == "unchecked"
        assert problem(report, "fd-tolerance").message.startswith("%config GradientMagics.atol = 1e+300")
    finally:  # the shell's configuration outlives this notebook
        nb.ok("%config GradientMagics.atol = None")
    assert nb.ok("%gradcheck five_times").result.result.verdict == "fail"


def test_an_atol_from_the_widgets_recheck_is_named_so(nb):
    nb.ok(FIVE_TIMES.format(""))
    widget = gradmagic.widget(nb.ns["_"])
    try:
        widget._on_message(widget, {"action": "recheck", "inputs": "", "eps": "", "rtol": "", "atol": "1e9"}, [])
        assert widget.report["verdict"] == "unchecked", widget.status
        (found,) = widget.report["problems"]
        assert found["code"] == "fd-tolerance" and found["message"].startswith("the Re-check's atol = 1e+09")
    finally:
        widget.close()


def test_an_atol_still_below_the_gradient_judges_and_fails_a_wrong_one():
    def five_times(x):
        return x * x, lambda dy: dy * 10 * x

    def right(x):
        return x * x, lambda dy: dy * 2 * x

    x = tf.constant([1.0, 2.0])
    assert gradmagic.check(five_times, x, atol=1.9).codes() == ["fd-mismatch"]  # below half of the largest, 4
    assert gradmagic.check(right, x, atol=1.9).verdict == "pass"
    assert gradmagic.check(right, x, atol=2.1).verdict == "unchecked"  # a gradient of 2 and 1 would pass too
    assert gradmagic.check(five_times, x, atol=1e9, full_threshold=0).codes()[-1] == "fd-mismatch"  # projections
    with pytest.raises(OptionError, match="^rtol is a relative tolerance: at 0.5 or more"):
        gradmagic.check(right, x, rtol=0.9)  # would pass a gradient 5 times too large


def test_a_second_order_judged_by_no_tolerance_says_so():
    def cube(x):
        return x**3, lambda dy: dy * 3 * x * x

    report = gradmagic.check(cube, tf.constant([1.0, 2.0], tf.float64), order=2, atol=1e3)
    assert report.verdict == "unchecked" and codes(report) == ["fd-tolerance", "second-order-skipped"], report
    # Judged at first order (its gradient reaches 1200), not at second (the custom gradient's own derivative, 6 x
    # times a random upstream, stays below 2 * 130).
    first = gradmagic.check(cube, tf.constant([10.0, 20.0], tf.float64), order=2, atol=130.0)
    assert first.verdict == "pass", first
    found = problem(first, "second-order-skipped")
    assert found.severity == "info" and found.message.startswith("The second order was not judged: atol = 130")


def test_a_zero_tolerance_is_named_as_the_cause_not_the_forward(nb):
    nb.ok(FIVE_TIMES.replace("10 * x", "2 * x").format(" --rtol 0 --atol 0"))
    report = nb.ns["_"]
    assert report.verdict == "unchecked", report
    message = problem(report, "fd-rounding").message
    assert message.startswith("The tolerance (--rtol=0, --atol=0) is tighter than the rounding finite differences")
    assert "forward's values are too large" not in message and "Give rtol of at least" in message


def test_a_step_that_rounds_to_zero_in_float16_is_named_not_the_edge_of_the_domain(nb):
    nb.ok(
        "%%custom_gradient --check x=tf.constant([1., 2.], tf.float16) --eps 1e-6\ndef half(x):\n"
        "    return tf.cast(x, tf.float16) ** 2, lambda dy: dy * 2 * x\n"
    )
    report = nb.ns["_"]
    assert report.verdict == "unchecked" and codes(report) == ["fd-rounding"], report
    message = problem(report, "fd-rounding").message
    assert "the step --eps=1e-06 rounds to zero in float16" in message and "edge of its domain" not in message


# -- side effects of the forward -----------------------------------------------------------------------------------


NOISY = """%%custom_gradient --check x=tf.constant([1., 2.])
def noisy(x):
    global runs
    calls.append(1)
    counter["n"] += 1
    runs += 1
    steps.assign_add(1.)
    print("forward ran")
    return x * 2, lambda dy: dy * 2
"""


def test_side_effects_of_the_forward_are_put_back_and_named(nb):
    nb.ok("calls, counter, runs = [], {'n': 0}, 0\nsteps = tf.Variable(0., trainable=False)")
    shown = nb.ok(NOISY).shown
    assert not re.search("^forward ran$", shown, re.M)  # kept out of the notebook, named in the report
    report = nb.ns["_"]
    assert report.verdict == "warn" and report.ok, report
    changed = problem(report, "forward-side-effect")
    assert changed.severity == "warning" and changed.location.line == 2
    for named in ("`calls` (changed)", "`counter` (changed)", "`runs` (set)", "`steps` (assigned)"):
        assert named in changed.message, changed.message
    assert "put it back as it was before the check" in changed.message
    printed = problem(report, "op-output")
    assert printed.severity == "info" and "the first: `forward ran`" in printed.message
    nb.ok("assert calls == [] and counter == {'n': 0} and runs == 0 and float(steps.numpy()) == 0.0")
    # Called by the user, the op does what it does, once.
    assert nb.ok("noisy(tf.constant([1.]))").stdout.count("forward ran") == 1
    nb.ok("assert calls == [1] and counter == {'n': 1} and runs == 1 and float(steps.numpy()) == 1.0")


def test_a_forward_assigning_only_a_variable_is_an_info_and_the_variable_is_put_back():
    scale = tf.Variable(1.0, trainable=False)

    @tf.custom_gradient
    def scaled(x):
        scale.assign(scale * 2)
        return x * 3, lambda dy: dy * 3

    report = gradmagic.check(scaled, tf.constant([1.0, 2.0]))
    found = problem(report, "forward-side-effect")
    assert found.severity == "info" and "`scale` (assigned)" in found.message and report.verdict == "pass"
    assert float(scale.numpy()) == 1.0


# -- example inputs ------------------------------------------------------------------------------------------------


def test_non_finite_inputs_are_named_as_the_cause_without_a_numpy_warning(nb):
    shown = nb.ok(
        "%%custom_gradient --check x=tf.constant([1., float('nan'), float('inf')])\ndef square(x):\n"
        "    return x * x, lambda dy: dy * 2 * x\n"
    ).shown
    report = nb.ns["_"]
    assert report.verdict == "unchecked" and codes(report) == ["nonfinite-input"], report
    found = problem(report, "nonfinite-input")
    assert "The example input `x` has 2 non-finite elements (Inf/NaN): x[1], x[2]" in found.message
    assert found.location.input == "x" and found.location.index == (1,)
    assert report.numerics.skipped_because == "the example inputs are NaN/Inf at x[1], x[2]"
    assert "RuntimeWarning" not in shown and "forward" not in found.message.split(".")[0]

    def doubled(x):
        return x * 2.0, lambda dy: dy * 2.0

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning leaking from the check fails the test
        report = gradmagic.check(doubled, np.array([1.0, np.inf]))
    assert codes(report) == ["nonfinite-input"]


def test_a_variable_that_is_not_finite_is_named():
    weight = tf.Variable([1.0, np.nan], name="weight")

    @tf.custom_gradient
    def scaled(x):
        return x * weight, lambda dy, variables=None: (dy * weight, [dy * x])

    report = gradmagic.check(scaled, tf.constant([1.0, 2.0]))
    found = problem(report, "nonfinite-input")
    assert "The variable `weight`, which the forward reads, has 1 non-finite element (NaN): weight[1]" in found.message
    assert report.verdict == "unchecked" and found.location.variable == "weight"


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


# -- the magic line ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line, message",
    [
        ("--atol -inf", "--atol must be a finite number at least 0, not -inf"),
        ("--rtol 0.9", "--rtol is a relative tolerance: at 0.5 or more it passes a gradient twice too large"),
        ("--keras --backends all,jax", "--backends: 'all' stands alone (every installed backend), not in a list"),
        ("--check y=1 +* 2", "The example input `y=1 +* 2` is not a Python expression: invalid syntax in `1 +* 2`"),
    ],
)
def test_a_bad_magic_line_names_its_cause_and_loses_nothing(nb, previous, line, message):
    run = nb.fails(f"%%custom_gradient {line}\ndef kept(x):\n    return x * 5, lambda dy: dy * 5", UsageError)
    assert message in run.stderr, run.stderr
    assert_kept(nb, previous)


def test_a_bad_config_value_in_a_watch_is_said_to_come_from_config(nb):
    nb.ok("%config GradientMagics.probes = 0")
    try:
        run = nb.fails("%%gradwatch\nkept_value = 1", UsageError)
        assert "%config GradientMagics.probes must be at least 1, not 0" in run.stderr
        assert "kept_value" not in nb.ns
    finally:
        nb.ok("%config GradientMagics.probes = 4")


# -- %%gradwatch and gradmagic.watch -------------------------------------------------------------------------------


def test_a_watch_refuses_infinite_memory_and_a_module_name_before_the_cell_runs(nb):
    run = nb.fails("%%gradwatch --memory inf\nran = True", UsageError)
    assert "--memory is in megabytes, a finite number at least 0, not inf" in run.stderr
    run = nb.fails("%%gradwatch tf\nran = True", UsageError)
    assert "would bind the watch's report to `tf`, which is the module tensorflow" in run.stderr
    assert "ran" not in nb.ns and nb.ns["tf"] is tf
    nb.ok("assert tf.constant(1.0) is not None")


def test_a_surrogate_that_names_no_op_is_said(nb):
    nb.ok("%%custom_gradient\ndef flip(x):\n    return tf.identity(x), lambda dy: -dy")
    report = nb.ok(
        "%%gradwatch --surrogate flipp\nwith tf.GradientTape() as tape:\n    x = tf.constant([1.])\n"
        "    tape.watch(x)\n    y = flip(x)\ntape.gradient(y, x)"
    ).result.result
    (note,) = [note for note in report.notes if "surrogate" in note]
    assert "Declared surrogate `flipp` (--surrogate, surrogates=) names no op the watched code reached" in note
    assert "the ops it reached are `flip`" in note


def test_ending_a_watch_that_never_started_or_has_ended_says_so():
    watch = gradmagic.watch()
    with pytest.raises(GradmagicError, match="This watch was never started"):
        watch.__exit__(None, None, None)
    with watch:
        pass
    with pytest.raises(GradmagicError, match="This watch has ended already: its report is `watch.report`"):
        watch.__exit__(None, None, None)
    assert watch.report.verdict == "unchecked"


# -- the Python API ------------------------------------------------------------------------------------------------


def test_widget_of_something_else_than_a_report_is_a_type_error():
    with pytest.raises(TypeError, match="widget\\(\\) shows a report: .* not str 'str'"):
        gradmagic.widget("str")


def test_a_keras_op_checked_as_tensorflows_gets_a_hint():
    @keras.ops.custom_gradient
    def doubled(x):
        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            return upstream * 2

        return x * 2, grad

    hinted = gradmagic.check(doubled, tf.constant([1.0, 2.0]))
    found = problem(hinted, "framework-hint")
    assert found.severity == "info" and "if it is a keras.ops.custom_gradient op, check it with framework='keras'" in (
        found.message
    )
    assert "framework-hint" not in gradmagic.check(doubled, tf.constant([1.0, 2.0]), framework="keras").codes()
    plain = gradmagic.check(tf.custom_gradient(lambda x: (x * 2, lambda dy: dy * 2)), tf.constant([1.0]))
    assert "framework-hint" not in plain.codes()


# -- in a real kernel ----------------------------------------------------------------------------------------------


def test_in_a_kernel_ctrl_c_in_a_trace_shows_the_users_line_and_a_noisy_forward_leaves_nothing(kernel):
    manager, client = kernel
    setup = run(
        client,
        """
%load_ext gradmagic
import time
import tensorflow as tf
def hangs_when_traced(x):
    if not tf.executing_eagerly():  # fine eagerly; hangs when the check traces it
        time.sleep(3600)
    return x * 2, lambda dy: dy * 2
op = tf.custom_gradient(hangs_when_traced)
calls = []
""",
    )
    assert setup["status"] == "ok", setup["shown"]
    content = interrupted(manager, client, "%gradcheck op x=tf.constant([3.0, 4.0])", after=8)
    shown = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(content["traceback"]))
    assert "in hangs_when_traced(x)" in shown and "----> 6         time.sleep(3600)" in shown, shown
    assert "threading.py" not in shown and "concurrent" not in shown and "gradmagic" not in shown, shown

    noisy = run(
        client,
        "%%custom_gradient --check x=tf.constant([1., 2.])\ndef noisy(x):\n    calls.append(1)\n"
        "    print('forward ran')\n    return x * 2, lambda dy: dy * 2\n",
    )
    assert noisy["status"] == "ok" and not re.search("^forward ran$", noisy["shown"], re.M), noisy["shown"]
    assert "forward-side-effect" in noisy["shown"] and "op-output" in noisy["shown"], noisy["shown"]
    after = run(client, "print(calls, 40 + 2)")
    assert after["status"] == "ok" and after["shown"].strip() == "[] 42", after["shown"]
