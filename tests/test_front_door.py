"""The front door: what a user types first, right or wrong, in a real IPython shell and from Python.

`--check ARG=EXPR` takes expressions with spaces; the Python API names the argument that cannot be what it names;
Ctrl-C and `KeyboardInterrupt` show the user's frames, never gradmagic's; `sys.exit()` in the op is a finding; a
`@tf.function` on the cell's function compiles the op made beneath it; an op named like the `tf` module and a Keras
gradient function without the `upstream is None` fallback each get their own message; a `tf.Variable` given as an
input stays a variable.
"""

import functools
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from conftest import codes, interrupted, problem, run
from IPython.core.error import UsageError

import gradmagic
from gradmagic.magic_line import split_words
from gradmagic.op import info_of

SQUARE = "def square(x):\n    return x * x, lambda dy: dy * 2 * x\n"
GRADMAGIC_FILES = os.path.dirname(os.path.abspath(gradmagic.__file__)) + os.sep


def plain(x, scale=1.0):
    return x * x * scale, lambda dy: dy * 2 * x * scale


# -- --check ARG=EXPR with spaces -------------------------------------------------------------------------------------


def test_an_example_input_runs_over_spaces_up_to_the_next_option_or_input():
    assert split_words("--check x=tf.constant([1., 2.]) * 2 --rtol 1e-3") == [
        "--check",
        "x=tf.constant([1., 2.]) * 2",
        "--rtol",
        "1e-3",
    ]
    assert split_words("op x = tf.ones(3) * 2 y=a if b else c --no-graph") == [
        "op",
        "x = tf.ones(3) * 2",
        "y=a if b else c",
        "--no-graph",
    ]
    # A comparison is not an input; a name after a finished expression is the next word.
    assert split_words("op x=a == b") == ["op", "x=a == b"]
    assert split_words("--check x=tf.ones(3) square") == ["--check", "x=tf.ones(3)", "square"]


def test_check_takes_an_expression_with_spaces_as_the_readme_shows(nb):
    run = nb.ok("%%custom_gradient --check x=tf.constant([1., 2.]) * 2\n" + SQUARE)
    assert "square(x) passes" in run.stdout
    report = nb.ns["_"]
    assert [row.shape for row in report.tensors if row.role == "input"] == [(2,)]
    assert [str(example) for example in info_of(nb.ns["square"]).example_inputs] == ["x=tf.constant([1., 2.]) * 2"]
    # The op's check ran at [2, 4]: the Jacobian's diagonal d output[i] / d x[i] = 2 x[i] is 4 and 8.
    assert sorted(element.custom for element in report.numerics.worst)[-2:] == pytest.approx([4.0, 8.0])


def test_spaces_around_the_equals_sign_and_an_option_after_the_expression(nb):
    nb.ok("%%custom_gradient --check x = tf.constant([1., 2.]) * 2 --rtol 1e-3\n" + SQUARE)
    assert nb.ns["_"].options["rtol"] == 1e-3 and nb.ns["_"].ok
    nb.ok("report = %gradcheck square x = tf.constant([1., 2., 3.]) * 2 --rtol 1e-3")
    report = nb.ns["report"]
    assert report.ok and report.options["rtol"] == 1e-3
    assert [row.shape for row in report.tensors if row.role == "input"] == [(3,)]


def test_gradcheck_takes_several_inputs_with_spaces(nb):
    nb.ok(
        "%%custom_gradient --no-check\ndef mul(x, y):\n    return x * y, lambda dy: (dy * y, tf.reduce_sum(dy * x))\n"
    )
    nb.ok("report = %gradcheck mul x=tf.constant([1., 2.]) * 2 y=tf.constant(3.) + 1 --no-graph")
    report = nb.ns["report"]
    assert report.ok, report
    assert [(row.name, row.shape) for row in report.tensors if row.role == "input"] == [("x", (2,)), ("y", ())]
    assert report.graph is None


def test_a_second_input_without_its_check_is_named(nb):
    run = nb.fails(
        "%%custom_gradient --check x=tf.constant([1., 2.]) * 2 y=tf.constant(3.)\ndef mul(x, y):\n"
        "    return x * y, lambda dy: (dy * y, tf.reduce_sum(dy * x))\n",
        UsageError,
    )
    assert "`y=tf.constant(3.)` is an example input without its --check" in run.stderr
    assert "`--check x=EXPR --check y=EXPR`" in run.stderr and "mul" not in nb.ns


# -- the Python API names the bad argument ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error_type", "words"),
    [
        (lambda x: gradmagic.check(42), TypeError, "op must be a custom-gradient op or a function"),
        (lambda x: gradmagic.check(None, x), TypeError, "give the op first, then its inputs, check(op, x)"),
        (lambda x: gradmagic.check(x, plain), TypeError, "op must be a custom-gradient op"),
        (lambda x: gradmagic.check(plain, x, framework="nonsense"), ValueError, "framework must be one of"),
        (lambda x: gradmagic.check(plain, x, framework=3), ValueError, "framework must be one of"),
        (lambda x: gradmagic.check(plain, x, kwargs=[1.0]), TypeError, "kwargs must be a dict"),
        (lambda x: gradmagic.check(plain, x, kwargs={1: 2.0}), TypeError, "kwargs must name the op's keyword"),
        (lambda x: gradmagic.check(plain, x, kwargs={"nope": 2.0}), TypeError, "unexpected keyword argument 'nope'"),
        (lambda x: gradmagic.check(plain), TypeError, "missing a required argument: 'x'"),
        (lambda x: gradmagic.check(plain, x, x, x), TypeError, "too many positional arguments"),
        (lambda x: gradmagic.check(plain, x, progress=3), TypeError, "progress must be a callable(fraction, phase)"),
        (lambda x: gradmagic.check(plain, x, progress=print.__call__), None, None),  # a signature it cannot read
        (lambda x: gradmagic.check(plain, x, progress=lambda f: f), TypeError, "progress must be a callable"),
        (lambda x: gradmagic.check(plain, x, rtoll=1e-3), TypeError, "unknown option 'rtoll'"),
        (lambda x: gradmagic.gradient_graph(None, x), TypeError, "give the op first"),
        (lambda x: gradmagic.assert_gradient(plain, x, framework="nonsense"), ValueError, "framework must be"),
    ],
)
def test_the_api_names_the_argument_that_cannot_be_what_it_names(call, error_type, words):
    x = tf.constant([1.0, 2.0])
    if error_type is None:
        assert call(x).ok
        return
    with pytest.raises(error_type) as raised:
        call(x)
    assert words in str(raised.value)
    assert not isinstance(raised.value, (AttributeError, KeyError))


def test_a_partial_is_checked_as_the_op_it_wraps(nb):
    x = tf.constant([1.0, 2.0])
    report = gradmagic.check(functools.partial(plain, scale=2.0), x)
    assert report.ok, report
    assert report.op.name == "plain" and "scale=2.0" in report.op.signature
    assert gradmagic.check(functools.partial(tf.custom_gradient(lambda x: (x * x, lambda dy: dy * 2 * x))), x).ok
    nb.ok("%%custom_gradient --no-check\ndef scaled(x, scale=1.0):\n    return x * scale, lambda dy: dy * scale\n")
    assert gradmagic.check(functools.partial(nb.ns["scaled"], scale=3.0), x).ok  # the magic's op takes keywords
    # A hand-decorated op given a keyword: tf.custom_gradient refuses it inside tf.function, and the report says so.
    found = problem(gradmagic.check(functools.partial(tf.custom_gradient(plain), scale=3.0), x), "graph-mismatch")
    assert "tf.custom_gradient refuses keyword arguments inside tf.function: pass them by position" in found.message


def test_a_partial_that_binds_the_input_says_the_bound_argument_is_no_input():
    found = problem(gradmagic.check(functools.partial(plain, tf.constant([1.0, 2.0]))), "grad-count")
    assert "returns 1 gradient for 0 inputs" in found.message and "`return ()`" in found.message
    assert "functools.partial that binds 1 argument by position" in found.message
    assert "`return `" not in found.message


# -- interrupts, sys.exit ---------------------------------------------------------------------------------------------

INTERRUPTED = """%%custom_gradient --check x=tf.constant([1., 2.])
def stops(x):
    raise KeyboardInterrupt
    return x, lambda dy: dy
"""


def test_a_keyboard_interrupt_in_the_op_shows_the_users_frames_only(nb):
    nb.ok("%%custom_gradient\n" + SQUARE)
    previous = nb.ns["square"]
    run = nb.fails(INTERRUPTED, KeyboardInterrupt)
    assert f"Cell In[{nb.last_cell_number}], line 3, in stops" in run.shown and "raise KeyboardInterrupt" in run.shown
    assert "gradmagic" not in run.shown
    assert nb.ns["square"] is previous
    run = nb.fails(
        "import gradmagic\ndef stops_too(x):\n    raise KeyboardInterrupt\n    return x, lambda dy: dy\n"
        "gradmagic.check(stops_too, tf.constant(1.))",
        KeyboardInterrupt,
    )
    assert "line 3, in stops_too" in run.shown
    assert GRADMAGIC_FILES not in run.shown and "api.py" not in run.shown and "structure.py" not in run.shown
    nb.ok("assert float(square(tf.constant(3.))) == 9.0")


def test_sys_exit_in_the_forward_or_the_gradient_is_reported_not_escaped(nb):
    nb.ok(
        "%%custom_gradient --check x=tf.constant([1., 2.])\nimport sys\ndef leaves(x):\n    sys.exit(3)\n"
        "    return x, lambda dy: dy\n"
    )
    found = problem(nb.ns["_"], "forward-error")
    assert "raised SystemExit: 3" in found.message and found.location.line == 4
    nb.ok(
        "%%custom_gradient --check x=tf.constant([1., 2.])\ndef leaves_late(x):\n"
        "    return x * 1, lambda dy: sys.exit()\n"
    )
    assert codes(nb.ns["_"]) == ["grad-error"] and "SystemExit" in nb.ns["_"].problems[0].message
    report = gradmagic.check(lambda x: __import__("sys").exit("bye"), tf.constant(1.0))
    assert "raised SystemExit: bye" in problem(report, "forward-error").message
    nb.ok("assert 40 + 2 == 42")  # the shell is still there


def _interrupted(manager, client, code: str) -> str:
    """Run `code`, press Ctrl-C once it is well under way, and return the traceback shown."""
    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(interrupted(manager, client, code)["traceback"]))


def test_ctrl_c_in_a_real_kernel_shows_no_gradmagic_frame_and_loses_nothing(kernel):
    manager, client = kernel
    setup = run(client, "%load_ext gradmagic\nimport time\nimport tensorflow as tf")
    assert setup["status"] == "ok", setup["shown"]
    defined = run(client, "%%custom_gradient --no-check\ndef kept(x):\n    return x * 3, lambda dy: dy * 3")
    assert defined["status"] == "ok", defined["shown"]

    # In the op's forward, while the check runs: the user's frames, where their code was, and none of gradmagic's.
    shown = _interrupted(
        manager,
        client,
        "%%custom_gradient --check x=tf.constant([1., 2.])\ndef slow(x):\n    time.sleep(3600)\n"
        "    return x, lambda dy: dy\n",
    )
    assert "in slow(x)" in shown and "----> 3     time.sleep(3600)" in shown, shown
    assert GRADMAGIC_FILES not in shown and "gradmagic" not in shown, shown
    assert run(client, "print(40 + 2)")["shown"].strip() == "42"

    # In the cell, before its op is defined: the cell fails to define it, so the previous op stays.
    shown = _interrupted(
        manager,
        client,
        "%%custom_gradient --check x=tf.constant([1., 2.])\ntime.sleep(3600)\ndef kept(x):\n"
        "    return x, lambda dy: dy\n",
    )
    assert "----> 2 time.sleep(3600)" in shown and GRADMAGIC_FILES not in shown, shown
    after = run(client, "print(float(kept(tf.constant(2.))))")
    assert after["status"] == "ok" and after["shown"].strip() == "6.0", after["shown"]


# -- the cell's function, its name, Keras ---------------------------------------------------------------------------


@pytest.mark.parametrize("decorator", ["@tf.function", "@tf.function(jit_compile=True)"])
def test_tf_function_on_the_cells_function_compiles_the_op_made_beneath_it(nb, decorator):
    run = nb.ok(f"%%custom_gradient --check x=tf.constant([1., 2.])\n{decorator}\n" + SQUARE)
    bound = nb.ns["square"]
    assert hasattr(bound, "python_function"), type(bound)  # a tf.function, as written: it stays compiled
    assert "passes" in run.stdout and "cell-definition" in run.stdout, run.stdout
    said = " ".join(run.stdout.split())
    assert f"`{decorator}`, cell line 2): the magic's tf.custom_gradient is applied beneath them" in said
    nb.ok("x = tf.constant([3.])\nwith tf.GradientTape() as tape:\n    tape.watch(x)\n    y = square(x)")
    assert float(nb.ns["tape"].gradient(nb.ns["y"], nb.ns["x"])[0]) == 6.0


def test_a_decorator_of_the_users_wraps_the_op_as_written(nb):
    nb.ok("import functools\ndef wrapped(function):\n    return functools.partial(function)")
    run = nb.ok("%%custom_gradient --check x=tf.constant([1., 2.])\n@wrapped\n" + SQUARE)
    assert isinstance(nb.ns["square"], functools.partial) and "passes" in run.stdout, run.stdout


@pytest.mark.parametrize(
    "cell",
    [
        "%%custom_gradient --check x=tf.constant([1., 2.])\ndef tf(x):\n    return x * x, lambda dy: dy * 2 * x\n",
        "%%custom_gradient tf(x) --check x=tf.constant([1., 2.])\nreturn x * x, lambda dy: dy * 2 * x\n",
    ],
)
def test_an_op_named_like_the_tf_module_is_refused_and_the_module_kept(nb, cell):
    module = nb.ns["tf"]
    run = nb.fails(cell, UsageError)
    assert "The op would be bound to `tf`, which is the module tensorflow in the notebook" in run.stderr
    assert "Give the function another name" in run.stderr and "the notebook is as before" in run.stderr
    assert nb.ns["tf"] is module
    nb.ok("assert float(tf.reduce_sum(tf.constant([1., 2.]))) == 3.0")


def test_a_keras_gradient_without_the_upstream_fallback_gets_the_portable_form(nb):
    from gradmagic.checking.structure import PORTABLE_FORM

    nb.ok("import keras\nfrom keras import ops")
    for body, outcome in [
        ("return ops.multiply(upstream, 1.0 - 1.0 / ops.add(1, e))", "raised"),
        (
            "if upstream is not None:\n            return ops.multiply(upstream, 1.0 - 1.0 / ops.add(1, e))",
            "returned None",
        ),
    ]:
        nb.ok(
            "%%custom_gradient --keras --check x=np.array([-5., 0., 100.])\ndef log1pexp(x):\n    e = ops.exp(x)\n"
            f"    def grad(*args, upstream=None):\n        {body}\n    return ops.log(1 + e), grad\n"
        )
        found = problem(nb.ns["_"], "backend-signature")
        assert codes(nb.ns["_"]) == ["backend-signature"] and found.location.line == 4
        assert "passes the upstream gradient positionally, in `*args`, so `upstream` keeps its default None" in (
            found.message
        )
        assert f"the gradient function {outcome}" in found.message and PORTABLE_FORM in found.message


# -- a tf.Variable as an input ----------------------------------------------------------------------------------------


def test_a_variable_given_as_an_input_reaches_the_forward_as_the_variable(nb):
    nb.ok("v = tf.Variable([1., 2.], name='v')")
    nb.ok(
        "%%custom_gradient --check x=v\ndef twice(x):\n    print(type(x).__name__)\n"
        "    return x * 2, lambda dy: dy * 2\n"
    )
    assert nb.ns["_"].ok, nb.ns["_"]
    # What the forward printed is kept out of the notebook, its first line named: the structure checks' eager call,
    # as `twice(v)` runs it.
    assert "the first: `ResourceVariable`" in problem(nb.ns["_"], "op-output").message
    report = gradmagic.check(tf.custom_gradient(lambda x: (x * 2, lambda dy: dy * 2)), nb.ns["v"])
    assert report.ok and [row.name for row in report.tensors if row.role == "variable"] == []


def test_an_op_that_uses_its_variable_input_as_a_variable_is_told_why_it_fails_in_tf_function(nb):
    nb.ok("v = tf.Variable([1., 2.], name='v')")
    nb.ok(
        "%%custom_gradient --check x=v\ndef bumps(x):\n    x.assign_add(tf.zeros_like(x))\n"
        "    return x * 2, lambda dy: dy * 2\n"
    )
    found = problem(nb.ns["_"], "graph-mismatch")
    assert "'SymbolicTensor' object has no attribute 'assign_add'. `x` is a variable: inside tf.function" in (
        found.message
    )
    assert "tf.custom_gradient reads a tf.Variable input into a tensor of its value" in found.message
    np.testing.assert_array_equal(nb.ns["v"].numpy(), [1.0, 2.0])
