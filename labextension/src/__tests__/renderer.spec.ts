/**
 * The renderer on reports made by the real Python checker: tests/test_labextension.py writes them as JSON into
 * the folder GRADMAGIC_REPORT_FIXTURES names, then runs these tests, so the two sides cannot drift apart.
 */
import * as fs from 'fs';
import * as path from 'path';

import { edgeDetails, graphView, nodeDetails } from '../graphview';
import { BACKWARD_LANE, foldScopes, layout } from '../layout';
import { ReportRenderer, reportRendererFactory } from '../renderer';
import { VERDICT_WORDS, reportView, surrogateLine } from '../reportview';
import { IReport, MIME_TYPE, formatShape, readReport, toNumber } from '../schema';
import { jumps, nearestPoint, niceTicks, sweepDetails } from '../sweepview';
import { TEMPLATE, isCustomGradientCell, loadsGradmagic } from '../cells';

const folder = process.env.GRADMAGIC_REPORT_FIXTURES;
if (!folder) {
  throw new Error(
    'GRADMAGIC_REPORT_FIXTURES is not set: run `pytest tests/test_labextension.py`, which writes the report ' +
      'fixtures with the real checker and runs these tests.'
  );
}
const fixtures: Record<string, IReport> = Object.fromEntries(
  fs
    .readdirSync(folder)
    .filter(name => name.endsWith('.json'))
    .map(name => [path.basename(name, '.json'), JSON.parse(fs.readFileSync(path.join(folder, name), 'utf8'))])
);
const names = Object.keys(fixtures);
/** What the Python renderers show of each fixture: the surrogate line, the sweep points marked at a jump. */
const python: Record<string, { surrogate_line: string | null; jumps: number[] | null }> = JSON.parse(
  fs.readFileSync(path.join(folder, 'python-renderers.txt'), 'utf8')
);

test('the Python suite wrote the fixtures these tests expect', () => {
  expect(names.sort()).toEqual([
    'big_graph',
    'gradient_reversal',
    'hostile',
    'keras_backends',
    'log1pexp',
    'projection',
    'straight_through',
    'unreduced_bias'
  ]);
});

test('a Keras report names its backend and shows the verdict on each backend', () => {
  const report = fixtures.keras_backends;
  const view = reportView(report);
  expect(view.querySelector('.jp-gradmagic-header .jp-gradmagic-muted')!.textContent).toMatch(
    /^Keras 3 on TensorFlow \(keras [\d.]+, tensorflow [\d.]+\), eager; checked in/
  );
  expect(view.querySelector('.jp-gradmagic-backend-line')!.textContent).toBe(
    'backends: TensorFlow ✓ · JAX ✓ · PyTorch ✗'
  );
  const rows = Array.from(view.querySelectorAll('.jp-gradmagic-backends-table tbody tr')) as HTMLTableRowElement[];
  expect(rows.map(row => row.dataset.backend)).toEqual(['tensorflow', 'jax', 'torch']);
  const cells = rows.map(row => Array.from(row.cells).map(cell => cell.textContent));
  expect(cells[0].slice(0, 3)).toEqual(['TensorFlow (this kernel)', 'passes', 'no problem']);
  expect(cells[1].slice(0, 3)).toEqual(['JAX', 'passes', 'no problem']);
  expect(cells[2].slice(0, 3)).toEqual(['PyTorch', 'fails', 'backend-signature']);
  expect(cells[2][3]).toMatch(/^keras [\d.]+, torch /);
  expect(rows[2].cells[1].className).toBe('jp-gradmagic-fail');
  const first = view.querySelector('.jp-gradmagic-all-problems .jp-gradmagic-problem')!;
  expect(first.querySelector('.jp-gradmagic-code')!.textContent).toBe('backend-fails');
  expect(first.querySelector('.jp-gradmagic-message')!.textContent).toContain('def grad(*args, upstream=None):');
});

describe.each(names)('report %s', name => {
  const report = fixtures[name];

  test('is readable with this schema version', () => {
    expect(readReport(report)).toBe(report);
  });

  test('shows its verdict, its problems and one shapes row per tensor', () => {
    const view = reportView(report);
    expect(view.querySelector('.jp-gradmagic-verdict')!.textContent).toBe(VERDICT_WORDS[report.verdict]);
    expect(view.querySelector('.jp-gradmagic-signature')!.textContent).toBe(report.op.name + report.op.signature);
    const codes = Array.from(view.querySelectorAll('.jp-gradmagic-all-problems .jp-gradmagic-code')).map(
      code => code.textContent
    );
    expect(codes).toEqual(report.problems.map(problem => problem.code));
    const rows = view.querySelectorAll('.jp-gradmagic-shapes-table tbody tr');
    expect(rows.length).toBe(report.tensors.length);
    report.tensors.forEach((tensor, i) => {
      const cells = Array.from(rows[i].querySelectorAll('td')).map(cell => cell.textContent);
      expect(cells[0]).toBe(tensor.role);
      expect(cells[1]).toBe(tensor.name);
      const shape = tensor.shape && (tensor.shape.length ? formatShape(tensor.shape) : '[]');
      expect(cells[2]).toBe(tensor.shape ? `${tensor.dtype}${shape}` : 'None');
      expect(rows[i].classList.contains('jp-gradmagic-mismatch')).toBe(!tensor.matches);
    });
    expect(view.querySelectorAll('.jp-gradmagic-worst-table tbody tr').length).toBe(report.numerics.worst.length);
  });

  test('says what the Python renderers say of a surrogate gradient, and draws its sweep, when it has them', () => {
    const view = reportView(report);
    expect(view.querySelector('.jp-gradmagic-surrogate-line')?.textContent ?? null).toBe(python[name].surrogate_line);
    expect(surrogateLine(report) === null).toBe(!report.surrogate);
    expect(view.querySelector('.jp-gradmagic-sweep-section .jp-gradmagic-sweep-svg') === null).toBe(!report.sweep);
  });

  test('marks finite differences at a jump where the Python figure does', () => {
    const sweep = report.sweep;
    if (!sweep) {
      expect(python[name].jumps).toBeNull();
      return;
    }
    const marked = jumps(sweep.points.map(toNumber), sweep.values.map(toNumber), sweep.numerical.map(toNumber));
    expect(marked.flatMap((jump, i) => (jump ? [i] : []))).toEqual(python[name].jumps);
    const chart = reportView(report).querySelector('.jp-gradmagic-sweep-svg')!;
    expect(chart.querySelectorAll('.jp-gradmagic-sweep-jump').length).toBe(python[name].jumps!.length);
  });

  test('draws every node and edge of its graph, saved tensors marked', () => {
    const view = reportView(report);
    const drawn = view.querySelector('.jp-gradmagic-graph') as HTMLElement | null;
    if (!report.graph) {
      expect(drawn).toBeNull();
      return;
    }
    expect(Number(drawn!.dataset.nodeCount)).toBe(report.graph.nodes.length);
    expect(view.querySelectorAll('.jp-gradmagic-node').length).toBe(report.graph.nodes.length);
    expect(view.querySelectorAll('.jp-gradmagic-edge').length).toBe(report.graph.edges.length);
    expect(view.querySelectorAll('.jp-gradmagic-edge.jp-gradmagic-saved').length).toBe(
      report.graph.edges.filter(edge => edge.saved).length
    );
  });
});

test('the layout puts the forward lane above the backward lane and gives every node its own place', () => {
  for (const report of Object.values(fixtures)) {
    if (!report.graph) {
      continue;
    }
    const positions = layout(report.graph);
    expect(positions.size).toBe(report.graph.nodes.length);
    const places = new Set([...positions.values()].map(point => `${point.x},${point.y}`));
    expect(places.size).toBe(report.graph.nodes.length);
    const lowestForward = Math.max(
      ...report.graph.nodes.filter(n => !BACKWARD_LANE.includes(n.role)).map(n => positions.get(n.id)!.y)
    );
    const highestBackward = Math.min(
      ...report.graph.nodes.filter(n => BACKWARD_LANE.includes(n.role)).map(n => positions.get(n.id)!.y)
    );
    expect(lowestForward).toBeLessThan(highestBackward);
  }
});

test('hover details name op type, shape, dtype, bytes and the cell line', () => {
  const graph = fixtures.log1pexp.graph!;
  const exp = graph.nodes.find(node => node.op === 'Exp')!;
  const lines = nodeDetails(exp);
  expect(lines[0]).toBe(`${exp.label} (Exp)`);
  expect(lines).toContain(`shape: ${formatShape(exp.shapes[0])}`);
  expect(lines).toContain(`dtype: ${exp.dtypes[0]}`);
  expect(lines).toContain(`cell line ${exp.line}`);
  const saved = graph.edges.find(edge => edge.saved)!;
  const details = edgeDetails(saved, new Map(graph.nodes.map(node => [node.id, node])));
  expect(details).toContain('saved: the backward keeps this forward tensor alive');
  expect(details).toContain(`bytes: ${saved.bytes} B (${saved.bytes} B)`);
});

test('text from the report is inserted as text, never as HTML', () => {
  const report = fixtures.hostile;
  expect(report.op.name).toContain('<img');
  const view = reportView(report);
  expect(view.querySelector('img')).toBeNull();
  expect(view.querySelector('.jp-gradmagic-signature')!.textContent).toContain(report.op.name);
  expect(view.textContent).toContain(report.problems[0].message);
});

test('a graph of more than 200 nodes is drawn with its name scopes folded', () => {
  const graph = fixtures.big_graph.graph!;
  const doubled = {
    ...graph,
    nodes: [
      ...graph.nodes,
      ...graph.nodes
        .filter(node => node.role === 'forward')
        .map(node => ({ ...node, id: `forward/extra/${node.id}` }))
    ]
  };
  expect(doubled.nodes.length).toBeGreaterThan(200);
  const folded = foldScopes(doubled);
  const extra = folded.nodes.find(node => node.id === 'forward/extra')!;
  expect(extra.count).toBe(graph.nodes.filter(node => node.role === 'forward').length);
  expect(Number((graphView(doubled).dataset.nodeCount))).toBe(folded.nodes.length);
});

test('a report of another schema major version says so instead of drawing wrong', async () => {
  const renderer = new ReportRenderer({} as any);
  const data = { ...fixtures.log1pexp, version: '2.0' };
  await renderer.renderModel({ data: { [MIME_TYPE]: data }, metadata: {} } as any);
  expect(renderer.node.textContent).toContain('reads report schema 1.x; the report is version 2.0');
});

test('the renderer shows the graph alone when the output asks for the graph view', async () => {
  const renderer = new ReportRenderer({} as any);
  const data = fixtures.log1pexp as any;
  await renderer.renderModel({ data: { [MIME_TYPE]: data }, metadata: { [MIME_TYPE]: { view: 'graph' } } } as any);
  expect(renderer.node.querySelector('.jp-gradmagic-graph')).not.toBeNull();
  expect(renderer.node.querySelector('.jp-gradmagic-verdict')).toBeNull();
});

test('the renderer outranks the text/html fallback, and in notebooks the widget view too', () => {
  // Which of the two shows in a notebook (live widget, or the report from data) is tested in a real
  // JupyterLab: tests/test_browser.py.
  expect(reportRendererFactory().defaultRank).toBeLessThan(50);
  const notebook = reportRendererFactory({ kernel: () => null, createWidgetRenderer: () => new ReportRenderer({} as any) });
  expect(notebook.defaultRank).toBeLessThan(-10);
});

test('the inserted cell is a custom-gradient cell, found by Re-check all', () => {
  expect(isCustomGradientCell(TEMPLATE)).toBe(true);
  expect(isCustomGradientCell('# a comment\n\n%%custom_gradient log1pexp\n')).toBe(true);
  expect(isCustomGradientCell('x = 1\n%%custom_gradient')).toBe(false);
  expect(isCustomGradientCell('%%custom_gradients')).toBe(false);
  expect(loadsGradmagic(['import tensorflow as tf', '%load_ext gradmagic'])).toBe(true);
  expect(loadsGradmagic(['%load_ext autoreload'])).toBe(false);
});

/** The distinct heights (SVG y) a path goes through. */
function levels(path: Element): Set<number> {
  return new Set(path.getAttribute('d')!.match(/[ML][^ML]+/g)!.map(point => Number(point.split(',')[1])));
}

describe('a declared straight-through estimator (round forward, gradient passed where |x| <= 1)', () => {
  const report = fixtures.straight_through;
  const view = reportView(report);
  const chart = view.querySelector('.jp-gradmagic-sweep-section .jp-gradmagic-sweep-svg')!;
  const curve = (series: string): Element => chart.querySelector(`path[data-series="${series}"]`)!;

  test('reads "surrogate gradient (declared)" in the surrogate colour, and says which surrogate it is', () => {
    expect(report.verdict).toBe('surrogate');
    const verdict = view.querySelector('.jp-gradmagic-verdict')!;
    expect(verdict.textContent).toBe('surrogate gradient (declared)');
    expect(verdict.className).toBe('jp-gradmagic-verdict jp-gradmagic-surrogate');
    expect(report.surrogate!.reason).toContain('round');
    expect(view.querySelector('.jp-gradmagic-header .jp-gradmagic-surrogate-line')!.textContent).toBe(
      `Declared surrogate gradient (straight-through estimator): ${report.surrogate!.reason}.`
    );
    const codes = report.problems.map(problem => `${problem.severity} ${problem.code}`);
    expect(codes).toEqual(['info surrogate-differs']);
  });

  test('has a Sweep section between Finite differences and the gradient graph, as the HTML fallback', () => {
    const titles = Array.from(view.querySelectorAll('.jp-gradmagic-section > summary')).map(title => title.textContent);
    expect(titles).toEqual(['Problems (1)', 'Shapes', 'Finite differences', 'Sweep', 'Gradient graph']);
    const [i] = report.sweep!.index;
    expect(view.querySelector('.jp-gradmagic-sweep-section .jp-gradmagic-muted')!.textContent).toBe(
      `output[${i}] and its derivative along x[${i}] (the op is element-wise in it) from -2.5 to 2.5, 201 points; ` +
        'the other inputs at the example point.'
    );
    expect(chart.querySelector('.jp-gradmagic-sweep-title')!.textContent).toBe(
      `output[${i}] along x[${i}] (element-wise op), float32`
    );
  });

  test('plots the step-shaped round above, the box-shaped surrogate, the true derivative and autodiff below', () => {
    expect(levels(curve('output')).size).toBe(5); // round over [-2.5, 2.5]: -2, -1, 0, 1, 2
    const box = [...levels(curve('custom'))].sort((a, b) => a - b);
    expect(box.length).toBe(2); // 1 on [-1, 1], 0 outside
    expect(box[1] - box[0]).toBeGreaterThan(150); // most of the 220 units of the panel: not flattened
    const labels = ['numerical', 'custom', 'autodiff'].map(series => {
      expect(curve(series).getAttribute('d')).toMatch(/^M[\d.]+,[\d.]+L/);
      return curve(series).querySelector('title')!.textContent;
    });
    expect(labels).toEqual(['true derivative (finite differences)', 'surrogate (custom gradient)', 'autodiff']);
    const legend = Array.from(view.querySelectorAll('.jp-gradmagic-sweep-key')).map(key => key.textContent);
    expect(legend).toEqual([...labels, 'true derivative at a jump (off scale)']);
  });

  test('leaves the finite differences at round\'s jumps out of the curve and the scale, marked on the top edge', () => {
    const sweep = report.sweep!;
    const points = sweep.points.map(toNumber);
    const marked = jumps(points, sweep.values.map(toNumber), sweep.numerical.map(toNumber));
    expect(points.filter((_, i) => marked[i])).toEqual([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]);
    expect(Math.min(...sweep.numerical.map(toNumber).filter((_, i) => marked[i]))).toBeGreaterThan(1000);
    expect(curve('numerical').getAttribute('d')!.match(/M/g)!.length).toBe(5); // four gaps, and both ends cut
    const markers = Array.from(chart.querySelectorAll('.jp-gradmagic-sweep-jump'));
    expect(markers.map(marker => marker.getAttribute('transform')!.split(' ')[1])).toEqual(
      Array(6).fill('160)') // the top edge of the derivatives' panel
    );
    // Drawn to scale, the 8e4 of a jump would flatten the surrogate's box to under a unit: the same sweep with
    // a forward that does not jump there (values following the finite differences) draws them to scale.
    const smooth = { ...sweep, values: sweep.values.map((_, i) => points[i] * 1e5) };
    expect(jumps(points, smooth.values.map(toNumber), smooth.numerical.map(toNumber)).some(Boolean)).toBe(false);
    const flattened = reportView({ ...report, sweep: smooth }).querySelector('path[data-series="custom"]')!;
    const heights = [...levels(flattened)];
    expect(Math.max(...heights) - Math.min(...heights)).toBeLessThan(1);
  });

  test('hovering shows the swept value, the output and the three derivatives at the nearest point', () => {
    const sweep = report.sweep!;
    const points = sweep.points.map(toNumber);
    const marked = jumps(points, sweep.values.map(toNumber), sweep.numerical.map(toNumber));
    const [i] = sweep.index;
    expect(sweepDetails(sweep, nearestPoint(points, 0.2), true, marked)).toEqual([
      `x[${i}] = 0.2`,
      `output[${i}] = 0`,
      'surrogate (custom gradient): 1',
      'true derivative (finite differences): 0',
      'autodiff: 0'
    ]);
    expect(sweepDetails(sweep, nearestPoint(points, 0.5), true, marked)[3]).toMatch(
      /^true derivative \(finite differences\): \d{4,} \(at a jump\)$/
    );
  });
});

test('an undeclared gradient reversal fails, and the header says it looks like an intended surrogate', () => {
  const report = fixtures.gradient_reversal;
  const view = reportView(report);
  expect(view.querySelector('.jp-gradmagic-verdict')!.textContent).toBe('fails');
  expect(view.querySelector('.jp-gradmagic-header .jp-gradmagic-surrogate-line')!.textContent).toBe(
    `Looks like an intended surrogate (gradient reversal): ${report.surrogate!.reason}. ` +
      'Declare it with --surrogate if so.'
  );
  expect(report.problems[0].code).toBe('fd-mismatch');
  const legend = Array.from(view.querySelectorAll('.jp-gradmagic-sweep-key')).map(key => key.textContent);
  expect(legend).toEqual(['finite differences', 'custom gradient', 'autodiff']);
});

test('a declared surrogate that matches the derivative has no pattern to name', () => {
  const report = { ...fixtures.log1pexp, surrogate: { declared: true, pattern: null, reason: null } };
  expect(reportView(report).querySelector('.jp-gradmagic-surrogate-line')!.textContent).toBe(
    'Declared surrogate gradient: its difference from the true derivative informs, it does not fail.'
  );
});

test('axis ticks are a few round numbers inside the range', () => {
  expect(niceTicks(-2.7, 2.4, 7)).toEqual([-2, -1, 0, 1, 2]);
  expect(niceTicks(-0.05, 1.05, 5)).toEqual([0, 0.25, 0.5, 0.75, 1]);
  expect(niceTicks(0.001, 0.0042, 4)).toEqual([0.001, 0.002, 0.003, 0.004]);
});
