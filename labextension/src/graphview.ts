/**
 * The gradient graph drawn in SVG: two lanes (forward above, backward
 * below), saved tensors as red dashed edges labelled with their size, pan by
 * dragging, zoom with Ctrl/⌘ + wheel, a pinch or the buttons, and hover
 * details (op type, shape, dtype, bytes, cell line) for every node and edge.
 * Where each node goes, and which name scopes are folded, comes with the
 * report (`graph.layout`, computed by the Python checker in
 * `gradmagic/checking/graph_layout.py`, which the static drawing reads too).
 * Every string from the report goes in as text.
 */
import { element, svg, uniqueId } from './dom';
import { formatBytes, formatShape } from './data';
import { IGraph, IGraphEdge, IGraphNode, IGraphScope, NodeRole } from './schema';

/** Pixels per layout unit. */
const UNIT_X = 150;
const UNIT_Y = 54;
const BOX_HEIGHT = 34;
const CHAR_WIDTH = 6.4;
const MARGIN = 40;
const MIN_SCALE = 0.1;
const MAX_SCALE = 8;
/** The nodes' roles, in the legend's order: the forward lane's, then the backward lane's. */
const NODE_ROLES: readonly NodeRole[] = [
  'input',
  'variable',
  'forward',
  'output',
  'upstream',
  'backward',
  'downstream'
];

/** What shows in place of a graph without a layout. */
export const NO_LAYOUT =
  "This report was saved by an older gradmagic, without the graph's layout: re-run the cell to draw its " +
  'gradient graph.';

/** A point in the SVG, in pixels. */
export interface IPoint {
  x: number;
  y: number;
}

/** Where a node at `position` (the layout's units: layers and rows) sits in the SVG. */
export function placeOf(position: readonly [number, number]): IPoint {
  return { x: MARGIN + position[0] * UNIT_X, y: MARGIN + position[1] * UNIT_Y };
}

/**
 * The graph as drawn: each of `scopes` one node in place of its members (with their count of ops and the first
 * member's shapes, dtypes and line), edges between drawn nodes once.
 */
export function foldedGraph(graph: IGraph, scopes: IGraphScope[]): IGraph {
  if (!scopes.length) {
    return graph;
  }
  const foldedId = new Map<string, string>();
  for (const scope of scopes) {
    scope.members.forEach(member => foldedId.set(member, scope.id));
  }
  const byId = new Map(scopes.map(scope => [scope.id, scope]));
  const nodes = new Map<string, IGraphNode>();
  for (const node of graph.nodes) {
    const key = foldedId.get(node.id) ?? node.id;
    const scope = byId.get(key);
    if (!nodes.has(key)) {
      nodes.set(
        key,
        scope ? { ...node, id: key, op: 'scope', label: scope.label, role: scope.role, count: scope.count } : node
      );
    }
  }
  const edges = new Map<string, IGraphEdge>();
  for (const edge of graph.edges) {
    const source = foldedId.get(edge.source) ?? edge.source;
    const target = foldedId.get(edge.target) ?? edge.target;
    const key = `${source}\u0000${target}`;
    if (source !== target && !edges.has(key)) {
      edges.set(key, { ...edge, source, target });
    }
  }
  return { ...graph, nodes: [...nodes.values()], edges: [...edges.values()] };
}

/** The lines of a node's hover card. */
export function nodeDetails(node: IGraphNode): string[] {
  const lines = [node.op ? `${node.label} (${node.op})` : node.label, `role: ${node.role}`];
  if (node.count > 1) {
    lines.push(`${node.count} ops folded into this scope`);
  }
  if (node.shapes.length) {
    lines.push(`shape: ${node.shapes.map(formatShape).join(', ')}`);
  }
  if (node.dtypes.length) {
    lines.push(`dtype: ${node.dtypes.join(', ')}`);
  }
  if (node.line !== null) {
    lines.push(`cell line ${node.line}`);
  }
  return lines;
}

/** The lines of an edge's hover card. */
export function edgeDetails(edge: IGraphEdge, nodes: Map<string, IGraphNode>): string[] {
  const name = (id: string): string => nodes.get(id)?.label ?? id;
  const lines = [`${name(edge.source)} → ${name(edge.target)}`];
  if (edge.saved) {
    lines.push('saved: the backward keeps this forward tensor alive');
  }
  lines.push(`shape: ${formatShape(edge.shape)}`, `dtype: ${edge.dtype ?? '—'}`);
  if (edge.bytes !== null) {
    lines.push(`bytes: ${formatBytes(edge.bytes)} (${edge.bytes} B)`);
  }
  return lines;
}

function nodeText(node: IGraphNode): [string, string] {
  const title = node.label + (node.count > 1 ? ` (${node.count} ops)` : '');
  const detail = [node.shapes.length ? formatShape(node.shapes[0]) : '', node.line !== null ? `l.${node.line}` : '']
    .filter(Boolean)
    .join(' ');
  return [title, detail];
}

/** How far from a box's centre a ray along (ux, uy) leaves it. */
function boxExit(ux: number, uy: number, halfWidth: number): number {
  const alongX = ux ? halfWidth / Math.abs(ux) : Infinity;
  const alongY = uy ? BOX_HEIGHT / 2 / Math.abs(uy) : Infinity;
  return Math.min(alongX, alongY) + 2;
}

/**
 * An edge through `points` (its source's centre, the layout's bend points, its target's centre), as an SVG path:
 * from the source's box to the target's, rounded at the bends; and the middle of its longest segment (for a label).
 */
export function edgePath(
  points: IPoint[],
  sourceHalf: number,
  targetHalf: number
): { d: string; middle: IPoint; ends: IPoint[] } {
  const unit = (from: IPoint, to: IPoint): IPoint => {
    const length = Math.hypot(to.x - from.x, to.y - from.y) || 1;
    return { x: (to.x - from.x) / length, y: (to.y - from.y) / length };
  };
  const first = unit(points[0], points[1]);
  const last = unit(points[points.length - 2], points[points.length - 1]);
  const start = boxExit(first.x, first.y, sourceHalf);
  const end = boxExit(last.x, last.y, targetHalf);
  const ends = [...points];
  ends[0] = { x: points[0].x + first.x * start, y: points[0].y + first.y * start };
  const tip = points[points.length - 1];
  ends[ends.length - 1] = { x: tip.x - last.x * end, y: tip.y - last.y * end };
  let d = `M${ends[0].x.toFixed(1)},${ends[0].y.toFixed(1)}`;
  for (let i = 1; i < ends.length - 1; i++) {
    // A bend: straight to just before it, a quadratic curve round it.
    const before = unit(ends[i], ends[i - 1]);
    const after = unit(ends[i], ends[i + 1]);
    const radius = Math.min(
      14,
      Math.hypot(ends[i].x - ends[i - 1].x, ends[i].y - ends[i - 1].y) / 2,
      Math.hypot(ends[i + 1].x - ends[i].x, ends[i + 1].y - ends[i].y) / 2
    );
    d += ` L${(ends[i].x + before.x * radius).toFixed(1)},${(ends[i].y + before.y * radius).toFixed(1)}`;
    d += ` Q${ends[i].x.toFixed(1)},${ends[i].y.toFixed(1)} ${(ends[i].x + after.x * radius).toFixed(1)},${(
      ends[i].y +
      after.y * radius
    ).toFixed(1)}`;
  }
  d += ` L${ends[ends.length - 1].x.toFixed(1)},${ends[ends.length - 1].y.toFixed(1)}`;
  let longest = 0;
  let middle = ends[0];
  for (let i = 1; i < ends.length; i++) {
    const length = Math.hypot(ends[i].x - ends[i - 1].x, ends[i].y - ends[i - 1].y);
    if (length > longest) {
      longest = length;
      middle = { x: (ends[i].x + ends[i - 1].x) / 2, y: (ends[i].y + ends[i - 1].y) / 2 };
    }
  }
  return { d, middle, ends };
}

/** A saved edge's size label: pixels per character, its height, the space kept round it, where along a segment. */
const LABEL_CHAR = 6;
const LABEL_HEIGHT = 12;
const LABEL_CLEARANCE = 2;
const LABEL_FRACTIONS = [0.5, 0.35, 0.65, 0.2, 0.8];

/** A box: left, top, right, bottom. */
type Box = [number, number, number, number];

function labelBox(x: number, y: number, width: number): Box {
  return [
    x - width / 2 - LABEL_CLEARANCE,
    y - LABEL_HEIGHT / 2 - LABEL_CLEARANCE,
    x + width / 2 + LABEL_CLEARANCE,
    y + LABEL_HEIGHT / 2 + LABEL_CLEARANCE
  ];
}

/** Whether the segment from `a` to `b` meets `box` (Liang-Barsky clipping). */
function crosses(a: IPoint, b: IPoint, box: Box): boolean {
  const dx = b.x - a.x;
  const dy = b.y - a.y;
  let low = 0;
  let high = 1;
  for (const [p, q] of [
    [-dx, a.x - box[0]],
    [dx, box[2] - a.x],
    [-dy, a.y - box[1]],
    [dy, box[3] - a.y]
  ]) {
    if (p === 0) {
      if (q < 0) {
        return false;
      }
      continue;
    }
    const t = q / p;
    if (p < 0) {
      low = Math.max(low, t);
    } else {
      high = Math.min(high, t);
    }
    if (low > high) {
      return false;
    }
  }
  return true;
}

function overlaps(a: Box, b: Box): boolean {
  return a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3];
}

/**
 * Where a saved edge's size label goes (its centre): on the edge (`ends`, its polyline), away from every other
 * edge (`others`, polylines) and node box (`boxes`), so that it never reads as another edge's: along its longest
 * segments first, their middle first, then beside them; the middle of the longest segment when no place is free.
 * Python's `label_place` (`gradmagic/render/graph.py`) places it alike.
 */
export function labelPlace(ends: IPoint[], textLength: number, others: IPoint[][], boxes: Box[]): IPoint {
  const width = textLength * LABEL_CHAR;
  const obstacles: [IPoint, IPoint][] = others.flatMap(line =>
    line.slice(1).map((b, i) => [line[i], b] as [IPoint, IPoint])
  );
  const length = ([a, b]: [IPoint, IPoint]): number => Math.hypot(b.x - a.x, b.y - a.y);
  const segments = ends
    .slice(1)
    .map((b, i) => [ends[i], b] as [IPoint, IPoint])
    .map((segment, i) => ({ segment, i }))
    .sort((u, v) => length(v.segment) - length(u.segment) || u.i - v.i)
    .map(({ segment }) => segment);
  const free = (x: number, y: number): boolean => {
    const box = labelBox(x, y, width);
    return !boxes.some(node => overlaps(box, node)) && !obstacles.some(([a, b]) => crosses(a, b, box));
  };
  const candidates: IPoint[] = [];
  for (const [a, b] of segments) {
    candidates.push(...LABEL_FRACTIONS.map(t => ({ x: a.x + (b.x - a.x) * t, y: a.y + (b.y - a.y) * t })));
  }
  for (const [a, b] of segments) {
    const x = (a.x + b.x) / 2;
    const y = (a.y + b.y) / 2;
    if (Math.abs(b.y - a.y) >= Math.abs(b.x - a.x)) {
      candidates.push({ x: x + width / 2 + 6, y }, { x: x - width / 2 - 6, y });
    } else {
      candidates.push({ x, y: y - LABEL_HEIGHT / 2 - 4 }, { x, y: y + LABEL_HEIGHT / 2 + 4 });
    }
  }
  const found = candidates.find(point => free(point.x, point.y));
  if (found) {
    return found;
  }
  const [a, b] = segments[0];
  return { x: (a.x + b.x) / 2, y: (a.y + b.y) / 2 };
}

/**
 * The interactive drawing of `graph`, as a DOM element. `graphView.nodeCount`
 * (a data attribute) and the legend say what is drawn.
 */
export function graphView(original: IGraph): HTMLElement {
  if (!original.layout) {
    return element('div', 'jp-gradmagic-muted jp-gradmagic-graph-note', NO_LAYOUT);
  }
  const { scopes } = original.layout;
  const positions = new Map(Object.entries(original.layout.positions));
  const folded = foldedGraph(original, scopes);
  // Every node the layout places (all of them, in a report the checker wrote).
  const graph = { ...folded, nodes: folded.nodes.filter(node => positions.has(node.id)) };
  const root = element('div', 'jp-gradmagic-graph');
  root.dataset.nodeCount = String(graph.nodes.length);

  const bar = element('div', 'jp-gradmagic-graph-bar', undefined, root);
  const legend = element('div', 'jp-gradmagic-legend', undefined, bar);
  for (const role of NODE_ROLES) {
    element('span', `jp-gradmagic-key jp-gradmagic-role-${role}`, role, legend);
  }
  element('span', 'jp-gradmagic-key jp-gradmagic-key-saved', 'saved for the backward', legend);
  const buttons = element('div', 'jp-gradmagic-zoom', undefined, bar);
  const zoomIn = element('button', 'jp-gradmagic-button', '+', buttons);
  const zoomOut = element('button', 'jp-gradmagic-button', '−', buttons);
  const reset = element('button', 'jp-gradmagic-button', 'fit', buttons);
  zoomIn.title = 'Zoom in (or Ctrl/⌘ + wheel)';
  zoomOut.title = 'Zoom out';
  reset.title = 'Fit the whole graph';
  if (scopes.length) {
    element(
      'div',
      'jp-gradmagic-muted',
      `${original.nodes.length} nodes: name scopes folded into ${graph.nodes.length}.`,
      root
    );
  }

  const halfWidths = new Map<string, number>();
  const byId = new Map(graph.nodes.map(node => [node.id, node]));
  let width = 0;
  let height = 0;
  for (const node of graph.nodes) {
    const [title, detail] = nodeText(node);
    halfWidths.set(node.id, (Math.max(title.length, detail.length) * CHAR_WIDTH) / 2 + 8);
    const { x, y } = placeOf(positions.get(node.id)!);
    width = Math.max(width, x + halfWidths.get(node.id)! + MARGIN);
    height = Math.max(height, y + BOX_HEIGHT / 2 + MARGIN);
  }

  const frame = element('div', 'jp-gradmagic-graph-frame', undefined, root);
  const canvas = svg('svg', { class: 'jp-gradmagic-graph-svg', role: 'img' }, frame);
  const label = svg('title', {}, canvas);
  label.textContent = 'Gradient graph: forward above, backward below';
  const defs = svg('defs', {}, canvas);
  // Arrowheads by ids unique in the page: a repeated id resolves into another report's drawing (hidden when folded).
  const arrow = uniqueId('arrow');
  const savedArrow = uniqueId('arrow-saved');
  for (const [id, className] of [
    [arrow, 'jp-gradmagic-arrowhead'],
    [savedArrow, 'jp-gradmagic-arrowhead-saved']
  ]) {
    const marker = svg(
      'marker',
      { id, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto' },
      defs
    );
    svg('path', { d: 'M0,0 L10,5 L0,10 z', class: className }, marker);
  }
  const viewport = svg('g', { class: 'jp-gradmagic-viewport' }, canvas);
  const edgeLayer = svg('g', {}, viewport);
  const nodeLayer = svg('g', {}, viewport);
  // Saved edges above the nodes they cross between, so they stay visible and hoverable.
  const savedLayer = svg('g', {}, viewport);

  const tooltip = element('div', 'jp-gradmagic-tooltip', undefined, frame);
  tooltip.hidden = true;
  const showDetails = (lines: string[], event: MouseEvent): void => {
    tooltip.replaceChildren(...lines.map((line, i) => element('div', i ? '' : 'jp-gradmagic-tooltip-title', line)));
    const box = frame.getBoundingClientRect();
    tooltip.style.left = `${event.clientX - box.left + 12}px`;
    tooltip.style.top = `${event.clientY - box.top + 12}px`;
    tooltip.hidden = false;
  };
  const hideDetails = (): void => {
    tooltip.hidden = true;
  };

  const routes = new Map((original.layout.routes ?? []).map(route => [`${route.source}\u0000${route.target}`, route]));
  const paths = graph.edges
    .filter(edge => halfWidths.has(edge.source) && halfWidths.has(edge.target))
    .map(edge => {
      const bends = (routes.get(`${edge.source}\u0000${edge.target}`)?.points ?? []).map(placeOf);
      const path = edgePath(
        [placeOf(positions.get(edge.source)!), ...bends, placeOf(positions.get(edge.target)!)],
        halfWidths.get(edge.source)!,
        halfWidths.get(edge.target)!
      );
      return { edge, path };
    });
  const boxes: Box[] = graph.nodes.map(node => {
    const { x, y } = placeOf(positions.get(node.id)!);
    const half = halfWidths.get(node.id)!;
    return [x - half, y - BOX_HEIGHT / 2, x + half, y + BOX_HEIGHT / 2];
  });
  paths.forEach(({ edge, path }, k) => {
    const group = svg('g', { class: edge.saved ? 'jp-gradmagic-edge jp-gradmagic-saved' : 'jp-gradmagic-edge' });
    group.dataset.source = edge.source;
    group.dataset.target = edge.target;
    svg('path', { d: path.d, class: 'jp-gradmagic-hit' }, group);
    svg(
      'path',
      {
        d: path.d,
        class: 'jp-gradmagic-stroke',
        'marker-end': `url(#${edge.saved ? savedArrow : arrow})`
      },
      group
    );
    if (edge.saved && edge.bytes !== null) {
      const size = formatBytes(edge.bytes);
      const others = paths.filter((_, j) => j !== k).map(other => other.path.ends);
      const at = labelPlace(path.ends, size.length, others, boxes);
      const text = svg(
        'text',
        { x: at.x.toFixed(1), y: (at.y + 3).toFixed(1), class: 'jp-gradmagic-edge-label' },
        group
      );
      text.textContent = size;
    }
    group.addEventListener('mousemove', event => showDetails(edgeDetails(edge, byId), event));
    group.addEventListener('mouseleave', hideDetails);
    (edge.saved ? savedLayer : edgeLayer).appendChild(group);
  });
  for (const node of graph.nodes) {
    const { x, y } = placeOf(positions.get(node.id)!);
    const half = halfWidths.get(node.id)!;
    const group = svg('g', { class: `jp-gradmagic-node jp-gradmagic-role-${node.role}` }, nodeLayer);
    group.dataset.id = node.id;
    group.dataset.role = node.role;
    svg('rect', { x: x - half, y: y - BOX_HEIGHT / 2, width: 2 * half, height: BOX_HEIGHT, rx: 5 }, group);
    const [title, detail] = nodeText(node);
    const text = svg('text', { x, y: detail ? y - 3 : y + 4 }, group);
    text.textContent = title;
    if (detail) {
      const second = svg('text', { x, y: y + 11, class: 'jp-gradmagic-node-detail' }, group);
      second.textContent = detail;
    }
    group.addEventListener('mousemove', event => showDetails(nodeDetails(node), event));
    group.addEventListener('mouseleave', hideDetails);
  }
  // Pan and zoom: a transform on the viewport group.
  const view = { x: 0, y: 0, scale: 1 };
  let moved = false; // by the user: then a resize no longer refits
  const apply = (): void => {
    viewport.setAttribute('transform', `translate(${view.x} ${view.y}) scale(${view.scale})`);
    root.dataset.scale = view.scale.toFixed(3);
  };
  const zoomAt = (factor: number, cx: number, cy: number): void => {
    moved = true;
    const scale = Math.min(MAX_SCALE, Math.max(MIN_SCALE, view.scale * factor));
    view.x = cx - ((cx - view.x) * scale) / view.scale;
    view.y = cy - ((cy - view.y) * scale) / view.scale;
    view.scale = scale;
    apply();
  };
  const frameHeight = Math.min(Math.max(height, 160), 560);
  frame.style.height = `${frameHeight}px`;
  const fit = (): void => {
    const available = frame.clientWidth || width;
    view.scale = Math.min(1, available / width, frameHeight / height);
    view.x = Math.max(0, (available - width * view.scale) / 2);
    view.y = 0;
    apply();
  };
  fit();
  // Fit again when the frame gets its real width (none until attached, or while its section is folded), until
  // the user pans or zooms.
  if (typeof ResizeObserver !== 'undefined') {
    const observer = new ResizeObserver(() => (moved ? observer.disconnect() : fit()));
    observer.observe(frame);
  }
  zoomIn.addEventListener('click', () => zoomAt(1.25, frame.clientWidth / 2, frameHeight / 2));
  zoomOut.addEventListener('click', () => zoomAt(0.8, frame.clientWidth / 2, frameHeight / 2));
  reset.addEventListener('click', fit);
  canvas.addEventListener(
    'wheel',
    event => {
      if (!event.ctrlKey && !event.metaKey) {
        return; // a plain wheel scrolls the notebook
      }
      event.preventDefault();
      const box = canvas.getBoundingClientRect();
      zoomAt(Math.exp(-event.deltaY / 300), event.clientX - box.left, event.clientY - box.top);
    },
    { passive: false }
  );
  let drag: { x: number; y: number; viewX: number; viewY: number } | null = null;
  canvas.addEventListener('pointerdown', event => {
    drag = { x: event.clientX, y: event.clientY, viewX: view.x, viewY: view.y };
    canvas.setPointerCapture?.(event.pointerId);
    canvas.classList.add('jp-gradmagic-dragging');
  });
  canvas.addEventListener('pointermove', event => {
    if (drag) {
      moved = true;
      view.x = drag.viewX + event.clientX - drag.x;
      view.y = drag.viewY + event.clientY - drag.y;
      apply();
    }
  });
  const stop = (): void => {
    drag = null;
    canvas.classList.remove('jp-gradmagic-dragging');
  };
  canvas.addEventListener('pointerup', stop);
  canvas.addEventListener('pointercancel', stop);
  return root;
}
