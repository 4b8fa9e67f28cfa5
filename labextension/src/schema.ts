/**
 * The report's data, as `gradmagic.report.Report.to_dict()` writes it and
 * `gradmagic/schema/report.schema.json` describes it. Non-finite numbers
 * travel as the strings "NaN", "Infinity" and "-Infinity".
 */

/** The MIME type under which a report travels from the kernel. */
export const MIME_TYPE = 'application/vnd.gradmagic.report+json';

/** The schema major version this renderer reads. */
export const SCHEMA_MAJOR = 1;

/** A number as JSON carries it: non-finite ones as strings. */
export type JsonNumber = number | 'NaN' | 'Infinity' | '-Infinity';
export type Num = JsonNumber | null;
export type Shape = (number | null)[];
/**
 * `surrogate`: a declared surrogate gradient differs from the true derivative and nothing fails (schema 1.4);
 * `unchecked`: nothing fails but no gradient value could be compared (schema 1.6).
 */
export type Verdict = 'pass' | 'warn' | 'surrogate' | 'unchecked' | 'fail';
export type Severity = 'error' | 'warning' | 'info';

export interface ILocation {
  input: string | null;
  output: string | null;
  variable: string | null;
  index: number[] | null;
  output_index: number[] | null;
  line: number | null;
  filename: string | null;
}

export interface IProblem {
  code: string;
  severity: Severity;
  message: string;
  location: ILocation | null;
}

export interface ITensorRow {
  role: string;
  name: string;
  shape: Shape | null;
  dtype: string | null;
  expected_shape: Shape | null;
  expected_dtype: string | null;
  matches: boolean;
}

export interface IElementComparison {
  input: string;
  index: number[];
  output: string | null;
  output_index: number[] | null;
  custom: Num;
  numerical: Num;
  autodiff: Num;
  error: Num;
}

/**
 * Dense Jacobians d output / d input of one (input, output) pair, row-major with the outputs as rows, kept for
 * small sizes: through the custom gradient, by finite differences and by autodiff; `error` (schema 1.7) is the
 * checker's own scaled error of each entry (1 is the tolerance; -1 where it judged nothing, a kink or no finite
 * difference).
 */
export interface IJacobianBlock {
  input: string;
  output: string;
  shape: [number, number];
  custom: Num[];
  numerical: Num[];
  autodiff: Num[];
  error?: Num[] | null;
}

export interface INumerics {
  mode: 'full' | 'projection' | 'skipped';
  dtype: string | null;
  rtol: number | null;
  atol: number | null;
  eps: number | null;
  elements: number;
  max_error: Num;
  probes: number;
  noise_floor: Num;
  worst: IElementComparison[];
  jacobians: IJacobianBlock[];
  skipped_because: string | null;
}

export type NodeRole = 'input' | 'variable' | 'forward' | 'output' | 'upstream' | 'backward' | 'downstream';
/** Every role, in the legend's order: the forward lane's, then the backward lane's. */
export const NODE_ROLES: readonly NodeRole[] = [
  'input',
  'variable',
  'forward',
  'output',
  'upstream',
  'backward',
  'downstream'
];

export interface IGraphNode {
  id: string;
  op: string;
  label: string;
  role: NodeRole;
  shapes: Shape[];
  dtypes: string[];
  line: number | null;
  count: number;
}

export interface IGraphEdge {
  source: string;
  target: string;
  shape: Shape | null;
  dtype: string | null;
  saved: boolean;
  bytes: number | null;
}

/** A name scope drawn as one node (`id`) in place of its members, with the first member's shapes, dtypes and line. */
export interface IGraphScope {
  id: string;
  label: string;
  role: NodeRole;
  /** Ops it stands for. */
  count: number;
  /** Node ids, in the graph's order. */
  members: string[];
}

/**
 * Where the drawings put each node, computed by the Python checker
 * (`gradmagic/checking/graph_layout.py`) with the graph (schema 1.5).
 */
export interface IGraphLayout {
  /** Every drawn node (a scope's id in place of its members): [x, y] in layout units, y growing downwards. */
  positions: Record<string, [number, number]>;
  /** Name scopes folded into one node each (graphs of more than 200 nodes); empty when none is. */
  scopes: IGraphScope[];
  /**
   * Edges that would cross another node's box drawn straight (schema 1.7): the points they pass through between
   * their ends, in layout units; an edge not listed is drawn straight.
   */
  routes?: IGraphRoute[];
}

/** The bend points of one drawn edge (see `IGraphLayout.routes`). */
export interface IGraphRoute {
  source: string;
  target: string;
  points: [number, number][];
}

export interface IGraph {
  nodes: IGraphNode[];
  edges: IGraphEdge[];
  saved_tensors: number;
  saved_bytes: number;
  raw: boolean;
  traced_ops: number;
  /** Absent (or null) in a report saved before schema 1.5: then the graph cannot be drawn. */
  layout?: IGraphLayout | null;
}

export interface IOpDescription {
  name: string;
  signature: string;
  framework: string;
  framework_version: string;
  origin: string;
  mode: string;
  filename: string | null;
  /** Keras 3's backend ("tensorflow", "jax", "torch") for framework "keras"; absent before schema 1.3. */
  backend?: string | null;
}

/** The op checked on one Keras backend, in its own process (the portability check, schema 1.3). */
export interface IBackendResult {
  backend: string;
  verdict: Verdict | 'unavailable';
  version: string | null;
  problems: IProblem[];
  seconds: number;
  note: string | null;
}

/**
 * The op along one input element, the others at the example point (schema 1.2): the output element, and its
 * derivative through the custom gradient, through the forward's own ops (autodiff) and by central differences.
 */
export interface ISweep {
  input: string;
  index: number[];
  output: string;
  output_index: number[];
  /** The element's value at the example point. */
  example: JsonNumber;
  points: JsonNumber[];
  values: Num[];
  custom: Num[];
  /** null where the forward has no autodiff gradient. */
  autodiff: Num[] | null;
  numerical: Num[];
  /** dtype of values, custom and autodiff (the op's own). */
  dtype: string;
  /** dtype the central differences ran in. */
  numerical_dtype: string;
  /** output[i] depends on input[i] alone. */
  elementwise: boolean;
  /** Where the check found the forward not differentiable. */
  kinks: JsonNumber[];
}

/** A custom gradient that is deliberately not the derivative: declared by the user, or recognised (schema 1.4). */
export interface ISurrogate {
  declared: boolean;
  /** "straight-through estimator", "gradient reversal", ...; null when none is recognised. */
  pattern: string | null;
  /** What in the measurements shows the pattern. */
  reason: string | null;
}

export interface IReport {
  $schema: string;
  version: string;
  ok: boolean;
  verdict: Verdict;
  op: IOpDescription;
  problems: IProblem[];
  tensors: ITensorRow[];
  numerics: INumerics;
  timings: Record<string, number>;
  options: Record<string, unknown>;
  graph: IGraph | null;
  sweep: ISweep | null;
  backends?: IBackendResult[];
  /** Absent before schema 1.4. */
  surrogate?: ISurrogate | null;
}

/**
 * The report in `data`, or an Error saying why it cannot be read
 * (not a report, or a schema major version this renderer does not know).
 */
export function readReport(data: unknown): IReport | Error {
  if (typeof data !== 'object' || data === null || Array.isArray(data)) {
    return new Error('The gradmagic report is not a JSON object.');
  }
  const report = data as Partial<IReport>;
  const version = typeof report.version === 'string' ? report.version : '';
  const major = Number(version.split('.')[0]);
  if (major !== SCHEMA_MAJOR) {
    return new Error(
      `This gradmagic extension reads report schema ${SCHEMA_MAJOR}.x; the report is version ` +
        `${version || 'unknown'}. Update the extension (pip install -U gradmagic) to see it.`
    );
  }
  for (const key of ['op', 'problems', 'tensors', 'numerics'] as const) {
    if (report[key] === undefined || report[key] === null) {
      return new Error(`The gradmagic report has no "${key}".`);
    }
  }
  return report as IReport;
}

/** Verdicts in words, as every view says them (Python's `VERDICT_WORDS` in `gradmagic/render/__init__.py`). */
export const VERDICT_WORDS: Record<Verdict | 'unavailable', string> = {
  pass: 'passes',
  warn: 'passes with warnings',
  surrogate: 'surrogate gradient (declared)',
  unchecked: 'not checked',
  fail: 'fails',
  unavailable: 'not checked'
};

/** A number from the report as a JavaScript number: the non-finite strings as NaN and ±Infinity, null as NaN. */
export function toNumber(value: Num): number {
  return value === null ? NaN : Number(value);
}

/**
 * A number for display: non-finite strings as they are, others with `digits` significant digits (4 by default), or
 * `digits - 2` decimals and an exponent out of [1e-3, 1e5). Python's `format_number` writes the same.
 */
export function formatNumber(value: Num | undefined, digits = 4): string {
  if (value === null || value === undefined) {
    return '—';
  }
  if (typeof value === 'string') {
    return value === 'Infinity' ? 'inf' : value === '-Infinity' ? '-inf' : 'nan';
  }
  if (value === 0 || (Math.abs(value) >= 1e-3 && Math.abs(value) < 1e5)) {
    return String(Number(value.toPrecision(digits)));
  }
  return value.toExponential(digits - 2);
}

/** The most significant digits a table shows to tell two values apart. */
export const MOST_DIGITS = 10;

/**
 * The significant digits (4 at least, MOST_DIGITS at most) at which `first` and `second` read differently, so that a
 * wrong element's custom gradient and finite differences never print alike (`0.25 | 0.25`); 4 when they are equal
 * or one is not a finite number. Python's `digits_to_tell` says the same.
 */
export function digitsToTell(first: Num, second: Num): number {
  if (typeof first !== 'number' || typeof second !== 'number' || first === second) {
    return 4;
  }
  for (let digits = 4; digits <= MOST_DIGITS; digits++) {
    if (formatNumber(first, digits) !== formatNumber(second, digits)) {
      return digits;
    }
  }
  return MOST_DIGITS;
}

/** `[2, 3]`, `[?, 3]` for unknown dimensions, `scalar` for rank 0, `—` for no tensor. */
export function formatShape(shape: Shape | null | undefined): string {
  if (!shape) {
    return '—';
  }
  return shape.length ? `[${shape.map(d => (d === null ? '?' : String(d))).join(', ')}]` : 'scalar';
}

/** `x[2, 0]` for an element, `x` for the whole tensor. */
/**
 * `1 element`, `3 elements`, `4,096 elements`: a count and its noun, singular for exactly one (Python's `counted`
 * in `gradmagic/render/__init__.py` says the same).
 */
export function counted(count: number, word: string, plural?: string): string {
  return `${count.toLocaleString('en')} ${count === 1 ? word : (plural ?? `${word}s`)}`;
}

export function elementLabel(name: string, index: number[] | null | undefined): string {
  return index && index.length ? `${name}[${index.join(', ')}]` : name;
}

export function formatBytes(size: number): string {
  const units: [string, number][] = [
    ['GiB', 2 ** 30],
    ['MiB', 2 ** 20],
    ['KiB', 2 ** 10]
  ];
  for (const [unit, scale] of units) {
    if (size >= scale) {
      return `${(size / scale).toFixed(1)} ${unit}`;
    }
  }
  return `${size} B`;
}
