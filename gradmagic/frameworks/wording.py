"""How messages name a framework's things, and what the framework's own messages mean.

Each adapter holds a `Wording`: the names its users write (`tf.reduce_sum`,
`ops.sum`), what the framework does with mistakes it does not report where
they are made, and how to read its error messages. The check engine builds
its messages from these, so that advice reads as the user's own code would
and no framework's phrases are written outside `frameworks/`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gradmagic.frameworks.names import backend_name

#: The ops advice names, by the `Wording` fields that spell them (TensorFlow's names).
ADVISED_OPS = ("zeros_like", "cast", "reduce_sum", "reshape", "where", "softplus", "stop_gradient", "einsum")
#: Keras 3's ops, as advice names them on every backend: `ops.` and the op's name (`reduce_sum` is `ops.sum`).
KERAS_OPS = {op: "ops." + op.removeprefix("reduce_") for op in ADVISED_OPS}


def keras_on(backend: str) -> dict[str, str]:
    """The `Wording` fields that name Keras on `backend`, its decorator and its ops ("Keras on JAX", `ops.sum`)."""
    name = backend_name(backend)
    return {
        "framework": f"Keras on {name}",
        "runs_on": f"Keras's {name} backend",
        "decorator": "keras.ops.custom_gradient",
        **KERAS_OPS,
    }


@dataclass(frozen=True)
class KeywordRefusal:
    """How a framework's decorated op refuses keyword arguments where it is compiled, and what to do instead."""

    phrases: tuple[str, ...]  # of the framework's error
    sentence: str  # who refuses them where: "tf.custom_gradient refuses keyword arguments inside tf.function"
    advice: str = "or make the op with %%custom_gradient, whose op accepts them."  # after "pass them by position, "


@dataclass(frozen=True)
class Wording:
    """The vocabulary of one framework (and Keras backend); the methods read its error messages."""

    framework: str  # who runs the op: "TensorFlow", "Keras on JAX"
    runs_on: str  # where the op runs, after "on": "TensorFlow", "Keras's JAX backend"
    decorator: str  # "tf.custom_gradient"
    autodiff: str  # "TensorFlow's own gradient", "JAX's own gradient (jax.vjp)"
    compiled: str  # "inside tf.function", "inside jax.jit"
    zeros_like: str
    cast: str
    reduce_sum: str
    reshape: str
    where: str
    softplus: str
    stop_gradient: str
    einsum: str
    #: What the framework does with a gradient of the wrong shape (one it does not fix, `fixes_gradients`).
    wrong_shape: str
    #: When the framework reports a wrong number of gradients.
    wrong_count: str
    #: Why a gradient function may not differentiate on this backend, added to second-order mismatches.
    second_order: str = ""
    #: How an op calls into Python with no gradient: "tf.numpy_function".
    python_function: str = "a call into Python"
    #: How an op calls into Python with a gradient of its own (autodiff of the Python function as it ran), and what
    #: limits that gradient: "tf.py_function", "its gradient ..." (a phrase); "" where the framework has none.
    eager_python_function: str = ""
    eager_python_function_gradient: str = ""
    #: How a gradient registered for an op type is applied to ops ("gradient_override_map"), how one is registered
    #: ("tf.RegisterGradient"), and where overrides apply (after "they apply only"); "" where the framework has none.
    override: str = ""
    registers: str = ""
    override_scope: str = ""
    #: How the structure checks ran the op, against which `compiled` is compared.
    direct: str = "eagerly"
    #: Advice when the op works `direct`ly but its gradient fails `compiled`.
    traced_advice: str = (
        "Code that runs eagerly may use Python values of tensors (`if`, `.numpy()`), which a graph cannot."
    )
    #: What a variable given as an input is to the forward `compiled` (after "inside tf.function, "), where it is not
    #: the variable it is `direct`ly; "" where it stays one.
    variable_input: str = ""
    #: What needs a scalar predicate, as users write it: "A Python `if` (or `tf.cond`)".
    conditional: str = "A Python `if`"
    #: Phrases of the framework's error when a Python `if` meets a tensor of several elements (or a traced one).
    ambiguous_truth: tuple[str, ...] = ("truth value of an array",)  # NumPy's own, which eager frameworks raise
    #: How the decorated op refuses keyword arguments where it is compiled; None where it takes them.
    keywords: KeywordRefusal | None = None
    #: What to write when the forward reads variables and the gradient function takes no `variables`.
    variables_advice: str = (
        "Define it as `def grad(upstream, variables=None):` and return `grad_xs, [grad for each variable]`."
    )

    #: The names the framework gives a variable nobody named (a regular expression, matched whole; "" for none):
    #: the report then names it as the op's code reads it.
    default_variable_name: str = ""

    #: Modules whose use in an op's code says it may be another decorator's op that this framework also runs, and how to
    #: check it as that one: (module, sentence), the sentence's `{op}` and `{modules}` filled in (on TensorFlow,
    #: `keras.ops.custom_gradient` is `tf.custom_gradient`, but Keras's other backends need more of the op).
    kin: tuple[tuple[str, str], ...] = ()

    def default_name(self, name: str) -> bool:
        """Whether `name` is one the framework gave a variable nobody named."""
        return bool(self.default_variable_name) and re.fullmatch(self.default_variable_name, name) is not None

    def message(self, error: BaseException) -> str:
        """The error's own message."""
        return str(error)

    def cause(self, error: BaseException) -> str:
        """The sentence that says what went wrong (a few lines of the message at most)."""
        lines = [line.strip() for line in self.message(error).strip().splitlines() if line.strip()]
        return " ".join(lines[:3])

    def is_ambiguous_truth(self, error: BaseException) -> bool:
        """Whether `error` is the framework refusing a Python `if` (or a `tf.cond`) on a tensor of several elements."""
        text = str(error)
        return any(phrase in text for phrase in self.ambiguous_truth)

    def compiled_failure_advice(self, cause: str) -> str:
        """Advice for an op that works `direct`ly but whose gradient fails `compiled` with `cause`."""
        refusal = self.keywords
        if refusal is not None and any(phrase in cause for phrase in refusal.phrases):
            return f"{refusal.sentence}: pass them by position, {refusal.advice}"
        return self.traced_advice

    def created_line(self, error: BaseException, filename: str) -> int | None:
        """For an error raised where a graph runs, not where the user's code is: the line of `filename` that created
        the operation that failed (None when the framework does not say)."""
        return None

    def autodiff_failure(self, error: BaseException) -> str | None:
        """Why autodiff of a forward failed where its custom gradient worked, when the error tells (a phrase after
        "it fails because"), else None."""
        return None

    def list_failure(self, inputs: int) -> str:
        """What a list of gradients does where the framework needs a tuple (`GradientConvention.tuple_required`)."""
        return "it fails when the gradient is taken"

    def closed_over_consequence(self, plural: bool) -> str:
        """What becomes of variables the forward closes over (`GradientConvention.variables` "closed-over"): a
        sentence."""
        return ""

    def several_outputs(self, count: int) -> str:
        """Why several output tensors fail (`GradientConvention.single_output`)."""
        return ""

    def fixed_gradient(self, what: str, dtype: str | None = None) -> str:
        """What the framework does with a gradient of a broadcast shape (`what` "shape") or of another floating dtype
        ("dtype", the gradient's `dtype`) that it fixes itself (`GradientConvention.fixes_gradients`), and what it
        does elsewhere: a sentence."""
        return ""
