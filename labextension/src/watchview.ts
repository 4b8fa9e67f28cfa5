/**
 * A watch's report (`gradmagic.watch()`, `%%gradwatch`) as DOM: the verdict and what the watch took, where the first
 * gradient went non-finite, the notes, and a table of the ops (name, where, calls, verdict, first problem), each op's
 * own report one click away under its row, drawn by the same view as every report (`reportView`). Live in the
 * kernel's widget and saved in the notebook alike. The words are Python's, carried by the data (`watch.words`,
 * worded once by `gradmagic/render/words.py`, with which the static HTML is written too).
 */
import { readReport, watchWordsOf } from './data';
import { element, summaryOf } from './dom';
import { problemItem, reportView } from './reportview';
import { IWatchReport } from './schema';

/** The watch's report as a new element: head, non-finite lines, notes, the table with each op's report. */
export function watchView(watch: IWatchReport): HTMLElement {
  const words = watchWordsOf(watch);
  const root = element('div', 'jp-gradmagic-report jp-gradmagic-watch');
  root.dataset.verdict = watch.verdict;
  const head = element('div', 'jp-gradmagic-head', undefined, root);
  element('span', `jp-gradmagic-badge jp-gradmagic-${watch.verdict}`, words.verdict, head);
  element('span', 'jp-gradmagic-headline', words.summary, head);
  element('div', 'jp-gradmagic-muted jp-gradmagic-watch-time', words.timings, root);
  for (const line of words.lines) {
    element('div', 'jp-gradmagic-watch-line', line, root);
  }
  if (words.raised) {
    element('div', 'jp-gradmagic-error', words.raised, root);
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
  watch.watched.forEach((op, k) => {
    const [name, where, calls, verdict, problem] = words.rows[k];
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
    summaryOf(details, `report of ${op.name}`);
    const opened = (): void => {
      // Drawn when first opened: a watch of many ops shows its table at once.
      if (!details.open || details.dataset.drawn) {
        return;
      }
      details.dataset.drawn = 'true';
      element('pre', 'jp-gradmagic-watch-calls', words.calls[k].join('\n'), details);
      if (op.findings.length) {
        const list = element('ul', 'jp-gradmagic-problems', undefined, details);
        op.findings.forEach((finding, f) => problemItem(finding, words.places[k][f] ?? '', list));
      }
      const report = readReport(op.report);
      details.appendChild(
        report instanceof Error ? element('div', 'jp-gradmagic-error', report.message) : reportView(report)
      );
    };
    details.addEventListener('toggle', opened);
  });
  return root;
}
