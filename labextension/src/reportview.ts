/**
 * A gradmagic report as DOM: the one view of a report, live (in the kernel's widget, with its controls) and saved
 * (drawn from the notebook's data by the JupyterLab extension, with no kernel).
 *
 * Read at a glance: a passing op is one line (the verdict and the key figures) with the details folded; a
 * failing one shows the verdict, then each problem once (cause, fix, where), then the evidence open. Every
 * string from the data goes in as text (`textContent`), never parsed as HTML. Python's static HTML
 * (`gradmagic/render/html.py`, for shared notebooks and exports) shows the same sections, words and order.
 */
import { element } from './dom';
import { graphView } from './graphview';
import { heatmapBlocks, heatmapsView } from './heatmapview';
import { ILive, ViewState } from './live';
import { VERDICT_WORDS, counted, digitsToTell, elementLabel, formatBytes, formatNumber, formatShape } from './data';
import { IElementComparison, ILocation, INumerics, IProblem, IReport, ISweep, ITensorRow, Verdict } from './schema';
import { sweepView } from './sweepview';

export { VERDICT_WORDS };
/** Keras backends as users name them. */
export const BACKEND_NAMES: Record<string, string> = { tensorflow: 'TensorFlow', jax: 'JAX', torch: 'PyTorch' };
/** The order backends' verdicts are named in a headline: what fails first. */
const HEADLINE_ORDER: (Verdict | 'unavailable')[] = ['fail', 'warn', 'surrogate', 'pass', 'unchecked', 'unavailable'];
const TIMED_PHASES = ['structure', 'graph', 'tf_function', 'numerics', 'backends'];
/** Elements the table lists when none is beyond the tolerance. */
const LISTED_WHEN_PASSING = 3;
/** Problems that say something is wrong with the shapes: the shapes table opens with them. */
const SHAPE_CODES = ['grad-shape', 'grad-dtype', 'grad-count', 'grad-structure', 'variable-grad-shape'];

/** What to show: the whole report, or the graph alone (`%gradgraph`, `gradmagic.gradient_graph`). */
export type View = 'report' | 'graph';

/**
 * The verdict in words, with each Keras backend it was checked on: `passes`, or `passes on TensorFlow; not
 * checked on JAX, PyTorch`, never a bare "passes" over backends that were not checked. Python's `headline`
 * (`gradmagic/render/__init__.py`) says the same; a test pins both on the same reports.
 */
export function headline(report: IReport): string {
  const backends = report.backends ?? [];
  if (!backends.length) {
    return VERDICT_WORDS[report.verdict];
  }
  const groups = HEADLINE_ORDER.map(verdict => [
    verdict,
    backends.filter(result => result.verdict === verdict).map(result => BACKEND_NAMES[result.backend] ?? result.backend)
  ]) as [Verdict | 'unavailable', string[]][];
  const merged = new Map<string, string[]>();
  for (const [verdict, names] of groups) {
    if (names.length) {
      const words = VERDICT_WORDS[verdict];
      merged.set(words, [...(merged.get(words) ?? []), ...names]);
    }
  }
  return [...merged].map(([words, names]) => `${words} on ${names.join(', ')}`).join('; ');
}

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

/**
 * The key figures after the verdict: how the numbers were compared and what they found, and the time.
 * `full · 3 elements in float64 · worst error 0.021 of tolerance · 24 ms`.
 */
export function keyFigures(report: IReport): string {
  const numerics = report.numerics;
  const parts: string[] = [];
  if (numerics.mode === 'skipped') {
    parts.push(`numbers not compared: ${numerics.skipped_because ?? 'no reason given'}`);
  } else {
    parts.push(`${numerics.mode} mode`, `${counted(numerics.elements, 'element')} in ${numerics.dtype}`);
    if (numerics.max_error !== null) {
      parts.push(`worst error ${formatNumber(numerics.max_error)} of tolerance`);
    }
    if (numerics.mode === 'projection') {
      parts.push(counted(numerics.probes, 'random direction'));
    }
  }
  parts.push(`${((report.timings.total ?? 0) * 1e3).toFixed(0)} ms`);
  return parts.join(' · ');
}

/** A <details> section that opens as `open` says, unless the user toggled it (kept in `state`). */
function section(
  parent: Element,
  title: string,
  name: string,
  open: boolean,
  state?: ViewState
): HTMLDetailsElement {
  const details = element('details', `jp-gradmagic-section jp-gradmagic-${name}`, undefined, parent);
  details.dataset.section = name;
  details.open = state?.opened.get(name) ?? open;
  element('summary', undefined, title, details);
  details.addEventListener('toggle', () => state?.opened.set(name, details.open));
  return details;
}

/** Run `fill` once: now if `details` is open, else when it first opens. */
function whenOpen(details: HTMLDetailsElement, fill: () => void): void {
  if (details.open) {
    fill();
    return;
  }
  const opened = (): void => {
    if (details.open) {
      details.removeEventListener('toggle', opened);
      fill();
    }
  };
  details.addEventListener('toggle', opened);
}

/** A table with a head row; `numeric` columns are right-aligned in tabular figures. */
function table(parent: Element, className: string, headings: string[], rows: string[][], numeric: number[] = []) {
  const scroll = element('div', 'jp-gradmagic-scroll', undefined, parent);
  const grid = element('table', `jp-gradmagic-table ${className}`, undefined, scroll);
  const head = element('tr', undefined, undefined, element('thead', undefined, undefined, grid));
  headings.forEach((heading, k) => element('th', numeric.includes(k) ? 'jp-gradmagic-number' : undefined, heading, head));
  const body = element('tbody', undefined, undefined, grid);
  return rows.map(cells => {
    const line = element('tr', undefined, undefined, body);
    cells.forEach((cell, k) => element('td', numeric.includes(k) ? 'jp-gradmagic-number' : undefined, cell, line));
    return line;
  });
}

function problemItem(report: IReport, problem: IProblem, parent: Element): void {
  const item = element('li', `jp-gradmagic-problem jp-gradmagic-${problem.severity}`, undefined, parent);
  item.dataset.code = problem.code;
  const head = element('div', 'jp-gradmagic-problem-head', undefined, item);
  element('span', 'jp-gradmagic-severity', problem.severity, head);
  element('code', 'jp-gradmagic-code', problem.code, head);
  const place = where(problem.location, report.op.filename);
  if (place) {
    element('span', 'jp-gradmagic-where', place, head);
  }
  element('div', 'jp-gradmagic-message', problem.message, item);
}

function header(report: IReport, parent: Element): void {
  const head = element('div', 'jp-gradmagic-head', undefined, parent);
  element('span', `jp-gradmagic-badge jp-gradmagic-${report.verdict}`, VERDICT_WORDS[report.verdict], head);
  element('code', 'jp-gradmagic-signature', report.op.name + report.op.signature, head);
  if (report.backends?.length) {
    element('span', 'jp-gradmagic-headline', headline(report), head);
  }
  element('span', 'jp-gradmagic-figures', keyFigures(report), head);
  const surrogate = surrogateLine(report);
  if (surrogate) {
    element('div', 'jp-gradmagic-surrogate-line', surrogate, parent);
  }
}

/** Errors and warnings, each once, in the report's order. */
function problems(report: IReport, parent: Element): void {
  const shown = report.problems.filter(problem => problem.severity !== 'info');
  if (!shown.length) {
    return;
  }
  const list = element('ol', 'jp-gradmagic-problems', undefined, parent);
  shown.forEach(problem => problemItem(report, problem, list));
}

function notes(report: IReport, parent: Element, state?: ViewState): void {
  const infos = report.problems.filter(problem => problem.severity === 'info');
  if (!infos.length) {
    return;
  }
  const body = section(parent, `Notes (${infos.length})`, 'notes', false, state);
  const list = element('ul', 'jp-gradmagic-problems jp-gradmagic-notes-list', undefined, body);
  infos.forEach(problem => problemItem(report, problem, list));
}

function shapeOf(tensor: ITensorRow, expected = false): string {
  const shape = expected ? tensor.expected_shape : tensor.shape;
  const dtype = expected ? tensor.expected_dtype : tensor.dtype;
  if (!shape) {
    return expected ? '' : 'None';
  }
  return `${dtype ?? ''} ${formatShape(shape)}`.trim();
}

function shapes(report: IReport, parent: Element, state?: ViewState): void {
  const mismatch = report.tensors.some(tensor => !tensor.matches);
  const open = mismatch || report.problems.some(problem => SHAPE_CODES.includes(problem.code));
  const body = section(parent, 'Shapes', 'shapes', open, state);
  if (!report.tensors.length) {
    element('p', 'jp-gradmagic-muted', 'No tensor reached the check: it stopped before calling the op.', body);
    return;
  }
  const rows = report.tensors.map(tensor => {
    const expected = shapeOf(tensor, true);
    return [tensor.role, tensor.name, shapeOf(tensor), expected, expected ? (tensor.matches ? '✓' : '✗ mismatch') : ''];
  });
  table(body, 'jp-gradmagic-shapes-table', ['role', 'name', 'dtype and shape', 'expected', ''], rows).forEach(
    (line, k) => line.classList.toggle('jp-gradmagic-mismatch', !report.tensors[k].matches)
  );
}

/** `finite differences (full mode): 3 elements in float64; tolerance rtol 1e-05, atol 1e-08, step ...`. */
export function numericsSummary(report: IReport): string {
  const numerics = report.numerics;
  if (numerics.mode === 'skipped') {
    return `Finite differences were not compared: ${numerics.skipped_because ?? 'no reason given'}.`;
  }
  let detail = `${counted(numerics.elements, 'element')} in ${numerics.dtype}`;
  if (numerics.max_error !== null) {
    detail += `, worst error ${formatNumber(numerics.max_error)} of the tolerance`;
  }
  if (numerics.mode === 'projection') {
    detail += `, ${counted(numerics.probes, 'random direction')}, measured noise floor ${formatNumber(numerics.noise_floor)}`;
  } else if (numerics.rtol !== null) {
    detail +=
      `; tolerance rtol ${formatNumber(numerics.rtol)}, atol ${formatNumber(numerics.atol)}, ` +
      `step ${formatNumber(numerics.eps)} × max(|x|, 1)`;
  }
  return `Finite differences (${numerics.mode} mode): ${detail}.`;
}

function numerics(report: IReport, parent: Element, state?: ViewState): void {
  const data = report.numerics;
  const failing = report.problems.some(problem => problem.code === 'fd-mismatch');
  const body = section(parent, 'Finite differences', 'numerics', failing, state);
  element('p', 'jp-gradmagic-muted', numericsSummary(report), body);
  const kinks = report.problems.filter(problem => problem.code === 'nondifferentiable-point' && problem.location);
  if (kinks.length) {
    element(
      'p',
      'jp-gradmagic-kinks',
      `Not differentiable at ${kinks.map(kink => where(kink.location, null)).join(', ')}: left out of the comparison.`,
      body
    );
  }
  const listed = shownElements(data);
  if (listed.length) {
    element(
      'div',
      'jp-gradmagic-subtitle',
      data.mode === 'full' ? 'Worst elements' : 'Located elements (custom Jᵀu against finite differences)',
      body
    );
    const rows = listed.map(worst => {
      let label = elementLabel(worst.input, worst.index);
      if (worst.output !== null) {
        label = `d ${elementLabel(worst.output, worst.output_index)} / d ${label}`;
      }
      return [label, ...comparisonCells(worst)];
    });
    const lines = table(
      body,
      'jp-gradmagic-worst-table',
      ['element', 'custom', 'finite differences', 'autodiff', 'error ÷ tolerance'],
      rows,
      [1, 2, 3, 4]
    );
    lines.forEach((line, k) => line.classList.toggle('jp-gradmagic-mismatch', isBeyond(listed[k])));
  }
  if (data.mode !== 'full') {
    return;
  }
  const heatmaps = heatmapsView(data);
  if (heatmaps) {
    const open = failing && heatmapBlocks(data).length > 0;
    section(body, 'Jacobians', 'jacobians', open, state).appendChild(heatmaps);
  } else if (!data.jacobians.length) {
    element('p', 'jp-gradmagic-muted', 'Jacobians of more than 4,096 entries are not kept for heatmaps.', body);
  }
}

/**
 * A worst element's custom gradient, finite differences and autodiff, and its error of the tolerance: the cells of
 * the table (Python's `comparison_cells`). An element beyond the tolerance shows the digits that tell the first two
 * apart; one within it, 4 (the digits beyond are noise).
 */
export function comparisonCells(worst: IElementComparison): string[] {
  const digits = isBeyond(worst) ? digitsToTell(worst.custom, worst.numerical) : 4; // within it: noise
  return [
    ...[worst.custom, worst.numerical, worst.autodiff].map(value => formatNumber(value, digits)),
    formatNumber(worst.error)
  ];
}

/** Whether a listed element is beyond the tolerance (or its error is not finite). */
function isBeyond(element: IElementComparison): boolean {
  return typeof element.error === 'number' ? element.error > 1 : element.error !== null;
}

/**
 * The elements the table lists: those beyond the tolerance, or when none is, the first few (the closest calls);
 * the entries of structural zeros a full Jacobian ranks after them say nothing.
 */
export function shownElements(numerics: INumerics): IElementComparison[] {
  const beyond = numerics.worst.filter(isBeyond);
  return beyond.length ? beyond : numerics.worst.slice(0, LISTED_WHEN_PASSING);
}

/** `output[2] and its derivative along x[2] (...) from -2.475 to 2.175, 201 points; ...`, as the HTML fallback. */
export function sweepSummary(sweep: ISweep): string {
  const kind = sweep.elementwise ? 'the op is element-wise in it' : 'a scalar input';
  return (
    `${elementLabel(sweep.output, sweep.output_index)} and its derivative along ` +
    `${elementLabel(sweep.input, sweep.index)} (${kind}) from ${formatNumber(sweep.points[0])} to ` +
    `${formatNumber(sweep.points[sweep.points.length - 1])}, ${counted(sweep.points.length, 'point')}; the other inputs at ` +
    'the example point.'
  );
}

/** Why a report has no sweep, in a sentence. */
export function noSweepReason(report: IReport, live: boolean): string {
  if (report.numerics.mode !== 'full') {
    return report.numerics.mode === 'projection'
      ? 'No sweep: the sweep is drawn in full mode (up to full_threshold elements); this op was checked in projection mode.'
      : 'No sweep: the finite differences were not compared.';
  }
  if (report.options.sweep !== true) {
    return live
      ? 'The sweep is computed when asked: Sweep draws the output and its derivatives along one element.'
      : 'No sweep: it is computed when asked (the live report\'s Sweep, or sweep=True).';
  }
  const unavailable = report.problems.find(problem => problem.code === 'sweep-unavailable');
  if (unavailable) {
    return unavailable.message; // the checker says why it could not draw one
  }
  return 'No sweep: it needs a scalar input or an op element-wise in an input (output[i] depending on input[i] alone).';
}

function sweepSection(report: IReport, parent: Element, live: ILive | undefined, state?: ViewState): void {
  const body = section(parent, 'Sweep', 'sweep-section', report.sweep !== null && report.sweep !== undefined, state);
  if (report.sweep) {
    element('p', 'jp-gradmagic-muted', sweepSummary(report.sweep), body);
    body.appendChild(sweepView(report.sweep, report.verdict === 'surrogate'));
  } else {
    element('p', 'jp-gradmagic-muted jp-gradmagic-why', noSweepReason(report, live !== undefined), body);
  }
  if (live && report.numerics.mode === 'full') {
    sweepControls(report, body, live, state);
  }
}

/**
 * `gradient graph: 7 forward and 4 backward ops; the backward keeps 12 B alive (1 saved tensor)`; the noun agrees
 * with the last count: `1 forward and 1 backward op`.
 */
export function graphSummary(report: IReport): string {
  const graph = report.graph!;
  const count = (role: string): number =>
    graph.nodes.filter(node => node.role === role).reduce((sum, node) => sum + node.count, 0);
  const kept = graph.saved_tensors
    ? `the backward keeps ${formatBytes(graph.saved_bytes)} alive ` +
      `(${counted(graph.saved_tensors, 'saved tensor')})`
    : 'the backward keeps nothing from the forward';
  return `gradient graph: ${count('forward').toLocaleString('en')} forward and ${counted(count('backward'), 'backward op')}; ${kept}`;
}

/** Why a report has no gradient graph, in a sentence. */
export function noGraphReason(report: IReport): string {
  const unavailable = report.problems.find(problem => problem.code === 'graph-unavailable');
  if (unavailable) {
    return unavailable.message;
  }
  if (report.options.graph === false) {
    return 'No gradient graph: it was left out (--no-graph, graph=False).';
  }
  const error = report.problems.find(problem => problem.severity === 'error');
  return error
    ? `No gradient graph: the check stopped at ${error.code} before tracing it.`
    : 'No gradient graph: the op was not traced.';
}

function graph(report: IReport, parent: Element, summary = true): void {
  if (!report.graph) {
    element('p', 'jp-gradmagic-muted jp-gradmagic-why', noGraphReason(report), parent);
    return;
  }
  if (summary) {
    element(
      'p',
      'jp-gradmagic-muted jp-gradmagic-graph-summary',
      `${graphSummary(report)} (per call, from the forward until the gradient is taken: the red dashed edges).`,
      parent
    );
  }
  parent.appendChild(graphView(report.graph));
}

function backends(report: IReport, parent: Element, state?: ViewState): void {
  const results = report.backends ?? [];
  if (!results.length) {
    return;
  }
  const failing = results.some(result => result.verdict === 'fail' || result.verdict === 'unavailable');
  const body = section(parent, `Backends (${results.length})`, 'backends', failing, state);
  element(
    'p',
    'jp-gradmagic-muted',
    'The same op and inputs on each Keras backend, each in its own process (KERAS_BACKEND is fixed when Keras is ' +
      "imported). A failing backend's problems are in the list above.",
    body
  );
  const rows = results.map(result => {
    const here = result.backend === report.op.backend ? ' (this kernel)' : '';
    const codes = [...new Set(result.problems.filter(p => p.severity !== 'info').map(p => p.code))].join(', ');
    const detail = result.verdict === 'unavailable' ? (result.note ?? '') : codes || 'no problem';
    const seconds = result.seconds >= 1 ? `${result.seconds.toFixed(1)} s` : `${(result.seconds * 1e3).toFixed(0)} ms`;
    return [(BACKEND_NAMES[result.backend] ?? result.backend) + here, VERDICT_WORDS[result.verdict], detail, result.version ?? '', seconds];
  });
  const lines = table(body, 'jp-gradmagic-backends-table', ['backend', 'verdict', 'problems', 'versions', 'time'], rows, [4]);
  lines.forEach((line, k) => {
    line.dataset.backend = results[k].backend;
    line.cells[1].className = `jp-gradmagic-${results[k].verdict}`;
  });
}

function timings(report: IReport, parent: Element): void {
  const phases = TIMED_PHASES.filter(phase => phase in report.timings);
  if (!phases.length) {
    return;
  }
  const text = phases.map(phase => `${phase.replace('_', '.')} ${(report.timings[phase] * 1e3).toFixed(0)} ms`);
  element('p', 'jp-gradmagic-muted jp-gradmagic-timings', `${frameworkLabel(report)}, ${report.op.mode}: ${text.join(' · ')}`, parent);
}

/** A labelled text field of the controls, keeping what the user typed across redraws. */
function field(parent: Element, name: string, label: string, value: string, placeholder: string, state?: ViewState) {
  const wrapper = element('label', `jp-gradmagic-field jp-gradmagic-field-${name}`, undefined, parent);
  element('span', undefined, label, wrapper);
  const input = element('input', undefined, undefined, wrapper);
  input.type = 'text';
  input.name = name;
  input.placeholder = placeholder;
  input.value = state?.typed.get(name) ?? value;
  input.spellcheck = false;
  input.addEventListener('input', () => state?.typed.set(name, input.value));
  return input;
}

/** The live controls: the inputs, step and tolerances to check at, Re-check, and the state of the kernel's work. */
function controls(parent: Element, live: ILive, state?: ViewState): void {
  const bar = element('div', 'jp-gradmagic-controls', undefined, parent);
  const values = live.controls;
  const inputs = field(bar, 'inputs', 'inputs', values.inputs, 'x=tf.constant([1., 2.])', state);
  const eps = field(bar, 'eps', 'step', values.eps, 'auto', state);
  const rtol = field(bar, 'rtol', 'rtol', values.rtol, 'by dtype', state);
  const atol = field(bar, 'atol', 'atol', values.atol, 'by dtype', state);
  const button = element('button', 'jp-gradmagic-button jp-gradmagic-recheck', 'Re-check', bar);
  const fields = [inputs, eps, rtol, atol];
  const off = !values.available || live.status.running;
  [...fields, button].forEach(control => (control.disabled = off));
  button.title = values.available ? 'Check again at these inputs and options' : values.reason;
  const submit = (): void => {
    state?.typed.clear();
    live.recheck({ inputs: inputs.value, eps: eps.value, rtol: rtol.value, atol: atol.value });
  };
  button.addEventListener('click', submit);
  fields.forEach(control =>
    control.addEventListener('keydown', event => {
      if ((event as KeyboardEvent).key === 'Enter') {
        submit();
      }
    })
  );
  status(parent, live);
}

/** The kernel's work under way (a bar and its phase), or the outcome of the last request; why controls are off. */
function status(parent: Element, live: ILive): void {
  const { status: now, controls: values } = live;
  const line = element('div', 'jp-gradmagic-status', undefined, parent);
  if (now.running) {
    line.classList.add('jp-gradmagic-running');
    const bar = element('progress', undefined, undefined, line);
    bar.max = 1;
    bar.value = now.fraction;
    element('span', undefined, now.message || 'checking…', line);
  } else if (now.message) {
    line.classList.toggle('jp-gradmagic-error', now.error);
    line.textContent = now.message;
  } else if (!values.available) {
    line.classList.add('jp-gradmagic-muted');
    line.textContent = values.reason;
  }
}

/** The sweep's range and its button (the element swept stays the one shown). */
function sweepControls(report: IReport, parent: Element, live: ILive, state?: ViewState): void {
  const bar = element('div', 'jp-gradmagic-controls jp-gradmagic-sweep-controls', undefined, parent);
  const from = field(bar, 'sweep-from', 'from', live.controls.sweepFrom, 'auto', state);
  const to = field(bar, 'sweep-to', 'to', live.controls.sweepTo, 'auto', state);
  const label = report.sweep ? 'Sweep again' : 'Sweep';
  const button = element('button', 'jp-gradmagic-button jp-gradmagic-sweep-button', label, bar);
  const off = !live.controls.available || live.status.running;
  [from, to, button].forEach(control => (control.disabled = off));
  button.title = live.controls.available ? 'Compute the sweep over this range' : live.controls.reason;
  button.addEventListener('click', () => {
    state?.typed.delete('sweep-from');
    state?.typed.delete('sweep-to');
    const sweep = report.sweep;
    live.sweep({ from: from.value, to: to.value, element: sweep ? { input: sweep.input, index: sweep.index } : null });
  });
}

/** The report (or its graph alone) as a new element; with `live`, its controls too. */
export function reportView(
  report: IReport,
  view: View = 'report',
  live?: ILive,
  state?: ViewState
): HTMLElement {
  const root = element('div', `jp-gradmagic-report jp-gradmagic-view-${view}`);
  root.dataset.verdict = report.verdict;
  if (view === 'graph') {
    graph(report, root, true);
    return root;
  }
  header(report, root);
  problems(report, root);
  if (live) {
    controls(root, live, state);
  }
  const passing = report.verdict === 'pass' || report.verdict === 'surrogate';
  const details = passing ? section(root, 'Details', 'details', false, state) : root;
  details.classList.add('jp-gradmagic-evidence');
  backends(report, details, state);
  numerics(report, details, state);
  shapes(report, details, state);
  sweepSection(report, details, live, state);
  // Drawn when first opened: a graph of hundreds of nodes costs more than the rest of the report, folded or not.
  const graphBody = section(details, 'Gradient graph', 'graph-section', false, state);
  whenOpen(graphBody, () => graph(report, graphBody));
  notes(report, details, state);
  timings(report, details);
  return root;
}
