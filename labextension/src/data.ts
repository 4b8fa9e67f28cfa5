/**
 * Reading the data the kernel sends (its types are generated from Python's dataclasses: `schema.ts`): a report or a
 * watch's report of a schema major version this extension reads, its numbers as numbers, and its words. The words
 * are Python's (`words`, worded once by `gradmagic/render/words.py`); data saved by a gradmagic older than schema 1.8
 * has none, and is shown with the few words the data itself holds, and a note saying so.
 */
import {
  AnyFloat,
  IReport,
  IReportWords,
  IWatchReport,
  IWatchWords,
  SCHEMA_VERSION,
  Shape,
  WATCH_SCHEMA_VERSION
} from './schema';

/** The schema major version of the reports this extension reads. */
export const SCHEMA_MAJOR = Number(SCHEMA_VERSION.split('.')[0]);
/** The schema major version of the watch reports this extension reads. */
export const WATCH_SCHEMA_MAJOR = Number(WATCH_SCHEMA_VERSION.split('.')[0]);

/** A number from the data, or none. */
export type Num = AnyFloat | null;

/** The major version of `data`'s schema, and its version as written ('' when it has none). */
function versionOf(data: { version?: unknown }): [number, string] {
  const version = typeof data.version === 'string' ? data.version : '';
  return [Number(version.split('.')[0]), version];
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
  const [major, version] = versionOf(report);
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

/** The watch's report in `data`, or an Error saying why it cannot be read. */
export function readWatchReport(data: unknown): IWatchReport | Error {
  if (typeof data !== 'object' || data === null || Array.isArray(data)) {
    return new Error("The gradmagic watch's report is not a JSON object.");
  }
  const watch = data as Partial<IWatchReport>;
  const [major, version] = versionOf(watch);
  if (major !== WATCH_SCHEMA_MAJOR) {
    return new Error(
      `This gradmagic extension reads watch reports of schema ${WATCH_SCHEMA_MAJOR}.x; this one is version ` +
        `${version || 'unknown'}. Update the extension (pip install -U gradmagic) to see it.`
    );
  }
  if (!Array.isArray(watch.watched)) {
    return new Error('The gradmagic watch report has no "watched".');
  }
  return watch as IWatchReport;
}

/** What a view says in place of the words a report saved before schema 1.8 lacks. */
export const OLDER_REPORT =
  'Saved by an older gradmagic, without the words every view shows now: re-run the cell for its summaries.';

/**
 * The report's words: Python's, or, for a report saved before schema 1.8, what its data holds as it is (its verdict,
 * the shapes of its tensors) and a note saying so where the key figures go.
 */
export function wordsOf(report: IReport): IReportWords {
  if (report.words) {
    return report.words;
  }
  const shapes = report.tensors.map(tensor => {
    const expected = tensor.expected_shape
      ? `${tensor.expected_dtype ?? ''} ${formatShape(tensor.expected_shape)}`
      : '';
    const mark = expected ? (tensor.matches ? '✓' : '✗') : '';
    const shape = tensor.shape ? `${tensor.dtype ?? ''} ${formatShape(tensor.shape)}` : 'None';
    return [tensor.role, tensor.name, shape.trim(), expected.trim(), mark] as [string, string, string, string, string];
  });
  return {
    verdict: report.verdict,
    headline: report.verdict,
    figures: OLDER_REPORT,
    surrogate: null,
    places: report.problems.map(() => ''),
    numerics: '',
    kinks: null,
    worst_title: '',
    worst: [],
    shapes,
    backends: (report.backends ?? []).map(result => [result.backend, result.verdict, '', result.version ?? '', '']),
    sweep: null,
    no_sweep: report.sweep ? null : '',
    no_sweep_live: report.sweep ? null : '',
    graph: null,
    no_graph: report.graph ? null : '',
    timings: null
  };
}

/** The watch's words: Python's, or, for a watch saved before its schema 1.1, its data's own and a note. */
export function watchWordsOf(watch: IWatchReport): IWatchWords {
  if (watch.words) {
    return watch.words;
  }
  return {
    verdict: watch.verdict,
    summary: OLDER_REPORT,
    timings: `${watch.framework} ${watch.framework_version}`,
    lines: [],
    raised: watch.error,
    rows: watch.watched.map(op => [op.name, op.where ?? '', String(op.calls), op.verdict, '']),
    calls: watch.watched.map(() => []),
    places: watch.watched.map(op => op.findings.map(() => ''))
  };
}

/** A number from the report as a JavaScript number: the non-finite strings as NaN and ±Infinity, null as NaN. */
export function toNumber(value: Num): number {
  return value === null ? NaN : Number(value);
}

/**
 * A number for display in the figures' labels and hover cards: non-finite strings as they are, others with `digits`
 * significant digits (4 by default), or `digits - 2` decimals and an exponent out of [1e-3, 1e5); as Python's
 * `format_number` writes the figures it draws.
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

/** `[2, 3]`, `[?, 3]` for unknown dimensions, `scalar` for rank 0, `—` for no tensor. */
export function formatShape(shape: Shape | null | undefined): string {
  if (!shape) {
    return '—';
  }
  return shape.length ? `[${shape.map(d => (d === null ? '?' : String(d))).join(', ')}]` : 'scalar';
}

/** `x[2, 0]` for an element, `x` for the whole tensor. */
export function elementLabel(name: string, index: number[] | null | undefined): string {
  return index && index.length ? `${name}[${index.join(', ')}]` : name;
}

/** `12 B`, `3.0 KiB`, `1.5 MiB`: a size in bytes, for the graph's hover cards. */
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
