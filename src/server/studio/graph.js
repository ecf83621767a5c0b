// Graph drawing: a layered (Sugiyama-style) layout — cycle removal by DFS,
// longest-path layering, dummy nodes for long edges, barycentric crossing
// reduction, isotonic (PAV) x placement — rendered as an accessible SVG.

import { s } from './util.js';

export const START = '__start__';
export const END = 'END';

const KINDS = {
  llm: ['LLM', '#dbeafe', '#1d4ed8'],
  agent: ['AG', '#ede9fe', '#6d28d9'],
  router: ['RT', '#fef3c7', '#a16207'],
  summarizer: ['SUM', '#e0f2fe', '#0369a1'],
  followup: ['FU', '#dcfce7', '#15803d'],
  tool: ['TL', '#fee2e2', '#b91c1c'],
  noop: ['NO', '#f1f5f9', '#475569'],
  subgraph: ['SG', '#fce7f3', '#be185d'],
  research: ['RS', '#ccfbf1', '#0f766e'],
};

export function kindStyle(kind) {
  if (KINDS[kind]) return KINDS[kind];
  if (kind && kind.startsWith('research')) return KINDS.research;
  return [(kind || '?').slice(0, 2).toUpperCase(), '#f3f4f6', '#374151'];
}

/** Edges from the Mermaid text of `GET /api/graphs/{name}` (older servers). */
export function edgesFromMermaid(text) {
  const out = [];
  for (const line of (text || '').split('\n')) {
    const m = /^\s*([\w-]+)\s+(-->|-\.->|==>)(?:\|([^|]*)\|)?\s+([\w-]+)\s*$/.exec(line);
    if (!m || m[1] === START) continue;
    const to = m[4] === '__end__' ? END : m[4];
    let kind = 'plain';
    let label = null;
    if (m[2] === '-.->') { kind = 'default'; label = 'default'; }
    else if (m[2] === '==>') { kind = 'map'; label = (m[3] || '').replace(/^each /, ''); }
    else if (m[3] === 'join') kind = 'join';
    else if (m[3]) { kind = 'case'; label = m[3]; }
    out.push({ from: m[1], to, kind, label });
  }
  return out;
}

function edgeLabel(e) {
  switch (e.kind) {
    case 'default': return e.label && e.label !== 'default' ? `${e.label} · default` : 'default';
    case 'map': {
      const f = (e.label || '').replace(/^(map|each) /, '');
      return f ? `map ${f}` : 'map';
    }
    case 'join': return e.label || 'join';
    case 'case': return e.label ?? '';
    default: return e.label || '';
  }
}

/** The YAML lines of one node in a graph file (older servers send no settings). */
export function yamlNodeBlock(source, id) {
  if (!source) return null;
  const lines = source.split('\n');
  const esc = id.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const re = new RegExp(`^(\\s*)- id:\\s*["']?${esc}["']?\\s*(#.*)?$`);
  const i = lines.findIndex((l) => re.test(l));
  if (i < 0) return null;
  const indent = re.exec(lines[i])[1].length;
  const out = [lines[i].trimStart()];
  for (let k = i + 1; k < lines.length; k++) {
    const l = lines[k];
    const lead = l.length - l.trimStart().length;
    if (l.trim() !== '' && lead <= indent) break;
    out.push(l.slice(indent));
  }
  while (out.length && out[out.length - 1].trim() === '') out.pop();
  return out.join('\n');
}

/** The drawable graph from a graph detail (extended or older API shape). */
export function normalize(detail) {
  const nodes = (detail.nodes || []).map((n) => {
    if (n.kind !== 'subgraph' || n.subgraph !== undefined) return { ...n };
    const m = /^\s*graph:\s*["']?([\w-]+)/m.exec(yamlNodeBlock(detail.source, n.id) || '');
    return { ...n, subgraph: m ? m[1] : null };
  });
  const ids = new Set(nodes.map((n) => n.id));
  let edges = Array.isArray(detail.edges) ? detail.edges : edgesFromMermaid(detail.mermaid);
  edges = edges.map((e) => ({ from: e.from, to: e.to === '__end__' ? END : e.to, kind: e.kind || 'plain', label: e.label ?? null }));
  edges = edges.filter((e) => ids.has(e.from) && (ids.has(e.to) || e.to === END));
  for (const e of edges) e.text = edgeLabel(e);
  const entry = detail.entry || (nodes[0] ? [nodes[0].id] : []);
  const all = [{ id: START, kind: '__start__', virtual: true }, ...nodes, { id: END, kind: '__end__', virtual: true }];
  const startEdges = entry.filter((id) => ids.has(id)).map((id) => ({ from: START, to: id, kind: 'start', label: null, text: '' }));
  return { nodes: all, edges: [...startEdges, ...edges] };
}

function nodeSize(n) {
  if (n.virtual) return [72, 30];
  const kind = (n.kind || '') + (n.subgraph ? ` → ${n.subgraph}` : '');
  const chars = Math.max(n.id.length, kind.length * 0.85);
  return [Math.max(132, Math.round(chars * 7.8 + 62)), 48];
}

/** Minimises Σ(x−want)² subject to x[i+1] ≥ x[i] + gap[i] (pool adjacent violators). */
function place(want, gaps) {
  const off = [0];
  for (let i = 1; i < want.length; i++) off.push(off[i - 1] + gaps[i - 1]);
  const blocks = [];
  for (let i = 0; i < want.length; i++) {
    blocks.push({ sum: want[i] - off[i], n: 1 });
    while (blocks.length > 1) {
      const b = blocks[blocks.length - 1];
      const a = blocks[blocks.length - 2];
      if (a.sum / a.n <= b.sum / b.n) break;
      a.sum += b.sum;
      a.n += b.n;
      blocks.pop();
    }
  }
  const out = [];
  for (const b of blocks) for (let k = 0; k < b.n; k++) out.push(b.sum / b.n + off[out.length]);
  return out;
}

export function layout(graph) {
  const N = new Map();
  for (const n of graph.nodes) {
    const [w, hgt] = nodeSize(n);
    N.set(n.id, { ...n, w, h: hgt, layer: 0, x: 0, y: 0, dummy: false });
  }
  const edges = graph.edges.map((e, i) => ({ ...e, i, back: false, self: e.from === e.to }));
  const out = new Map([...N.keys()].map((k) => [k, []]));
  for (const e of edges) if (!e.self) out.get(e.from).push(e);

  // 1. Cycle removal: DFS from START, edges to a node on the stack are back edges.
  const state = new Map();
  const visit = (v) => {
    state.set(v, 1);
    for (const e of out.get(v)) {
      const st = state.get(e.to);
      if (st === 1) e.back = true;
      else if (!st) visit(e.to);
    }
    state.set(v, 2);
  };
  visit(START);
  for (const id of N.keys()) if (!state.get(id)) visit(id);

  // 2. Longest-path layering over the acyclic orientation.
  const up = (e) => (e.back ? [e.to, e.from] : [e.from, e.to]);
  const indeg = new Map([...N.keys()].map((k) => [k, 0]));
  const succ = new Map([...N.keys()].map((k) => [k, []]));
  for (const e of edges) {
    if (e.self) continue;
    const [a, b] = up(e);
    succ.get(a).push(b);
    indeg.set(b, indeg.get(b) + 1);
  }
  const queue = [...N.keys()].filter((k) => indeg.get(k) === 0);
  const topo = [];
  while (queue.length) {
    const v = queue.shift();
    topo.push(v);
    for (const w of succ.get(v)) {
      N.get(w).layer = Math.max(N.get(w).layer, N.get(v).layer + 1);
      indeg.set(w, indeg.get(w) - 1);
      if (indeg.get(w) === 0) queue.push(w);
    }
  }
  let maxLayer = 0;
  for (const [id, n] of N) if (id !== END) maxLayer = Math.max(maxLayer, n.layer);
  if (N.has(END)) N.get(END).layer = maxLayer + 1;
  if (!edges.some((e) => e.to === END)) N.delete(END);

  // 3. Dummy nodes for edges spanning several layers.
  const layers = [];
  const addTo = (id) => {
    const n = N.get(id);
    (layers[n.layer] ||= []).push(id);
  };
  for (const id of topo) if (N.has(id)) addTo(id);
  for (const id of N.keys()) if (!topo.includes(id)) addTo(id);
  for (const e of edges) {
    if (e.self) { e.chain = [e.from, e.to]; continue; }
    const [a, b] = up(e);
    const chain = [a];
    for (let l = N.get(a).layer + 1; l < N.get(b).layer; l++) {
      const id = `__d${e.i}_${l}`;
      N.set(id, { id, dummy: true, w: 14, h: 14, layer: l, x: 0, y: 0 });
      (layers[l] ||= []).push(id);
      chain.push(id);
    }
    chain.push(b);
    e.chain = chain;
  }
  for (let l = 0; l < layers.length; l++) layers[l] ||= [];
  const upper = new Map([...N.keys()].map((k) => [k, []]));
  const lower = new Map([...N.keys()].map((k) => [k, []]));
  for (const e of edges) {
    if (e.self) continue;
    for (let k = 0; k + 1 < e.chain.length; k++) {
      lower.get(e.chain[k]).push(e.chain[k + 1]);
      upper.get(e.chain[k + 1]).push(e.chain[k]);
    }
  }

  // 4. Crossing reduction: barycentre sweeps, keep the best ordering.
  const pos = new Map();
  const index = () => layers.forEach((L) => L.forEach((id, i) => pos.set(id, i)));
  const crossings = () => {
    let c = 0;
    for (let l = 0; l + 1 < layers.length; l++) {
      const segs = [];
      for (const a of layers[l]) for (const b of lower.get(a)) segs.push([pos.get(a), pos.get(b)]);
      for (let i = 0; i < segs.length; i++) {
        for (let j = i + 1; j < segs.length; j++) {
          if ((segs[i][0] - segs[j][0]) * (segs[i][1] - segs[j][1]) < 0) c++;
        }
      }
    }
    return c;
  };
  index();
  let best = layers.map((L) => [...L]);
  let bestC = crossings();
  for (let it = 0; it < 12 && bestC > 0; it++) {
    const down = it % 2 === 0;
    const order = down ? layers.keys() : [...layers.keys()].reverse();
    for (const l of order) {
      const nb = down ? upper : lower;
      const bary = new Map(layers[l].map((id) => {
        const ns = nb.get(id);
        return [id, ns.length ? ns.reduce((a, n) => a + pos.get(n), 0) / ns.length : pos.get(id)];
      }));
      layers[l].sort((a, b) => bary.get(a) - bary.get(b));
      layers[l].forEach((id, i) => pos.set(id, i));
    }
    const c = crossings();
    if (c < bestC) { bestC = c; best = layers.map((L) => [...L]); }
  }
  for (let l = 0; l < layers.length; l++) layers[l] = best[l];
  index();

  // 5. x coordinates: start packed, then pull towards neighbours' mean.
  const GAP = 34;
  const gapsOf = (L) => L.slice(1).map((id, i) => (N.get(L[i]).w + N.get(id).w) / 2 + (N.get(id).dummy || N.get(L[i]).dummy ? 14 : GAP));
  for (const L of layers) {
    let x = 0;
    L.forEach((id, i) => {
      const n = N.get(id);
      if (i) x += gapsOf(L)[i - 1];
      n.x = x;
    });
  }
  for (let it = 0; it < 24; it++) {
    const down = it % 2 === 0;
    const order = down ? [...layers.keys()] : [...layers.keys()].reverse();
    for (const l of order) {
      const L = layers[l];
      if (!L.length) continue;
      const want = L.map((id) => {
        const ns = [...(down ? upper : lower).get(id), ...(it > 12 ? (down ? lower : upper).get(id) : [])];
        if (!ns.length) return N.get(id).x;
        const xs = ns.map((n) => N.get(n).x).sort((a, b) => a - b);
        const m = xs.length >> 1;
        return xs.length % 2 ? xs[m] : (xs[m - 1] + xs[m]) / 2;
      });
      place(want, gapsOf(L)).forEach((x, i) => { N.get(L[i]).x = x; });
    }
  }

  // 6. y by layer; shift everything into view.
  const ROW = 104;
  const MARGIN = 28;
  let minX = Infinity;
  let maxX = -Infinity;
  for (const n of N.values()) {
    n.y = MARGIN + n.layer * ROW + 24;
    minX = Math.min(minX, n.x - n.w / 2);
    maxX = Math.max(maxX, n.x + n.w / 2);
  }
  const hasBack = edges.some((e) => e.back || e.self);
  const dx = MARGIN - minX;
  for (const n of N.values()) n.x += dx;
  const width = Math.ceil(maxX - minX + MARGIN * 2 + (hasBack ? 70 : 0));
  const height = Math.ceil(MARGIN * 2 + (layers.length - 1) * ROW + 48);

  // 7. Routes: forward edges bottom→top ports; back edges leave and enter by the side.
  const groups = new Map();
  for (const e of edges) {
    const k = `${e.from}->${e.to}`;
    (groups.get(k) || groups.set(k, []).get(k)).push(e);
  }
  for (const g of groups.values()) g.forEach((e, i) => { e.par = i - (g.length - 1) / 2; });
  for (const e of edges) {
    const a = N.get(e.from);
    const b = N.get(e.to);
    if (e.self) {
      const x = a.x + a.w / 2;
      e.path = `M${x},${a.y - 8} C${x + 46},${a.y - 30} ${x + 46},${a.y + 30} ${x},${a.y + 8}`;
      e.labelAt = { x: x + 40, y: a.y };
      continue;
    }
    const mids = e.chain.slice(1, -1).map((id) => N.get(id));
    if (e.back) mids.reverse();
    const off = e.par * 22;
    if (!e.back) {
      const p0 = { x: a.x + off * 0.6, y: a.y + a.h / 2 };
      const p1 = { x: b.x + off * 0.6, y: b.y - b.h / 2 };
      const pts = [p0, ...mids.map((m) => ({ x: m.x, y: m.y })), p1];
      let d = `M${p0.x},${p0.y}`;
      for (let k = 1; k < pts.length; k++) {
        const p = pts[k - 1];
        const q = pts[k];
        const dy = (q.y - p.y) / 2;
        d += ` C${p.x + (k === 1 ? off : 0)},${p.y + dy} ${q.x + (k === pts.length - 1 ? off : 0)},${q.y - dy} ${q.x},${q.y}`;
      }
      e.path = d;
      if (mids.length) e.labelAt = { x: mids[0].x, y: mids[0].y };
      else {
        const t = 0.6 + e.par * 0.22;
        const c0 = { x: p0.x + off, y: p0.y + (p1.y - p0.y) / 2 };
        const c1 = { x: p1.x + off, y: p1.y - (p1.y - p0.y) / 2 };
        const bz = (u, v0, v1, v2, v3) => (1 - u) ** 3 * v0 + 3 * (1 - u) ** 2 * u * v1 + 3 * (1 - u) * u * u * v2 + u ** 3 * v3;
        e.labelAt = { x: bz(t, p0.x, c0.x, c1.x, p1.x), y: bz(t, p0.y, c0.y, c1.y, p1.y) };
      }
    } else {
      // Back edge: out of the source's side, up the dummy lane, into the target's side.
      const lane = mids.length ? mids[0].x : Math.max(a.x + a.w / 2, b.x + b.w / 2) + 40;
      const right = lane >= a.x;
      const sx = a.x + (right ? a.w / 2 : -a.w / 2);
      const tx = b.x + (lane >= b.x ? b.w / 2 : -b.w / 2);
      const lanePts = mids.length ? mids.map((m) => ({ x: m.x, y: m.y })) : [{ x: lane, y: (a.y + b.y) / 2 }];
      const bot = lanePts[0];
      const top = lanePts[lanePts.length - 1];
      let d = `M${sx},${a.y} Q${bot.x},${a.y} ${bot.x},${a.y - 22}`;
      for (const p of lanePts) if (p.y < a.y - 22 && p.y > b.y + 22) d += ` L${p.x},${p.y}`;
      d += ` L${top.x},${b.y + 22} Q${top.x},${b.y} ${tx},${b.y}`;
      e.path = d;
      const m = lanePts[Math.floor(lanePts.length / 2)];
      e.labelAt = { x: m.x, y: m.y };
    }
  }
  return { nodes: N, edges, layers, width, height };
}

// Keeps labels from overlapping: nudges later boxes down.
function spreadLabels(labels) {
  labels.sort((a, b) => a.y - b.y || a.x - b.x);
  for (let i = 0; i < labels.length; i++) {
    for (let j = 0; j < i; j++) {
      const a = labels[j];
      const b = labels[i];
      if (Math.abs(a.x - b.x) < (a.w + b.w) / 2 + 4 && Math.abs(a.y - b.y) < 18) b.y = a.y + 18;
    }
  }
}

function nodeShape(n, fill, stroke) {
  const { w, h } = n;
  const x = -w / 2;
  const y = -h / 2;
  if (n.kind === 'router') {
    const c = 12;
    return s('path', { class: 'node-body', d: `M${x + c},${y} H${x + w - c} L${x + w},${y + h / 2} L${x + w - c},${y + h} H${x + c} L${x},${y + h / 2} Z`, fill, stroke });
  }
  if (n.kind === 'subgraph') {
    return s('g', null,
      s('rect', { class: 'node-body', x, y, width: w, height: h, rx: 6, fill, stroke }),
      s('rect', { x: x + 4, y: y + 4, width: w - 8, height: h - 8, rx: 4, fill: 'none', stroke, 'stroke-dasharray': '3 2' }));
  }
  return s('rect', { class: 'node-body', x, y, width: w, height: h, rx: n.kind === 'agent' ? 2 : 8, fill, stroke });
}

/**
 * Draws the graph; returns {svg, focus(id), select(id)}.
 * `onSelect(node)` runs on click, Enter or Space; arrow keys move between nodes.
 */
export function renderGraph(detail, { onSelect, label } = {}) {
  const g = normalize(detail);
  const L = layout(g);
  const svg = s('svg', {
    class: 'graph-svg', width: L.width, height: L.height, viewBox: `0 0 ${L.width} ${L.height}`,
    role: 'group', 'aria-label': label || `Graph ${detail.id}: ${g.nodes.length - 2} nodes. Arrow keys move between nodes, Enter opens one.`,
    'data-testid': 'graph-svg', 'data-graph': detail.id,
  });
  const marker = (id, color) => s('marker', { id, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
    s('path', { d: 'M0,0 L10,5 L0,10 z', fill: color }));
  const uid = `g${Math.random().toString(36).slice(2, 8)}`;
  svg.append(s('defs', null,
    marker(`${uid}-plain`, '#4b5563'), marker(`${uid}-map`, '#7c3aed'),
    marker(`${uid}-join`, '#0f766e'), marker(`${uid}-back`, '#c2410c')));
  const edgeG = s('g', { class: 'edges', 'aria-hidden': 'true' });
  const labelG = s('g', { class: 'edge-labels' });
  const labels = [];
  for (const e of L.edges) {
    const cls = `edge edge-${e.kind}${e.back || e.self ? ' edge-back' : ''}`;
    const mk = e.back || e.self ? 'back' : e.kind === 'map' ? 'map' : e.kind === 'join' ? 'join' : 'plain';
    edgeG.append(s('path', { class: cls, d: e.path, 'marker-end': `url(#${uid}-${mk})`, 'data-testid': 'graph-edge', 'data-from': e.from, 'data-to': e.to, 'data-kind': e.kind, 'data-back': e.back || e.self ? 'true' : null }));
    if (e.text && e.labelAt) labels.push({ e, x: e.labelAt.x, y: e.labelAt.y, w: e.text.length * 6.6 + 12 });
  }
  spreadLabels(labels);
  for (const l of labels) {
    labelG.append(s('g', { class: `edge-label edge-label-${l.e.kind}`, transform: `translate(${l.x},${l.y})` },
      s('rect', { x: -l.w / 2, y: -9, width: l.w, height: 18, rx: 4 }),
      s('text', { 'text-anchor': 'middle', y: 4, 'data-testid': 'edge-label', 'data-kind': l.e.kind, 'data-from': l.e.from, 'data-to': l.e.to }, l.e.text)));
  }
  const nodeG = s('g', { class: 'nodes' });
  const iconG = s('g', { class: 'node-icons', 'aria-hidden': 'true' });
  const els = new Map();
  let first = true;
  for (const n of L.nodes.values()) {
    if (n.dummy) continue;
    if (n.virtual) {
      const isStart = n.id === START;
      nodeG.append(s('g', { class: `node node-terminal`, transform: `translate(${n.x},${n.y})`, role: 'img', 'aria-label': isStart ? 'START' : 'END', 'data-testid': isStart ? 'graph-start' : 'graph-end' },
        s('rect', { x: -n.w / 2, y: -n.h / 2, width: n.w, height: n.h, rx: n.h / 2 }),
        s('text', { 'text-anchor': 'middle', y: 4 }, isStart ? 'START' : 'END')));
      continue;
    }
    const [abbr, fill, stroke] = kindStyle(n.kind);
    const kindText = n.kind + (n.subgraph ? ` → ${n.subgraph}` : '');
    const el = s('g', {
      class: `node kind-${n.kind}`, transform: `translate(${n.x},${n.y})`, role: 'button', tabindex: first ? '0' : '-1',
      'aria-label': `${n.id} ${kindText} node`,
      'data-testid': 'graph-node', 'data-node': n.id, 'data-kind': n.kind,
    },
    nodeShape(n, fill, stroke),
    s('circle', { cx: -n.w / 2 + 20, cy: 0, r: 13, fill: stroke }),
    s('text', null, s('tspan', { class: 'node-id', x: -n.w / 2 + 40, y: -3 }, n.id), ' ',
      s('tspan', { class: 'node-kind', x: -n.w / 2 + 40, y: 13 }, kindText)));
    // The kind's abbreviation sits in a separate aria-hidden layer, so a node's
    // accessible name ("router router node") contains all of its visible text.
    iconG.append(s('text', { class: 'node-icon', x: n.x - n.w / 2 + 20, y: n.y + 3.5, 'text-anchor': 'middle' }, abbr));
    first = false;
    el.addEventListener('click', () => { setActive(n.id); onSelect?.(n); });
    els.set(n.id, el);
    nodeG.append(el);
  }
  svg.append(edgeG, labelG, nodeG, iconG);

  function setActive(id) {
    for (const [k, el] of els) el.setAttribute('tabindex', k === id ? '0' : '-1');
  }
  function focus(id) {
    const el = els.get(id);
    if (!el) return;
    setActive(id);
    el.focus();
  }
  function select(id) {
    for (const [k, el] of els) el.classList.toggle('selected', k === id);
  }
  // Arrow keys: left/right within a layer, up/down to the nearest node of the next layer that has nodes.
  svg.addEventListener('keydown', (ev) => {
    const el = ev.target.closest?.('[data-node]');
    if (!el) return;
    const id = el.getAttribute('data-node');
    const n = L.nodes.get(id);
    if (ev.key === 'Enter' || ev.key === ' ') {
      ev.preventDefault();
      onSelect?.(g.nodes.find((x) => x.id === id));
      return;
    }
    const real = (l) => (L.layers[l] || []).filter((k) => els.has(k));
    let target = null;
    if (ev.key === 'ArrowLeft' || ev.key === 'ArrowRight') {
      const row = real(n.layer);
      const i = row.indexOf(id) + (ev.key === 'ArrowRight' ? 1 : -1);
      target = row[i];
    } else if (ev.key === 'ArrowDown' || ev.key === 'ArrowUp') {
      const step = ev.key === 'ArrowDown' ? 1 : -1;
      for (let l = n.layer + step; l >= 0 && l < L.layers.length && !target; l += step) {
        const row = real(l);
        if (row.length) target = row.reduce((b, k) => (Math.abs(L.nodes.get(k).x - n.x) < Math.abs(L.nodes.get(b).x - n.x) ? k : b));
      }
    } else if (ev.key === 'Home' || ev.key === 'End') {
      const all = [...els.keys()];
      target = ev.key === 'Home' ? all[0] : all[all.length - 1];
    } else return;
    ev.preventDefault();
    if (target) focus(target);
  });
  return { svg, focus, select, layout: L };
}
