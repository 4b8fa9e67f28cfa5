"""`gradmagic.watch()` on Keras's JAX and PyTorch backends: `keras.ops.custom_gradient` ops recorded in `model.fit`
(Keras's `jax.jit` train step; PyTorch's eager one), `evaluate`, `predict`, a `jax.jit` training loop over
`model.stateless_call`, an eager JAX loop and a PyTorch loop, and checked with the Keras adapter at the inputs they
received. Keras fixes its backend at import: each backend runs in a fresh Python (`backend_process.py`), all three
real (Keras, JAX, PyTorch), with no mocks."""

import pytest
from backend_process import BackendProcess

#: A layer calling three ops: `scaled_tanh` correct, `soft_square` with a gradient 1.5 times too large, `row_norm`
#: whose gradient is 0 / 0 at the all-zero rows of the second batch; a model trained on them for an epoch of 4 steps
#: under a watch, and the same model trained without it; what both processes report.
_SETUP = """
import numpy as np, keras, gradmagic
from keras import ops


def upstream_of(args, upstream):
    return args[0] if upstream is None else upstream


@keras.ops.custom_gradient
def scaled_tanh(x):
    y = ops.tanh(x)
    return y, lambda *args, upstream=None: upstream_of(args, upstream) * (1 - y * y)


@keras.ops.custom_gradient
def soft_square(x):
    return x * x / (1 + x * x), lambda *args, upstream=None: upstream_of(args, upstream) * 3 * x / (1 + x * x) ** 2


@keras.ops.custom_gradient
def row_norm(x):
    norm = ops.sqrt(ops.sum(x * x, axis=1, keepdims=True))
    return norm, lambda *args, upstream=None: upstream_of(args, upstream) * x / norm


class Features(keras.layers.Layer):
    def call(self, x):
        h = soft_square(scaled_tanh(x))
        return ops.concatenate([h, row_norm(h)], axis=1)


def model():
    keras.utils.set_random_seed(0)
    net = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(8, use_bias=False), Features(), keras.layers.Dense(1)]
    )
    net.compile(optimizer="sgd", loss="mse")
    return net


rng = np.random.default_rng(0)
x = rng.normal(size=(128, 8)).astype(np.float32)
x[40:44] = 0.0  # rows 8-11 of the second batch: all zero, kept zero (no bias)
y = rng.normal(size=(128, 1)).astype(np.float32)
plain, watched = model(), model()
for net in (plain, watched):
    net.fit(x[:32], y[:32], batch_size=32, verbose=0)  # a train step traced before the watch
plain.fit(x, y, batch_size=32, shuffle=False, verbose=0)
with gradmagic.watch() as watch:
    watched.fit(x, y, batch_size=32, shuffle=False, verbose=0)
    watched.evaluate(x[:64], y[:64], batch_size=32, verbose=0)
    watched.predict(x[:32], batch_size=32, verbose=0)
report = watch.report
first = report.first_nonfinite_gradient


def identical(first, second):
    return all(np.array_equal(a, b, equal_nan=True) for a, b in zip(first.get_weights(), second.get_weights()))


FIT = {
    "framework": [report.framework, report.framework_version],
    "ops": [[op.name, op.calls, op.compiled_calls, op.gradient_calls, op.verdict] for op in report.watched],
    "checked_with": [[op.op.framework, op.op.backend] for op in report.ops],
    "ok": report.ok,
    "first": [first.op, first.call, first.tensor, list(first.index), first.values, first.from_finite],
    "soft_square": [p.message for p in report["soft_square"].report.problems if p.code == "fd-mismatch"],
    "row_norm": [report["row_norm"].checked_call, report["row_norm"].report.codes()],
    "findings": [p.code for p in report["row_norm"].findings],
    "checked_shape": list(report["soft_square"].report.tensors[0].shape),
    "identical": identical(plain, watched),
    "nonfinite_weights": int(sum(np.isnan(w).sum() for w in watched.get_weights())),
    "notes": list(report.notes),
}
"""


def _check_fit(fit: dict, backend: str, compiled: int) -> None:
    """What both backends report of the model.fit epoch (4 steps), evaluate (2 steps) and predict (1 step)."""
    framework, version = fit["framework"]
    assert framework == "keras" and version.startswith("keras 3.") and f", {backend} " in version
    assert fit["checked_with"] == [["keras", backend]] * 3
    # 4 train steps (forward and gradient), 2 test steps, 1 predict step.
    assert fit["ops"] == [
        ["scaled_tanh", 7, compiled, 4, "pass"],
        ["soft_square", 7, compiled, 4, "fail"],
        ["row_norm", 7, compiled, 4, "fail"],
    ]
    assert not fit["ok"]
    assert fit["first"] == ["row_norm", 2, "x", [8, 0], "NaN", True]
    assert len(fit["soft_square"]) == 1 and "1.5 times the finite differences" in fit["soft_square"][0]
    checked_call, codes = fit["row_norm"]
    assert checked_call == 2 and "nonfinite-gradient" in codes  # reproduced at the inputs recorded at that call
    assert fit["findings"] == ["watched-nonfinite-gradient"]
    assert fit["checked_shape"] == [32, 8]  # checked at a batch it received
    assert fit["nonfinite_weights"] > 0  # the NaN gradient reached the weights, in both runs alike
    assert fit["identical"]


_JAX = (
    _SETUP
    + """
import jax

original_call = vars(jax.custom_vjp)["__call__"]


def loop_model():
    keras.utils.set_random_seed(1)
    net = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Lambda(scaled_tanh),
                            keras.layers.Dense(1)])
    net.build((None, 8))
    return net


def loss_of(net):
    def loss(trainable, non_trainable, x, y):
        out, _ = net.stateless_call(trainable, non_trainable, x)
        return ops.mean((out - y) ** 2)
    return loss


def train(net, step, batches):
    trainable = [v.value for v in net.trainable_variables]
    non_trainable = [v.value for v in net.non_trainable_variables]
    losses = []
    for xb, yb in batches:
        loss, grads = step(trainable, non_trainable, xb, yb)
        trainable = [w - 0.1 * g for w, g in zip(trainable, grads)]
        losses.append(float(loss))
    return [np.asarray(w) for w in trainable], losses


batches = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 64, 16)]
plain_net, watched_net = loop_model(), loop_model()
plain_step = jax.jit(jax.value_and_grad(loss_of(plain_net)))
watched_step = jax.jit(jax.value_and_grad(loss_of(watched_net)))
train(plain_net, plain_step, batches[:1])
train(watched_net, watched_step, batches[:1])  # traced before the watch
plain_weights, plain_losses = train(plain_net, plain_step, batches)
with gradmagic.watch() as loop_watch:
    watched_weights, watched_losses = train(watched_net, watched_step, batches)
eager_net = loop_model()
with gradmagic.watch() as eager:
    eager_weights, _ = train(eager_net, jax.value_and_grad(loss_of(eager_net)), batches[:2])

RESULT = {
    "fit": FIT,
    "put_back": vars(jax.custom_vjp)["__call__"] is original_call,
    "loop": [[op.name, op.calls, op.compiled_calls, op.gradient_calls, op.verdict] for op in loop_watch.report.watched],
    "loop_identical": plain_losses == watched_losses
    and all(np.array_equal(a, b) for a, b in zip(plain_weights, watched_weights)),
    "loop_shapes": [list(shape) for shape in loop_watch.report["scaled_tanh"].inputs[0].shapes],
    "eager": [[op.name, op.calls, op.compiled_calls, op.gradient_calls, op.verdict] for op in eager.report.watched],
}
"""
)
_TORCH = (
    _SETUP
    + """
import torch

original_call = vars(type(keras.ops.custom_gradient(lambda: None)))["__call__"]


def torch_loop(net, batches):
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for xb, yb in batches:
        optimizer.zero_grad()
        loss = ((net(torch.from_numpy(xb)) - torch.from_numpy(yb)) ** 2).mean()
        loss.backward()
        optimizer.step()
    return [p.detach().numpy().copy() for p in net.parameters()]


def loop_model():
    keras.utils.set_random_seed(1)
    net = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Lambda(scaled_tanh),
                            keras.layers.Dense(1)])
    net.build((None, 8))
    return net


batches = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 64, 16)]
plain_weights = torch_loop(loop_model(), batches)
with gradmagic.watch() as loop_watch:
    watched_weights = torch_loop(loop_model(), batches)

RESULT = {
    "fit": FIT,
    "put_back": vars(type(keras.ops.custom_gradient(lambda: None)))["__call__"] is original_call,
    "loop": [[op.name, op.calls, op.compiled_calls, op.gradient_calls, op.verdict] for op in loop_watch.report.watched],
    "loop_identical": all(np.array_equal(a, b) for a, b in zip(plain_weights, watched_weights)),
}
"""
)


@pytest.fixture(scope="module")
def processes():
    """Both backends' fresh Pythons, run at once: on JAX, model.fit, a jax.jit training loop traced before the watch
    and an eager loop; on PyTorch, model.fit and a plain PyTorch loop (`loss.backward()`)."""
    running = {"jax": BackendProcess("jax", _JAX, timeout=600), "torch": BackendProcess("torch", _TORCH, timeout=600)}
    yield running
    for process in running.values():
        process.close()


@pytest.fixture(scope="module")
def jax_run(processes):
    return processes["jax"].result()


@pytest.fixture(scope="module")
def torch_run(processes):
    return processes["torch"].result()


def test_jax_model_fit_records_compiled_calls_names_the_wrong_and_the_nan_op_and_trains_as_without_the_watch(jax_run):
    result = jax_run
    _check_fit(result["fit"], "jax", compiled=7)  # Keras's train, test and predict steps: jax.jit
    assert result["put_back"]


def test_jax_training_loops_jitted_before_the_watch_and_eager_are_recorded(jax_run):
    result = jax_run
    # The jitted step traced before the watch traced again for it: 4 steps, each a forward and a gradient call.
    assert result["loop"] == [["scaled_tanh", 4, 4, 4, "pass"]]
    assert result["loop_shapes"] == [[16, 4]]
    assert result["loop_identical"]
    assert result["eager"] == [["scaled_tanh", 2, 0, 2, "pass"]]


def test_torch_model_fit_records_every_call_names_the_wrong_and_the_nan_op_and_trains_as_without_the_watch(torch_run):
    result = torch_run
    _check_fit(result["fit"], "torch", compiled=0)  # PyTorch runs eagerly
    assert result["put_back"]


def test_torch_loop_with_loss_backward_is_recorded(torch_run):
    result = torch_run
    assert result["loop"] == [["scaled_tanh", 4, 0, 4, "pass"]]
    assert result["loop_identical"]


_JAX_CTRL_C = """
import numpy as np, keras, jax, gradmagic
from keras import ops
from gradmagic.watching.recording import CallRecorder


@keras.ops.custom_gradient
def scaled_tanh(x):
    y = ops.tanh(x)
    return y, lambda *args, upstream=None: (args[0] if upstream is None else upstream) * (1 - y * y)


original, calls = CallRecorder.forward, []


def forward(self, site, call):  # a Ctrl-C landing in the recording's jax.debug.callback, at its third call
    calls.append(call)
    if len(calls) == 3:
        raise KeyboardInterrupt
    return original(self, site, call)


CallRecorder.forward = forward
step = jax.jit(lambda x: scaled_tanh(x) * 2.0)
try:
    with gradmagic.watch() as watch:
        for _ in range(5):
            step(np.ones(3, np.float32)).block_until_ready()
    raised = None
except BaseException as error:
    raised = error
RESULT = {
    "raised": type(raised).__name__,
    "message": str(raised),
    "cause": type(raised.__cause__).__name__,
    "calls": watch.report.watched[0].calls,
    "skipped": watch.report.ops[0].numerics.skipped_because,
}
"""


def test_jax_a_ctrl_c_landing_in_the_recording_callback_is_given_back_as_a_ctrl_c():
    """JAX runs a jitted step's `jax.debug.callback` on the calling thread: a Ctrl-C landing there comes out of the
    step as a JaxRuntimeError; the watch gives it back as the KeyboardInterrupt it was, its ops not checked."""
    process = BackendProcess("jax", _JAX_CTRL_C)
    try:
        result = process.result()
    finally:
        process.close()
    assert result["raised"] == "KeyboardInterrupt" and "landed in the watch's recording" in result["message"]
    assert "RuntimeError" in result["cause"], result
    assert result["calls"] == 2 and result["skipped"] == "not checked: the watch was interrupted"
