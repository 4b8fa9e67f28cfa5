/**
 * The renderer on reports made by the real Python checker: tests/test_labextension.py writes them as JSON into
 * the folder GRADMAGIC_REPORT_FIXTURES names, then runs these tests, so the two sides cannot drift apart.
 */
import * as fs from 'fs';
import * as path from 'path';

import { edgeDetails, graphView, nodeDetails } from '../graphview';
import { BACKWARD_LANE, foldScopes, layout } from '../layout';
import { ReportRenderer, reportRendererFactory } from '../renderer';
import { VERDICT_WORDS, reportView } from '../reportview';
import { IReport, MIME_TYPE, formatShape, readReport } from '../schema';
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

test('the Python suite wrote the fixtures these tests expect', () => {
  expect(names.sort()).toEqual(['big_graph', 'hostile', 'keras_backends', 'log1pexp', 'projection', 'unreduced_bias']);
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
