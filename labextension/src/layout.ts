/**
 * Where each node of the gradient graph sits: the same two-lane layout as
 * the static drawing (`gradmagic/render/graph.py`), so both pictures read
 * alike. The forward runs left to right in the upper lane, the backward
 * right to left in the lower lane, from the upstream gradients (under the
 * outputs) to the downstream gradients (under the inputs). Within a lane a
 * node sits in the layer of its longest path from the lane's start and is
 * ordered by the mean row of its neighbours. Long lanes wrap into bands;
 * above MAX_NODES nodes, name scopes are folded into one node each.
 */
import { IGraph, IGraphEdge, IGraphNode, NodeRole } from './schema';

export const FORWARD_LANE: readonly NodeRole[] = ['input', 'variable', 'forward', 'output'];
export const BACKWARD_LANE: readonly NodeRole[] = ['upstream', 'backward', 'downstream'];
/** Layers per band before a lane wraps. */
export const BAND = 16;
/** Above this many nodes, name scopes are folded. */
export const MAX_NODES = 200;

type Lane = 'forward' | 'backward';

/** Layout units: x counts layers, y counts rows, growing downwards. */
export interface IPoint {
  x: number;
  y: number;
}

function laneOf(role: NodeRole): Lane {
  return FORWARD_LANE.includes(role) ? 'forward' : 'backward';
}

function push<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) {
    list.push(value);
  } else {
    map.set(key, [value]);
  }
}

/** One node per name scope inside each pass (`forward/block_2/...`), with the count of ops it stands for. */
export function foldScopes(graph: IGraph): IGraph {
  const groups = new Map<string, IGraphNode[]>();
  for (const node of graph.nodes) {
    const parts = node.id.split('/');
    const folds = (node.role === 'forward' || node.role === 'backward') && parts.length > 2;
    push(groups, folds ? parts.slice(0, 2).join('/') : node.id, node);
  }
  const foldedId = new Map<string, string>();
  const nodes: IGraphNode[] = [];
  for (const [key, members] of groups) {
    members.forEach(member => foldedId.set(member.id, key));
    const first = members[0];
    nodes.push(
      members.length === 1
        ? first
        : {
            ...first,
            id: key,
            op: 'scope',
            label: key.split('/').pop() ?? key,
            count: members.reduce((sum, member) => sum + member.count, 0)
          }
    );
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
  return { ...graph, nodes, edges: [...edges.values()] };
}

/** Layer of each node: the length of the longest path reaching it (an edge closing a cycle is ignored). */
function longestPaths(nodes: string[], before: Map<string, string[]>): Map<string, number> {
  const layer = new Map<string, number>();
  for (const start of nodes) {
    const stack: [string, boolean][] = [[start, false]];
    const visiting = new Set<string>();
    while (stack.length) {
      const [id, done] = stack.pop()!;
      if (layer.has(id)) {
        continue;
      }
      const parents = before.get(id) ?? [];
      if (done) {
        visiting.delete(id);
        let deepest = -1;
        for (const parent of parents) {
          const depth = layer.get(parent);
          if (depth !== undefined && depth > deepest) {
            deepest = depth;
          }
        }
        layer.set(id, deepest + 1);
        continue;
      }
      visiting.add(id);
      stack.push([id, true]);
      for (const parent of parents) {
        if (!layer.has(parent) && !visiting.has(parent)) {
          stack.push([parent, false]);
        }
      }
    }
  }
  return layer;
}

/** x (layer, wrapped into bands) and y (lane, band and row) of every node, in layout units. */
export function layout(graph: IGraph): Map<string, IPoint> {
  const lanes = new Map<string, Lane>(graph.nodes.map(node => [node.id, laneOf(node.role)]));
  const roles = new Map<string, NodeRole>(graph.nodes.map(node => [node.id, node.role]));
  const before = new Map<string, string[]>();
  const after = new Map<string, string[]>();
  const neighbours = new Map<string, string[]>();
  for (const edge of graph.edges) {
    if (!lanes.has(edge.source) || !lanes.has(edge.target)) {
      continue;
    }
    if (lanes.get(edge.source) === lanes.get(edge.target)) {
      push(before, edge.target, edge.source);
      push(after, edge.source, edge.target);
    }
    push(neighbours, edge.source, edge.target);
    push(neighbours, edge.target, edge.source);
  }
  const layer = longestPaths(
    graph.nodes.map(node => node.id),
    before
  );
  // A node that starts nothing (a constant, or a backward op fed by saved tensors only) sits just before its
  // first consumer, not at the lane's start.
  for (let sweep = 0; sweep < layer.size; sweep++) {
    let moved = false;
    for (const [id, depth] of layer) {
      const consumers = after.get(id) ?? [];
      const role = roles.get(id)!;
      if (!before.get(id)?.length && consumers.length && !['input', 'variable', 'upstream'].includes(role)) {
        const target = Math.min(...consumers.map(consumer => layer.get(consumer)!)) - 1;
        moved = moved || target !== depth;
        layer.set(id, target);
      }
    }
    if (!moved) {
      break;
    }
  }
  const widths: Record<Lane, number> = { forward: 0, backward: 0 };
  for (const [id, depth] of layer) {
    const lane = lanes.get(id)!;
    widths[lane] = Math.max(widths[lane], depth);
  }
  const widest = Math.max(widths.forward, widths.backward);
  if (widest < BAND) {
    // One band: both lanes share the width, the gradients under their tensors.
    widths.forward = widths.backward = widest;
  }
  for (const [id, role] of roles) {
    if (role === 'output' || role === 'downstream') {
      layer.set(id, widths[lanes.get(id)!]);
    } else if (role === 'upstream') {
      layer.set(id, 0);
    }
  }
  const column = new Map<string, number>();
  for (const [id, depth] of layer) {
    column.set(id, lanes.get(id) === 'forward' ? depth : widths.backward - depth);
  }

  const cells = new Map<string, string[]>();
  for (const node of graph.nodes) {
    push(cells, `${lanes.get(node.id)}:${column.get(node.id)}`, node.id);
  }
  const row = new Map<string, number>();
  for (const members of cells.values()) {
    members.forEach((id, i) => row.set(id, i));
  }
  const meanRow = (id: string): number => {
    const around = neighbours.get(id) ?? [];
    return around.length ? around.reduce((sum, other) => sum + row.get(other)!, 0) / around.length : 0;
  };
  for (let sweep = 0; sweep < 4; sweep++) {
    for (const members of cells.values()) {
      const keys = new Map(members.map(id => [id, meanRow(id)]));
      members.sort((a, b) => keys.get(a)! - keys.get(b)!);
      members.forEach((id, i) => row.set(id, i));
    }
  }

  const bandHeight: Record<Lane, number> = { forward: 1, backward: 1 };
  for (const [key, members] of cells) {
    const lane = key.split(':')[0] as Lane;
    bandHeight[lane] = Math.max(bandHeight[lane], 1 + members.length);
  }
  const forwardBands = Math.floor(widths.forward / BAND) + 1;
  const positions = new Map<string, IPoint>();
  for (const [id, col] of column) {
    const band = Math.floor(col / BAND);
    const x = col - band * BAND;
    const y =
      lanes.get(id) === 'forward'
        ? band * bandHeight.forward + row.get(id)!
        : forwardBands * bandHeight.forward + 0.5 + band * bandHeight.backward + row.get(id)!;
    positions.set(id, { x, y });
  }
  return positions;
}
