/**
 * Reading the data the kernel sends (its types are generated from Python's dataclasses: `schema.ts`): a report or a
 * watch's report of a schema major version this extension reads, its numbers as numbers, and the words every view
 * says of them.
 */
import { AnyFloat, BackendVerdict, IReport, IWatchReport, SCHEMA_VERSION, Shape, WATCH_SCHEMA_VERSION } from './schema';

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

/** Verdicts in words, as every view says them (Python's `VERDICT_WORDS` in `gradmagic/render/__init__.py`). */
export const VERDICT_WORDS: Record<BackendVerdict, string> = {
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

/**
 * `1 element`, `3 elements`, `4,096 elements`: a count and its noun, singular for exactly one (Python's `counted`
 * in `gradmagic/render/__init__.py` says the same).
 */
export function counted(count: number, word: string, plural?: string): string {
  return `${count.toLocaleString('en')} ${count === 1 ? word : (plural ?? `${word}s`)}`;
}

/** `x[2, 0]` for an element, `x` for the whole tensor. */
export function elementLabel(name: string, index: number[] | null | undefined): string {
  return index && index.length ? `${name}[${index.join(', ')}]` : name;
}

/** `12 B`, `3.0 KiB`, `1.5 MiB`: a size in bytes. */
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
