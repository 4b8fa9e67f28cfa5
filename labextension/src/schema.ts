/**
 * The types of the data gradmagic's kernel side sends the views: a Report, as `gradmagic.render.words.report_data`
 * writes it (`Report.to_dict()` and its `words`), and a watch's report. GENERATED from the dataclasses of
 * gradmagic/report.py through gradmagic/schema/*.schema.json by `python -m gradmagic.schema`: edit those, then run it.
 */

/** The MIME type under which a Report travels from the kernel. */
export const MIME_TYPE = 'application/vnd.gradmagic.report+json';
/** The Report schema's version this extension was built with; it reads its major version. */
export const SCHEMA_VERSION = '1.9';

/** The MIME type under which a WatchReport travels from the kernel. */
export const WATCH_MIME_TYPE = 'application/vnd.gradmagic.watch-report+json';
/** The WatchReport schema's version this extension was built with; it reads its major version. */
export const WATCH_SCHEMA_VERSION = '1.3';

/**
 * "fail": a problem of severity error; "unchecked": nothing fails but no gradient value could be compared
 * (`numerics.skipped_because` says why; 1.6); "surrogate": a declared surrogate gradient differs from the true
 * derivative and nothing fails (1.4); "warn": a warning; else "pass".
 */
export type Verdict = 'pass' | 'warn' | 'surrogate' | 'unchecked' | 'fail';

/** What was checked. */
export interface IOpDescription {
  name: string;
  /** Python signature, e.g. "(x, y=2.0)". */
  signature: string;
  /** The adapter's name: "tensorflow" (tf.custom_gradient) or "keras" (keras.ops.custom_gradient). */
  framework: string;
  framework_version: string;
  /**
   * Made by %%custom_gradient, decorated by hand, a plain function returning (outputs, grad_fn), or (1.6) a composite:
   * a differentiable function that reaches custom-gradient ops inside.
   */
  origin: 'magic' | 'decorated' | 'plain' | 'composite';
  /** Execution mode the check ran in. */
  mode: string;
  filename: string | null;
  /** Keras 3's backend ("tensorflow", "jax", "torch") when framework is "keras", else None. Added in 1.3. */
  backend?: string | null;
}

/** One finding: a stable `code`, a severity, and a message naming cause and fix. */
export interface IProblem {
  /**
   * Stable identifier, e.g. return-structure, grad-count, grad-shape, grad-dtype, missing-variables-kwarg,
   * variable-grad-count, none-gradient, not-differentiable, forward-error, grad-error, keyword-input, input-type,
   * grad-structure, nonfinite-output, nonfinite-gradient, fd-mismatch, fd-error, second-order-mismatch,
   * second-order-skipped, graph-unavailable, nondifferentiable-point, autodiff-nonfinite, autodiff-differs,
   * graph-mismatch, non-resource-variable, closed-over-tensor, override-unused, override-unregistered, override-eager.
   */
  code: string;
  severity: Severity;
  /** The cause and the fix. */
  message: string;
  location: ILocation | null;
}

export type Severity = 'error' | 'warning' | 'info';

/** Where a problem is. Every field is optional; a problem names what it can. */
export interface ILocation {
  /** Argument name, e.g. "x", or "args[1]" for a *args element. */
  input: string | null;
  /** Output name, e.g. "output[0]". */
  output: string | null;
  /** A tf.Variable's name. */
  variable: string | null;
  /** Element index inside the input (or variable). */
  index: Index | null;
  /** Element index inside the output. */
  output_index: Index | null;
  /** Line in the user's cell (the magic line is line 1) or file. */
  line: number | null;
  filename: string | null;
}

/** An element's index inside its tensor; empty for a scalar. */
export type Index = Count[];

/** A count, or a size in bytes. */
export type Count = number;

/** A line of the shapes table: one input, output, upstream or downstream gradient, or variable. */
export interface ITensorRow {
  role: TensorRole;
  name: string;
  /** None: not a tensor (e.g. a None gradient). */
  shape: Shape | null;
  dtype: string | null;
  /** For gradients: the input's. */
  expected_shape: Shape | null;
  expected_dtype: string | null;
  /** The shape and dtype are the expected ones. */
  matches: boolean;
}

/** A row of the shapes table: an input, an output, an upstream or downstream gradient, a variable or its gradient. */
export type TensorRole = 'input' | 'output' | 'upstream' | 'downstream' | 'variable' | 'variable-gradient';

/** A tensor's shape; None for a dimension not known. */
export type Shape = (number | null)[];

/** How the finite-difference comparison was done, and what it found. */
export interface INumerics {
  /**
   * "full": every Jacobian entry by finite differences; "projection": random directions, wrong elements located after;
   * "skipped": no gradient value compared (`skipped_because` says why).
   */
  mode: 'full' | 'projection' | 'skipped';
  /** The dtype the finite differences ran in. */
  dtype: string | null;
  rtol: number | null;
  atol: number | null;
  /** Relative step. */
  eps: number | null;
  /** Total input (and variable) elements perturbed. */
  elements: Count;
  /** Worst scaled error (1.0 is the tolerance). */
  max_error: AnyFloat | null;
  /** Projection mode: number of random directions. */
  probes: Count;
  /** Projection mode: measured relative noise. */
  noise_floor: AnyFloat | null;
  worst: IElementComparison[];
  jacobians: IJacobianBlock[];
  skipped_because: string | null;
  /** What the comparison could resolve; None where it did not run. Added in 1.9. */
  resolution?: IResolution | null;
}

/** A float, NaN and the infinities included: JSON carries those as the strings "NaN", "Infinity" and "-Infinity". */
export type AnyFloat = number | 'NaN' | 'Infinity' | '-Infinity';

/** One Jacobian element (or a located element in projection mode), side by side. */
export interface IElementComparison {
  /** Input or variable name. */
  input: string;
  index: Index;
  output: string | null;
  output_index: Index | null;
  /** Through the custom gradient. */
  custom: AnyFloat | null;
  /** By finite differences. */
  numerical: AnyFloat | null;
  /** Through the forward's own ops. */
  autodiff: AnyFloat | null;
  /** Scaled error used for the verdict (1.0 is the tolerance). */
  error: AnyFloat | null;
}

/** Dense Jacobians d output / d input for small sizes (for heatmaps), row-major, outputs by rows. */
export interface IJacobianBlock {
  input: string;
  output: string;
  /** Outputs, inputs. */
  shape: [Count, Count];
  custom: (AnyFloat | null)[];
  numerical: (AnyFloat | null)[];
  autodiff: (AnyFloat | null)[];
  /**
   * The check's scaled error of each entry (1.0 is the tolerance; -1 where nothing was judged: a kink, no finite
   * difference). Added in 1.7.
   */
  error?: (AnyFloat | null)[] | null;
}

/**
 * What a check could resolve: the precision its finite differences ran in and why, and the smallest error it would have
 * seen in each input's gradient.
 */
export interface IResolution {
  /** The float the finite differences ran in. */
  dtype: string;
  /** Why that float: "`w` is a float32 variable", "the inputs' own", "the inputs cast up to float64 ...". */
  why: string;
  inputs: IInputResolution[];
}

/** The smallest error of one input's (or variable's) gradient a check would have seen. */
export interface IInputResolution {
  input: string;
  /**
   * The smallest relative error r for which the input's gradient, all of it (1 + r) times the right one, fails; None
   * where no element of it was judged (or its gradient is zero there).
   */
  relative: AnyFloat | null;
}

/** The op's forward and backward as the framework traced them, plumbing folded away unless `raw`. */
export interface IGraph {
  nodes: IGraphNode[];
  edges: IGraphEdge[];
  /** Distinct forward tensors the backward consumes. */
  saved_tensors: Count;
  /** Their total size: what the backward keeps alive from the forward. */
  saved_bytes: Count;
  /** Framework plumbing not folded away. */
  raw: boolean;
  /** Ops in the traced graph before folding. */
  traced_ops: Count;
  /**
   * Where the drawings put each node, computed with the graph; without it (a report saved before 1.5) the graph is not
   * drawn. Added in 1.5.
   */
  layout?: IGraphLayout | null;
}

/** An op (or an input, output or gradient) of the traced forward-and-backward graph. */
export interface IGraphNode {
  id: string;
  /** The framework's op type, e.g. "Exp"; "" for inputs, outputs and gradients. */
  op: string;
  label: string;
  role: NodeRole;
  /** The shapes of its outputs. */
  shapes: Shape[];
  dtypes: string[];
  /** The line of the user's source that created it. */
  line: number | null;
  /** Ops this node stands for (more than 1: a folded name scope). */
  count: number;
}

/** A node of the gradient graph: the forward lane's roles, then the backward lane's. */
export type NodeRole = 'input' | 'variable' | 'forward' | 'output' | 'upstream' | 'backward' | 'downstream';

/** A tensor from one node to another; `saved` when the backward keeps it from the forward. */
export interface IGraphEdge {
  source: string;
  target: string;
  shape: Shape | null;
  dtype: string | null;
  /** The backward keeps this forward tensor alive. */
  saved: boolean;
  bytes: Count | null;
}

/**
 * Where the gradient graph's drawings put each node (computed in `gradmagic/checking/graph_layout.py`). `positions`
 * holds every drawn node (a scope's id in place of its members) in layout units: x the layer (0 at the left), y the
 * row, growing downwards: the forward lane's bands, then the backward lane's. `scopes` are the name scopes folded into
 * one node each, when the graph has too many nodes to draw one by one.
 */
export interface IGraphLayout {
  /** Every drawn node by id (a folded scope's id in place of its members): [x, y] in layout units. */
  positions: Record<string, [number, number]>;
  /** Name scopes drawn as one node each (graphs of more than 200 nodes); empty when none is folded. */
  scopes: IGraphScope[];
  /**
   * Edges that would cross another node's box drawn straight, with the points they pass through between their ends
   * (layout units); an edge not listed is drawn straight. Added in 1.7.
   */
  routes?: IGraphRoute[];
}

/**
 * A name scope drawn as one node (`id`, e.g. `forward/block_2`) in place of its `members`, which it stands for. The
 * node's shapes, dtypes and line are those of its first member.
 */
export interface IGraphScope {
  id: string;
  label: string;
  role: NodeRole;
  /** Ops it stands for. */
  count: number;
  /** Node ids, in the graph's order. */
  members: string[];
}

/** The bend points of one drawn edge, between its ends, in layout units. */
export interface IGraphRoute {
  source: string;
  target: string;
  points: [number, number][];
}

/**
 * The op along one input element, the others held at the example point. `values` is the output element, `custom` and
 * `autodiff` its derivative through the custom gradient and through the forward's own ops (both in the op's dtype),
 * `numerical` the central difference (in `numerical_dtype`). The input is a scalar, or the op is element-wise in it
 * (`elementwise`): then output[i] depends on input[i] alone and the curve is the op's element-wise function.
 */
export interface ISweep {
  /** The swept input (or variable). */
  input: string;
  /** The swept element inside it. */
  index: Index;
  output: string;
  output_index: Index;
  /** The element's value at the example point. */
  example: AnyFloat;
  /** The swept element's values. */
  points: AnyFloat[];
  /** The output element at each point. */
  values: (AnyFloat | null)[];
  /** Its derivative through the custom gradient. */
  custom: (AnyFloat | null)[];
  /** Through the forward's own ops; None where it has no gradient. */
  autodiff: (AnyFloat | null)[] | null;
  /** Its central difference. */
  numerical: (AnyFloat | null)[];
  /** The dtype of values, custom and autodiff (the op's own). */
  dtype: string;
  /** The dtype the central differences ran in. */
  numerical_dtype: string;
  /** Output[i] depends on input[i] alone. */
  elementwise: boolean;
  /** Where the check found the forward not differentiable. */
  kinks: AnyFloat[];
}

/** The op checked on one Keras backend, in its own process (the portability check). */
export interface IBackendResult {
  /** "tensorflow", "jax" or "torch". */
  backend: string;
  verdict: BackendVerdict;
  /** Keras's and the backend's versions in that process. */
  version: string | null;
  problems: IProblem[];
  seconds: number;
  /** Why it is unavailable. */
  note: string | null;
}

/**
 * A verdict on one Keras backend; "unavailable" when the backend could not run (not installed, its process failed).
 */
export type BackendVerdict = 'pass' | 'warn' | 'surrogate' | 'unchecked' | 'fail' | 'unavailable';

/**
 * A custom gradient that is deliberately not the derivative: declared by the user, or recognised. Declared
 * (`surrogate=True`), its difference from the true derivative is reported as `surrogate-differs` (info) and does not
 * fail the check. Recognised only, the check fails with `fd-mismatch` and names the pattern.
 */
export interface ISurrogate {
  /** Declared by the user (--surrogate, surrogate=True): its difference informs, it does not fail. */
  declared: boolean;
  /**
   * The recognised pattern: "straight-through estimator", "gradient clipping", "gradient reversal", "scaled gradient
   * reversal", "scaled gradient", "stopped gradient", "stop_gradient-like forward"; None when none is.
   */
  pattern: string | null;
  /** What in the measurements shows the pattern. */
  reason: string | null;
}

/** One example input the check ran at (a leaf of the op's arguments): how it was given and what it held. */
export interface ICheckedInput {
  /** As the report names its elements: "x", "args[1]", "pair[0]". */
  name: string;
  dtype: string | null;
  shape: Shape | null;
  /** Its smallest and largest finite value (None for strings and empty tensors). */
  minimum: AnyFloat | null;
  maximum: AnyFloat | null;
  /** The expression it was typed as (`--check x=EXPR`, Re-check); None for values. */
  expression: string | null;
}

/**
 * What every view of a report says, worded once, in Python (`gradmagic.render.words.report_words`): the static HTML is
 * written with these words, and the JupyterLab view and the live widget show them as they are.
 */
export interface IReportWords {
  /** The badge: "passes", "fails", "surrogate gradient (declared)", ... */
  verdict: string;
  /**
   * The verdict with each Keras backend it was checked on ("fails on PyTorch; passes on TensorFlow, JAX"); the badge's
   * words for an op checked on one framework.
   */
  headline: string;
  /** The key figures after the verdict: "full mode · 3 elements in float64 · worst error ... · 24 ms". */
  figures: string;
  /** What the report says of a surrogate gradient, declared or recognised. */
  surrogate: string | null;
  /** Where each of `problems` is ("x[2]; Cell In[3], line 4"), "" where it names no place. */
  places: string[];
  /** How the finite differences ran and what they found, in a sentence. */
  numerics: string;
  /** Where the forward is not differentiable, left out of the comparison. */
  kinks: string | null;
  /** "Worst elements" (full mode) or "Located elements (...)" (projection mode). */
  worst_title: string;
  /** The elements the table lists: those beyond the tolerance, else the first few. */
  worst: IWorstRow[];
  /** The shapes table, a row per tensor: role, name, dtype and shape, the expected ones, and whether they match. */
  shapes: [string, string, string, string, string][];
  /** The portability table, a row per backend: backend, verdict, problems (or why not checked), versions, time. */
  backends: [string, string, string, string, string][];
  /** The sweep's caption; None without a sweep. */
  sweep: string | null;
  /** Why there is no sweep; None with one. */
  no_sweep: string | null;
  /** Why there is no sweep, as the live view says it (where its Sweep button is). */
  no_sweep_live: string | null;
  /** The gradient graph's summary; None without a graph. */
  graph: string | null;
  /** Why there is no gradient graph; None with one. */
  no_graph: string | null;
  /** What ran the op, the execution mode, and the time of each phase of the check. */
  timings: string | null;
  /**
   * What it checked, in a sentence: the inputs (expressions and values), where they came from, the options given. Added
   * in 1.9.
   */
  checked_at?: string | null;
  /**
   * What the custom gradient fixes, said under the verdict where every view shows it without a click: the framework's
   * own gradient NaN/Inf where the custom one is finite (`autodiff-nonfinite`); None otherwise. Added in 1.9.
   */
  fixes?: string | null;
}

/** A row of the table of the worst (or located) elements, as every view shows it. */
export interface IWorstRow {
  /**
   * The element, its output's beside it where the Jacobian has one: "d output[2] / d x[2]"; then its custom gradient,
   * finite differences and autodiff (with the digits that tell the first two apart where it is beyond the tolerance),
   * and its error ÷ the tolerance.
   */
  cells: [string, string, string, string, string];
  /** Beyond the tolerance (or its error not finite): the row is marked. */
  beyond: boolean;
}

/** The result of `gradmagic.check()`: problems, the shapes table, the finite-difference comparison and timings. */
export interface IReport {
  $schema: 'urn:gradmagic:schema:report';
  version: string;
  /** True when no problem has severity `error`. */
  ok: boolean;
  /**
   * "fail" with an error; "unchecked" when no gradient value could be compared (`numerics.skipped_because` says why: no
   * floating input, complex inputs, finite differences NaN everywhere); "surrogate" when a declared surrogate gradient
   * differs from the true derivative (`surrogate-differs`, `surrogate-nonlinear`); "warn" with a warning; else "pass".
   */
  verdict: Verdict;
  op: IOpDescription;
  problems: IProblem[];
  tensors: ITensorRow[];
  numerics: INumerics;
  /** Seconds spent per phase: structure, numerics, total. */
  timings: Record<string, number>;
  /** The options the check ran with (rtol, atol, eps, ...). */
  options: Record<string, unknown>;
  /** The op's forward and backward as traced; None when not traced. Added in 1.1. */
  graph?: IGraph | null;
  /** The op along one input element (a scalar input or an element-wise op). Added in 1.2. */
  sweep?: ISweep | null;
  /**
   * The portability check: the same op and inputs checked on each Keras backend asked for, each in its own process;
   * empty when not asked. Added in 1.3.
   */
  backends?: IBackendResult[];
  /**
   * A custom gradient that is deliberately not the derivative: declared (surrogate=True), or recognised from an
   * fd-mismatch; None otherwise. Added in 1.4.
   */
  surrogate?: ISurrogate | null;
  /** The example inputs it ran at. Added in 1.9. */
  inputs?: ICheckedInput[];
  /**
   * Where those inputs came from: "the cell's --check", "%gradcheck", "gradmagic.check's arguments", "Re-check, not the
   * cell's --check", ...; None where not said (data saved before 1.9). Added in 1.9.
   */
  inputs_from?: string | null;
  /**
   * The words every view shows, worded once in Python (gradmagic.render.words); absent from data `to_dict()` wrote, and
   * from data saved before 1.8, where a view words what it can itself. Added in 1.8.
   */
  words?: IReportWords;
}

/**
 * A problem of a watch: the op it is about, and the call whose recorded inputs show it (None: the watched code itself
 * showed it).
 */
export interface IWatchProblem {
  op: string;
  /**
   * A Report's problem code, or one of the watch's own: watched-nonfinite-gradient, watched-nonfinite-output,
   * watch-unrecorded.
   */
  code: string;
  severity: Severity;
  message: string;
  /** The op's call whose recorded inputs its check ran at; None for what the watched code itself showed. */
  call: number | null;
  location: ILocation | null;
}

/**
 * One custom-gradient op under a watch: what its calls received and did, and its check at the inputs it got. `report`
 * is an ordinary Report: the op checked at the kept call that shows the most (`checked_call`), or "not checked" with
 * the reason. `findings` are what the watched code itself showed: a gradient that went non-finite from a finite
 * upstream gradient, calls that could not be recorded.
 */
export interface IWatchedOp {
  /** The op's name. */
  name: string;
  /**
   * The report's verdict, made "fail" by an error in `findings` (and "warn" by a warning, over "pass" and "surrogate").
   */
  verdict: Verdict;
  report: IReport;
  /** "Cell In[3], line 2" or "/path/model.py, line 14": where the op is defined. */
  where: string | null;
  calls: Count;
  /** Of `calls`, those inside compiled code (tf.function, model.fit, a TF1 graph). */
  compiled_calls: Count;
  gradient_calls: Count;
  inputs: IValueSummary[];
  outputs: IValueSummary[];
  nonfinite_gradient_calls: Count;
  nonfinite_output_calls: Count;
  first_nonfinite_gradient: INonFinite | null;
  first_nonfinite_output: INonFinite | null;
  checked: ICheckedCall[];
  /** The kept call whose check `report` is. */
  checked_call: number | null;
  findings: IProblem[];
  /**
   * Times the op was traced into a graph (a tf.function, Keras's compiled functions, XLA): an op traced and never run
   * (its graph failed, or ran inside XLA) is still reached, and checked at inputs of its traced shapes. Added in 1.2.
   */
  traces?: Count;
  /** Its inputs as traced: dtypes and shapes, None for a dimension not known. Added in 1.2. */
  traced_inputs?: IValueSummary[];
  /**
   * Calls that ran inside XLA-compiled code (counted from the compiled steps that ran; their values never reach
   * Python); not in `calls`. Added in 1.2.
   */
  xla_calls?: Count;
  /**
   * Of `calls`, those the watch made replaying an XLA-compiled step uncompiled at that step's inputs. Added in 1.2.
   */
  replayed_calls?: Count;
  /** How many replicas in sync it ran on (tf.distribute), where more than one; 0 elsewhere. Added in 1.2. */
  replicas?: Count;
  /**
   * Under `pytest --gradmagic`: the tests that called it, in the order they first did, with their calls. Added in 1.3.
   */
  tests?: ICallsByTest[];
}

/** One input or output of an op over the calls a watch recorded: its dtype, the shapes it had, its range. */
export interface IValueSummary {
  /** "x", "args[1]", "output", "output[0]". */
  name: string;
  dtype: string;
  /** The distinct shapes, in the order first seen (at most 8). */
  shapes: Shape[];
  /** Over the finite elements of every recorded call; None: no finite number. */
  minimum: AnyFloat | null;
  maximum: AnyFloat | null;
  /** Calls in which it had a NaN or infinite element. */
  nonfinite_calls: Count;
}

/** The first call in which an op's gradient (or its output) had NaN or infinite elements. */
export interface INonFinite {
  op: string;
  /** The op's call (1: its first) whose gradient or output it was; None: not recorded. */
  call: number | null;
  kind: 'gradient' | 'output';
  /** The input the gradient is for ("x"), or the output ("output"). */
  tensor: string;
  /** Its first non-finite element. */
  index: Index;
  /** How many were non-finite. */
  elements: Count;
  /** "NaN", "Inf", "NaN and Inf". */
  values: string;
  /** The upstream gradient (for a gradient) or the op's inputs (for an output) were finite. */
  from_finite: boolean;
  /**
   * The test (a pytest node id, under `pytest --gradmagic`) that made the call; None outside a test suite. Added in
   * 1.3.
   */
  test?: string | null;
}

/** A call a watch kept, and the verdict of the op's check at its inputs. */
export interface ICheckedCall {
  call: number;
  /** Why it was kept: "first call", "largest values", "first non-finite gradient", ... */
  reasons: string[];
  /** The shapes of its recorded inputs. */
  shapes: Shape[];
  verdict: Verdict;
  codes: string[];
  /**
   * The test (a pytest node id, under `pytest --gradmagic`) that made the call; None outside a test suite. Added in
   * 1.3.
   */
  test?: string | null;
}

/** A test (under `pytest --gradmagic`) that reached an op, and how many of the op's calls it made. */
export interface ICallsByTest {
  /** The pytest node id: "tests/test_layers.py::test_fit[2]". */
  test: string;
  calls: Count;
}

/**
 * One worker's watch of a multi-worker run (`tf.distribute.MultiWorkerMirroredStrategy`): each worker's is gathered on
 * every worker when the watch ends.
 */
export interface IWorkerWatch {
  /** "worker 1". */
  worker: string;
  verdict: Verdict;
  ok: boolean;
  ops: IWorkerOp[];
  /** Its errors and warnings, a line each ("center: error watch-replica-gradient: ..."). */
  problems: string[];
}

/** An op as one worker of a multi-worker run watched it. */
export interface IWorkerOp {
  name: string;
  calls: Count;
  verdict: Verdict;
}

/**
 * How many checks a watch may run when it ends (each op at each kept call is one), and how many it ran: the kept calls
 * beyond the budget go unchecked, chosen the same way on any machine (each op's most telling call first, the ops in
 * turn).
 */
export interface ICheckBudget {
  /** The most checks the watch may run (`max_checks`). */
  checks: Count;
  /** The checks it ran. */
  used: Count;
  /** Kept calls not checked for the budget. */
  left_out: Count;
}

/** What every view of a watch's report says, worded once, in Python (`gradmagic.render.words.watch_words`). */
export interface IWatchWords {
  /** The badge: "passes", "fails", ... */
  verdict: string;
  /** "watch of 3 custom-gradient ops fails (2 errors, 0 warnings)". */
  summary: string;
  /**
   * The framework; the time the watched code took, the watch's own part in it and the checks'; the memory the kept
   * inputs took, of the limit.
   */
  timings: string;
  /** Where the first gradient and the first output went non-finite, that none did, or that no op was called. */
  lines: string[];
  /** What the watched code raised, in a sentence. */
  raised: string | null;
  /**
   * The table, a row per op of `watched`: name, where, calls, verdict, its first problem (code and first sentence).
   */
  rows: [string, string, string, string, string][];
  /** A list per op of `watched`: what its calls received and did, and the calls it was checked at, a line each. */
  calls: string[][];
  /**
   * A list per op of `watched`: where each of its `findings` is ("model.py, line 14"), "" where it names no place.
   */
  places: string[][];
}

/**
 * What `gradmagic.watch()` found: every custom-gradient op the watched code reached, each with an ordinary Report
 * (`ops`), and where the first gradient went non-finite. `timings`: `watched` is the watched code's wall time
 * (recording included), `recording` the part of it spent in the watch's recording, `checks` the checks at the end. Kept
 * calls' inputs take at most `memory_limit` bytes; `calls_not_kept` calls that would have been kept were not, for that
 * limit.
 */
export interface IWatchReport {
  $schema: 'urn:gradmagic:schema:watch-report';
  version: string;
  /**
   * True when the watched code reached at least one op, every op it reached was checked, and no problem has severity
   * `error`: an op not checked is no pass (`assert watch.report.ok` never passes on nothing). In a multi-worker run, on
   * every worker.
   */
  ok: boolean;
  /**
   * The worst of the ops' verdicts (every worker's, in a multi-worker run): "fail", then "warn", then "unchecked" when
   * an op was not checked (also when no op was reached), then "surrogate", "pass".
   */
  verdict: Verdict;
  /** How many of the ops reached were checked (their verdict is not "unchecked"). Added in 1.2. */
  checked?: number;
  /** Every op's findings, then its check's errors and warnings, each naming its op. */
  problems: IWatchProblem[];
  /** The ops, in the order their first calls returned (a nested op before the op calling it). */
  watched: IWatchedOp[];
  framework: string;
  framework_version: string;
  /**
   * The first gradient in the watched code that went non-finite from a finite upstream gradient; else the first that
   * went non-finite at all.
   */
  first_nonfinite_gradient: INonFinite | null;
  /** The first output that was non-finite from finite inputs; else the first non-finite at all. */
  first_nonfinite_output: INonFinite | null;
  /** Seconds: watched, recording, checks. */
  timings: Record<string, number>;
  /** Bytes the kept calls' inputs may take. */
  memory_limit: Count;
  kept_bytes: Count;
  /** Calls that would have been kept but for the memory limit. */
  calls_not_kept: Count;
  /** What the watch changed while it ran (each put back), and what it could not record. */
  notes: string[];
  /** What the watched code raised ("ValueError: ..."), if it did. */
  error: string | null;
  /**
   * In a multi-worker run, the worker this report is of ("worker 0"), and every worker's watch, gathered. Added in 1.2.
   */
  worker?: string | null;
  /** Added in 1.2. */
  workers?: IWorkerWatch[];
  /** The checks' budget and its use, where the watch had one (`max_checks`). Added in 1.3. */
  budget?: ICheckBudget | null;
  /**
   * The words every view shows, worded once in Python (gradmagic.render.words); absent from data `to_dict()` wrote, and
   * from data saved before 1.1, where a view words what it can itself. Added in 1.1.
   */
  words?: IWatchWords;
}
