"""How messages name TensorFlow's things, and what TensorFlow's own messages mean (measured with TensorFlow 2.21)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from gradmagic.frameworks.wording import ADVISED_OPS, KeywordRefusal, Wording, keras_on

# TensorFlow 1's tf.cond (tf.compat.v1.disable_v2_behavior()) on a vector, when the graph is built.
# The gradient of tf.py_function asking for the tape its forward's run left, which an earlier gradient took.
_PY_FUNCTION_TAPE = re.compile(r"KeyError: b'pyfunc_\d+'")
_VECTOR_COND_V1 = re.compile(r"Shape must be rank 0 but is rank \d+ for '\{\{node [^}]*Switch\}\}")
#: TensorFlow's ops, as advice names them: `tf.` and the op's name (softplus is `tf.math.softplus`).
_OPS = {**{op: f"tf.{op}" for op in ADVISED_OPS}, "softplus": "tf.math.softplus"}


@dataclass(frozen=True)
class TensorFlowWording(Wording):
    """TensorFlow's errors carry more than their message: the stack that created a failing graph op, framing."""

    def message(self, error: BaseException) -> str:
        # A TensorFlow error raised by a graph that ran: `str` appends the stack that created the failing op.
        message = getattr(error, "message", None)
        return message if isinstance(message, str) else str(error)

    def cause(self, error: BaseException) -> str:
        # TensorFlow puts the sentence that says what went wrong last, after 'in user code:' and frames.
        text = self.message(error)
        lines = [
            line.strip() for line in text.strip().splitlines() if line.strip() and not line.strip().startswith("[[")
        ]
        if ("in user code:" in text or "Graph execution error" in text) and lines:
            return lines[-1]
        return " ".join(lines[:3])

    def is_ambiguous_truth(self, error: BaseException) -> bool:
        return super().is_ambiguous_truth(error) or bool(_VECTOR_COND_V1.search(str(error)))

    def autodiff_failure(self, error: BaseException) -> str | None:
        if _PY_FUNCTION_TAPE.search(self.message(error)):
            return f"it uses {self.eager_python_function} ({self.eager_python_function_gradient})"
        return None

    def created_line(self, error: BaseException, filename: str) -> int | None:
        frames = getattr(getattr(error, "op", None), "traceback", None) or ()
        lines = [frame.lineno for frame in frames if frame.filename == filename]
        return lines[-1] if lines else None


TENSORFLOW = TensorFlowWording(
    framework="TensorFlow",
    default_variable_name=r"Variable(_\d+)?",  # `tf.Variable(...)` without a name
    runs_on="TensorFlow",
    decorator="tf.custom_gradient",
    autodiff="TensorFlow's own gradient",
    compiled="inside tf.function",
    **_OPS,
    wrong_shape="TensorFlow accepts this silently and fails later, far away.",
    wrong_count="TensorFlow reports this only when the gradient is taken, and inside tf.function as an InternalError "
    "about 'too few gradients'.",
    conditional="A Python `if` (or `tf.cond`)",
    ambiguous_truth=("truth value of an array", "symbolic `tf.Tensor` as a Python `bool`"),
    keywords=KeywordRefusal(
        ("keywords arguments only when eager",), "tf.custom_gradient refuses keyword arguments inside tf.function"
    ),
    python_function="tf.numpy_function",
    # Measured with TensorFlow 2.21: the gradient of tf.py_function pops what the forward's run recorded, so a second
    # gradient from the same run (a persistent tape, a Jacobian's rows) fails.
    eager_python_function="tf.py_function",
    eager_python_function_gradient="TensorFlow takes its gradient, autodiff of the Python function as it ran, at most "
    "once per run of the forward: a second one, as every row of a Jacobian is, fails with `KeyError: b'pyfunc_N'`",
    override="gradient_override_map",
    registers="tf.RegisterGradient",
    override_scope="to the gradient TensorFlow takes of a graph: a tf.function's, taken outside it (a tape around its "
    "call; a tape inside the same tf.function ignores overrides), or tf.gradients in TensorFlow 1's graph mode",
    variable_input="tf.custom_gradient reads a tf.Variable input into a tensor of its value before the forward runs",
    kin=(
        (
            "keras",
            "`{op}` uses Keras ({modules}): if it is a keras.ops.custom_gradient op, check it with framework='keras' "
            "(%%custom_gradient --keras, or %config GradientMagics.framework = 'keras'). Checked as a "
            "tf.custom_gradient op, it is judged as TensorFlow runs it; as Keras's, also by what Keras's JAX and "
            "PyTorch backends need of it (the gradient function's signature, a tuple of gradients), and "
            "backends='all' checks it on them.",
        ),
    ),
)

#: TensorFlow 1's graph mode: every call builds into a graph, run in a tf.compat.v1 Session.
GRAPH_MODE = dataclasses.replace(
    TENSORFLOW,
    autodiff="TensorFlow's own gradient (tf.gradients)",
    compiled="in a tf.compat.v1 Session",
    direct="when gradmagic calls it and its gradient function itself",
    traced_advice="",
    keywords=dataclasses.replace(
        TENSORFLOW.keywords, sentence="tf.custom_gradient refuses keyword arguments in graph mode"
    ),
    kin=(),
)

#: Keras 3 on TensorFlow: `keras.ops.custom_gradient` is `tf.custom_gradient`; advice names Keras's ops.
KERAS_ON_TENSORFLOW = dataclasses.replace(
    TENSORFLOW,
    **keras_on("tensorflow"),
    autodiff="TensorFlow's own gradient (tf.GradientTape)",
    # Keras's JAX and PyTorch backends give closed-over variables no gradient: the portable form takes them as inputs.
    variables_advice="Pass it as an input of the op instead (`op(x, w)`) and return its gradient with the others: "
    "that form works on every Keras backend (Keras's own quantised layers pass their kernels so). On TensorFlow "
    "alone, `def grad(*args, upstream=None, variables=None):` returning `grad_xs, [grad for each variable]` works "
    "too.",
    kin=(),
)
