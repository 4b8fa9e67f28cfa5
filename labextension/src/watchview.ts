/**
 * A watch's report (`gradmagic.watch()`, `%%gradwatch`) as DOM: the verdict and what the watch took, where the first
 * gradient went non-finite, the notes, and a table of the ops (name, where, calls, verdict, first problem), each op's
 * own report one click away under its row, drawn by the same view as every report (`reportView`). Live in the
 * kernel's widget and saved in the notebook alike. The words are Python's (`gradmagic/render/text.py`:
 * `watch_summary`, `watch_time`, `nonfinite_lines`, `watch_row`, `watched_op_lines`), pinned by tests on the same
 * watch.
 */
import { VERDICT_WORDS, counted, elementLabel, formatBytes, readReport, toNumber } from './data';
import { element } from './dom';
import { reportView } from './reportview';
import { INonFinite, IValueSummary, IWatchReport, IWatchedOp } from './schema';

/** Characters of an op's first problem in the table (the whole of it is in the op's report). */
const PROBLEM_WIDTH = 90;

/** `269 ms`, `1.4 s` (Python's `seconds`). */
export function seconds(value: number): string {
  return value >= 1 ? `${value.toFixed(1)} s` : `${(value * 1e3).toFixed(0)} ms`;
}

/** A number as Python's `format(value, '.4g')` writes it. */
export function formatG4(value: number): string {
  if (value === 0) {
    return Object.is(value, -0) ? '-0' : '0';
  }
  const [mantissa, exponentText] = value.toExponential(3).split('e');
  const exponent = Number(exponentText);
  if (exponent < -4 || exponent >= 4) {
    const digits = mantissa.replace(/\.?0+$/, '');
    return `${digits}e${exponent < 0 ? '-' : '+'}${String(Math.abs(exponent)).padStart(2, '0')}`;
  }
  return value.toFixed(Math.max(0, 3 - exponent)).replace(/(\.\d*?)0+$/, '$1').replace(/\.$/, '');
}

/** `watch of 3 custom-gradient ops fails (2 errors, 0 warnings)`. */
export function watchSummary(watch: IWatchReport): string {
  const errors = watch.problems.filter(problem => problem.severity === 'error').length;
  const warnings = watch.problems.filter(problem => problem.severity === 'warning').length;
  return (
    `watch of ${counted(watch.watched.length, 'custom-gradient op')} ${VERDICT_WORDS[watch.verdict]} ` +
    `(${counted(errors, 'error')}, ${counted(warnings, 'warning')})`
  );
}

/** What the watched block took, the watch's own part in it, the checks, the memory kept (Python's `watch_time`). */
export function watchTime(watch: IWatchReport): string {
  const timings = watch.timings;
  const parts: string[] = [];
  if ('before_first_call' in timings) {
    parts.push(
      `up to ${seconds(timings.before_first_call)} tracing compiled code again for the watch (before the first ` +
        'recorded call)'
    );
  }
  parts.push(`recording ${seconds(timings.recording ?? 0)}`);
  if ('setup' in timings) {
    parts.push(`setting up and putting back ${seconds(timings.setup)}`);
  }
  return (
    `watched ${seconds(timings.watched ?? 0)}, the watch's part in it: ${parts.join(', ')}; checks ` +
    `${seconds(timings.checks ?? 0)}; inputs kept ${formatBytes(watch.kept_bytes)} of ${formatBytes(watch.memory_limit)}`
  );
}

/** `row_norm, call 2: dx[8, 0] NaN (32 elements), from a finite upstream gradient` (Python's `NonFinite.__str__`). */
export function nonFiniteText(event: INonFinite): string {
  const label = elementLabel(event.tensor, event.index);
  const what = event.kind === 'gradient' ? `d${label}` : label;
  let source = event.kind === 'gradient' ? 'a finite upstream gradient' : 'finite inputs';
  if (!event.from_finite) {
    source = source.replace('a finite', 'a non-finite').replace('finite inputs', 'non-finite inputs');
  }
  const call = event.call !== null ? `call ${event.call}` : 'an unnumbered call';
  return `${event.op}, ${call}: ${what} ${event.values} (${counted(event.elements, 'element')}), from ${source}`;
}

/** Where the first gradient and output went non-finite, that none did, or that no op was called. */
export function nonFiniteLines(watch: IWatchReport): string[] {
  const lines: string[] = [];
  if (watch.first_nonfinite_gradient) {
    lines.push(`first non-finite gradient: ${nonFiniteText(watch.first_nonfinite_gradient)}`);
  }
  if (watch.first_nonfinite_output) {
    lines.push(`first non-finite output: ${nonFiniteText(watch.first_nonfinite_output)}`);
  }
  if (!watch.watched.length) {
    lines.push(
      'the watched code called no custom-gradient op that could be recorded' +
        (watch.notes.length ? ' (the notes say why where they can)' : '')
    );
  } else if (!lines.length) {
    lines.push('no gradient or output went non-finite');
  }
  return lines;
}

function clipped(text: string, width: number): string {
  const words = text.split(/\s+/).filter(Boolean).join(' ');
  return words.length <= width ? words : `${words.slice(0, width - 1)}…`;
}

/** The op's first error (else warning): its findings, then its check's problems at the call it was checked at. */
function firstProblem(op: IWatchedOp): { code: string; message: string; call: number | null } | null {
  const problems = [
    ...op.findings.map(problem => ({ ...problem, call: null as number | null })),
    ...op.report.problems
      .filter(problem => problem.severity !== 'info')
      .map(problem => ({ ...problem, call: op.checked_call }))
  ];
  return problems.find(problem => problem.severity === 'error') ?? problems[0] ?? null;
}

/** An op's row of the table: name, where, calls, verdict, its first problem (code and first sentence). */
export function watchRow(op: IWatchedOp): [string, string, string, string, string] {
  const calls = `${op.calls}` + (op.compiled_calls ? ` (${op.compiled_calls} compiled)` : '');
  const first = firstProblem(op);
  let problem = '';
  if (first) {
    const at = first.call !== null ? ` (at call ${first.call})` : '';
    const sentence = first.message.split(/\s+/).filter(Boolean).join(' ').split('. ')[0].replace(/\.+$/, '');
    problem = `${first.code}${at}: ${clipped(sentence, PROBLEM_WIDTH)}`;
  } else if (op.verdict === 'unchecked') {
    problem = op.report.numerics.skipped_because ?? '';
  }
  return [op.name, op.where ?? '', calls, VERDICT_WORDS[op.verdict], problem];
}

/** `x          float32 [32, 8]  from -3.1 to 4.2, non-finite in 2 calls` (Python's `value_line`). */
export function valueLine(summary: IValueSummary): string {
  const shapes = summary.shapes.map(shape => `[${shape.map(d => (d === null ? 'None' : String(d))).join(', ')}]`);
  const extent =
    summary.minimum === null
      ? ''
      : `  from ${formatG4(toNumber(summary.minimum))} to ${formatG4(toNumber(summary.maximum))}`;
  const nonfinite = summary.nonfinite_calls ? `, non-finite in ${counted(summary.nonfinite_calls, 'call')}` : '';
  return `${summary.name.padEnd(10)} ${summary.dtype} ${shapes.join(', ')}${extent}${nonfinite}`;
}

/** What an op's calls received and did, and the calls it was checked at (Python's `watched_op_lines`). */
export function watchedOpLines(op: IWatchedOp): string[] {
  const lines = [
    `${op.name} (${op.where || 'defined where unknown'}): ${counted(op.calls, 'call')}` +
      (op.compiled_calls ? ` (${op.compiled_calls} compiled)` : '') +
      `, ${counted(op.gradient_calls, 'gradient call')}`
  ];
  for (const [role, summaries] of [
    ['input', op.inputs],
    ['output', op.outputs]
  ] as [string, IValueSummary[]][]) {
    lines.push(...summaries.map(summary => `  ${role.padEnd(7)}${valueLine(summary)}`));
  }
  if (op.nonfinite_gradient_calls) {
    const first = op.first_nonfinite_gradient ? nonFiniteText(op.first_nonfinite_gradient) : 'None';
    lines.push(`  gradient non-finite in ${op.nonfinite_gradient_calls} of ${counted(op.gradient_calls, 'call')}, first: ${first}`);
  }
  if (op.checked.length) {
    lines.push(
      '  checked at ' +
        op.checked
          .map(checked => `call ${checked.call} (${checked.reasons.join(', ')}): ${VERDICT_WORDS[checked.verdict]}`)
          .join('; ')
    );
  }
  return lines;
}

/** The watch's report as a new element: head, non-finite lines, notes, the table with each op's report. */
export function watchView(watch: IWatchReport): HTMLElement {
  const root = element('div', 'jp-gradmagic-report jp-gradmagic-watch');
  root.dataset.verdict = watch.verdict;
  const head = element('div', 'jp-gradmagic-head', undefined, root);
  element('span', `jp-gradmagic-badge jp-gradmagic-${watch.verdict}`, VERDICT_WORDS[watch.verdict], head);
  element('span', 'jp-gradmagic-headline', watchSummary(watch), head);
  element('div', 'jp-gradmagic-muted jp-gradmagic-watch-time', `${watch.framework} ${watch.framework_version}; ${watchTime(watch)}`, root);
  for (const line of nonFiniteLines(watch)) {
    element('div', 'jp-gradmagic-watch-line', line, root);
  }
  if (watch.error) {
    element('div', 'jp-gradmagic-error', `The watched code raised ${watch.error}.`, root);
  }
  for (const note of watch.notes) {
    element('p', 'jp-gradmagic-muted jp-gradmagic-watch-note', note, root);
  }
  if (!watch.watched.length) {
    return root;
  }
  const scroll = element('div', 'jp-gradmagic-scroll', undefined, root);
  const table = element('table', 'jp-gradmagic-table jp-gradmagic-watch-table', undefined, scroll);
  const headRow = element('tr', undefined, undefined, element('thead', undefined, undefined, table));
  ['op', 'where', 'calls', 'verdict', 'first problem'].forEach(heading => element('th', undefined, heading, headRow));
  const body = element('tbody', undefined, undefined, table);
  for (const op of watch.watched) {
    const [name, where, calls, verdict, problem] = watchRow(op);
    const row = element('tr', 'jp-gradmagic-watch-row', undefined, body);
    row.dataset.op = op.name;
    element('td', undefined, name, row);
    element('td', undefined, where, row);
    element('td', 'jp-gradmagic-number', calls, row);
    element('td', `jp-gradmagic-${op.verdict}`, verdict, row);
    element('td', 'jp-gradmagic-watch-problem', problem, row);
    const cell = element('td', undefined, undefined, element('tr', 'jp-gradmagic-watch-op', undefined, body));
    cell.colSpan = 5;
    const details = element('details', 'jp-gradmagic-section jp-gradmagic-watch-details', undefined, cell);
    details.dataset.op = op.name;
    element('summary', undefined, `report of ${op.name}`, details);
    const opened = (): void => {
      // Drawn when first opened: a watch of many ops shows its table at once.
      if (!details.open || details.dataset.drawn) {
        return;
      }
      details.dataset.drawn = 'true';
      element('pre', 'jp-gradmagic-watch-calls', watchedOpLines(op).slice(1).join('\n'), details);
      if (op.findings.length) {
        const list = element('ul', 'jp-gradmagic-problems', undefined, details);
        for (const finding of op.findings) {
          const item = element('li', `jp-gradmagic-problem jp-gradmagic-${finding.severity}`, undefined, list);
          item.dataset.code = finding.code;
          const line = element('div', 'jp-gradmagic-problem-head', undefined, item);
          element('span', 'jp-gradmagic-severity', finding.severity, line);
          element('code', 'jp-gradmagic-code', finding.code, line);
          element('div', 'jp-gradmagic-message', finding.message, item);
        }
      }
      const report = readReport(op.report);
      details.appendChild(
        report instanceof Error ? element('div', 'jp-gradmagic-error', report.message) : reportView(report)
      );
    };
    details.addEventListener('toggle', opened);
  }
  return root;
}
