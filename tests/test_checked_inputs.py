"""The report records what it checked (issue 30, point 3): the inputs it ran at (the expressions as typed, and their
dtype, shape and range), where they came from (the cell's --check, %gradcheck, gradmagic.check, a Re-check, a watched
call), and the options given and how; in the data, the text and the HTML."""

from __future__ import annotations

import html

import tensorflow as tf

import gradmagic
from gradmagic.notebook import contexts
from gradmagic.render.html import render_html
from gradmagic.render.text import render_text
from gradmagic.render.words import report_words
from gradmagic.report import Report

SOFTPLUS = "def softplus(x):\n    return tf.math.softplus(x), lambda u: u * tf.sigmoid(x)\n"


def test_a_cells_report_records_its_inputs_as_typed_and_their_values(nb):
    run = nb.ok("%%custom_gradient --check x=tf.constant([-5., 0., 100.])\n" + SOFTPLUS)
    report = nb.ns["_"]
    (given,) = report.inputs
    assert (given.name, given.expression, given.dtype, given.shape) == (
        "x",
        "tf.constant([-5., 0., 100.])",
        "float32",
        (3,),
    )
    assert (given.minimum, given.maximum, report.inputs_from) == (-5.0, 100.0, "the cell's --check")
    said = "Checked at x=tf.constant([-5., 0., 100.]) (float32 [3], -5 to 100) from the cell's --check."
    assert said in run.stdout.replace("\n  ", " "), run.stdout
    data = report.to_dict()
    assert (
        data["inputs"][0]["expression"] == "tf.constant([-5., 0., 100.])"
        and data["inputs_from"] == "the cell's --check"
    )
    assert Report.from_dict(data).inputs == report.inputs


def test_a_recheck_at_other_inputs_says_so_in_its_report(nb):
    nb.ok("%%custom_gradient --check x=tf.constant([-5., 0., 100.])\n" + SOFTPLUS)
    context = contexts.context_of(nb.ns["_"])
    again = context.recheck("x=tf.constant([0.5, 2.0])", {})
    assert again.inputs_from == "Re-check, not the cell's --check"
    assert again.inputs[0].expression == "tf.constant([0.5, 2.0])" and again.inputs[0].maximum == 2.0
    words = report_words(again).checked_at
    assert words.startswith("Checked at x=tf.constant([0.5, 2.0]) (float32 [2], 0.5 to 2) by Re-check, not the cell's")
    assert html.escape(words) in render_html(again) and "by Re-check, not the cell's --check" in render_text(
        again
    ).replace("\n  ", " ")
    # The same inputs again, with another tolerance: not other inputs, but the option's source says the Re-check's.
    same = contexts.context_of(again).recheck("", {"rtol": 1e-3})
    assert same.inputs_from == "Re-check, not the cell's --check"
    assert "rtol=0.001 (the Re-check's rtol)" in report_words(same).checked_at


def test_options_are_listed_with_where_they_were_given_and_defaults_are_not(nb):
    plain = nb.ok("%%custom_gradient --check x=tf.constant([1.])\n" + SOFTPLUS)
    assert "options given" not in plain.stdout
    nb.ok("%config GradientMagics.rtol = 1e-3")
    configured = nb.ok("%%custom_gradient --eps 1e-6 --check x=tf.constant([1.])\n" + SOFTPLUS).stdout.replace(
        "\n  ", " "
    )
    assert "options given:" in configured and "rtol=0.001 (%config GradientMagics.rtol)" in configured, configured
    assert "eps=1e-06 (--eps)" in configured and "full_threshold" not in configured
    nb.ok("%config GradientMagics.rtol = None")


def test_gradcheck_and_the_python_api_say_where_their_inputs_came_from(nb):
    nb.ok("%%custom_gradient\n" + SOFTPLUS)
    report = nb.ok("r = %gradcheck softplus x=tf.constant([2., 3.])") and nb.ns["r"]
    assert report.inputs_from == "%gradcheck" and report.inputs[0].expression == "tf.constant([2., 3.])"

    @tf.custom_gradient
    def square(x):
        return x * x, lambda u: 2 * u * x

    checked = gradmagic.check(square, tf.constant([[1.0, -2.0]]), rtol=1e-4)
    assert checked.inputs_from == "gradmagic.check's arguments" and checked.inputs[0].expression is None
    assert report_words(checked).checked_at == (
        "Checked at x (float32 [1, 2], -2 to 1) from gradmagic.check's arguments; options given: rtol=0.0001."
    )


def test_a_watched_calls_report_names_the_call_it_was_checked_at():
    @tf.custom_gradient
    def doubled(x):
        return 2 * x, lambda u: 3 * u  # wrong: 2 is right

    with gradmagic.watch() as watched:
        x = tf.Variable([1.0, 2.0])
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(doubled(x))
        tape.gradient(y, x)
    (op,) = watched.report.watched
    assert op.report.inputs_from.startswith("the watched code's call 1 of `doubled`"), op.report.inputs_from
    assert op.report.inputs[0].maximum == 2.0
