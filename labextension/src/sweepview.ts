/**
 * The sweep drawn in SVG, as Python's static drawing (gradmagic/render/svg.py) draws it: the output along
 * the swept element above; below, its derivative three ways (custom gradient, finite differences wide and
 * translucent under the others, autodiff dashed) on the same x axis. Non-finite values leave gaps, shaded as
 * bands (the output's, the custom gradient's, autodiff's) named in the legend; finite
 * differences that straddle a jump of the forward are left out of the curve and of the scale, and marked with
 * triangles on the top edge. Hovering shows the values at the nearest point. Every string goes in as text.
 */
import { element, svg } from './dom';
import { elementLabel, formatNumber, toNumber } from './data';
import { ISweep } from './schema';

/** The drawing in SVG units: it scales to the output's width, text with it. */
const WIDTH = 720;
const HEIGHT = 430;
const LEFT = 66;
const RIGHT = 14;
/** The output's panel and the derivatives' panel, top and bottom edges. */
const VALUE_PANEL: [number, number] = [30, 146];
const DERIVATIVE_PANEL: [number, number] = [160, 380];
/** Space around the data inside a panel, as matplotlib's default margins. */
const MARGIN = 0.05;
const JUMP_MARKER = 'M0,-5 L4.5,3 L-4.5,3 z';

export type DerivativeName = 'numerical' | 'custom' | 'autodiff';

/** What the legend and the hover card call each curve: the surrogate and the true derivative when declared. */
export function derivativeLabels(surrogate: boolean): Record<DerivativeName | 'jump', string> {
  return {
    numerical: surrogate ? 'true derivative (finite differences)' : 'finite differences',
    custom: surrogate ? 'surrogate (custom gradient)' : 'custom gradient',
    autodiff: 'autodiff',
    jump: `${surrogate ? 'true derivative' : 'finite differences'} at a jump (off scale)`
  };
}

/** `output[0] along x[0] (element-wise op), float32`, the title of Python's sweep figure. */
export function sweepTitle(sweep: ISweep): string {
  const output = elementLabel(sweep.output, sweep.output_index);
  const input = elementLabel(sweep.input, sweep.index);
  return `${output} along ${input}${sweep.elementwise ? ' (element-wise op)' : ''}, ${sweep.dtype}`;
}

/** NumPy's `np.gradient(values, points)` at `i`: second-order central differences inside, one-sided at the ends. */
function secantSlope(points: number[], values: number[], i: number): number {
  const last = points.length - 1;
  if (i === 0) {
    return (values[1] - values[0]) / (points[1] - points[0]);
  }
  if (i === last) {
    return (values[last] - values[last - 1]) / (points[last] - points[last - 1]);
  }
  const before = points[i] - points[i - 1];
  const after = points[i + 1] - points[i];
  return (
    (before ** 2 * values[i + 1] + (after ** 2 - before ** 2) * values[i] - after ** 2 * values[i - 1]) /
    (before * after * (before + after))
  );
}

/**
 * Where a central difference straddles a jump of the forward (round, sign), as Python's `figures.jumps`: it is
 * the jump over 2h there, more than 10 times the slope between neighbouring sweep points, and off any useful scale.
 */
export function jumps(points: number[], values: number[], numerical: number[]): boolean[] {
  if (points.length < 3) {
    return points.map(() => false);
  }
  return numerical.map((difference, i) => {
    const secant = Math.abs(secantSlope(points, values, i));
    return Number.isFinite(difference) && Number.isFinite(secant) && Math.abs(difference) > 10 * secant + 1e-12;
  });
}

/** About `count` tick values inside [low, high], at multiples of 1, 2, 2.5 or 5 times a power of ten. */
export function niceTicks(low: number, high: number, count: number): number[] {
  const rough = (high - low) / count;
  const power = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 2.5, 5, 10].map(factor => factor * power).find(candidate => candidate >= rough)!;
  const ticks: number[] = [];
  for (let k = Math.ceil(low / step); k * step <= high; k++) {
    ticks.push(Number((k * step).toPrecision(12)) || 0); // no -0
  }
  return ticks;
}

/** The finite range of `series` with margins; a flat or empty one is widened so that it still has a scale. */
function dataRange(...series: number[][]): [number, number] {
  const finite = series.flat().filter(Number.isFinite);
  let low = finite.reduce((least, value) => Math.min(least, value), Infinity);
  let high = finite.reduce((most, value) => Math.max(most, value), -Infinity);
  if (!finite.length) {
    [low, high] = [-1, 1];
  } else if (low === high) {
    const spread = Math.abs(low) / 10 || 1;
    [low, high] = [low - spread, high + spread];
  }
  const margin = (high - low) * MARGIN;
  return [low - margin, high + margin];
}

/** A linear map from `domain` onto `range` (SVG units). */
function linear([from, to]: [number, number], [start, end]: [number, number]): (value: number) => number {
  return value => start + ((value - from) / (to - from)) * (end - start);
}

/** An SVG path through the points where both coordinates are finite, broken (a gap) where one is not. */
export function linePath(xs: number[], ys: number[]): string {
  const parts: string[] = [];
  let drawing = false;
  xs.forEach((x, i) => {
    const y = ys[i];
    if (Number.isFinite(x) && Number.isFinite(y)) {
      parts.push(`${drawing ? 'L' : 'M'}${x.toFixed(1)},${y.toFixed(1)}`);
      drawing = true;
    } else {
      drawing = false;
    }
  });
  return parts.join('');
}

/**
 * The stretches of the sweep where `series` is NaN or infinite, as [first, last] point indices: drawn as bands
 * (a curve there has a gap, which a band makes visible).
 */
export function nonFiniteRuns(series: number[]): [number, number][] {
  const runs: [number, number][] = [];
  series.forEach((value, i) => {
    if (Number.isFinite(value)) {
      return;
    }
    const last = runs[runs.length - 1];
    if (last && last[1] === i - 1) {
      last[1] = i;
    } else {
      runs.push([i, i]);
    }
  });
  return runs;
}

/** The index of the sweep point nearest to `x`. */
export function nearestPoint(points: number[], x: number): number {
  let nearest = 0;
  points.forEach((point, i) => {
    if (Math.abs(point - x) < Math.abs(points[nearest] - x)) {
      nearest = i;
    }
  });
  return nearest;
}

/**
 * The lines of the hover card at point `i`: the swept element, the output and the three derivatives;
 * `offScale` marks the points where finite differences straddle a jump (`jumps`).
 */
export function sweepDetails(sweep: ISweep, i: number, surrogate: boolean, offScale: boolean[]): string[] {
  const labels = derivativeLabels(surrogate);
  const lines = [
    `${elementLabel(sweep.input, sweep.index)} = ${formatNumber(sweep.points[i])}`,
    `${elementLabel(sweep.output, sweep.output_index)} = ${formatNumber(sweep.values[i])}`,
    `${labels.custom}: ${formatNumber(sweep.custom[i])}`,
    `${labels.numerical}: ${formatNumber(sweep.numerical[i])}${offScale[i] ? ' (at a jump)' : ''}`
  ];
  if (sweep.autodiff) {
    lines.push(`${labels.autodiff}: ${formatNumber(sweep.autodiff[i])}`);
  }
  return lines;
}

function text(parent: Element, content: string, attributes: Record<string, string | number>): SVGTextElement {
  const node = svg('text', attributes, parent);
  node.textContent = content;
  return node;
}

/** Grid lines and tick labels of a panel's y axis. */
function yAxis(parent: Element, range: [number, number], panel: [number, number], label: string, count: number): void {
  const y = linear(range, [panel[1], panel[0]]);
  for (const tick of niceTicks(range[0], range[1], count)) {
    svg('line', { x1: LEFT, x2: WIDTH - RIGHT, y1: y(tick), y2: y(tick), class: 'jp-gradmagic-sweep-grid' }, parent);
    text(parent, formatNumber(tick), {
      x: LEFT - 5,
      y: y(tick) + 3.5,
      class: 'jp-gradmagic-sweep-tick',
      'text-anchor': 'end'
    });
  }
  const middle = (panel[0] + panel[1]) / 2;
  text(parent, label, {
    x: 14,
    y: middle,
    transform: `rotate(-90 14 ${middle})`,
    class: 'jp-gradmagic-sweep-label',
    'text-anchor': 'middle'
  });
}

/** A legend entry: a short sample of the curve (drawn with the curve's class) and its label. */
function legendEntry(parent: Element, className: string, label: string, marker = false, band = false): void {
  const entry = element('span', 'jp-gradmagic-sweep-key', undefined, parent);
  const sample = svg('svg', { width: 26, height: 10, viewBox: '0 0 26 10' }, entry);
  if (band) {
    svg('rect', { x: 1, y: 0, width: 24, height: 10, class: className }, sample);
  } else if (marker) {
    svg('path', { d: JUMP_MARKER, transform: 'translate(13 6)', class: className }, sample);
  } else {
    svg('line', { x1: 1, x2: 25, y1: 5, y2: 5, class: className }, sample);
  }
  element('span', undefined, label, entry);
}

/**
 * The sweep as a chart; `surrogate` (the report's verdict is "surrogate") names the custom gradient the
 * surrogate and finite differences the true derivative.
 */
export function sweepView(sweep: ISweep, surrogate: boolean): HTMLElement {
  const labels = derivativeLabels(surrogate);
  const points = sweep.points.map(toNumber);
  const values = sweep.values.map(toNumber);
  const numerical = sweep.numerical.map(toNumber);
  const offScale = jumps(points, values, numerical);
  const derivatives: [DerivativeName, number[]][] = [
    ['numerical', numerical.map((value, i) => (offScale[i] ? NaN : value))], // first: under the others
    ['custom', sweep.custom.map(toNumber)]
  ];
  if (sweep.autodiff) {
    derivatives.push(['autodiff', sweep.autodiff.map(toNumber)]);
  }

  const root = element('div', 'jp-gradmagic-sweep');
  root.dataset.jumps = String(offScale.filter(Boolean).length);
  const legend = element('div', 'jp-gradmagic-sweep-legend', undefined, root);
  for (const [name] of derivatives) {
    legendEntry(legend, `jp-gradmagic-sweep-${name}`, labels[name]);
  }
  if (sweep.kinks.length) {
    legendEntry(legend, 'jp-gradmagic-sweep-kink', 'not differentiable');
  }
  // NaN or inf: the output in its panel; the custom gradient and autodiff in theirs (a curve's gap, made visible).
  const bands: [string, number[], [number, number], string][] = [
    [`${elementLabel(sweep.output, sweep.output_index)} NaN/inf`, values, VALUE_PANEL, 'output'],
    [`${labels.custom} NaN/inf`, sweep.custom.map(toNumber), DERIVATIVE_PANEL, 'custom']
  ];
  if (sweep.autodiff) {
    bands.push([`${labels.autodiff} NaN/inf`, sweep.autodiff.map(toNumber), DERIVATIVE_PANEL, 'autodiff']);
  }
  const shaded = bands.filter(([, series]) => nonFiniteRuns(series).length);
  shaded.forEach(([label, , , name]) =>
    legendEntry(legend, `jp-gradmagic-sweep-nonfinite jp-gradmagic-band-${name}`, label, false, true)
  );
  if (offScale.some(Boolean)) {
    legendEntry(legend, 'jp-gradmagic-sweep-jump', labels.jump, true);
  }

  const frame = element('div', 'jp-gradmagic-sweep-frame', undefined, root);
  const chart = svg('svg', { class: 'jp-gradmagic-sweep-svg', viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: 'img' }, frame);
  const title = sweepTitle(sweep);
  svg('title', {}, chart).textContent = title;
  const middle = (LEFT + WIDTH - RIGHT) / 2;
  text(chart, title, { x: middle, y: 18, class: 'jp-gradmagic-sweep-title', 'text-anchor': 'middle' });

  const xRange = dataRange(points);
  const x = linear(xRange, [LEFT, WIDTH - RIGHT]);
  const xs = points.map(x);
  const valueRange = dataRange(values);
  const derivativeRange = dataRange(...derivatives.map(([, series]) => series));
  const output = elementLabel(sweep.output, sweep.output_index);
  const input = elementLabel(sweep.input, sweep.index);
  yAxis(chart, valueRange, VALUE_PANEL, output, 5);
  yAxis(chart, derivativeRange, DERIVATIVE_PANEL, `d ${output} / d ${input}`, 5);
  for (const tick of niceTicks(xRange[0], xRange[1], 7)) {
    for (const [top, bottom] of [VALUE_PANEL, DERIVATIVE_PANEL]) {
      svg('line', { x1: x(tick), x2: x(tick), y1: top, y2: bottom, class: 'jp-gradmagic-sweep-grid' }, chart);
    }
    text(chart, formatNumber(tick), {
      x: x(tick),
      y: DERIVATIVE_PANEL[1] + 14,
      class: 'jp-gradmagic-sweep-tick',
      'text-anchor': 'middle'
    });
  }
  text(chart, `${input} (finite differences in ${sweep.numerical_dtype})`, {
    x: middle,
    y: DERIVATIVE_PANEL[1] + 34,
    class: 'jp-gradmagic-sweep-label',
    'text-anchor': 'middle'
  });

  const verticals: [number, string][] = [
    ...sweep.kinks.map((kink): [number, string] => [toNumber(kink), 'jp-gradmagic-sweep-kink']),
    [toNumber(sweep.example), 'jp-gradmagic-sweep-example']
  ];
  for (const [at, className] of verticals) {
    for (const [top, bottom] of [VALUE_PANEL, DERIVATIVE_PANEL]) {
      svg('line', { x1: x(at), x2: x(at), y1: top, y2: bottom, class: className }, chart);
    }
  }
  text(chart, `example ${formatNumber(sweep.example)}`, {
    x: x(toNumber(sweep.example)) + 3,
    y: DERIVATIVE_PANEL[1] - 4,
    class: 'jp-gradmagic-sweep-note'
  });

  const step = xs.length > 1 ? (xs[xs.length - 1] - xs[0]) / (xs.length - 1) : 0;
  shaded.forEach(([label, series, [top, bottom], name]) => {
    for (const [first, last] of nonFiniteRuns(series)) {
      const left = Math.max(LEFT, xs[first] - step / 2);
      const right = Math.min(WIDTH - RIGHT, xs[last] + step / 2);
      const band = svg(
        'rect',
        {
          x: left,
          y: top,
          width: Math.max(1, right - left),
          height: bottom - top,
          class: `jp-gradmagic-sweep-nonfinite jp-gradmagic-band-${name}`
        },
        chart
      );
      svg('title', {}, band).textContent = label;
    }
  });

  const valueY = linear(valueRange, [VALUE_PANEL[1], VALUE_PANEL[0]]);
  svg('path', { d: linePath(xs, values.map(valueY)), class: 'jp-gradmagic-sweep-output' }, chart).dataset.series =
    'output';
  const derivativeY = linear(derivativeRange, [DERIVATIVE_PANEL[1], DERIVATIVE_PANEL[0]]);
  for (const [name, series] of derivatives) {
    const curve = svg('path', { d: linePath(xs, series.map(derivativeY)), class: `jp-gradmagic-sweep-${name}` }, chart);
    curve.dataset.series = name;
    svg('title', {}, curve).textContent = labels[name];
  }
  offScale.forEach((jump, i) => {
    if (jump) {
      const marker = svg('path', { d: JUMP_MARKER, class: 'jp-gradmagic-sweep-jump' }, chart);
      marker.setAttribute('transform', `translate(${xs[i].toFixed(1)} ${DERIVATIVE_PANEL[0]})`);
    }
  });
  for (const [top, bottom] of [VALUE_PANEL, DERIVATIVE_PANEL]) {
    const frameOfPanel = { x: LEFT, y: top, width: WIDTH - LEFT - RIGHT, height: bottom - top };
    svg('rect', { ...frameOfPanel, class: 'jp-gradmagic-sweep-axes' }, chart);
  }

  // Hover: a line at the nearest point and its values in a card.
  const cursor = svg(
    'line',
    { y1: VALUE_PANEL[0], y2: DERIVATIVE_PANEL[1], class: 'jp-gradmagic-sweep-cursor' },
    chart
  );
  cursor.style.display = 'none';
  const tooltip = element('div', 'jp-gradmagic-tooltip', undefined, frame);
  tooltip.hidden = true;
  chart.addEventListener('mousemove', event => {
    const box = chart.getBoundingClientRect();
    const i = nearestPoint(xs, ((event.clientX - box.left) / box.width) * WIDTH);
    cursor.setAttribute('x1', xs[i].toFixed(1));
    cursor.setAttribute('x2', xs[i].toFixed(1));
    cursor.style.display = '';
    const lines = sweepDetails(sweep, i, surrogate, offScale);
    tooltip.replaceChildren(...lines.map((line, k) => element('div', k ? '' : 'jp-gradmagic-tooltip-title', line)));
    const frameBox = frame.getBoundingClientRect();
    const rightHalf = event.clientX > frameBox.left + frameBox.width / 2; // the card goes toward the middle
    tooltip.style.left = rightHalf ? '' : `${event.clientX - frameBox.left + 12}px`;
    tooltip.style.right = rightHalf ? `${frameBox.right - event.clientX + 12}px` : '';
    tooltip.style.top = `${event.clientY - frameBox.top + 12}px`;
    tooltip.hidden = false;
  });
  chart.addEventListener('mouseleave', () => {
    cursor.style.display = 'none';
    tooltip.hidden = true;
  });
  return root;
}
