"""`gradmagic.watch()` and `%%gradwatch`: custom gradients checked where they live, on real Keras models and training
loops (compiled by model.fit, in the user's tf.function, eager), in a real IPython shell, and in TensorFlow 1's graph
mode in a fresh Python."""

import json
import queue
import shutil
import signal
import time
import warnings

import jsonschema
import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import ARTIFACTS, codes, problem, run, run_python
from IPython.core.error import UsageError
from keras.src.backend.tensorflow.trainer import TensorFlowTrainer
from tensorflow.python.eager.polymorphic_function.polymorphic_function import Function
from tensorflow.python.framework import ops as tf_ops
from tensorflow.python.ops import custom_gradient as tf_custom_gradient

import gradmagic
from gradmagic.errors import GradmagicError, OptionError
from gradmagic.notebook.display import report_bundle, watch_bundle
from gradmagic.render.html import render_watch_html
from gradmagic.render.text import render_watch_text
from gradmagic.render.words import watch_data
from gradmagic.report import WATCH_MIME_TYPE, WatchReport, watch_schema
from gradmagic.watching.recording import CallRecorder


@tf.custom_gradient
def scaled_tanh(x):
    """Correct."""
    y = tf.tanh(x)
    return y, lambda dy: dy * (1 - y * y)


@keras.ops.custom_gradient
def soft_square(x):
    """x² / (1 + x²), its gradient 1.5 times too large (a Keras op, on Keras's TensorFlow backend)."""

    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        return upstream * 3 * x / (1 + x * x) ** 2

    return x * x / (1 + x * x), grad


@tf.custom_gradient
def row_norm(x):
    """The norm of each row, its gradient NaN at an all-zero row (0 / 0)."""
    norm = tf.norm(x, axis=1, keepdims=True)
    return norm, lambda dy: dy * x / norm


class Features(keras.layers.Layer):
    """A layer calling three custom-gradient ops."""

    def call(self, x):
        h = soft_square(scaled_tanh(x))
        return tf.concat([h, row_norm(h)], axis=1)


BATCH = 32
ZERO_ROWS = slice(40, 44)  # in the second batch (rows 32-63), its rows 8-11: all zero, and kept zero (no bias)


def features_model() -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(8, use_bias=False), Features(), keras.layers.Dense(1)]
    )
    model.compile(optimizer="sgd", loss="mse")
    return model


def training_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4 * BATCH, 8)).astype(np.float32)
    x[ZERO_ROWS] = 0.0
    return x, rng.normal(size=(4 * BATCH, 1)).astype(np.float32)


def global_settings() -> dict:
    """Everything a watch changes while it runs."""
    return {
        "decorators": (tf_custom_gradient._eager_mode_decorator, tf_custom_gradient._graph_mode_decorator),
        "tf.function call": Function.__call__,
        "keras": tuple(vars(TensorFlowTrainer)[f"make_{kind}_function"] for kind in ("train", "test", "predict")),
    }


@pytest.fixture(scope="module")
def fitted():
    """A model trained for an epoch with model.fit (Keras's compiled train function) under a watch, after one step
    before it (so that the model has a train function of its own to get back)."""
    model = features_model()
    x, y = training_data()
    model.fit(x[:BATCH], y[:BATCH], batch_size=BATCH, verbose=0)
    before = model.train_function
    settings = global_settings()
    with gradmagic.watch() as watch:
        history = model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    return {"model": model, "before": before, "settings": settings, "history": history, "report": watch.report}


def test_model_fit_names_the_wrong_op_the_nan_op_and_passes_the_correct_one(fitted):
    report = fitted["report"]
    assert [op.op.name for op in report.ops] == ["scaled_tanh", "soft_square", "row_norm"]
    assert [(op.calls, op.compiled_calls, op.gradient_calls) for op in report.watched] == [(4, 4, 4)] * 3
    assert [op.verdict for op in report.watched] == ["pass", "fail", "fail"] and not report.ok

    wrong = report["soft_square"]
    mismatch = problem(wrong.report, "fd-mismatch")
    assert "1.5 times the finite differences" in mismatch.message
    assert wrong.report.tensors[0].shape == (BATCH, 8)  # checked at a batch it received, not at an example

    first = report.first_nonfinite_gradient
    assert (first.op, first.call, first.kind, first.tensor, first.index) == ("row_norm", 2, "gradient", "x", (8, 0))
    assert first.from_finite and first.values == "NaN" and first.elements == 4 * 8
    nan_op = report["row_norm"]
    assert nan_op.checked_call == 2 and "first non-finite gradient" in next(
        checked.reasons for checked in nan_op.checked if checked.call == 2
    )
    assert "nonfinite-gradient" in codes(nan_op.report)  # reproduced at the inputs recorded at that call
    assert problem(nan_op.report, "nonfinite-gradient").location.index == (8, 0)
    assert [p.code for p in nan_op.findings] == ["watched-nonfinite-gradient"]
    # The other ops' gradients went non-finite only from the NaN that row_norm passed down.
    assert not report["soft_square"].first_nonfinite_gradient.from_finite

    assert {p.op for p in report.problems if p.severity == "error"} == {"soft_square", "row_norm"}
    assert all(p.op in p.__str__() for p in report.problems)


def test_model_fit_records_what_each_op_received(fitted):
    report = fitted["report"]
    tanh = report["scaled_tanh"]
    assert tanh.where.endswith(f"test_watch.py, line {scaled_tanh.__wrapped__.__code__.co_firstlineno}")
    (received,) = tanh.inputs
    assert (received.name, received.dtype, received.shapes) == ("x", "float32", ((BATCH, 8),))
    assert received.minimum < 0 < received.maximum and received.nonfinite_calls == 2  # NaN weights after step 2
    assert report["row_norm"].outputs[0].shapes == ((BATCH, 1),)
    assert all(len(op.checked) <= 5 for op in report.watched)
    assert 0 < report.kept_bytes <= report.memory_limit
    assert report.timings["watched"] > report.timings["recording"] > 0 and report.timings["checks"] > 0


def test_the_time_the_watch_added_is_reported_its_retrace_named():
    """A model fitted once has its compiled train function; under the watch it is traced again (with the recording):
    that retrace is most of the time the watch adds, and the report says so, not "watched N ms, of which recording
    1 ms" as if the rest were the model's own time."""
    from gradmagic.render.text import watch_timings

    model = features_model()
    x, y = training_data()
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    started = time.perf_counter()
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    unwatched = time.perf_counter() - started
    started = time.perf_counter()
    with gradmagic.watch(check=False) as watch:
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    block = time.perf_counter() - started
    timings = watch.report.timings
    assert timings["watched"] <= block  # the block, the watch's own part in it
    added = timings["before_first_call"] + timings["recording"] + timings["setup"]
    assert timings["before_first_call"] > timings["recording"] and added <= timings["watched"]
    assert timings["watched"] - added < max(2 * unwatched, 0.05), (timings, unwatched)  # what is left: the epoch
    text = watch_timings(watch.report)
    assert f"up to {timings['before_first_call'] * 1e3:.0f} ms tracing compiled code again for the watch" in text
    assert "setting up and putting back" in text and "recording" in text
    with gradmagic.watch(check=False) as eager:  # no compiled code: no retrace to name
        scaled_tanh(tf.constant([1.0]))
    assert "before_first_call" not in eager.report.timings and "tracing" not in watch_timings(eager.report)


def test_model_fit_runs_its_steps_and_gets_everything_back(fitted):
    assert len(fitted["history"].history["loss"]) == 1
    assert global_settings() == fitted["settings"]
    assert fitted["model"].train_function is fitted["before"]


def test_custom_training_loop_with_an_op_called_from_several_layers_runs_as_without_the_watch():
    class Softsign(keras.layers.Layer):
        @tf.custom_gradient
        def softsign(self, x):
            return x / (1 + tf.abs(x)), lambda dy: dy / (1 + tf.abs(x)) ** 2

        def call(self, x):
            return self.softsign(x)

    def model():
        keras.utils.set_random_seed(1)
        layers = [keras.Input((8,))]
        for width in (6, 4, 2):
            layers += [keras.layers.Dense(width), Softsign()]
        return keras.Sequential(layers + [keras.layers.Dense(1)])

    @tf.function
    def step(net, optimizer, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((net(x) - y) ** 2)
        optimizer.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
        return loss

    rng = np.random.default_rng(1)
    batches = [(rng.normal(size=(16, 8)).astype("f4"), rng.normal(size=(16, 1)).astype("f4")) for _ in range(4)]
    watched, plain = model(), model()
    optimizers = {id(watched): keras.optimizers.SGD(0.1), id(plain): keras.optimizers.SGD(0.1)}
    losses = {id(net): [float(step(net, optimizers[id(net)], *batches[0]))] for net in (watched, plain)}
    with gradmagic.watch() as watch:  # `step` was traced before: a copy of it is traced for the watch
        losses[id(watched)] += [float(step(watched, optimizers[id(watched)], x, y)) for x, y in batches[1:]]
    losses[id(plain)] += [float(step(plain, optimizers[id(plain)], x, y)) for x, y in batches[1:]]

    assert losses[id(watched)] == losses[id(plain)]
    for mine, theirs in zip(watched.get_weights(), plain.get_weights()):
        np.testing.assert_array_equal(mine, theirs)
    assert step.experimental_get_tracing_count() == 2  # its own traces, one per model: the copy is gone
    (op,) = watch.report.watched
    assert (op.name, op.calls, op.compiled_calls, op.gradient_calls) == ("softsign", 9, 9, 9)
    assert op.inputs[0].shapes == ((16, 6), (16, 4), (16, 2))  # one op, three layers
    assert op.verdict == "pass" and [(checked.call, checked.reasons[-1]) for checked in op.checked] == [
        (1, "smallest values"),
        (2, "first call with input shape [16, 4]"),  # checked at what each layer fed it
        (3, "first call with input shape [16, 2]"),
    ]
    assert any("tf.function `step` was traced before the watch" in note for note in watch.report.notes)


def test_a_tf_function_first_traced_under_the_watch_forgets_that_trace_when_it_ends():
    @tf.function
    def total(x):
        return tf.reduce_sum(scaled_tanh(x))

    def op_types():
        return {op.type for op in total.get_concrete_function(x).graph.get_operations()}

    x = tf.constant([1.0, 2.0])
    with gradmagic.watch(check=False) as watch:
        during = total(x)
        assert "PyFunc" in op_types()  # the recording's tf.numpy_function
    assert watch.report["scaled_tanh"].compiled_calls == 1
    assert total.experimental_get_tracing_count() == 0 and total(x) == during
    assert "PyFunc" not in op_types()


def test_eager_nested_ops_and_a_declared_surrogate():
    @tf.custom_gradient
    def inner(x):
        return 2 * x, lambda dy: 2 * dy

    @tf.custom_gradient
    def outer(x):
        y = inner(x)
        return tf.sin(y), lambda dy: 2 * dy * tf.cos(y)

    @tf.custom_gradient
    def straight_through(x):
        return tf.round(x), lambda dy: dy

    x = tf.constant([[0.3, -1.2], [2.5, 0.7]])
    with gradmagic.watch(surrogates={"straight_through"}) as watch:
        for _ in range(3):
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = tf.reduce_sum(outer(x) * straight_through(x))
            tape.gradient(loss, x)
        assert gradmagic.check(outer, x).ok  # a check's own calls are not the watched code's
    report = watch.report
    assert [(op.name, op.calls, op.compiled_calls, op.gradient_calls) for op in report.watched] == [
        ("inner", 3, 0, 0),  # its calls end first; outer's custom gradient stands for its gradient
        ("outer", 3, 0, 3),
        ("straight_through", 3, 0, 3),
    ]
    assert [op.verdict for op in report.watched] == ["pass", "pass", "surrogate"] and report.ok


def problem_of(op, code):
    return next(finding for finding in op.findings if finding.code == code)


def test_everything_is_put_back_after_an_error_and_a_ctrl_c():
    settings = global_settings()
    x = tf.constant([1.0, 2.0])
    with pytest.raises(ValueError, match="training went wrong"):
        with gradmagic.watch() as failed:
            scaled_tanh(x)
            raise ValueError("training went wrong")
    assert global_settings() == settings
    assert failed.report.error == "ValueError: training went wrong"
    assert failed.report["scaled_tanh"].verdict == "pass"  # what ran before the error is checked

    with pytest.raises(KeyboardInterrupt):
        with gradmagic.watch() as interrupted:
            scaled_tanh(x)
            raise KeyboardInterrupt
    assert global_settings() == settings
    assert interrupted.report.ops[0].numerics.skipped_because == "not checked: the watch was interrupted"


@tf.RegisterGradient("GradmagicTestHalfSign")
def _half_sign(op, upstream):
    return 0.5 * upstream


@tf.RegisterGradient("GradmagicTestSquare")
def _square_gradient(op, upstream):
    return 3.0 * upstream * op.inputs[0]  # 1.5 times too large


def test_registered_gradients_are_recorded_and_checked_through_their_op_and_the_registry_put_back():
    """Gradients registered with tf.RegisterGradient, applied by overrides in a tf.function: each taken gradient is
    an op of the report (named as registered, defined where its def is), recorded at every run of the backward with
    the inputs of the op it was taken for, and checked through that op built under the override. TensorFlow's own
    registered gradients (Exp's) are not."""

    @tf.function
    def step(x):
        overrides = {"Sign": "GradmagicTestHalfSign", "Square": "GradmagicTestSquare"}
        with tf.compat.v1.get_default_graph().gradient_override_map(overrides):
            return tf.sign(x) + tf.square(x) + scaled_tanh(x) + tf.exp(x)

    lookup = type(tf_ops._gradient_registry).lookup
    with gradmagic.watch(surrogates=["GradmagicTestHalfSign"]) as watch:
        for values in ([0.5, -2.0], [1.5, 3.0]):
            x = tf.constant(values)
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = step(x)
            expected = 0.5 + 3 * x + (1 - np.tanh(x) ** 2) + np.exp(x)
            np.testing.assert_allclose(tape.gradient(y, x), expected, rtol=1e-6)  # training as without the watch
    assert type(tf_ops._gradient_registry).lookup is lookup
    report = watch.report
    assert sorted(op.name for op in report.watched) == ["GradmagicTestHalfSign", "GradmagicTestSquare", "scaled_tanh"]
    square = report["GradmagicTestSquare"]
    assert (square.calls, square.compiled_calls, square.gradient_calls) == (2, 2, 2)
    assert square.verdict == "fail" and "fd-mismatch" in square.report.codes()
    assert square.where.endswith(f"test_watch.py, line {_square_gradient.__code__.co_firstlineno}")
    assert square.inputs[0].name == "x" and (square.inputs[0].minimum, square.inputs[0].maximum) == (-2.0, 3.0)
    assert report["GradmagicTestHalfSign"].verdict == "surrogate"
    assert report["scaled_tanh"].verdict == "pass" and not report.ok


def test_a_ctrl_c_landing_in_the_recording_inside_compiled_code_is_given_back_as_a_ctrl_c(monkeypatch):
    """A Ctrl-C lands wherever Python runs, also in the watch's tf.numpy_function callback of a step run on the main
    thread, where TensorFlow turns the KeyboardInterrupt into an UnknownError. The watch gives it back as the Ctrl-C
    it was (TensorFlow's error its cause), its ops not checked, as for a Ctrl-C anywhere else. Here it lands at the
    recording's third call (the recorder raises it there, as a signal arriving at that moment would)."""
    original, calls = CallRecorder.forward, []

    def forward(self, site, call):
        calls.append(call)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return original(self, site, call)

    monkeypatch.setattr(CallRecorder, "forward", forward)

    @tf.function
    def step(x):
        return scaled_tanh(x) * 2.0

    settings = global_settings()
    with pytest.raises(KeyboardInterrupt, match="landed in the watch's recording inside compiled code") as raised:
        with gradmagic.watch() as watch:
            for _ in range(5):
                step(tf.constant([1.0, 2.0]))
    assert isinstance(raised.value.__cause__, tf.errors.UnknownError) and len(calls) == 3
    assert global_settings() == settings
    assert watch.report["scaled_tanh"].calls == 2
    assert watch.report.ops[0].numerics.skipped_because == "not checked: the watch was interrupted"


def test_recording_is_bounded_by_calls_and_memory():
    x = tf.random.normal([64, 64])
    with gradmagic.watch(memory_limit=3 * x.numpy().nbytes) as bounded:
        for scale in np.linspace(0.1, 5.0, 50):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = scaled_tanh(x * scale)
            tape.gradient(y, x)
    op = bounded.report["scaled_tanh"]
    assert op.calls == 50 and [checked.call for checked in op.checked] == [1, 50]  # first, smallest; largest
    assert bounded.report.kept_bytes <= 3 * x.numpy().nbytes

    with gradmagic.watch(memory_limit=0) as nothing_kept:
        scaled_tanh(x)
    op = nothing_kept.report["scaled_tanh"]
    assert op.calls == 1 and op.report.verdict == "unchecked" and "memory limit" in op.report.numerics.skipped_because
    assert nothing_kept.report.calls_not_kept == 3 and "were not kept" in nothing_kept.report.notes[0]
    jsonschema.validate(nothing_kept.report.to_dict(), watch_schema())  # a "not checked" op's report too


def test_bad_options_and_misuse_say_what_to_do():
    with pytest.raises(OptionError, match="rtol must be a finite number at least 0"):
        gradmagic.watch(rtol=-1)
    with pytest.raises(TypeError, match="each op is checked with the framework that made it"):
        gradmagic.watch(framework="keras")
    with pytest.raises(TypeError, match="surrogates="):
        gradmagic.watch(surrogate=True)
    with pytest.raises(OptionError, match="memory_limit must be a whole number of bytes"):
        gradmagic.watch(memory_limit=1.5)
    with pytest.raises(OptionError, match="surrogates must be a collection of op names"):
        gradmagic.watch(surrogates="straight_through")
    watch = gradmagic.watch()
    with pytest.raises(GradmagicError, match="Nothing was watched yet"):
        watch.report
    with watch:
        with pytest.raises(GradmagicError, match="still running"):
            watch.report
        with pytest.raises(GradmagicError, match="Watches do not nest"):
            with gradmagic.watch():
                pass
    assert watch.report.verdict == "unchecked" and not watch.report.watched
    assert "called no custom-gradient op" in render_watch_text(watch.report)


def test_the_report_round_trips_validates_and_renders_safely(fitted):
    report = fitted["report"]
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    jsonschema.validate(data, watch_schema())
    assert WatchReport.from_dict(data).to_dict() == data
    with pytest.raises(ValueError, match="not readable"):
        WatchReport.from_dict({**data, "version": "2.0"})

    text = render_watch_text(report)
    assert text.startswith("watch of 3 custom-gradient ops fails (")
    assert "first non-finite gradient: row_norm, call 2: dx[8, 0] NaN (32 elements), from a finite upstream" in text
    assert "soft_square(x) fails" in text  # each op's own report follows the table

    html = render_watch_html(report)
    assert html.count("<details") >= 3 and "report of row_norm</span></summary>" in html and "<script" not in html
    hostile = WatchReport.from_dict({**data, "notes": ["<script>alert('x')</script>"]})
    assert "&lt;script&gt;" in render_watch_html(hostile) and "<script>" not in render_watch_html(hostile)

    bundle, metadata = watch_bundle(report)  # no kernel here: no widget
    assert set(bundle) == {WATCH_MIME_TYPE, "text/plain", "text/html"} and bundle[WATCH_MIME_TYPE] == watch_data(report)
    assert not metadata
    assert "text/html" in report_bundle(report.ops[1])[0]  # each op's report shows as every Report does


SOFTSIGN_CELL = """%%custom_gradient
def softsign(x):
    return x / (1 + tf.abs(x)), lambda dy: 2 * dy / (1 + tf.abs(x)) ** 2
"""

TRAINING_CELL = """%%gradwatch {name}
losses = []
for _ in range(3):
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(softsign(x) ** 2)
    losses.append(float(loss))
{last}"""


def test_gradwatch_shows_the_report_and_binds_it(nb):
    nb.ok(SOFTSIGN_CELL)
    nb.ok("x = tf.constant([[1.0, -2.0], [0.5, 3.0]])")
    run = nb.ok(TRAINING_CELL.format(name="watched", last="len(losses)"))
    report = run.result.result
    assert isinstance(report, WatchReport) and nb.ns["watched"] is report and nb.ns["losses"][0] > 0
    (op,) = report.watched
    assert op.calls == 3 and op.where == f"Cell In[{nb.last_cell_number - 2}], line 2"
    assert op.report.op.origin == "magic" and "fd-mismatch" in codes(op.report)
    shown = run.stdout.split(None, 1)  # the report, the cell's value, and nothing else: not its last line's value (3)
    assert shown[0] == f"Out[{nb.last_cell_number}]:" and shown[1].startswith("watch of 1 custom-gradient op fails")
    assert run.stdout.count("Out[") == 1


def test_gradwatch_over_model_fit_shows_the_report_alone_not_the_history(nb):
    nb.ns["model"], (nb.ns["x"], nb.ns["y"]) = features_model(), training_data()
    run = nb.ok("%%gradwatch\nmodel.fit(x, y, epochs=1, verbose=0)")
    shown = run.stdout.split(None, 1)
    assert shown[0] == f"Out[{nb.last_cell_number}]:" and shown[1].startswith("watch of 3 custom-gradient ops fails")
    assert run.stdout.count("Out[") == 1 and "History" not in run.stdout and not run.stderr
    assert nb.ns["_"] is run.result.result and isinstance(run.result.result, WatchReport)


def test_gradwatch_on_a_failing_cell_keeps_its_names_and_the_report_and_puts_everything_back(nb):
    nb.ok(SOFTSIGN_CELL)
    nb.ok("x = tf.constant([1.0, 2.0])")
    settings = global_settings()
    run = nb.fails(TRAINING_CELL.format(name="failed", last="1 / 0"), ZeroDivisionError)
    assert global_settings() == settings
    assert len(nb.ns["losses"]) == 3 and nb.ns["failed"].error == "ZeroDivisionError: division by zero"
    assert "Cell In[" in run.shown and "line 8" in run.shown  # the cell's own line, the magic line being 1
    nb.ok("%%gradwatch --no-check\nsoftsign(x)")


def test_gradwatch_usage(nb):
    assert "Run the cell under a watch" in nb.shell.find_magic("gradwatch", "cell").__doc__
    assert "%gradwatch [--no-check] [--memory MB]" in nb.ok("%gradwatch?").stdout
    assert "is a cell magic" in nb.fails("%gradwatch", UsageError).stderr
    assert "--memory is in megabytes" in nb.fails("%%gradwatch --memory -1\npass", UsageError).stderr
    assert "not one" in nb.fails("%%gradwatch 2x\npass", UsageError).stderr
    assert "SyntaxError" in nb.fails("%%gradwatch\ndef (", UsageError).stderr
    with gradmagic.watch():
        assert "Watches do not nest" in nb.fails("%%gradwatch\npass", UsageError).stderr


def test_ctrl_c_in_a_kernel_stops_the_watched_training_shows_the_report_and_puts_everything_back(kernel, tmp_path):
    """As a user stops training that runs too long: Ctrl-C (the kernel's interrupt, SIGINT) once the watched loop
    trains. Should the first interrupt not end the cell within a minute, its kernel's threads are dumped into
    test-artifacts/ and the interrupt is sent again, as a user presses Ctrl-C again; a dead kernel fails at once."""
    manager, client = kernel
    stacks = tmp_path / "kernel-stacks.txt"
    setup = run(
        client,
        f"""
import faulthandler, signal
faulthandler.register(signal.SIGUSR1, file=open({str(stacks)!r}, "w"), all_threads=True)
%load_ext gradmagic
import numpy as np, keras, tensorflow as tf
from tensorflow.python.ops import custom_gradient
from keras.src.backend.tensorflow.trainer import TensorFlowTrainer
def settings():
    return (custom_gradient._eager_mode_decorator, custom_gradient._graph_mode_decorator,
            type(tf.function(abs)).__call__, vars(TensorFlowTrainer)["make_train_function"])
before = settings()

@tf.custom_gradient
def softsign(x):
    return x / (1 + tf.abs(x)), lambda dy: dy / (1 + tf.abs(x)) ** 2

class Softsign(keras.layers.Layer):
    def call(self, x):
        return softsign(x)

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4), Softsign(), keras.layers.Dense(1)])
model.compile("sgd", "mse")
x, y = np.ones((64, 4), "f4"), np.ones((64, 1), "f4")
""",
    )
    assert setup["status"] == "ok", setup["shown"]
    message_id = client.execute(
        "%%gradwatch watched\nfor epoch in range(100_000):\n    model.fit(x, y, verbose=0)\n"
        "    if epoch == 2:\n        print('training', flush=True)"
    )
    wait_for_output(client, message_id, "training")  # the watched loop runs, recorded
    manager.interrupt_kernel()
    interrupted = run_until_reply(client, message_id, timeout=60)
    if interrupted is None:
        assert manager.is_alive(), "the kernel died when interrupted"
        manager.signal_kernel(signal.SIGUSR1)
        time.sleep(2)
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(stacks, ARTIFACTS / "ctrl-c-kernel-stacks.txt")
        warnings.warn("The first Ctrl-C did not end the watched cell in 60 s; its threads then are in "
                      "test-artifacts/ctrl-c-kernel-stacks.txt; the interrupt was sent again", stacklevel=1)
        manager.interrupt_kernel()
        interrupted = run_until_reply(client, message_id)
    assert interrupted is not None, "two interrupts did not end the watched cell"
    assert interrupted["status"] == "error" and interrupted["ename"] == "KeyboardInterrupt"
    (shown,) = [output for output in interrupted["outputs"] if WATCH_MIME_TYPE in output]
    assert "text/html" in shown and "softsign" in shown["text/plain"]

    after = run(
        client,
        """
print(settings() == before, epoch > 0, watched["softsign"].calls > 0, watched.ops[0].numerics.skipped_because)
""",
    )
    assert after["shown"].strip() == "True True True not checked: the watch was interrupted"


def test_gradwatch_over_model_fit_in_a_kernel_shows_the_report_alone(kernel):
    """In a real kernel, as JupyterLab runs the cell (naming it): one output, the report (with its live widget),
    never `<keras.src.callbacks.history.History at 0x...>` above it."""
    _, client = kernel
    setup = run(
        client,
        """
%load_ext gradmagic
import numpy as np, keras, tensorflow as tf

@tf.custom_gradient
def softsign(x):
    return x / (1 + tf.abs(x)), lambda dy: 2 * dy / (1 + tf.abs(x)) ** 2

class Softsign(keras.layers.Layer):
    def call(self, x):
        return softsign(x)

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4), Softsign(), keras.layers.Dense(1)])
model.compile("sgd", "mse")
x, y = np.ones((64, 4), "f4"), np.ones((64, 1), "f4")
""",
    )
    assert setup["status"] == "ok", setup["shown"]
    ran = run(client, "%%gradwatch\nmodel.fit(x, y, epochs=1, verbose=0)", cell_id="fit-cell")
    assert ran["status"] == "ok", ran["shown"]
    (shown,) = ran["outputs"]
    assert WATCH_MIME_TYPE in shown and shown["text/plain"].startswith("watch of 1 custom-gradient op fails")
    assert "History" not in ran["shown"] and ran["shown"] == shown["text/plain"]
    after = run(client, "print(type(_).__name__, _.watched[0].calls > 0)")
    assert after["shown"].strip() == "WatchReport True"


def wait_for_output(client, message_id: str, text: str, timeout: float = 300) -> None:
    """Wait until the running cell `message_id` prints `text`."""
    deadline = time.monotonic() + timeout
    while True:
        message = client.get_iopub_msg(timeout=max(deadline - time.monotonic(), 0.1))
        if message["parent_header"].get("msg_id") != message_id:
            continue
        if message["msg_type"] == "stream" and text in message["content"]["text"]:
            return
        assert message["msg_type"] != "error", message["content"]["evalue"]


def run_until_reply(client, message_id: str, timeout: float = 120) -> dict | None:
    """The outputs a cell sent and its reply, once it has ended; None when no message came for `timeout` seconds."""
    outputs, content = [], {}
    while True:
        try:
            message = client.get_iopub_msg(timeout=timeout)
        except queue.Empty:
            return None
        if message["parent_header"].get("msg_id") != message_id:
            continue
        if message["msg_type"] in ("display_data", "execute_result"):
            outputs.append(message["content"]["data"])
        if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
            break
    while not content:
        reply = client.get_shell_msg(timeout=120)
        if reply["parent_header"].get("msg_id") == message_id:
            content = reply["content"]
    return {**content, "outputs": outputs}


def test_tensorflow_1_graph_mode_records_a_graph_built_under_the_watch():
    output = run_python(
        """
import json
import numpy as np
import tensorflow as tf
tf.compat.v1.disable_eager_execution()
import gradmagic

@tf.custom_gradient
def wrong(x):
    return x * x, lambda dy: dy * 3.0 * x

with gradmagic.watch() as watch:
    x = tf.compat.v1.placeholder(tf.float32, [None, 3])
    gradient = tf.gradients(tf.reduce_sum(wrong(x)), x)
    with tf.compat.v1.Session() as session:
        for scale in (1.0, 2.0, 3.0):
            session.run(gradient, {x: np.full((2, 3), scale, np.float32)})
(op,) = watch.report.watched
print(json.dumps([op.calls, op.compiled_calls, op.gradient_calls, op.verdict, op.report.op.mode, op.report.codes()]))
"""
    )
    calls, compiled, gradients, verdict, mode, found = json.loads(output.strip().splitlines()[-1])
    assert (calls, compiled, gradients, verdict, mode) == (3, 3, 3, "fail", "graph") and "fd-mismatch" in found
