/**
 * A gradmagic report as DOM: the verdict and problems, the shapes table,
 * the finite-difference results, the sweep and the interactive gradient graph. The same
 * sections, words and order as the Python HTML fallback
 * (`gradmagic/render/html.py`). Every string from the data is inserted as
 * text (`textContent`), never parsed as HTML.
 */
import { element } from './dom';
import { graphView } from './graphview';
import { sweepView } from './sweepview';
import {
  ILocation,
  IReport,
  ISweep,
  ITensorRow,
  elementLabel,
  formatBytes,
  formatNumber,
  formatShape
} from './schema';

export const VERDICT_WORDS = {
  pass: 'passes',
  warn: 'passes with warnings',
  surrogate: 'surrogate gradient (declared)',
  unchecked: 'not checked',
  fail: 'fails'
} as const;
const BACKEND_VERDICT_WORDS = { ...VERDICT_WORDS, unavailable: 'not checked' } as const;
const BACKEND_MARKS = { pass: '✓', warn: '✓', surrogate: '✓', unchecked: '–', fail: '✗', unavailable: '–' } as const;
/** Keras backends as users name them. */
export const BACKEND_NAMES: Record<string, string> = { tensorflow: 'TensorFlow', jax: 'JAX', torch: 'PyTorch' };
/** Problems the header shows; the rest are in the problems section. */
const HEADLINED = 3;
const TIMED_PHASES = ['structure', 'tf_function', 'graph', 'numerics', 'backends'];

/** What to show: the whole report, or the graph alone (the widget's graph tab). */
export type View = 'report' | 'graph';

/** `x[2]; output[0]; Cell In[3], line 4` from a problem's location, or ''. */
export function where(location: ILocation | null, opFilename: string | null): string {
  if (!location) {
    return '';
  }
  const parts: string[] = [];
  if (location.input) {
    parts.push(elementLabel(location.input, location.index));
  } else if (location.variable) {
    parts.push(`variable ${elementLabel(location.variable, location.index)}`);
  }
  if (location.output) {
    parts.push(elementLabel(location.output, location.output_index));
  }
  if (location.line !== null && location.line !== undefined) {
    const source = location.filename ?? opFilename;
    parts.push(source ? `${source}, line ${location.line}` : `line ${location.line}`);
  }
  return parts.join('; ');
}

function section(parent: Element, title: string, name: string, open = true): HTMLElement {
  const details = element('details', `jp-gradmagic-section jp-gradmagic-${name}`, undefined, parent);
  details.open = open;
  element('summary', undefined, title, details);
  return details;
}

function table(parent: Element, className: string, headings: string[], rows: HTMLTableRowElement[]): void {
  const grid = element('table', `jp-gradmagic-table ${className}`, undefined, parent);
  const head = element('tr', undefined, undefined, element('thead', undefined, undefined, grid));
  headings.forEach(heading => element('th', undefined, heading, head));
  const body = element('tbody', undefined, undefined, grid);
  rows.forEach(row => body.appendChild(row));
}

function row(cells: string[], className?: string): HTMLTableRowElement {
  const line = element('tr', className);
  cells.forEach(cell => element('td', undefined, cell, line));
  return line;
}

function header(report: IReport, parent: Element): void {
  const head = element('div', 'jp-gradmagic-header', undefined, parent);
  const title = element('div', 'jp-gradmagic-title', undefined, head);
  element('span', `jp-gradmagic-verdict jp-gradmagic-${report.verdict}`, VERDICT_WORDS[report.verdict], title);
  element('code', 'jp-gradmagic-signature', report.op.name + report.op.signature, title);
  const timings = TIMED_PHASES.filter(phase => phase in report.timings)
    .map(phase => `${phase.replace('_', '.')} ${(report.timings[phase] * 1e3).toFixed(0)} ms`)
    .join(' · ');
  const total = ((report.timings.total ?? 0) * 1e3).toFixed(0);
  element(
    'div',
    'jp-gradmagic-muted',
    `${frameworkLabel(report)}, ${report.op.mode}; checked in ${total} ms` + (timings ? ` (${timings})` : ''),
    head
  );
  const surrogate = surrogateLine(report);
  if (surrogate) {
    element('div', 'jp-gradmagic-surrogate-line', surrogate, head);
  }
  const backends = report.backends ?? [];
  if (backends.length) {
    const line = element('div', 'jp-gradmagic-backend-line', 'backends: ', head);
    backends.forEach((result, position) => {
      if (position) {
        line.append(' · ');
      }
      const name = BACKEND_NAMES[result.backend] ?? result.backend;
      element('b', `jp-gradmagic-${result.verdict}`, `${name} ${BACKEND_MARKS[result.verdict]}`, line);
    });
  }
  if (report.problems.length) {
    problemList(report, report.problems.slice(0, HEADLINED), head);
    if (report.problems.length > HEADLINED) {
      element('div', 'jp-gradmagic-muted', `… and ${report.problems.length - HEADLINED} more (Problems).`, head);
    }
  }
}

/** What the report says of a surrogate gradient, in the words of Python's `surrogate_line`; null if nothing. */
export function surrogateLine(report: IReport): string | null {
  const surrogate = report.surrogate;
  if (!surrogate) {
    return null;
  }
  if (surrogate.declared) {
    return surrogate.pattern === null
      ? 'Declared surrogate gradient: its difference from the true derivative informs, it does not fail.'
      : `Declared surrogate gradient (${surrogate.pattern}): ${surrogate.reason}.`;
  }
  return (
    `Looks like an intended surrogate (${surrogate.pattern}): ${surrogate.reason}. ` +
    'Declare it with --surrogate if so.'
  );
}

/** `Keras 3 on JAX (keras 3.15.1, jax 0.10.2)` or `tensorflow 2.21.0`: what ran the op. */
export function frameworkLabel(report: IReport): string {
  const op = report.op;
  if (op.backend) {
    return `Keras 3 on ${BACKEND_NAMES[op.backend] ?? op.backend} (${op.framework_version})`;
  }
  return `${op.framework} ${op.framework_version}`;
}

/** The portability check: each Keras backend's verdict, problems (or why not checked) and time. */
function backendTable(report: IReport, parent: Element): void {
  const results = report.backends ?? [];
  const body = section(parent, `Backends (${results.length})`, 'backends');
  element(
    'div',
    'jp-gradmagic-muted',
    'The same op and inputs on each Keras backend, each in its own process (KERAS_BACKEND is fixed when Keras ' +
      "is imported). Each failing backend's first error is in Problems.",
    body
  );
  const rows = results.map(result => {
    const here = result.backend === report.op.backend ? ' (this kernel)' : '';
    const codes = [...new Set(result.problems.filter(p => p.severity !== 'info').map(p => p.code))].join(', ');
    const detail = result.verdict === 'unavailable' ? (result.note ?? '') : codes || 'no problem';
    const seconds = result.seconds >= 1 ? `${result.seconds.toFixed(1)} s` : `${(result.seconds * 1e3).toFixed(0)} ms`;
    const line = row(
      [
        (BACKEND_NAMES[result.backend] ?? result.backend) + here,
        BACKEND_VERDICT_WORDS[result.verdict],
        detail,
        result.version ?? '',
        seconds
      ],
      `jp-gradmagic-backend-${result.verdict}`
    );
    line.cells[1].className = `jp-gradmagic-${result.verdict}`;
    line.dataset.backend = result.backend;
    return line;
  });
  table(body, 'jp-gradmagic-backends-table', ['backend', 'verdict', 'problems', 'versions', 'time'], rows);
}

function problemList(report: IReport, problems: IReport['problems'], parent: Element): void {
  const list = element('ul', 'jp-gradmagic-problems', undefined, parent);
  for (const problem of problems) {
    const item = element('li', `jp-gradmagic-problem jp-gradmagic-${problem.severity}`, undefined, list);
    element('b', 'jp-gradmagic-severity', problem.severity, item);
    item.append(' ');
    element('code', 'jp-gradmagic-code', problem.code, item);
    const place = where(problem.location, report.op.filename);
    if (place) {
      element('span', 'jp-gradmagic-muted', ` (${place})`, item);
    }
    element('div', 'jp-gradmagic-message', problem.message, item);
  }
}

function shapeOf(tensor: ITensorRow, expected = false): string {
  const shape = expected ? tensor.expected_shape : tensor.shape;
  const dtype = expected ? tensor.expected_dtype : tensor.dtype;
  if (!shape) {
    return expected ? '' : 'None';
  }
  return `${dtype ?? ''}${shape.length ? formatShape(shape) : '[]'}`; // as the Python renderers: float32[]
}

function shapes(report: IReport, parent: Element): void {
  const body = section(parent, 'Shapes', 'shapes');
  if (!report.tensors.length) {
    element('div', 'jp-gradmagic-muted', 'No tensor reached the check.', body);
    return;
  }
  const rows = report.tensors.map(tensor => {
    const expected = shapeOf(tensor, true);
    return row(
      [tensor.role, tensor.name, shapeOf(tensor), expected, expected ? (tensor.matches ? '✓' : '✗ mismatch') : ''],
      tensor.matches ? undefined : 'jp-gradmagic-mismatch'
    );
  });
  table(body, 'jp-gradmagic-shapes-table', ['role', 'name', 'shape', 'expected', ''], rows);
}

function numericsSummary(report: IReport): string {
  const numerics = report.numerics;
  if (numerics.mode === 'skipped') {
    return `finite differences: skipped (${numerics.skipped_because ?? 'no reason given'})`;
  }
  let detail = `${numerics.elements} elements in ${numerics.dtype}`;
  if (numerics.max_error !== null) {
    detail += `, worst error ${formatNumber(numerics.max_error)} of tolerance`;
  }
  if (numerics.mode === 'projection') {
    detail += `, ${numerics.probes} random directions, noise floor ${formatNumber(numerics.noise_floor)}`;
  }
  return `finite differences (${numerics.mode} mode): ${detail}`;
}

function numerics(report: IReport, parent: Element): void {
  const body = section(parent, 'Finite differences', 'numerics');
  const numerics = report.numerics;
  element('div', 'jp-gradmagic-muted', numericsSummary(report), body);
  if (numerics.mode === 'full' && numerics.rtol !== null) {
    element(
      'div',
      'jp-gradmagic-muted',
      `tolerance: rtol ${formatNumber(numerics.rtol)}, atol ${formatNumber(numerics.atol)}, ` +
        `step ${formatNumber(numerics.eps)} × max(|x|, 1); error 1.0 is the tolerance`,
      body
    );
  }
  const kinks = report.problems.filter(problem => problem.code === 'nondifferentiable-point' && problem.location);
  if (kinks.length) {
    element(
      'div',
      'jp-gradmagic-kinks',
      `Not differentiable at ${kinks.map(kink => where(kink.location, null)).join(', ')}: left out of the comparison.`,
      body
    );
  }
  if (!numerics.worst.length) {
    return;
  }
  element(
    'div',
    'jp-gradmagic-subtitle',
    numerics.mode === 'full' ? 'Worst elements' : 'Located elements (custom Jᵀu vs finite differences)',
    body
  );
  const rows = numerics.worst.map(worst => {
    let label = elementLabel(worst.input, worst.index);
    if (worst.output !== null) {
      label = `d ${elementLabel(worst.output, worst.output_index)} / d ${label}`;
    }
    const bad = typeof worst.error === 'number' ? worst.error > 1 : worst.error !== null;
    return row(
      [label, ...[worst.custom, worst.numerical, worst.autodiff, worst.error].map(formatNumber)],
      bad ? 'jp-gradmagic-mismatch' : undefined
    );
  });
  table(body, 'jp-gradmagic-worst-table', ['element', 'custom', 'finite differences', 'autodiff', 'error'], rows);
}

/** `output[2] and its derivative along x[2] (...) from -2.475 to 2.175, 201 points; ...`, as the HTML fallback. */
export function sweepSummary(sweep: ISweep): string {
  const kind = sweep.elementwise ? 'the op is element-wise in it' : 'a scalar input';
  return (
    `${elementLabel(sweep.output, sweep.output_index)} and its derivative along ` +
    `${elementLabel(sweep.input, sweep.index)} (${kind}) from ${formatNumber(sweep.points[0])} to ` +
    `${formatNumber(sweep.points[sweep.points.length - 1])}, ${sweep.points.length} points; the other inputs at ` +
    'the example point.'
  );
}

function sweep(report: IReport, parent: Element): void {
  element('div', 'jp-gradmagic-muted', sweepSummary(report.sweep!), parent);
  parent.appendChild(sweepView(report.sweep!, report.verdict === 'surrogate'));
}

/** `gradient graph: 7 forward and 4 backward ops; the backward keeps 12 B alive (1 saved tensor)`. */
export function graphSummary(report: IReport): string {
  const graph = report.graph!;
  const count = (role: string): number =>
    graph.nodes.filter(node => node.role === role).reduce((sum, node) => sum + node.count, 0);
  const kept = graph.saved_tensors
    ? `the backward keeps ${formatBytes(graph.saved_bytes)} alive ` +
      `(${graph.saved_tensors} saved tensor${graph.saved_tensors === 1 ? '' : 's'})`
    : 'the backward keeps nothing from the forward';
  return `gradient graph: ${count('forward')} forward and ${count('backward')} backward ops; ${kept}`;
}

function graph(report: IReport, parent: Element, summary = true): void {
  if (!report.graph) {
    element('div', 'jp-gradmagic-muted', 'No gradient graph.', parent);
    return;
  }
  if (summary) {
    element(
    'div',
    'jp-gradmagic-muted jp-gradmagic-graph-summary',
      `${graphSummary(report)} (per call, from the forward until the gradient is taken: the red dashed edges).`,
      parent
    );
  }
  parent.appendChild(graphView(report.graph));
}

/** The report (or its graph alone) as a new element. */
export function reportView(report: IReport, view: View = 'report'): HTMLElement {
  const root = element('div', `jp-gradmagic-report jp-gradmagic-view-${view}`);
  root.dataset.verdict = report.verdict;
  if (view === 'graph') {
    graph(report, root, false); // the widget's graph tab has the summary above
    return root;
  }
  header(report, root);
  if (report.backends?.length) {
    backendTable(report, root);
  }
  if (report.problems.length) {
    problemList(report, report.problems, section(root, `Problems (${report.problems.length})`, 'all-problems'));
  }
  shapes(report, root);
  numerics(report, root);
  if (report.sweep) {
    sweep(report, section(root, 'Sweep', 'sweep-section'));
  }
  graph(report, section(root, 'Gradient graph', 'graph-section'));
  return root;
}
