/**
 * The view on reports made by the real Python checker: tests/test_labextension.py writes them as JSON into the
 * folder GRADMAGIC_REPORT_FIXTURES names, as the kernel sends them (their data and the words Python wrote for every
 * view), with what the Python figures draw of each, then runs these tests: the view shows Python's words where they
 * belong, and its figures draw what Python's draw. Reports saved by older versions are read from tests/saved_reports.
 */
import * as fs from 'fs';
import * as path from 'path';

import { TEMPLATE, isCustomGradientCell, loadsGradmagic } from '../cells';
import { OLDER_REPORT, formatNumber, formatShape, readReport, readWatchReport, toNumber } from '../data';
import { NO_LAYOUT, edgeDetails, edgePath, foldedGraph, graphView, nodeDetails, placeOf } from '../graphview';
import { cellDetails, errorColour, heatmapBlocks, valueColour } from '../heatmapview';
import { ILive, ViewState } from '../live';
import { ReportRenderer, liveModelId, reportRendererFactory } from '../renderer';
import { HEADLINE_INFOS, reportView } from '../reportview';
import { IGraph, IReport, IReportWords, IWatchReport, MIME_TYPE, NodeRole, WATCH_MIME_TYPE } from '../schema';
import { jumps, nearestPoint, niceTicks, nonFiniteRuns, sweepDetails } from '../sweepview';
import stub, { VIEW_KEY, drawReport as stubRender, viewRegistry } from '../stub';
import * as stubModule from '../stub';
import { watchView } from '../watchview';
import { IWidgetModel, REPORT_EVENT, render } from '../widget';

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
/** What the Python figures draw of each fixture (tests/test_labextension.py): the view's figures must draw alike. */
const python: Record<
  string,
  {
    labels?: [number, number, string][];
    heatmaps: [string, string][];
    jumps: number[] | null;
    drawn: { nodes: [string, string, number][]; edges: [string, string, boolean][] } | null;
  }
> = JSON.parse(fs.readFileSync(path.join(folder, 'python-figures.txt'), 'utf8'));
/** Reports saved by older versions of gradmagic, as their notebooks keep them. */
const SAVED = path.join(__dirname, '..', '..', '..', 'tests', 'saved_reports');
const saved = (name: string): unknown => JSON.parse(fs.readFileSync(path.join(SAVED, name), 'utf8'));
const BACKWARD_LANE: NodeRole[] = ['upstream', 'backward', 'downstream'];

/** The words Python wrote for `report` (every fixture has them). */
function wordsOf(report: IReport): IReportWords {
  expect(report.words).toBeDefined();
  return report.words!;
}

/** The text of each cell of each body row of the table `selector` in `view`. */
function rowsOf(view: Element, selector: string): string[][] {
  return Array.from(view.querySelectorAll(`${selector} tbody tr`)).map(row =>
    Array.from((row as HTMLTableRowElement).cells).map(cell => cell.textContent ?? '')
  );
}

/** The report's view with its (lazily drawn) gradient graph section opened, as a user opens it. */
function withGraph(report: IReport): HTMLElement {
  const view = reportView(report);
  const section = view.querySelector('.jp-gradmagic-graph-section') as HTMLDetailsElement;
  section.open = true;
  section.dispatchEvent(new Event('toggle'));
  return view;
}

/** The centre of each drawn node's box, in SVG pixels, by node id. */
function drawnCentres(view: Element): Map<string, { x: number; y: number }> {
  const centres = new Map<string, { x: number; y: number }>();
  for (const group of Array.from(view.querySelectorAll('.jp-gradmagic-node')) as SVGGElement[]) {
    const rect = group.querySelector('rect')!;
    const at = (name: string): number => Number(rect.getAttribute(name));
    centres.set(group.dataset.id!, { x: at('x') + at('width') / 2, y: at('y') + at('height') / 2 });
  }
  return centres;
}

test('the Python suite wrote the fixtures these tests expect', () => {
  expect(names.sort()).toEqual([
    'big_graph',
    'gradient_reversal',
    'hostile',
    'keras_backends',
    'log1pexp',
    'projection',
    'scaled_square',
    'scoped_graph',
    'straight_through',
    'unreduced_bias'
  ]);
});

test('a Keras report names each backend in its headline, never a bare verdict over backends not all passing', () => {
  const report = fixtures.keras_backends;
  const view = reportView(report);
  expect(view.querySelector('.jp-gradmagic-headline')!.textContent).toBe('fails on PyTorch; passes on TensorFlow, JAX');
  const rows = Array.from(view.querySelectorAll('.jp-gradmagic-backends-table tbody tr')) as HTMLTableRowElement[];
  expect(rows.map(row => row.dataset.backend)).toEqual(['tensorflow', 'jax', 'torch']);
  const cells = rowsOf(view, '.jp-gradmagic-backends-table');
  expect(cells[0].slice(0, 3)).toEqual(['TensorFlow (this kernel)', 'passes', 'no problem']);
  expect(cells[2].slice(0, 3)).toEqual(['PyTorch', 'fails', 'backend-signature']);
  expect(rows[2].cells[1].className).toBe('jp-gradmagic-fail');
  const first = view.querySelector('.jp-gradmagic-problems .jp-gradmagic-problem')!;
  expect(first.querySelector('.jp-gradmagic-code')!.textContent).toBe('backend-fails');
  expect(first.querySelector('.jp-gradmagic-message')!.textContent).toContain('def grad(*args, upstream=None):');
});

describe.each(names)('report %s', name => {
  const report = fixtures[name];
  const said = python[name];

  test('is readable with this schema version', () => {
    expect(readReport(report)).toBe(report);
  });

  test('shows the words Python wrote, each where it belongs: the head, the places, the summaries', () => {
    const words = wordsOf(report);
    const view = withGraph(report);
    const text = (selector: string): string | null => view.querySelector(selector)?.textContent ?? null;
    expect(text('.jp-gradmagic-badge')).toBe(words.verdict);
    expect(text('.jp-gradmagic-headline')).toBe(report.backends?.length ? words.headline : null);
    expect(text('.jp-gradmagic-figures')).toBe(words.figures);
    expect(text(':scope > .jp-gradmagic-surrogate-line')).toBe(words.surrogate);
    const places = Array.from(view.querySelectorAll('.jp-gradmagic-problem')).map(
      item => item.querySelector('.jp-gradmagic-where')?.textContent ?? ''
    );
    const listed = [...report.problems.keys()].filter(k => report.problems[k].severity !== 'info');
    // The info said under the verdict (words.fixes) is not repeated among the notes.
    const headline = (k: number) => Boolean(words.fixes) && HEADLINE_INFOS.includes(report.problems[k].code);
    const noted = [...report.problems.keys()].filter(k => report.problems[k].severity === 'info' && !headline(k));
    expect(places).toEqual([...listed, ...noted].map(k => words.places[k]));
    expect(text(':scope > .jp-gradmagic-checked')).toBe(words.checked_at ?? null);
    expect(text(':scope > .jp-gradmagic-fixes')).toBe(words.fixes ?? null);
    expect(text('.jp-gradmagic-numerics > .jp-gradmagic-muted')).toBe(words.numerics);
    expect(text('.jp-gradmagic-kinks')).toBe(words.kinks);
    expect(text('.jp-gradmagic-sweep-section > .jp-gradmagic-muted')).toBe(words.sweep ?? words.no_sweep);
    expect(text('.jp-gradmagic-graph-summary')).toBe(words.graph);
    expect(text('.jp-gradmagic-graph-section .jp-gradmagic-why')).toBe(words.no_graph);
    expect(text('.jp-gradmagic-timings')).toBe(words.timings);
  });

  test("shows Python's tables as Python wrote them: the elements, the shapes, the backends", () => {
    const words = wordsOf(report);
    const view = reportView(report);
    expect(rowsOf(view, '.jp-gradmagic-worst-table')).toEqual(words.worst.map(row => row.cells));
    const marked = Array.from(view.querySelectorAll('.jp-gradmagic-worst-table tbody tr')).map(row =>
      row.classList.contains('jp-gradmagic-mismatch')
    );
    expect(marked).toEqual(words.worst.map(row => row.beyond));
    expect(view.querySelector('.jp-gradmagic-subtitle')?.textContent ?? '').toBe(
      words.worst.length ? words.worst_title : ''
    );
    expect(rowsOf(view, '.jp-gradmagic-shapes-table')).toEqual(words.shapes);
    expect(rowsOf(view, '.jp-gradmagic-backends-table')).toEqual(words.backends);
  });

  test('says nothing of its own where Python wrote the words: changed words show changed', () => {
    const words = wordsOf(report);
    const changed = Object.fromEntries(
      Object.entries(words).map(([key, value]) => [key, typeof value === 'string' ? `«${value}»` : value])
    ) as unknown as IReportWords;
    const view = reportView({ ...report, words: changed });
    expect(view.querySelector('.jp-gradmagic-badge')!.textContent).toBe(`«${words.verdict}»`);
    expect(view.querySelector('.jp-gradmagic-figures')!.textContent).toBe(`«${words.figures}»`);
    expect(view.querySelector('.jp-gradmagic-numerics > .jp-gradmagic-muted')!.textContent).toBe(`«${words.numerics}»`);
  });

  test('draws the heatmaps of the blocks the Python figures draw', () => {
    expect(heatmapBlocks(report.numerics).map(b => [b.input, b.output])).toEqual(said.heatmaps);
  });

  test('counts in good English: one element, one backward op, never "1 elements" or "1 backward ops"', () => {
    const view = withGraph(report);
    view.querySelectorAll('details').forEach(details => ((details as HTMLDetailsElement).open = true));
    const words = view.textContent!;
    expect(words).not.toMatch(/(^|[^\d.,])1 (element|op|call|point|direction|error|warning|tensor|entr(y|ie))s\b/);
    expect(words).not.toMatch(/(^|[^\d.,])1 (forward|backward|random|saved|gradient) [a-z]+s\b/);
  });

  test('shows its verdict and key figures in one line, then each error and warning once', () => {
    const view = reportView(report);
    const head = view.querySelector('.jp-gradmagic-head')!;
    expect(head.querySelector('.jp-gradmagic-badge')!.textContent).toBe(wordsOf(report).verdict);
    expect(head.querySelector('.jp-gradmagic-signature')!.textContent).toBe(report.op.name + report.op.signature);
    expect(head.querySelector('.jp-gradmagic-figures')!.textContent).toBe(wordsOf(report).figures);
    const listed = Array.from(view.querySelectorAll(':scope > .jp-gradmagic-problems > .jp-gradmagic-problem'));
    const shown = report.problems.filter(problem => problem.severity !== 'info');
    expect(listed.map(item => (item as HTMLElement).dataset.code)).toEqual(shown.map(problem => problem.code));
    const notes = Array.from(view.querySelectorAll('.jp-gradmagic-notes-list .jp-gradmagic-problem'));
    const fixes = wordsOf(report).fixes;
    const headline = report.problems.filter(problem => Boolean(fixes) && HEADLINE_INFOS.includes(problem.code));
    expect(notes.length).toBe(report.problems.length - shown.length - headline.length);
    const everywhere = Array.from(view.querySelectorAll('.jp-gradmagic-problem')).map(
      p => (p as HTMLElement).dataset.code
    );
    expect(everywhere.length).toBe(report.problems.length - headline.length); // each problem once (or said above)
  });

  test('folds the details of a passing op and opens the evidence of a failing one', () => {
    const view = reportView(report);
    const details = view.querySelector(':scope > .jp-gradmagic-details') as HTMLDetailsElement | null;
    const passing = report.verdict === 'pass' || report.verdict === 'surrogate';
    expect(details !== null).toBe(passing);
    if (details) {
      expect(details.open).toBe(false);
    }
    const numerics = view.querySelector('.jp-gradmagic-numerics') as HTMLDetailsElement;
    expect(numerics.open).toBe(report.problems.some(problem => problem.code === 'fd-mismatch'));
  });

  test('has one shapes row per tensor, a mismatch marked', () => {
    const view = reportView(report);
    const rows = view.querySelectorAll('.jp-gradmagic-shapes-table tbody tr');
    expect(rows.length).toBe(report.tensors.length);
    report.tensors.forEach((tensor, i) => {
      const cells = Array.from(rows[i].querySelectorAll('td')).map(cell => cell.textContent);
      expect(cells.slice(0, 2)).toEqual([tensor.role, tensor.name]);
      expect(rows[i].classList.contains('jp-gradmagic-mismatch')).toBe(!tensor.matches);
    });
  });

  test('says what Python says of a surrogate gradient, and draws its sweep, when it has them', () => {
    const view = reportView(report);
    expect(view.querySelector('.jp-gradmagic-surrogate-line')?.textContent ?? null).toBe(wordsOf(report).surrogate);
    expect(wordsOf(report).surrogate === null).toBe(!report.surrogate);
    expect(view.querySelector('.jp-gradmagic-sweep-section .jp-gradmagic-sweep-svg') === null).toBe(!report.sweep);
    const why = view.querySelector('.jp-gradmagic-sweep-section .jp-gradmagic-why');
    expect(why?.textContent ?? null).toBe(wordsOf(report).no_sweep);
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

  test('draws the nodes and edges the Python drawing draws, name scopes folded, saved tensors marked', () => {
    const view = withGraph(report);
    const drawn = view.querySelector('.jp-gradmagic-graph') as HTMLElement | null;
    if (!report.graph) {
      expect(drawn).toBeNull();
      expect(python[name].drawn).toBeNull();
      expect(view.querySelector('.jp-gradmagic-graph-section .jp-gradmagic-why')!.textContent).toBe(
        wordsOf(report).no_graph
      );
      return;
    }
    const { nodes, edges } = python[name].drawn!;
    expect(Number(drawn!.dataset.nodeCount)).toBe(nodes.length);
    const groups = Array.from(view.querySelectorAll('.jp-gradmagic-node')) as SVGGElement[];
    expect(groups.map(group => group.dataset.id)).toEqual(nodes.map(([id]) => id));
    const titles = groups.map(group => group.querySelector('text')!.textContent);
    expect(titles).toEqual(nodes.map(([, label, count]) => label + (count > 1 ? ` (${count} ops)` : '')));
    const lines = Array.from(view.querySelectorAll('.jp-gradmagic-edge')) as SVGGElement[];
    const sorted = (list: unknown[][]): string[] => list.map(edge => JSON.stringify(edge)).sort();
    const saved = (line: SVGGElement): boolean => line.classList.contains('jp-gradmagic-saved');
    expect(sorted(lines.map(line => [line.dataset.source, line.dataset.target, saved(line)]))).toEqual(sorted(edges));
    const folded = foldedGraph(report.graph, report.graph.layout!.scopes);
    expect(folded.nodes.map(node => node.id)).toEqual(nodes.map(([id]) => id));
    expect(folded.edges.map(edge => [edge.source, edge.target, edge.saved])).toEqual(edges);
  });

  test("puts each saved tensor's size label where the Python drawing puts it (clear of other edges and nodes)", () => {
    if (!report.graph?.layout) {
      return;
    }
    const labels = Array.from(withGraph(report).querySelectorAll('.jp-gradmagic-edge-label')).map(text => [
      Number(text.getAttribute('x')),
      Number(text.getAttribute('y')),
      text.textContent
    ]);
    expect(labels.map(label => label[2])).toEqual((said.labels ?? []).map(label => label[2]));
    labels.forEach((label, k) => {
      expect(label[0] as number).toBeCloseTo(said.labels![k][0], 0);
      expect(label[1] as number).toBeCloseTo(said.labels![k][1], 0);
    });
  });

  test('places every node where the Python layout says, the forward lane above the backward lane', () => {
    if (!report.graph) {
      return;
    }
    const positions = report.graph.layout!.positions;
    const centres = drawnCentres(withGraph(report));
    expect([...centres.keys()].sort()).toEqual(Object.keys(positions).sort());
    for (const [id, centre] of centres) {
      const expected = placeOf(positions[id]);
      expect(centre.x).toBeCloseTo(expected.x, 6);
      expect(centre.y).toBeCloseTo(expected.y, 6);
    }
    // One scale for each axis: x grows with the layer, y with the row.
    const ids = Object.keys(positions);
    for (const [axis, pixel] of [
      [0, 'x'],
      [1, 'y']
    ] as const) {
      const [low, high] = [Math.min, Math.max].map(extreme => extreme(...ids.map(id => positions[id][axis])));
      const [left, right] = [Math.min, Math.max].map(extreme => extreme(...ids.map(id => centres.get(id)![pixel])));
      const scale = high > low ? (right - left) / (high - low) : 0;
      expect(high === low || scale > 10).toBe(true);
      for (const id of ids) {
        expect(centres.get(id)![pixel] - left).toBeCloseTo((positions[id][axis] - low) * scale, 6);
      }
    }
    const roles = new Map(foldedGraph(report.graph, report.graph.layout!.scopes).nodes.map(n => [n.id, n.role]));
    const rows = (backward: boolean): number[] =>
      ids.filter(id => BACKWARD_LANE.includes(roles.get(id)!) === backward).map(id => centres.get(id)!.y);
    expect(Math.max(...rows(false))).toBeLessThan(Math.min(...rows(true)));
    expect(new Set([...centres.values()].map(c => `${c.x},${c.y}`)).size).toBe(ids.length);
  });
});

test('each gradient is drawn under its tensor, as in the Python drawing', () => {
  const graph = fixtures.log1pexp.graph!;
  const centres = drawnCentres(graphView(graph));
  const byLabel = (label: string) => centres.get(graph.nodes.find(node => node.label === label)!.id)!;
  expect(byLabel('dx').x).toBe(byLabel('x').x);
  expect(byLabel('doutput').x).toBe(byLabel('output').x);
  expect(byLabel('dx').y).toBeGreaterThan(byLabel('x').y);
  expect(byLabel('x').x).toBeLessThan(byLabel('output').x);
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

test('a graph of more than 200 nodes is drawn with the name scopes the Python layout folded', () => {
  const graph = fixtures.scoped_graph.graph!;
  const scopes = graph.layout!.scopes;
  expect(graph.nodes.length).toBeGreaterThan(200);
  expect(scopes.length).toBe(80);
  const view = graphView(graph);
  const drawn = graph.nodes.length - scopes.reduce((sum, scope) => sum + scope.members.length - 1, 0);
  expect(Number(view.dataset.nodeCount)).toBe(drawn);
  expect(view.querySelector('.jp-gradmagic-muted')!.textContent).toBe(
    `${graph.nodes.length} nodes: name scopes folded into ${drawn}.`
  );
  const scope = view.querySelector('.jp-gradmagic-node[data-id="backward/block_7"]') as SVGGElement;
  expect(scope.dataset.role).toBe('backward');
  expect(scope.querySelector('text')!.textContent).toBe('block_7 (3 ops)');
  const first = graph.nodes.find(node => node.id === scopes.find(s => s.id === 'backward/block_7')!.members[0])!;
  expect(nodeDetails(foldedGraph(graph, scopes).nodes.find(node => node.id === 'backward/block_7')!)).toEqual([
    'block_7 (scope)',
    'role: backward',
    '3 ops folded into this scope',
    `shape: ${formatShape(first.shapes[0])}`,
    `dtype: ${first.dtypes[0]}`,
    `cell line ${first.line}`
  ]);
  expect(view.querySelector('.jp-gradmagic-edge.jp-gradmagic-saved[data-source="forward/block_7"]')).not.toBeNull();
});

test('a graph from a report saved before schema 1.5 (no layout) shows a one-line note instead', () => {
  const { layout, ...graph } = fixtures.log1pexp.graph!;
  expect(layout).toBeTruthy();
  const older: IReport = { ...fixtures.log1pexp, version: '1.4', graph: graph as IGraph };
  expect(readReport(older)).toBe(older);
  const view = withGraph(older);
  expect(view.querySelector('.jp-gradmagic-graph')).toBeNull();
  expect(view.querySelector('.jp-gradmagic-graph-note')!.textContent).toBe(NO_LAYOUT);
  expect(NO_LAYOUT).toContain('re-run the cell');
  expect(graphView({ ...graph, layout: null }).textContent).toBe(NO_LAYOUT);
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
  expect(renderer.node.querySelector('.jp-gradmagic-badge')).toBeNull();
});

test('the renderer outranks the text/html fallback, and in notebooks the widget view too', () => {
  // Which of the two shows in a notebook (live widget, or the report from data) is tested in a real
  // JupyterLab: tests/test_browser.py.
  expect(reportRendererFactory().defaultRank).toBeLessThan(50);
  const notebook = reportRendererFactory({
    kernel: () => null,
    createWidgetRenderer: () => new ReportRenderer({} as any)
  });
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
  return new Set(
    path
      .getAttribute('d')!
      .match(/[ML][^ML]+/g)!
      .map(point => Number(point.split(',')[1]))
  );
}

describe('a declared straight-through estimator (round forward, gradient passed where |x| <= 1)', () => {
  const report = fixtures.straight_through;
  const view = reportView(report);
  const chart = view.querySelector('.jp-gradmagic-sweep-section .jp-gradmagic-sweep-svg')!;
  const curve = (series: string): Element => chart.querySelector(`path[data-series="${series}"]`)!;

  test('reads "surrogate gradient (declared)" in the surrogate colour, and says which surrogate it is', () => {
    expect(report.verdict).toBe('surrogate');
    const badge = view.querySelector('.jp-gradmagic-badge')!;
    expect(badge.textContent).toBe('surrogate gradient (declared)');
    expect(badge.className).toBe('jp-gradmagic-badge jp-gradmagic-surrogate');
    expect(report.surrogate!.reason).toContain('round');
    expect(view.querySelector(':scope > .jp-gradmagic-surrogate-line')!.textContent).toBe(
      `Declared surrogate gradient (straight-through estimator): ${report.surrogate!.reason}.`
    );
    const codes = report.problems.map(problem => `${problem.severity} ${problem.code}`);
    expect(codes).toEqual(['info surrogate-differs']);
  });

  test('folds its sections under Details in the order of the HTML fallback: the sweep before the graph', () => {
    const titles = Array.from(view.querySelectorAll('.jp-gradmagic-section > summary')).map(title => title.textContent);
    expect(titles).toEqual([
      'Details',
      'Finite differences',
      'Jacobians',
      'Shapes',
      'Sweep',
      'Gradient graph',
      'Notes (1)'
    ]);
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

  test("leaves the finite differences at round's jumps out of the curve and the scale, marked on the top edge", () => {
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
  expect(view.querySelector('.jp-gradmagic-badge')!.textContent).toBe('fails');
  expect(view.querySelector(':scope > .jp-gradmagic-surrogate-line')!.textContent).toBe(
    `Looks like an intended surrogate (gradient reversal): ${report.surrogate!.reason}. ` +
      'Declare it with --surrogate if so.'
  );
  expect(report.problems[0].code).toBe('fd-mismatch');
  const legend = Array.from(view.querySelectorAll('.jp-gradmagic-sweep-key')).map(key => key.textContent);
  expect(legend).toEqual(['finite differences', 'custom gradient', 'autodiff']);
});

test("the figures' numbers read as Python's figures write them", () => {
  const written = JSON.parse(fs.readFileSync(path.join(folder, 'python-numbers.txt'), 'utf8'));
  const numbers: number[] = written.numbers;
  expect(numbers.map(n => [4, 5, 6, 7, 8, 9, 10].map(d => formatNumber(n, d)))).toEqual(written.formatted);
});

test('axis ticks are a few round numbers inside the range', () => {
  expect(niceTicks(-2.7, 2.4, 7)).toEqual([-2, -1, 0, 1, 2]);
  expect(niceTicks(-0.05, 1.05, 5)).toEqual([0, 0.25, 0.5, 0.75, 1]);
  expect(niceTicks(0.001, 0.0042, 4)).toEqual([0.001, 0.002, 0.003, 0.004]);
});

describe('Jacobian heatmaps where they help', () => {
  const report = fixtures.scaled_square;

  test('draw a 4 x 4 block with its error: red where beyond the tolerance, grey within it whatever its size', () => {
    const blocks = heatmapBlocks(report.numerics);
    expect(blocks.map(block => block.shape)).toEqual([[4, 4]]);
    const view = reportView(report);
    const section = view.querySelector('.jp-gradmagic-jacobians') as HTMLDetailsElement;
    expect(section.open).toBe(true); // failing: open
    const matrices = Array.from(section.querySelectorAll('.jp-gradmagic-heatmap')).map(
      group => (group as SVGGElement).dataset.matrix
    );
    expect(matrices).toEqual(['custom gradient', 'finite differences', 'autodiff', 'error ÷ tolerance']);
    const errors = Array.from(section.querySelectorAll('.jp-gradmagic-heatmap-error rect')).map(rect =>
      rect.getAttribute('fill')
    );
    const diagonal = [0, 5, 10, 15];
    expect(errors.filter((_, k) => diagonal.includes(k)).every(fill => fill !== '#eef0f2')).toBe(true);
    expect(errors.filter((_, k) => !diagonal.includes(k)).every(fill => fill === '#eef0f2')).toBe(true);
    const legend = Array.from(section.querySelectorAll('.jp-gradmagic-key-entry')).map(entry => entry.textContent);
    expect(legend).toContain('NaN or inf');
    expect(legend).toContain('error within tolerance');
  });

  test('colour noise within the tolerance like an exact match, and NaN as a hatch', () => {
    expect(errorColour(2e-12)).toBe(errorColour(0.9));
    expect(errorColour(1.5)).not.toBe(errorColour(0.9));
    expect(errorColour(-1)).toBeNull(); // not judged: dotted
    expect(valueColour(NaN, 1)).toBeNull(); // hatched
    expect(valueColour(0, 1)).toBe('rgb(255,255,255)');
    const block = report.numerics.jacobians[0];
    expect(cellDetails(block, 1, 1).split('\n')).toEqual([
      'd output[1] / d x[1]',
      'custom 4.2',
      'finite differences 4',
      'autodiff 4',
      expect.stringMatching(/^error \d+ of tolerance$/)
    ]);
  });

  test('are left out for the small blocks of a passing op', () => {
    expect(heatmapBlocks(fixtures.log1pexp.numerics)).toEqual([]);
    expect(reportView(fixtures.log1pexp).querySelector('.jp-gradmagic-heatmaps')).toBeNull();
  });
});

test('non-finite stretches of a sweep are bands named in the legend', () => {
  expect(nonFiniteRuns([1, NaN, NaN, 2, Infinity, 3])).toEqual([
    [1, 2],
    [4, 4]
  ]);
  const view = reportView(fixtures.log1pexp); // autodiff overflows in float32 towards x = 100
  const bands = view.querySelectorAll('.jp-gradmagic-sweep-svg .jp-gradmagic-sweep-nonfinite');
  expect(bands.length).toBeGreaterThan(0);
  const legend = Array.from(view.querySelectorAll('.jp-gradmagic-sweep-key')).map(key => key.textContent);
  expect(legend.some(label => label!.endsWith('NaN/inf'))).toBe(true);
});

test('an edge with bend points is drawn through them, rounded, from box to box', () => {
  const { d } = edgePath(
    [
      { x: 0, y: 0 },
      { x: 75, y: 27 },
      { x: 375, y: 27 },
      { x: 450, y: 0 }
    ],
    40,
    40
  );
  expect(d.startsWith('M')).toBe(true);
  expect(d.match(/Q/g)!.length).toBe(2);
  const routes = fixtures.log1pexp.graph!.layout!.routes ?? [];
  const view = graphView(fixtures.log1pexp.graph!);
  expect(reportView(fixtures.log1pexp).querySelector('.jp-gradmagic-graph')).toBeNull(); // drawn when opened
  for (const route of routes) {
    const edge = view.querySelector(
      `.jp-gradmagic-edge[data-source="${route.source}"][data-target="${route.target}"]`
    )!;
    expect(edge.querySelector('.jp-gradmagic-stroke')!.getAttribute('d')).toContain('Q');
  }
});

/** A live report over plain data, recording what the view asks the kernel. */
function liveReport(overrides: Partial<ILive> = {}): { live: ILive; asked: unknown[] } {
  const asked: unknown[] = [];
  const live: ILive = {
    controls: {
      inputs: 'x=tf.constant([1., 2.])',
      eps: '',
      rtol: '',
      atol: '',
      sweepFrom: '',
      sweepTo: '',
      available: true,
      reason: ''
    },
    status: { running: false, fraction: 0, message: '', error: false },
    recheck: request => asked.push({ recheck: request }),
    sweep: request => asked.push({ sweep: request }),
    ...overrides
  };
  return { live, asked };
}

describe('the live view', () => {
  test('re-checks at the inputs and options typed, on the button or Enter', () => {
    const { live, asked } = liveReport();
    const view = reportView(fixtures.log1pexp, 'report', live, new ViewState());
    const field = (name: string): HTMLInputElement => view.querySelector(`input[name="${name}"]`)!;
    expect(field('inputs').value).toBe('x=tf.constant([1., 2.])');
    field('inputs').value = 'x=tf.constant([-1., 2.])';
    field('rtol').value = '1e-3';
    (view.querySelector('.jp-gradmagic-recheck') as HTMLButtonElement).click();
    expect(asked).toEqual([{ recheck: { inputs: 'x=tf.constant([-1., 2.])', eps: '', rtol: '1e-3', atol: '' } }]);
    field('eps').dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter' }));
    expect(asked.length).toBe(2);
  });

  test('sweeps the element shown, over the range typed', () => {
    const { live, asked } = liveReport();
    const report = fixtures.straight_through;
    const view = reportView(report, 'report', live, new ViewState());
    (view.querySelector('input[name="sweep-from"]') as HTMLInputElement).value = '-3';
    (view.querySelector('input[name="sweep-to"]') as HTMLInputElement).value = '3';
    (view.querySelector('.jp-gradmagic-sweep-button') as HTMLButtonElement).click();
    expect(asked).toEqual([
      { sweep: { from: '-3', to: '3', element: { input: report.sweep!.input, index: report.sweep!.index } } }
    ]);
    const unswept = reportView(fixtures.scaled_square, 'report', live, new ViewState());
    expect(unswept.querySelector('.jp-gradmagic-sweep-section .jp-gradmagic-why')!.textContent).toBe(
      wordsOf(fixtures.scaled_square).no_sweep_live
    );
    expect(unswept.querySelector('.jp-gradmagic-sweep-button')!.textContent).toBe('Sweep');
  });

  test('shows the kernel at work, its controls off meanwhile, and the outcome or the error after', () => {
    const running = liveReport({
      status: { running: true, fraction: 0.45, message: 'finite differences', error: false }
    });
    const view = reportView(fixtures.log1pexp, 'report', running.live);
    expect((view.querySelector('.jp-gradmagic-status progress') as HTMLProgressElement).value).toBeCloseTo(0.45);
    expect(view.querySelector('.jp-gradmagic-status')!.textContent).toBe('finite differences');
    expect((view.querySelector('.jp-gradmagic-recheck') as HTMLButtonElement).disabled).toBe(true);
    const failed = liveReport({
      status: { running: false, fraction: 0, message: 'Not re-checked: NameError', error: true }
    });
    const status = reportView(fixtures.log1pexp, 'report', failed.live).querySelector('.jp-gradmagic-status')!;
    expect(status.classList.contains('jp-gradmagic-error')).toBe(true);
    expect(status.textContent).toBe('Not re-checked: NameError');
  });

  test('says why its controls are off when the kernel lost the op', () => {
    const { live } = liveReport();
    live.controls = {
      ...live.controls,
      available: false,
      reason: 'This report has no op to re-check: run its cell again.'
    };
    const view = reportView(fixtures.log1pexp, 'report', live);
    expect((view.querySelector('.jp-gradmagic-recheck') as HTMLButtonElement).disabled).toBe(true);
    expect(view.querySelector('.jp-gradmagic-status')!.textContent).toContain('run its cell again');
  });

  test('keeps what the user opened and typed across a redraw', () => {
    const { live } = liveReport();
    const state = new ViewState();
    const first = reportView(fixtures.scaled_square, 'report', live, state);
    const shapes = first.querySelector('.jp-gradmagic-shapes') as HTMLDetailsElement;
    shapes.open = !shapes.open;
    shapes.dispatchEvent(new Event('toggle'));
    const inputs = first.querySelector('input[name="inputs"]') as HTMLInputElement;
    inputs.value = 'x=tf.ones([4])';
    inputs.dispatchEvent(new Event('input'));
    const again = reportView(fixtures.scaled_square, 'report', live, state);
    expect((again.querySelector('.jp-gradmagic-shapes') as HTMLDetailsElement).open).toBe(shapes.open);
    expect((again.querySelector('input[name="inputs"]') as HTMLInputElement).value).toBe('x=tf.ones([4])');
  });
});

/** anywidget's model API over plain values: the view's side of the widget, without a kernel. */
class FakeModel implements IWidgetModel {
  readonly sent: Record<string, unknown>[] = [];
  private readonly listeners = new Map<string, Set<(content: unknown) => void>>();
  constructor(private readonly values: Record<string, unknown>) {}
  get(name: string): unknown {
    return this.values[name];
  }
  set(name: string, value: unknown): void {
    this.values[name] = value;
    this.listeners.get(`change:${name}`)?.forEach(callback => callback(undefined));
  }
  /** A custom message from the kernel. */
  receive(content: unknown): void {
    this.listeners.get('msg:custom')?.forEach(callback => callback(content));
  }
  on(event: string, callback: (content: unknown) => void): void {
    this.listeners.set(event, (this.listeners.get(event) ?? new Set()).add(callback));
  }
  off(event: string, callback: (content: unknown) => void): void {
    this.listeners.get(event)?.delete(callback);
  }
  send(content: Record<string, unknown>): void {
    this.sent.push(content);
  }
}

test('the widget view draws the model, sends requests, redraws and announces a re-checked report', () => {
  const { live } = liveReport();
  const model = new FakeModel({
    report: fixtures.log1pexp,
    view: 'report',
    controls: live.controls,
    status: live.status
  });
  const el = document.createElement('div');
  const announced: unknown[] = [];
  el.addEventListener(REPORT_EVENT, event => announced.push((event as CustomEvent).detail));
  const cleanup = render({ model, el });
  expect(el.querySelector('.jp-gradmagic-badge')!.textContent).toBe('passes with warnings');
  (el.querySelector('.jp-gradmagic-recheck') as HTMLButtonElement).click();
  expect(model.sent).toEqual([{ action: 'recheck', inputs: 'x=tf.constant([1., 2.])', eps: '', rtol: '', atol: '' }]);
  model.set('report', fixtures.scaled_square);
  expect(el.querySelector('.jp-gradmagic-badge')!.textContent).toBe('fails');
  const data = { [MIME_TYPE]: fixtures.scaled_square, 'text/html': '<div>new</div>', 'text/plain': 'new' };
  model.receive({ gradmagic: 'saved', data });
  expect(announced).toEqual([data]);
  cleanup();
  model.set('report', fixtures.log1pexp);
  expect(el.querySelector('.jp-gradmagic-badge')!.textContent).toBe('fails'); // no longer listening
});

test('the renderer finds the live widget in the output metadata and saves a re-checked report in the output', async () => {
  const metadata = { [MIME_TYPE]: { model_id: 'abc' } };
  expect(liveModelId({ data: {}, metadata } as any)).toBe('abc');
  expect(
    liveModelId({ data: { 'application/vnd.jupyter.widget-view+json': { model_id: 'def' } }, metadata: {} } as any)
  ).toBe('def');
  let saved: any = null;
  const widget = new ReportRenderer({} as any);
  const live = {
    kernel: () => ({ hasComm: (id: string) => id === 'abc' }) as any,
    createWidgetRenderer: () => widget
  };
  const renderer = new ReportRenderer({} as any, live);
  const output = {
    data: { [MIME_TYPE]: fixtures.log1pexp, 'text/html': 'old' },
    metadata,
    setData: (options: any) => (saved = options)
  };
  await renderer.renderModel(output as any);
  expect(renderer.widgets[0]).toBe(widget); // the live widget's renderer, given the model id
  renderer.node.firstElementChild!.dispatchEvent(
    new CustomEvent(REPORT_EVENT, {
      bubbles: true,
      detail: { [MIME_TYPE]: fixtures.scaled_square, 'text/html': 'new' }
    })
  );
  expect(saved.data[MIME_TYPE]).toBe(fixtures.scaled_square);
  expect(saved.data['text/html']).toBe('new');
  expect(saved.metadata).toBe(metadata);
});

describe('the stub each widget model carries instead of the view', () => {
  afterEach(() => delete viewRegistry()[VIEW_KEY]);

  test('gives anywidget its render through the default export only (a named `render` is deprecated)', () => {
    expect(stub.render).toBe(stubRender);
    expect(Object.keys(stubModule)).not.toContain('render');
  });

  test('draws with the view the JupyterLab extension registered, asking the kernel nothing', async () => {
    viewRegistry()[VIEW_KEY] = { render };
    const { live } = liveReport();
    const model = new FakeModel({ report: fixtures.scaled_square, view: 'report', controls: live.controls });
    const el = document.createElement('div');
    await stubRender({ model, el });
    expect(el.querySelector('.jp-gradmagic-badge')!.textContent).toBe('fails');
    expect(model.sent).toEqual([]);
  });

  test('elsewhere asks the kernel for the view once per page, and says so with the verdict meanwhile', () => {
    const model = new FakeModel({ report: fixtures.scaled_square });
    const other = new FakeModel({ report: fixtures.log1pexp });
    const el = document.createElement('div');
    void stubRender({ model, el });
    void stubRender({ model: other, el: document.createElement('div') });
    expect(model.sent).toEqual([{ action: 'view' }]);
    expect(other.sent).toEqual([]); // the page's one request serves every report
    expect(el.textContent).toContain('fails');
    expect(el.textContent).toContain('loading from the kernel');
  });
});

describe("a watch's report, drawn by the same view as every report", () => {
  const watch = JSON.parse(fs.readFileSync(path.join(folder, 'watch-report.txt'), 'utf8')) as IWatchReport;
  const words = watch.words!;

  test('shows the words Python wrote: summary, time, non-finite lines, rows, what each op received', () => {
    expect(readWatchReport(watch)).toBe(watch);
    const view = watchView(watch);
    expect(view.querySelector(':scope > .jp-gradmagic-head .jp-gradmagic-badge')!.textContent).toBe(words.verdict);
    expect(view.querySelector(':scope > .jp-gradmagic-head .jp-gradmagic-headline')!.textContent).toBe(words.summary);
    expect(view.querySelector('.jp-gradmagic-watch-time')!.textContent).toBe(words.timings);
    const lines = Array.from(view.querySelectorAll('.jp-gradmagic-watch-line')).map(line => line.textContent);
    expect(lines).toEqual(words.lines);
    expect(rowsOf(view, '.jp-gradmagic-watch-table').filter((_, k) => k % 2 === 0)).toEqual(words.rows);
    view.querySelectorAll('details.jp-gradmagic-watch-details').forEach((details, k) => {
      (details as HTMLDetailsElement).open = true;
      details.dispatchEvent(new Event('toggle'));
      expect(details.querySelector('.jp-gradmagic-watch-calls')!.textContent).toBe(words.calls[k].join('\n'));
      const places = Array.from(details.querySelectorAll(':scope > .jp-gradmagic-problems .jp-gradmagic-problem')).map(
        item => item.querySelector('.jp-gradmagic-where')?.textContent ?? ''
      );
      expect(places).toEqual(words.places[k]);
    });
    expect(words.places.flat().some(place => place.includes('line'))).toBe(true); // a finding names its line
  });

  test("shows a table of the ops, each op's own report one click away under its row", () => {
    const view = watchView(watch);
    expect(view.querySelector('.jp-gradmagic-badge')!.textContent).toBe('fails');
    const rows = Array.from(view.querySelectorAll('tr.jp-gradmagic-watch-row')) as HTMLElement[];
    expect(rows.map(row => row.dataset.op)).toEqual(['fine', 'doubled', 'row_norm']);
    const details = view.querySelector("details.jp-gradmagic-watch-details[data-op='doubled']") as HTMLDetailsElement;
    expect(details.querySelector('.jp-gradmagic-report')).toBeNull(); // drawn when first opened
    details.open = true;
    details.dispatchEvent(new Event('toggle'));
    const report = details.querySelector('.jp-gradmagic-report') as HTMLElement;
    expect(report.querySelector('.jp-gradmagic-badge')!.textContent).toBe('fails');
    expect(report.querySelector('.jp-gradmagic-problem')!.getAttribute('data-code')).toBe('fd-mismatch');
    expect(report.querySelector('.jp-gradmagic-figures')!.textContent).toBe(watch.watched[1].report.words!.figures);
  });

  test('the renderer draws a saved watch report, and the widget a live one, with that view', async () => {
    const renderer = new ReportRenderer({} as never);
    await renderer.renderModel({
      data: { [WATCH_MIME_TYPE]: watch },
      metadata: {},
      trusted: true,
      setData: () => undefined
    } as never);
    expect(renderer.node.querySelectorAll('tr.jp-gradmagic-watch-row').length).toBe(3);
    const el = document.createElement('div');
    render({ model: new FakeModel({ report: watch, view: 'watch' }), el });
    expect(el.querySelector('.jp-gradmagic-watch .jp-gradmagic-headline')!.textContent).toBe(words.summary);
    expect(reportRendererFactory().mimeTypes).toContain(WATCH_MIME_TYPE);
  });
});

describe('reports saved by an older gradmagic, without the words (opened without a kernel)', () => {
  test.each(['unreduced_bias-1.7.json', 'straight_through-1.7.json'])('%s shows its data and says so', name => {
    const report = readReport(saved(name)) as IReport;
    expect(report.version).toBe('1.7');
    expect(report.words).toBeUndefined();
    const view = withGraph(report);
    const badge = view.querySelector('.jp-gradmagic-badge')!;
    expect(badge.textContent).toBe(report.verdict); // shown in capitals, as every badge
    expect(badge.className).toBe(`jp-gradmagic-badge jp-gradmagic-${report.verdict}`);
    expect(view.querySelector('.jp-gradmagic-figures')!.textContent).toBe(OLDER_REPORT);
    const codes = Array.from(view.querySelectorAll('.jp-gradmagic-problem')).map(p => (p as HTMLElement).dataset.code);
    expect(codes.sort()).toEqual(report.problems.map(problem => problem.code).sort());
    expect(view.textContent).toContain(report.problems[0].message);
    expect(rowsOf(view, '.jp-gradmagic-shapes-table').map(row => row.slice(0, 2))).toEqual(
      report.tensors.map(tensor => [tensor.role, tensor.name])
    );
    expect(rowsOf(view, '.jp-gradmagic-shapes-table')[0][2]).toBe(
      `${report.tensors[0].dtype} ${formatShape(report.tensors[0].shape)}`
    );
    expect(view.querySelector('.jp-gradmagic-graph') !== null).toBe(!!report.graph?.layout);
    expect(view.querySelector('.jp-gradmagic-sweep-svg') !== null).toBe(!!report.sweep);
    expect(view.querySelectorAll('.jp-gradmagic-muted:empty').length).toBe(0); // no empty line where words lack
  });

  test("a watch report of schema 1.0 shows its table and each op's report", () => {
    const watch = readWatchReport(saved('watch-1.0.json')) as IWatchReport;
    expect(watch.words).toBeUndefined();
    const view = watchView(watch);
    expect(view.querySelector('.jp-gradmagic-badge')!.textContent).toBe('fail');
    expect(view.querySelector('.jp-gradmagic-headline')!.textContent).toBe(OLDER_REPORT);
    const rows = Array.from(view.querySelectorAll('tr.jp-gradmagic-watch-row')) as HTMLElement[];
    expect(rows.map(row => row.dataset.op)).toEqual(['fine', 'doubled', 'row_norm']);
    const details = view.querySelector("details.jp-gradmagic-watch-details[data-op='row_norm']") as HTMLDetailsElement;
    details.open = true;
    details.dispatchEvent(new Event('toggle'));
    expect(details.querySelector('.jp-gradmagic-report .jp-gradmagic-figures')!.textContent).toBe(OLDER_REPORT);
  });
});
