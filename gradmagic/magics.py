"""The IPython magics: `%%custom_gradient`, `%%register_gradient`, `%gradcheck`, `%gradgraph` and `%%gradwatch`.

Thin by design: parse the line, then hand over to `source` (cell to
function), `frameworks` (function to op), `inputs` (`ARG=EXPR` to call
arguments) and `checking` (op to Report); bind the op and return the Report
for IPython to display. Errors in what the user gave gradmagic become
`UsageError`s; errors raised by the user's code while the cell defines the op
keep their traceback, which points at the cell's lines.
"""

from __future__ import annotations

import contextlib
import inspect
import linecache
import math
import types

from IPython.core import magic_arguments
from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_cell_magic, line_magic, magics_class, no_var_expand
from traitlets import Bool, Enum, Float, Int

from gradmagic import cell_gradient, cell_op, frameworks, source
from gradmagic import inputs as example_inputs
from gradmagic.checking.options import CheckOptions
from gradmagic.errors import GradmagicError, interrupts_in_user_frames
from gradmagic.magic_line import is_example_input, split_words
from gradmagic.op import OpInfo, info_of
from gradmagic.report import display_text

#: The check options' defaults, which the `%config` traits start from.
_DEFAULTS = CheckOptions()


def _option(trait: type, name: str, help: str):
    """A `%config GradientMagics` trait for the check option `name`, starting from its CheckOptions default."""
    default = getattr(_DEFAULTS, name)
    return trait(default, allow_none=default is None, config=True, help=help)


def _check_arguments(magic):
    """--rtol, --atol, --eps, --order, --graph/--no-graph, --backends, --surrogate, --sweep, shared by both magics
    (defaults: the traits)."""

    def argument(flag: str, help: str, **settings) -> None:
        nonlocal magic
        magic = magic_arguments.argument(flag, default=None, help=help, **settings)(magic)

    # Each decorates the magic in turn: the last added shows first in its help.
    argument(
        "--sweep",
        "Also compute the sweep with this check (full mode: a scalar input, or an input the op is element-wise in, "
        "swept; the output and its derivative three ways drawn along it), so that the saved notebook shows it. "
        "Without it the live report's Sweep computes it when asked (default: %%config GradientMagics.sweep).",
        action="store_true",
    )
    argument(
        "--surrogate",
        "The custom gradient is deliberately not the derivative (a straight-through estimator, gradient clipping, "
        "reversal, a scaled or stopped gradient): show how it differs from the true derivative instead of failing. "
        "Structure, shape and dtype problems still fail. Kept with the op for %%gradcheck.",
        action="store_true",
    )
    argument(
        "--backends",
        f"Keras ops: also check on these Keras backends ({', '.join(frameworks.KERAS_BACKENDS)}; 'all': every one "
        "installed), each in its own process, and show a verdict per backend.",
        metavar="all|NAME,NAME",
    )
    argument("--no-graph", "Leave the gradient graph out of the report.", dest="graph", action="store_false")
    argument(
        "--graph", "Show the gradient graph (default: %%config GradientMagics.graph)", dest="graph", action="store_true"
    )
    argument(
        "--order",
        "2: also check the derivative of the custom gradient (default: %%config GradientMagics.order)",
        type=int,
        choices=(1, 2),
    )
    for flag in ("--eps", "--atol", "--rtol"):
        argument(
            flag, f"{flag[2:]} for this check (default: %%config GradientMagics.{flag[2:]})", type=float, metavar="X"
        )
    return magic


def _cell_check_arguments(check_help: str):
    """--check ARG=EXPR (repeatable, `check_help` saying what is called), --no-check and --quiet, shared by the cell
    magics that define something and check it."""

    def decorate(magic):
        magic = magic_arguments.argument(
            "--quiet", action="store_true", default=None, help="Display nothing when the cell's check passes."
        )(magic)
        magic = magic_arguments.argument(
            "--no-check",
            dest="run_check",
            action="store_false",
            default=None,
            help="Do not check at the example inputs (they are still kept for %%gradcheck).",
        )(magic)
        return magic_arguments.argument(
            "--check", dest="examples", action="append", default=[], metavar="ARG=EXPR", help=check_help
        )(magic)

    return decorate


def _op_arguments(magic):
    """OP and its example inputs, ARG=EXPR ..., of the line magics that take an op of the notebook."""
    magic = magic_arguments.argument(
        "examples",
        nargs="*",
        metavar="ARG=EXPR",
        help="Example inputs; default: the --check inputs of the op's %%custom_gradient cell.",
    )(magic)
    return magic_arguments.argument("op", metavar="OP", help="The op: a name or expression in the notebook.")(magic)


@magics_class
class GradientMagics(Magics):
    """Magics to write and check custom gradients; settings via `%config GradientMagics`."""

    check = Bool(
        True,
        config=True,
        help="Check each %%custom_gradient op at the example inputs given with --check ARG=EXPR. "
        "--no-check turns this off for one cell.",
    )
    quiet = Bool(False, config=True, help="Display nothing when an op is defined and its check passes.")
    # The check's options, their defaults those of CheckOptions.
    rtol = _option(
        Float, "rtol", "Relative tolerance of the finite-difference comparison (None: by dtype, 1e-5 in float64)."
    )
    atol = _option(
        Float, "atol", "Absolute tolerance of the finite-difference comparison (None: by dtype, 1e-8 in float64)."
    )
    eps = _option(Float, "eps", "Relative finite-difference step (None: machine epsilon ** (1/3) of the dtype).")
    full_threshold = _option(
        Int,
        "full_threshold",
        "Up to this many input elements, dense Jacobians are compared; above, random projections.",
    )
    probes = _option(Int, "probes", "Random directions in projection mode.")
    order = _option(Int, "order", "2: also check the derivative of the custom gradient (what nested tapes use).")
    graph = _option(Bool, "graph", "Trace the forward and the backward and show the gradient graph in the report.")
    seed = _option(Int, "seed", "Seed of the random upstream gradients and directions.")
    sweep = _option(
        Bool,
        "sweep",
        "Compute the sweep with every check: a scalar input, or an input the op is element-wise in, swept, the "
        "output and its derivative (custom, autodiff, finite differences) drawn along it. Off: the live report's "
        "Sweep computes it when asked.",
    )
    framework = Enum(
        frameworks.NAMES,
        default_value=_DEFAULTS.framework,
        config=True,
        help="The framework whose custom_gradient decorator makes the ops.",
    )

    @classmethod
    def unregister(cls, shell) -> None:
        """Remove these magics and their configurable from `shell`."""
        manager = shell.magics_manager
        for kind, names in cls.magics.items():
            for name in names:
                manager.magics[kind].pop(name, None)
        manager.registry.pop(cls.__name__, None)
        shell.configurables[:] = [c for c in shell.configurables if not isinstance(c, cls)]

    @magic_arguments.magic_arguments()
    @magic_arguments.argument(
        "target",
        nargs="?",
        metavar="NAME | NAME(PARAMS)",
        help="NAME: the def to decorate when the cell defines several. NAME(PARAMS): the signature; "
        "the cell is then the function's body.",
    )
    @_cell_check_arguments(
        "An example input (repeat for each parameter): EXPR is a Python expression evaluated in the notebook, spaces "
        "allowed. The op is called on these inputs right away."
    )
    @magic_arguments.argument(
        "--keras",
        action="store_true",
        help="Decorate with keras.ops.custom_gradient (Keras 3, on the backend Keras runs on) instead of "
        "%%config GradientMagics.framework.",
    )
    @_check_arguments
    @no_var_expand
    @line_cell_magic
    @interrupts_in_user_frames
    def custom_gradient(self, line: str, cell: str | None = None):
        """Turn the cell into a custom-gradient op, bound in the notebook under its name.

        Definition form: the cell holds the function (imports and helper
        statements may stand around it); name it on the magic line when the
        cell defines several::

            %%custom_gradient
            def log1pexp(x):
                e = tf.exp(x)
                def grad(upstream):
                    return upstream * (1 - 1 / (1 + e))
                return tf.math.log(1 + e), grad

        Body form: the magic line gives the signature (defaults, *args and
        keyword-only parameters as in Python) and the cell is the body::

            %%custom_gradient log1pexp(x) --check x=tf.constant([-5., 0., 100.])
            e = tf.exp(x)
            def grad(upstream):
                return upstream * (1 - 1 / (1 + e))
            return tf.math.log(1 + e), grad

        With --check, the op is checked at the example inputs and the report
        is displayed: structure (what tf.custom_gradient accepts silently),
        finite differences and autodiff. The op is bound even when its check
        fails, so it can be inspected. An input that can be passed by position
        is (gradients flow to positional inputs only); for a *args parameter,
        give a tuple: --check xs=(a, b).

        Code as found: a def already decorated (`@tf.custom_gradient`, under
        `@tf.function` or a decorator of yours) is bound as written; other
        decorators stay, the magic's applied beneath them; the lines after
        the def run with the op bound; a function that calls custom-gradient
        ops, or a Keras layer class whose `call` does, is checked as it is.

        Line numbers in errors and tracebacks are the cell's, the magic line
        being line 1. A cell that fails to define its op keeps nothing it
        defined: the previous op and variables of the notebook stay exactly
        as they were.

        --surrogate declares a custom gradient that is deliberately not the
        derivative (a straight-through estimator, gradient clipping or
        reversal): its difference from finite differences is then shown, not
        failed. Without it, a mismatch that looks like such a pattern says so.

        --order 2 also checks the derivative of the custom gradient, for ops
        used under nested tapes (Hessians, gradient penalties). The report
        shows the gradient graph (forward, backward, and the tensors the
        backward keeps alive) unless --no-graph.

        Defaults: %config GradientMagics (check, quiet, rtol, atol, eps, order, ...).
        """
        __tracebackhide__ = True
        if cell is None:
            raise UsageError(
                "%%custom_gradient is a cell magic: put it on the first line of a cell holding the function "
                "(see %custom_gradient?)."
            )
        options = self._parse(self.custom_gradient, line)
        if options.target is not None and is_example_input(options.target):
            raise UsageError(
                f"`{display_text(options.target, 200)}` is an example input without its --check: give each input "
                "its own, `--check x=EXPR --check y=EXPR`."
            )
        run_check = self.check if options.run_check is None else options.run_check
        quiet = self.quiet if options.quiet is None else options.quiet
        cell_source = source.Cell.typed("custom_gradient", line, cell, self._register_cell)
        try:
            examples = example_inputs.parse_example_inputs(options.examples)
            compiled = source.compile_cell(cell_source, options.target)
            # A custom-gradient decorator written in the cell names its framework (`@keras.ops.custom_gradient`).
            framework = compiled.framework or ("keras" if options.keras else self.framework)
            settings = self._settings(options, framework)
            adapter = frameworks.get_adapter(settings.framework)
        except GradmagicError as error:
            raise _usage(str(error)) from None
        except SyntaxError as error:
            raise _usage(self._syntax_error_message(error, cell_source.filename)) from None

        namespace = self.shell.user_ns
        previous = namespace.get(compiled.name)
        if isinstance(previous, types.ModuleType):
            raise UsageError(
                f"The op would be bound to `{compiled.name}`, which is the module {previous.__name__} in the notebook: "
                f"binding the op there would hide the module (`{compiled.name}.` would fail in --check and in every "
                f"later cell). Give the function another name.\n`{compiled.name}` was not (re)defined; the notebook "
                "is as before."
            )
        try:
            with source.UnchangedOnFailure(namespace):
                bound, note = self._define(compiled, namespace, adapter, previous)
                cell_op.attach_info(
                    bound,
                    OpInfo(
                        compiled.name,
                        adapter.name,
                        compiled.form,
                        cell_source.filename,
                        examples,
                        options.target,
                        surrogate=bool(options.surrogate),
                    ),
                )
                self._run_rest(compiled, namespace, bound)
                checking = run_check and bool(examples)
                op, signature, instance_note = cell_op.checked_callable(compiled, bound, namespace, checking)
                note = note or instance_note
                if examples:
                    example_inputs.check_names(examples, signature, compiled.name)
                arguments = None
                if run_check and examples:
                    with adapter.example_scope():
                        values = example_inputs.evaluate(examples, namespace)
                    arguments = example_inputs.bind(signature, values)
        except GradmagicError as error:
            raise _usage(f"{error}\n`{compiled.name}` was not (re)defined; the notebook is as before.") from None
        if arguments is None:
            if not quiet:
                print(cell_op.defined_line(compiled, bound, signature, adapter, note))
            return None
        report = self._check(op, examples, arguments, settings, "the cell's --check", note)
        return None if quiet and report.ok else report

    def _define(self, compiled: source.CompiledCell, namespace: dict, adapter, previous) -> tuple[object, str | None]:
        """Run the cell up to its definition, the op made there (under the user's decorators, if any); what is bound
        under its name, and the info that says what the magic did when that is not the plain case."""
        __tracebackhide__ = True
        made: dict = {}
        try:
            bound = source.run_compiled_cell(compiled, namespace, cell_op.hook(compiled, adapter, previous, made))
        except GradmagicError:
            raise
        except BaseException as error:
            _add_note(
                error,
                f"gradmagic: the cell failed, so `{compiled.name}` was not (re)defined; "
                "the notebook's names are as they were before the cell.",
            )
            raise
        return bound, cell_op.definition_note(compiled, bound, adapter, made)

    def _run_rest(self, compiled: source.CompiledCell, namespace: dict, bound: object) -> None:
        """The cell's statements after its definition (demo lines, a layer class), with the op bound."""
        __tracebackhide__ = True
        try:
            source.run_rest(compiled, namespace, bound)
        except GradmagicError:
            raise
        except BaseException as error:
            _add_note(
                error,
                f"gradmagic: the cell's lines after `{compiled.name}` failed (they ran with `{compiled.name}` "
                "bound as the op), so the cell defined nothing; the notebook's names are as they were before it.",
            )
            raise

    @magic_arguments.magic_arguments()
    @magic_arguments.argument(
        "op_types",
        nargs="*",
        metavar="OP_TYPE",
        help="The op types the gradient applies to, as TensorFlow spells them (`op.type`: Sign, Round, Identity, "
        "MatMul, PyFunc); default: those the cell's own gradient_override_map maps to it.",
    )
    @_cell_check_arguments(
        "An example input (repeat for each): the registered gradient is checked right away, through the cell's "
        "forward def, or without one through one op of OP_TYPE (its inputs named as in tf.raw_ops.OP_TYPE)."
    )
    @magic_arguments.argument(
        "--forward", metavar="NAME", help="The cell's def the check calls, when the cell defines several."
    )
    @magic_arguments.argument(
        "--name", metavar="NAME", help="The name to register a plain def under (default: the def's own)."
    )
    @_check_arguments
    @no_var_expand
    @cell_magic
    @interrupts_in_user_frames
    def register_gradient(self, line: str, cell: str):
        """Register the cell's gradient function for op types, re-runnably, and check it.

        The cell holds a gradient function `(op, grad)` as TensorFlow calls a
        registered one, pasted with its `@tf.RegisterGradient("Name")` line or
        written plain (registered under its own name, or --name)::

            %%register_gradient Sign --check x=tf.constant([-1.5, 0.3, 2.0]) --surrogate
            def ste(op, grad):
                return grad          # straight through the sign

        Running the cell again replaces the registration (TensorFlow alone
        raises "Registering two gradient with name ..."). The def's name is
        bound to the registered gradient: `with ste:` applies it to the
        OP_TYPE ops built in the block (TensorFlow's gradient_override_map;
        `ste.override_map` is the map) where TensorFlow applies overrides: in
        a tf.function whose gradient is taken outside it (a tape around its
        call; a tape inside the same tf.function ignores overrides), or in
        TensorFlow 1's graph mode. TensorFlow 2's eager mode has none: `with
        ste:` there raises, saying so.

        OP_TYPE defaults to the op types the cell's own
        `gradient_override_map({...})` maps to the gradient. A forward def in
        the cell (a function of tensors, `tf.numpy_function` inside for the
        "py_func with gradient" recipe) is bound as a tf.function with the
        override applied, which works wherever it is called (eagerly, in a
        training step), and --check calls it; without one, --check
        calls one OP_TYPE op, its inputs named as tf.raw_ops.OP_TYPE's
        (`--check x=...` for Sign, `--check a=... --check b=...` for MatMul).

        The check is %%custom_gradient's: structure (one gradient per op
        input, shapes, dtypes), finite differences of the forward, autodiff
        (the forward without the override), the gradient graph; --surrogate
        for a gradient that is deliberately not the derivative (a
        straight-through estimator, clipping). An override that applied to no
        op says so, naming the op types that were built. %gradcheck NAME
        checks it again.
        """
        __tracebackhide__ = True
        options = self._parse(self.register_gradient, line)
        run_check = self.check if options.run_check is None else options.run_check
        quiet = self.quiet if options.quiet is None else options.quiet
        cell_source = source.Cell.typed("register_gradient", line, cell, self._register_cell)
        try:
            registry = frameworks.get_registry()
            for op_type in options.op_types:
                registry.check_op_type(op_type)
            examples = example_inputs.parse_example_inputs(options.examples)
            read = cell_gradient.read(cell_source)
            settings = self._settings(options, "tensorflow")
            adapter = frameworks.get_adapter("tensorflow")
        except GradmagicError as error:
            raise _usage(str(error)) from None
        except SyntaxError as error:
            raise _usage(self._syntax_error_message(error, cell_source.filename)) from None
        namespace = self.shell.user_ns
        try:
            # A failure anywhere in the block leaves the notebook's names and TensorFlow's registry as they were.
            with source.UnchangedOnFailure(namespace), registry.registering() as made:
                self._run_gradient_cell(read, namespace)
                bound, checked, note = self._bind_gradients(
                    read, options, registry, namespace, examples, cell_source, made
                )
                arguments = None
                if run_check and examples and checked is not None:
                    signature = cell_op.signature_of(checked, bound.__name__)
                    example_inputs.check_names(examples, signature, bound.__name__)
                    with adapter.example_scope():
                        values = example_inputs.evaluate(examples, namespace)
                    arguments = example_inputs.bind(signature, values)
        except GradmagicError as error:
            raise _usage(f"{error}\nNothing was (re)registered; the notebook is as before.") from None
        if arguments is None:
            if examples and run_check and checked is None:
                note += " Nothing to check it through: name its op type on the magic line, or define a forward."
            if not quiet:
                print(note)
            return None
        report = self._check(checked, examples, arguments, settings, "the cell's --check", note)
        return None if quiet and report.ok else report

    def _run_gradient_cell(self, read, namespace: dict) -> None:
        """Run a %%register_gradient cell (its registrations replacing earlier ones: see `_bind_gradients`)."""
        __tracebackhide__ = True
        try:
            exec(read.code, namespace)
        except BaseException as error:
            _add_note(error, "gradmagic: the cell failed, so nothing was (re)registered; the notebook is as before.")
            raise

    def _bind_gradients(self, read, options, registry, namespace: dict, examples, cell_source, made) -> tuple:
        """Register the cell's plain gradient defs, bind each as a registered gradient (the forward with its override
        applied); what was bound first, what the check calls, what was done."""
        by_function = {id(function): name for name, function, _ in made}
        replaced = {name for name, _, replacing in made if replacing}
        names = [example.name for example in examples]
        forward_name = cell_gradient.forward_of(read, options.forward, names, namespace)
        if options.name is not None and len(read.gradients) > 1:
            raise GradmagicError("--name names one gradient: the cell defines several; register them by decorator.")
        first, checked, said = None, None, []
        for name, line in read.gradients:
            function = namespace.get(name)
            if not callable(function):
                raise GradmagicError(f"`{name}` (cell line {line}) is not a function after the cell ran.")
            registered_as = by_function.get(id(function))
            if registered_as is None:
                registered_as = options.name or read.registered_as.get(name) or name
                if registry.register(registered_as, function):
                    replaced.add(registered_as)
            op_types = cell_gradient.op_types_of(read, name, registered_as, options.op_types, namespace)
            forward = namespace.get(forward_name) if forward_name else None
            own_override = dict(read.forwards).get(forward_name, False)
            gradient = registry.bound(registered_as, function, tuple(op_types), forward, registered_as in replaced)
            namespace[name] = gradient
            cell_op.attach_info(
                gradient,
                OpInfo(
                    name, "tensorflow", "definition", cell_source.filename, examples, surrogate=bool(options.surrogate)
                ),
            )
            if first is None:
                first, checked = gradient, gradient.checked
                if forward is not None and not own_override:
                    namespace[forward_name] = registry.applying(forward, gradient)
            said.append(registry.describe(gradient, forward_name))
        return first, checked, " ".join(said)

    @magic_arguments.magic_arguments()
    @_op_arguments
    @_check_arguments
    @no_var_expand
    @line_magic
    @interrupts_in_user_frames
    def gradcheck(self, line: str):
        """Check a custom-gradient op at example inputs and show the report: %gradcheck OP ARG=EXPR ...

        OP may be any op of the notebook: made by %%custom_gradient, decorated
        with tf.custom_gradient by hand, or a plain function returning
        (outputs, grad_fn). Without inputs, the --check inputs of the op's
        %%custom_gradient cell are used::

            %gradcheck log1pexp x=tf.constant([-5., 0., 100.])

        The report is the magic's value: `report = %gradcheck ...` keeps it.
        """
        __tracebackhide__ = True
        options = self._parse(self.gradcheck, line)
        try:
            op, info, examples, arguments = self._op_and_arguments(options, "gradcheck")
            if options.surrogate is None and info is not None and info.surrogate:
                options.surrogate = True
            settings = self._settings(options, info.framework if info else self.framework)
            return self._check(op, examples, arguments, settings, "%gradcheck")
        except GradmagicError as error:
            raise _usage(str(error)) from None

    @magic_arguments.magic_arguments()
    @_op_arguments
    @magic_arguments.argument("--raw", action="store_true", help="Keep every traced op (no folding of plumbing).")
    @no_var_expand
    @line_magic
    @interrupts_in_user_frames
    def gradgraph(self, line: str):
        """Draw the gradient graph of an op at example inputs: %gradgraph OP ARG=EXPR ... [--raw]

        The forward (top, left to right) and the backward (bottom, right to
        left) as TensorFlow traced them, roles in colour, and the tensors the
        backward keeps alive from the forward as red dashed edges with their
        size. The graph is the magic's value: `graph = %gradgraph ...`::

            %gradgraph log1pexp x=tf.constant([-5., 0., 100.])
        """
        __tracebackhide__ = True
        from gradmagic.api import gradient_graph

        options = self._parse(self.gradgraph, line)
        try:
            op, info, _, arguments = self._op_and_arguments(options, "gradgraph")
            args, kwargs = arguments
            framework = info.framework if info else self.framework
            return gradient_graph(op, *args, kwargs=kwargs, framework=framework, fold=not options.raw)
        except GradmagicError as error:
            raise _usage(str(error)) from None

    @magic_arguments.magic_arguments()
    @magic_arguments.argument(
        "name",
        nargs="?",
        metavar="NAME",
        help="Also bind the watch's report to NAME in the notebook (kept when the cell raises).",
    )
    @magic_arguments.argument(
        "--no-check",
        dest="run_check",
        action="store_false",
        help="Record only: do not check the ops when the cell ends.",
    )
    @magic_arguments.argument(
        "--memory",
        type=float,
        default=None,
        metavar="MB",
        help="Megabytes the kept calls' inputs may take (default: 64).",
    )
    @magic_arguments.argument(
        "--surrogate",
        dest="surrogates",
        action="append",
        default=[],
        metavar="OP",
        help="An op (by name) whose custom gradient is deliberately not the derivative; repeatable.",
    )
    @no_var_expand
    @line_cell_magic
    @interrupts_in_user_frames
    def gradwatch(self, line: str, cell: str | None = None):
        """Run the cell under a watch, and show every custom-gradient op it reached, checked at its real inputs.

        Every call of every custom-gradient op the cell reaches is recorded:
        ops made by %%custom_gradient or decorated with tf.custom_gradient or
        keras.ops.custom_gradient (on Keras's TensorFlow, JAX and PyTorch
        backends), in layers, methods, nested ops, tf.function, jax.jit and
        model.fit's compiled steps; gradients registered with
        tf.RegisterGradient (%%register_gradient's too) where TensorFlow
        takes them, each checked through the op it was taken for::

            %%gradwatch
            model.fit(x, y, epochs=1)

        When the cell ends, each op is checked at the inputs it really
        received (its first call, the calls with extreme values, the first
        whose gradient went non-finite), and the report shows a table of the
        ops (name, where it is defined, calls, verdict, first problem), where
        the first gradient went non-finite (op, call, element), and each op's
        own report under its row. The report is the cell's value, the only
        one shown (`report = _`): the value of the cell's last line (the
        History of model.fit) is not shown; assign it to keep it
        (`history = model.fit(...)`). The report has report.ok,
        report.problems, report.ops (one Report per op),
        report.first_nonfinite_gradient; with NAME it is also bound to NAME,
        also when the cell raises (then it shows above the traceback).

        Everything the watch changes is put back when the cell ends, also on
        an error or Ctrl-C. Compiled code is recorded when traced under the
        watch: a Keras model traces its train function again for the watch
        and gets its own back after; a tf.function traced before the cell
        runs a copy traced for the watch; one first traced in the cell traces
        again after it. XLA-compiled code (jit_compile=True, a Keras model's
        included) runs compiled as without the watch: its runs are counted,
        and chosen runs (the first at each input signature, the first that
        left its variables non-finite and the one before) are replayed
        uncompiled, their variables put back. Ops run on several replicas
        (tf.distribute) are also checked across the replicas; under
        MultiWorkerMirroredStrategy every worker's watch is gathered. An op
        traced but never run is checked at inputs of its traced shapes, and
        report.ok is True only when every op reached was checked and passed. On
        Keras's JAX backend jax.jit code is recorded through
        jax.debug.callback; JAX's caches are cleared when the cell starts and
        ends, so that compiled functions trace again with the recording, and
        without it after. On PyTorch every call is recorded as it happens.

        --surrogate OP declares an op whose gradient is deliberately not the
        derivative; the check options are those of %config GradientMagics
        (rtol, atol, eps, ...). In Python: `with gradmagic.watch() as watch:
        ...`, then `watch.report`.
        """
        __tracebackhide__ = True
        from gradmagic.watching import MEMORY_LIMIT, Watch

        if cell is None:
            raise UsageError(
                "%%gradwatch is a cell magic: put it on the first line of the cell to watch (see %gradwatch?)."
            )
        options = self._parse(self.gradwatch, line)
        if options.name is not None and not options.name.isidentifier():
            raise UsageError(f"%%gradwatch NAME binds the report to a name: {options.name!r} is not one.")
        bound = self.shell.user_ns.get(options.name) if options.name is not None else None
        if isinstance(bound, types.ModuleType):
            raise UsageError(
                f"%%gradwatch {options.name} would bind the watch's report to `{options.name}`, which is the module "
                f"{bound.__name__} in the notebook: the report would hide the module (`{options.name}.` would fail in "
                "this cell's next run and in every later cell). Give the report another name.\nThe cell did not run."
            )
        settings = self._configured_settings()
        if options.memory is not None and not (0 <= options.memory < math.inf):
            raise UsageError(f"--memory is in megabytes, a finite number at least 0, not {options.memory:g}.")
        memory = MEMORY_LIMIT if options.memory is None else int(options.memory * 2**20)
        try:
            watch = Watch(check=options.run_check, memory_limit=memory, surrogates=options.surrogates, **settings)
        except GradmagicError as error:  # a bad %config value, named
            raise _usage(str(error)) from None
        watched = self._compile_watched(source.Cell.typed("gradwatch", line, cell, self._register_cell))
        started = contextlib.ExitStack()
        try:
            started.enter_context(watch)
        except GradmagicError as error:  # no TensorFlow, or another watch running
            raise _usage(str(error)) from None
        try:
            with started:
                exec(watched, self.shell.user_global_ns, self.shell.user_ns)  # noqa: S102 - the user's cell
        except BaseException:
            if watch.finished:
                self._bind_watch_report(options.name, watch.report)
                from IPython.display import display

                display(watch.report)
            raise
        return self._bind_watch_report(options.name, watch.report)

    def _bind_watch_report(self, name: str | None, report):
        if name is not None:
            self.shell.user_ns[name] = report
        return report

    def _compile_watched(self, cell: source.Cell):
        """The cell compiled as IPython compiles a cell (magics and shell escapes transformed, named after the cell for
        tracebacks, the magic line being line 1), its last expression run as a statement: the report is the cell's
        value, the only one shown."""
        filename = cell.filename
        try:
            tree = self.shell.compile.ast_parse(cell.numbered(self.shell.transform_cell(cell.body)), filename)
        except SyntaxError as error:
            raise _usage(self._syntax_error_message(error, filename)) from None
        return self.shell.compile(self.shell.transform_ast(tree), filename, "exec")

    def _op_and_arguments(self, options, magic_name: str):
        """The op named on a line magic, its OpInfo, the line's or its cell's inputs, and (args, kwargs) from them."""
        op = self._evaluate_op(options.op)
        info = info_of(op)
        examples = example_inputs.parse_example_inputs(options.examples)
        if not examples and info is not None:
            examples = info.example_inputs
        if not examples:
            raise GradmagicError(f"Give example inputs: `%{magic_name} {options.op} x=EXPR ...`.")
        signature = cell_op.signature_of(op, options.op)
        example_inputs.check_names(examples, signature, options.op)
        with frameworks.get_adapter(info.framework if info else self.framework).example_scope():
            values = example_inputs.evaluate(examples, self.shell.user_ns)
        return op, info, examples, example_inputs.bind(signature, values)

    def _parse(self, magic, line: str):
        try:
            words = split_words(line)
        except GradmagicError as error:
            raise _usage(str(error)) from None
        return magic.parser.parse_args(_values_attached(magic.parser, words))

    def _register_cell(self, text: str) -> str:
        """Put the cell in linecache as IPython does, so tracebacks say `Cell In[N], line L`."""
        return self.shell.compile.cache(text, self._running_cell_number(), raw_code=text)

    def _running_cell_number(self) -> int:
        """The number IPython gave the cell that runs this magic.

        IPython versions differ in when they advance `execution_count`, so the
        number is read from the running cell's code: its filename is one that
        IPython's compiler registered with the number. A magic called from
        Python, outside any cell, gets `execution_count`.
        """
        numbers = getattr(self.shell.compile, "_filename_map", {})
        frame = inspect.currentframe()
        while frame is not None:
            if frame.f_code.co_filename in numbers:
                return numbers[frame.f_code.co_filename]
            frame = frame.f_back
        return self.shell.execution_count

    def _syntax_error_message(self, error: SyntaxError, filename: str) -> str:
        """A SyntaxError laid out as IPython shows one in a plain cell (in the cell `filename` where Python names no
        file or line: a NUL in the cell)."""
        source_name = error.filename or filename
        kind, label = self.shell.compile.format_code_name(source_name) or ("File", source_name)
        lines = [f"SyntaxError in {kind} {label}{f', line {error.lineno}' if error.lineno else ''}: {error.msg}"]
        # Errors found when compiling the AST (e.g. a duplicate argument) carry no text.
        text = (error.text or linecache.getline(error.filename, error.lineno or 0)).rstrip("\n")
        if text:
            stripped = text.lstrip()
            lines.append(f"    {stripped}")
            if error.offset:
                lines.append("    " + " " * max(error.offset - 1 - (len(text) - len(stripped)), 0) + "^")
        return "\n".join(lines)

    def _settings(self, options, framework: str) -> CheckOptions:
        """The check's options: the line's over the `%config` traits' (an OptionError naming a bad one as given:
        `--rtol` on the line, `%config GradientMagics.rtol`)."""
        line = {name: getattr(options, name) for name in ("rtol", "atol", "eps", "order", "graph", "sweep")}
        configured = {name: getattr(self, name) for name in ("full_threshold", "probes", "seed")}
        names = (*line, *configured, "framework")
        sources = {name: f"%config GradientMagics.{name}" for name in names if self._configured(name)}
        sources.update({name: f"--{name}" for name, value in line.items() if value is not None})
        if options.backends is not None:
            sources["backends"] = "--backends"
        if getattr(options, "keras", False):
            sources["framework"] = "--keras"
        return CheckOptions(
            framework=framework,
            **{name: getattr(self, name) if value is None else value for name, value in line.items()},
            **configured,
            surrogate=bool(options.surrogate),
            backends=() if options.backends is None else options.backends,
            sources=sources,
        )

    def _configured_settings(self) -> dict:
        """The check options `%config GradientMagics` sets, for a watch: each named as `%config` sets it."""
        names = ("rtol", "atol", "eps", "order", "graph", "sweep", "full_threshold", "probes", "seed")
        settings = {name: getattr(self, name) for name in names}
        return {
            **settings,
            "sources": {name: f"%config GradientMagics.{name}" for name in names if self._configured(name)},
        }

    def _configured(self, name: str) -> bool:
        """Whether `%config` set the trait `name` to other than its default (what the report lists as given)."""
        return name in self.config.get("GradientMagics", {}) and getattr(self, name) != self.trait_defaults(name)

    def _check(
        self,
        op,
        examples,
        arguments: tuple[list, dict],
        settings: CheckOptions,
        inputs_from: str,
        note: str | None = None,
    ):
        """Run the check with these options; the report can re-check. `inputs_from`: where the inputs came from, as
        the report says it ("the cell's --check"); `note`: how the cell made its op, said in the report."""
        from gradmagic.api import CheckContext
        from gradmagic.notebook.progress import ProgressBar

        context = CheckContext(op, settings, examples, inputs_from=inputs_from, cell_note=note)
        with ProgressBar() as progress:
            return context.run(*arguments, progress=progress)

    def _evaluate_op(self, expression: str):
        try:
            op = eval(expression, self.shell.user_ns)  # noqa: S307 - the user's own expression
        except Exception as error:
            raise GradmagicError(
                f"`{expression}` is not an op of the notebook ({type(error).__name__}: {error})."
            ) from None
        if not callable(op):
            raise GradmagicError(f"`{expression}` is a {type(op).__name__}, not an op.")
        return op


def _values_attached(parser, words: list[str]) -> list[str]:
    """`--atol -inf` as `--atol=-inf`: argparse takes a value starting with `-` (other than a plain negative number)
    for an option, and says the option expects an argument; attached, the value reaches the option and its check."""
    takes_value = {
        flag
        for action in parser._actions
        if action.nargs is None and action.option_strings
        for flag in action.option_strings
    }
    flags = {flag for action in parser._actions for flag in action.option_strings}
    attached: list[str] = []
    for word in words:
        if attached and attached[-1] in takes_value and word.startswith("-") and word.split("=")[0] not in flags:
            attached[-1] = f"{attached[-1]}={word}"
        else:
            attached.append(word)
    return attached


def _usage(message: str) -> UsageError:
    """A UsageError whose message shows as written: the user's text in it (an error their expression raised) can
    neither colour the output nor flood it (`display_text`)."""
    return UsageError(display_text(message))


def _add_note(error: BaseException, note: str) -> None:
    # Exception notes exist from Python 3.11 on; IPython shows them under the traceback.
    if hasattr(error, "add_note"):
        error.add_note(note)
