/**
 * The Jacobians of one (input, output) pair as heatmaps in SVG: through the custom gradient, by finite
 * differences and by autodiff on one shared colour scale (brown below zero, teal above), and the checker's own
 * error of each entry against its tolerance (grey within it, red beyond). Non-finite entries are hatched, entries
 * the checker did not judge (a kink, no finite difference) are dotted; the legend says both. Each cell's values
 * are in its SVG title. Each matrix is an SVG of its own, at its own size: the matrices of a block wrap onto rows
 * where the page is narrow, their labels never scaled down. Python's static drawing (`gradmagic/render/figures.py`)
 * draws the same.
 */
import { element, svg, uniqueId } from './dom';
import { Num, formatNumber, toNumber } from './data';
import { IJacobianBlock, INumerics } from './schema';

/** Cells are this many pixels at most and at least; a matrix is at most MATRIX pixels wide or high. */
const CELL_MAX = 28;
const CELL_MIN = 6;
const MATRIX = 220;
/** Each matrix sits in a slot at least this wide, so that its title fits over it. */
const SLOT = 116;
const TOP = 30;
const LABEL = 26;
/** A block is drawn when it is at least this large on one side, or when one of its entries fails. */
export const HEATMAP_MIN_SIDE = 4;
/** Blocks drawn at most, the failing ones first. */
export const HEATMAP_BLOCKS = 6;

/** Hatched (non-finite) and dotted (not judged) fills defined in `parent`: their `url(#...)` references. */
function patterns(parent: Element): { nonfinite: string; unjudged: string } {
  const defs = svg('defs', {}, parent);
  const id = uniqueId('pattern'); // unique in the page, whichever copy of this module draws
  const hatch = svg(
    'pattern',
    { id: `${id}-nonfinite`, width: 5, height: 5, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' },
    defs
  );
  svg('rect', { width: 5, height: 5, fill: '#d0d7de' }, hatch);
  svg('line', { x1: 0, y1: 0, x2: 0, y2: 5, stroke: '#6e7781', 'stroke-width': 2 }, hatch);
  const dots = svg('pattern', { id: `${id}-unjudged`, width: 4, height: 4, patternUnits: 'userSpaceOnUse' }, defs);
  svg('rect', { width: 4, height: 4, fill: '#ffffff' }, dots);
  svg('circle', { cx: 2, cy: 2, r: 0.8, fill: '#8c959f' }, dots);
  return { nonfinite: `url(#${id}-nonfinite)`, unjudged: `url(#${id}-unjudged)` };
}

/** Diverging colours (ColorBrewer BrBG) for values from -1 to 1, white at 0. */
const NEGATIVE = [140, 81, 10];
const POSITIVE = [1, 102, 94];
const ERROR_HIGH = [207, 34, 46];

function mix(from: number[], to: number[], t: number): string {
  const c = from.map((f, i) => Math.round(f + (to[i] - f) * Math.min(1, Math.max(0, t))));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

/** The fill of a value on a scale symmetric around zero with half-width `scale`; null for a non-finite value. */
export function valueColour(value: number, scale: number): string | null {
  if (!Number.isFinite(value)) {
    return null;
  }
  const t = scale > 0 ? value / scale : 0;
  return t < 0 ? mix([255, 255, 255], NEGATIVE, -t) : mix([255, 255, 255], POSITIVE, t);
}

/**
 * The fill of an entry's error (1 is the tolerance): light grey within the tolerance whatever its size (noise is
 * no error), red beyond it, darker up to 10 times the tolerance; null for an entry not judged (-1) or non-finite.
 */
export function errorColour(error: number): string | null {
  if (!Number.isFinite(error) || error < 0) {
    return Number.isFinite(error) ? null : mix([255, 255, 255], ERROR_HIGH, 1);
  }
  if (error <= 1) {
    return '#eef0f2';
  }
  return mix([250, 200, 200], ERROR_HIGH, Math.log10(error));
}

/** The blocks worth drawing: at least HEATMAP_MIN_SIDE on a side, or holding a failing entry; failing first. */
export function heatmapBlocks(numerics: INumerics): IJacobianBlock[] {
  const failing = (block: IJacobianBlock): boolean => (block.error ?? []).some(e => toNumber(e) > 1);
  return numerics.jacobians
    .filter(block => Math.max(...block.shape) >= HEATMAP_MIN_SIDE || failing(block))
    .sort((a, b) => Number(failing(b)) - Number(failing(a)))
    .slice(0, HEATMAP_BLOCKS);
}

/** The largest finite magnitude among the block's values: the half-width of its colour scale. */
export function blockScale(block: IJacobianBlock): number {
  let largest = 0;
  for (const series of [block.custom, block.numerical, block.autodiff]) {
    for (const value of series) {
      const number = Math.abs(toNumber(value));
      if (Number.isFinite(number)) {
        largest = Math.max(largest, number);
      }
    }
  }
  return largest;
}

function text(parent: Element, content: string, attributes: Record<string, string | number>): void {
  svg('text', attributes, parent).textContent = content;
}

/** The matrices drawn for a block: label and values, autodiff only where it has a finite entry. */
function matrices(block: IJacobianBlock): [string, Num[], 'value' | 'error'][] {
  const drawn: [string, Num[], 'value' | 'error'][] = [
    ['custom gradient', block.custom, 'value'],
    ['finite differences', block.numerical, 'value']
  ];
  if (block.autodiff.some(value => Number.isFinite(toNumber(value)))) {
    drawn.push(['autodiff', block.autodiff, 'value']);
  }
  if (block.error) {
    drawn.push(['error ÷ tolerance', block.error, 'error']);
  }
  return drawn;
}

/** The size of a block's cells and matrices, in pixels. */
function cellSize(block: IJacobianBlock): number {
  const [rows, columns] = block.shape;
  return Math.max(CELL_MIN, Math.min(CELL_MAX, Math.floor(MATRIX / Math.max(rows, columns, 1))));
}

/**
 * One matrix of a block (custom, finite differences, autodiff or the error) as an SVG element of its own, sized in
 * pixels: its title, `in →` over it, `out` at its left. The panels of a block wrap onto rows where the page is
 * narrow, each at its own size, so that their labels stay legible (never scaled down).
 */
export function heatmapPanel(
  block: IJacobianBlock,
  label: string,
  values: Num[],
  kind: 'value' | 'error'
): SVGSVGElement {
  const [rows, columns] = block.shape;
  const cell = cellSize(block);
  const width = columns * cell;
  const height = rows * cell;
  const slot = Math.max(width, SLOT);
  const total = LABEL + slot + 4;
  const root = svg('svg', {
    class: 'jp-gradmagic-heatmap-svg',
    width: total,
    height: TOP + height + 18,
    viewBox: `0 0 ${total} ${TOP + height + 18}`,
    role: 'img'
  });
  svg('title', {}, root).textContent = `${label}: d ${block.output} / d ${block.input}`;
  const fills = patterns(root);
  const scale = blockScale(block);
  const left = LABEL + (slot - width) / 2;
  text(root, 'out', { x: left - 4, y: TOP + height / 2, class: 'jp-gradmagic-heatmap-axis', 'text-anchor': 'end' });
  text(root, label, { x: left + width / 2, y: 12, class: 'jp-gradmagic-heatmap-title', 'text-anchor': 'middle' });
  text(root, `in →`, { x: left + width / 2, y: 25, class: 'jp-gradmagic-heatmap-axis', 'text-anchor': 'middle' });
  const group = svg('g', { class: `jp-gradmagic-heatmap jp-gradmagic-heatmap-${kind}` }, root);
  group.dataset.matrix = label;
  for (let i = 0; i < rows; i++) {
    for (let j = 0; j < columns; j++) {
      const value = toNumber(values[i * columns + j]);
      const fill = kind === 'value' ? valueColour(value, scale) : errorColour(value);
      const unjudged = kind === 'error' && Number.isFinite(value) && value < 0;
      const rect = svg(
        'rect',
        {
          x: left + j * cell,
          y: TOP + i * cell,
          width: cell,
          height: cell,
          fill: fill ?? (unjudged ? fills.unjudged : fills.nonfinite)
        },
        group
      );
      svg('title', {}, rect).textContent = cellDetails(block, i, j);
    }
  }
  svg('rect', { x: left, y: TOP, width, height, class: 'jp-gradmagic-heatmap-frame' }, root);
  return root;
}

/** One block's heatmaps: a panel per matrix, in a row that wraps. */
export function heatmapPanels(block: IJacobianBlock): HTMLElement {
  const row = element('div', 'jp-gradmagic-heatmap-panels');
  for (const [label, values, kind] of matrices(block)) {
    const frame = element('div', 'jp-gradmagic-heatmap-panel', undefined, row);
    frame.appendChild(heatmapPanel(block, label, values, kind));
  }
  return row;
}

/** The lines of a cell's title: the entry and its values. */
export function cellDetails(block: IJacobianBlock, row: number, column: number): string {
  const at = row * block.shape[1] + column;
  const lines = [
    `d ${block.output}[${row}] / d ${block.input}[${column}]`,
    `custom ${formatNumber(block.custom[at])}`,
    `finite differences ${formatNumber(block.numerical[at])}`,
    `autodiff ${formatNumber(block.autodiff[at])}`
  ];
  if (block.error) {
    const error = toNumber(block.error[at]);
    lines.push(
      Number.isFinite(error) && error < 0 ? 'not judged' : `error ${formatNumber(block.error[at])} of tolerance`
    );
  }
  return lines.join('\n');
}

/** The legend under the heatmaps: the value scale, the error's colours, hatched and dotted cells. */
function legend(parent: Element, scale: number): void {
  const line = element('div', 'jp-gradmagic-heatmap-legend', undefined, parent);
  const swatch = (fill: string | null, label: string): void => {
    const entry = element('span', 'jp-gradmagic-key-entry', undefined, line);
    const sample = svg('svg', { width: 14, height: 12, viewBox: '0 0 14 12' }, entry);
    const fills = patterns(sample);
    const drawn = fill ?? (label.startsWith('NaN') ? fills.nonfinite : fills.unjudged);
    svg('rect', { x: 0.5, y: 0.5, width: 13, height: 11, fill: drawn, stroke: '#8c959f' }, sample);
    element('span', undefined, label, entry);
  };
  swatch(mix([255, 255, 255], NEGATIVE, 1), `−${formatNumber(scale)}`);
  swatch('#ffffff', '0');
  swatch(mix([255, 255, 255], POSITIVE, 1), `+${formatNumber(scale)}`);
  swatch('#eef0f2', 'error within tolerance');
  swatch(mix([250, 200, 200], ERROR_HIGH, 0.5), 'beyond it (darker: up to 10×)');
  swatch(null, 'NaN or inf');
  swatch(null, 'not judged (kink, no finite difference)');
}

/** Every block worth drawing, each with its title and the legend; null when none is. */
export function heatmapsView(numerics: INumerics): HTMLElement | null {
  const blocks = heatmapBlocks(numerics);
  if (!blocks.length) {
    return null;
  }
  const root = element('div', 'jp-gradmagic-heatmaps');
  for (const block of blocks) {
    const figure = element('figure', 'jp-gradmagic-heatmap-figure', undefined, root);
    element(
      'figcaption',
      undefined,
      `d ${block.output} / d ${block.input}: ${block.shape[0]} × ${block.shape[1]}`,
      figure
    );
    figure.appendChild(heatmapPanels(block));
    legend(figure, blockScale(block));
  }
  return root;
}
