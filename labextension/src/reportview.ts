/**
 * A gradmagic report as DOM: the one view of a report, live (in the kernel's widget, with its controls) and saved
 * (drawn from the notebook's data by the JupyterLab extension, with no kernel).
 *
 * Read at a glance: a passing op is one line (the verdict and the key figures) with the details folded; a
 * failing one shows the verdict, then each problem once (cause, fix, where), then the evidence open. Every
 * string from the data goes in as text (`textContent`), never parsed as HTML. The words are Python's, carried by the
 * data (`report.words`, worded once by `gradmagic/render/words.py`, which writes the static HTML for shared notebooks
 * and exports with the same words, in the same sections and order); this view lays them out and draws the figures.
 */
import { wordsOf } from './data';
import { element, summaryOf } from './dom';
import { graphView } from './graphview';
import { heatmapBlocks, heatmapsView } from './heatmapview';
import { ILive, ViewState } from './live';
import { IProblem, IReport, IReportWords } from './schema';
import { sweepView } from './sweepview';

/** Problems that say something is wrong with the shapes: the shapes table opens with them. */
const SHAPE_CODES = ['grad-shape', 'grad-dtype', 'grad-count', 'grad-structure', 'variable-grad-shape'];

/** What to show: the whole report, or the graph alone (`%gradgraph`, `gradmagic.gradient_graph`). */
export type View = 'report' | 'graph';

/** A <details> section that opens as `open` says, unless the user toggled it (kept in `state`). */
function section(parent: Element, title: string, name: string, open: boolean, state?: ViewState): HTMLDetailsElement {
  const details = element('details', `jp-gradmagic-section jp-gradmagic-${name}`, undefined, parent);
  details.dataset.section = name;
  details.open = state?.opened.get(name) ?? open;
  summaryOf(details, title);
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

/** A muted paragraph of `text`, unless `text` is empty (words a report saved before schema 1.8 lacks). */
function muted(parent: Element, text: string | null, className = ''): void {
  if (text) {
    element('p', `jp-gradmagic-muted ${className}`.trim(), text, parent);
  }
}

/** A table with a head row; `numeric` columns are right-aligned in tabular figures. */
function table(
  parent: Element,
  className: string,
  headings: string[],
  rows: readonly string[][],
  numeric: number[] = []
): HTMLTableRowElement[] {
  const scroll = element('div', 'jp-gradmagic-scroll', undefined, parent);
  const grid = element('table', `jp-gradmagic-table ${className}`, undefined, scroll);
  const head = element('tr', undefined, undefined, element('thead', undefined, undefined, grid));
  headings.forEach((heading, k) =>
    element('th', numeric.includes(k) ? 'jp-gradmagic-number' : undefined, heading, head)
  );
  const body = element('tbody', undefined, undefined, grid);
  return rows.map(cells => {
    const line = element('tr', undefined, undefined, body);
    cells.forEach((cell, k) => element('td', numeric.includes(k) ? 'jp-gradmagic-number' : undefined, cell, line));
    return line;
  });
}

/** A problem as an item of `parent`: severity, code, where it is (`place`, Python's words), and its message. */
export function problemItem(
  problem: Pick<IProblem, 'code' | 'severity' | 'message'>,
  place: string,
  parent: Element
): void {
  const item = element('li', `jp-gradmagic-problem jp-gradmagic-${problem.severity}`, undefined, parent);
  item.dataset.code = problem.code;
  const head = element('div', 'jp-gradmagic-problem-head', undefined, item);
  element('span', 'jp-gradmagic-severity', problem.severity, head);
  element('code', 'jp-gradmagic-code', problem.code, head);
  if (place) {
    element('span', 'jp-gradmagic-where', place, head);
  }
  element('div', 'jp-gradmagic-message', problem.message, item);
}

function header(report: IReport, words: IReportWords, parent: Element): void {
  const head = element('div', 'jp-gradmagic-head', undefined, parent);
  element('span', `jp-gradmagic-badge jp-gradmagic-${report.verdict}`, words.verdict, head);
  element('code', 'jp-gradmagic-signature', report.op.name + report.op.signature, head);
  if (report.backends?.length) {
    element('span', 'jp-gradmagic-headline', words.headline, head);
  }
  element('span', 'jp-gradmagic-figures', words.figures, head);
  if (words.checked_at) {
    element('div', 'jp-gradmagic-checked', words.checked_at, parent);
  }
  if (words.fixes) {
    element('div', 'jp-gradmagic-fixes', words.fixes, parent);
  }
  if (words.surrogate) {
    element('div', 'jp-gradmagic-surrogate-line', words.surrogate, parent);
  }
}

/** The report's problems of the severities `wanted`, each with where it is, in the report's order. */
function problemsOf(
  report: IReport,
  words: IReportWords,
  wanted: (problem: IProblem) => boolean
): [IProblem, string][] {
  return report.problems.flatMap((problem, k) => (wanted(problem) ? [[problem, words.places[k] ?? '']] : []));
}

/** Errors and warnings, each once, in the report's order. */
function problems(report: IReport, words: IReportWords, parent: Element): void {
  const shown = problemsOf(report, words, problem => problem.severity !== 'info');
  if (!shown.length) {
    return;
  }
  const list = element('ol', 'jp-gradmagic-problems', undefined, parent);
  shown.forEach(([problem, place]) => problemItem(problem, place, list));
}

/** Infos said under the verdict rather than among the notes (as `gradmagic.render.HEADLINE_INFOS`). */
export const HEADLINE_INFOS = ['autodiff-nonfinite'];

function notes(report: IReport, words: IReportWords, parent: Element, state?: ViewState): void {
  // The info said under the verdict (`words.fixes`, Python's HEADLINE_INFOS) is not repeated here.
  const headline = (problem: IProblem) => Boolean(words.fixes) && HEADLINE_INFOS.includes(problem.code);
  const infos = problemsOf(report, words, problem => problem.severity === 'info' && !headline(problem));
  if (!infos.length) {
    return;
  }
  const body = section(parent, `Notes (${infos.length})`, 'notes', false, state);
  const list = element('ul', 'jp-gradmagic-problems jp-gradmagic-notes-list', undefined, body);
  infos.forEach(([problem, place]) => problemItem(problem, place, list));
}

function shapes(report: IReport, words: IReportWords, parent: Element, state?: ViewState): void {
  const mismatch = report.tensors.some(tensor => !tensor.matches);
  const open = mismatch || report.problems.some(problem => SHAPE_CODES.includes(problem.code));
  const body = section(parent, 'Shapes', 'shapes', open, state);
  if (!report.tensors.length) {
    muted(body, 'No tensor reached the check: it stopped before calling the op.');
    return;
  }
  table(body, 'jp-gradmagic-shapes-table', ['role', 'name', 'dtype and shape', 'expected', ''], words.shapes).forEach(
    (line, k) => line.classList.toggle('jp-gradmagic-mismatch', !report.tensors[k].matches)
  );
}

function numerics(report: IReport, words: IReportWords, parent: Element, state?: ViewState): void {
  const data = report.numerics;
  const failing = report.problems.some(problem => problem.code === 'fd-mismatch');
  const body = section(parent, 'Finite differences', 'numerics', failing, state);
  muted(body, words.numerics);
  if (words.kinks) {
    element('p', 'jp-gradmagic-kinks', words.kinks, body);
  }
  if (words.worst.length) {
    element('div', 'jp-gradmagic-subtitle', words.worst_title, body);
    const lines = table(
      body,
      'jp-gradmagic-worst-table',
      ['element', 'custom', 'finite differences', 'autodiff', 'error ÷ tolerance'],
      words.worst.map(row => row.cells),
      [1, 2, 3, 4]
    );
    lines.forEach((line, k) => line.classList.toggle('jp-gradmagic-mismatch', words.worst[k].beyond));
  }
  if (data.mode !== 'full') {
    return;
  }
  const heatmaps = heatmapsView(data);
  if (heatmaps) {
    const open = failing && heatmapBlocks(data).length > 0;
    section(body, 'Jacobians', 'jacobians', open, state).appendChild(heatmaps);
  } else if (!data.jacobians.length) {
    muted(body, 'Jacobians of more than 4,096 entries are not kept for heatmaps.');
  }
}

function sweepSection(report: IReport, words: IReportWords, parent: Element, live?: ILive, state?: ViewState): void {
  const body = section(parent, 'Sweep', 'sweep-section', !!report.sweep, state);
  if (report.sweep) {
    muted(body, words.sweep);
    body.appendChild(sweepView(report.sweep, report.verdict === 'surrogate'));
  } else {
    muted(body, live ? words.no_sweep_live : words.no_sweep, 'jp-gradmagic-why');
  }
  if (live && report.numerics.mode === 'full') {
    sweepControls(report, body, live, state);
  }
}

function graph(report: IReport, words: IReportWords, parent: Element): void {
  if (!report.graph) {
    muted(parent, words.no_graph, 'jp-gradmagic-why');
    return;
  }
  muted(parent, words.graph, 'jp-gradmagic-graph-summary');
  parent.appendChild(graphView(report.graph));
}

function backends(report: IReport, words: IReportWords, parent: Element, state?: ViewState): void {
  const results = report.backends ?? [];
  if (!results.length) {
    return;
  }
  const failing = results.some(result => result.verdict === 'fail' || result.verdict === 'unavailable');
  const body = section(parent, `Backends (${results.length})`, 'backends', failing, state);
  muted(
    body,
    'The same op and inputs on each Keras backend, each in its own process (KERAS_BACKEND is fixed when Keras is ' +
      "imported). A failing backend's problems are in the list above."
  );
  const headings = ['backend', 'verdict', 'problems', 'versions', 'time'];
  table(body, 'jp-gradmagic-backends-table', headings, words.backends, [4]).forEach((line, k) => {
    line.dataset.backend = results[k].backend;
    line.cells[1].className = `jp-gradmagic-${results[k].verdict}`;
  });
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
export function reportView(report: IReport, view: View = 'report', live?: ILive, state?: ViewState): HTMLElement {
  const words = wordsOf(report);
  const root = element('div', `jp-gradmagic-report jp-gradmagic-view-${view}`);
  root.dataset.verdict = report.verdict;
  if (view === 'graph') {
    graph(report, words, root);
    return root;
  }
  header(report, words, root);
  problems(report, words, root);
  if (live) {
    controls(root, live, state);
  }
  const passing = report.verdict === 'pass' || report.verdict === 'surrogate';
  const details = passing ? section(root, 'Details', 'details', false, state) : root;
  details.classList.add('jp-gradmagic-evidence');
  backends(report, words, details, state);
  numerics(report, words, details, state);
  shapes(report, words, details, state);
  sweepSection(report, words, details, live, state);
  // Drawn when first opened: a graph of hundreds of nodes costs more than the rest of the report, folded or not.
  const graphBody = section(details, 'Gradient graph', 'graph-section', false, state);
  whenOpen(graphBody, () => graph(report, words, graphBody));
  notes(report, words, details, state);
  muted(details, words.timings, 'jp-gradmagic-timings');
  return root;
}
