// Path tab: the run's graph with the path it took lit up — each node that
// ran numbered in order, with its fan-out (tasks in one step), retries,
// errors and interrupts; the edges it went along; and each node linked to
// its steps in the timeline. Redrawn from the timeline, which the run page
// reloads while the run is live.

import { h, s, errorBox } from './util.js';
import { renderGraph, START, END } from './graph.js';

/** The visits of a timeline, in order: one per (step, node), its tasks folded into a count. */
export function visitsOf(tl) {
  const out = [];
  for (const st of [...(tl?.steps || [])].sort((a, b) => a.step - b.step)) {
    const byNode = new Map();
    for (const t of st.tasks) {
      let v = byNode.get(t.node);
      if (!v) {
        v = { node: t.node, step: st.step, tasks: 0, retries: 0, status: 'finished' };
        byNode.set(t.node, v);
        out.push(v);
      }
      v.tasks += 1;
      v.retries += Math.max((t.attempts || 1) - 1, (t.retries || []).length);
      // The worst status of its tasks: failed > interrupted > running > finished.
      const rank = { failed: 3, interrupted: 2, running: 1, finished: 0 };
      if ((rank[t.status] ?? 0) > (rank[v.status] ?? 0)) v.status = t.status;
    }
  }
  out.forEach((v, i) => { v.order = i + 1; });
  return out;
}

/** Edges taken: from a node of one step to a node of the next, when the graph has that edge. */
function edgesTaken(visits, runStatus) {
  const steps = [...new Set(visits.map((v) => v.step))];
  const at = (st) => visits.filter((v) => v.step === st).map((v) => v.node);
  const taken = new Set();
  if (steps.length) for (const n of at(steps[0])) taken.add(`${START}->${n}`);
  for (let i = 0; i + 1 < steps.length; i++) {
    for (const a of at(steps[i])) for (const b of at(steps[i + 1])) taken.add(`${a}->${b}`);
  }
  if (runStatus === 'finished' && steps.length) for (const n of at(steps[steps.length - 1])) taken.add(`${n}->${END}`);
  return taken;
}

function statusWord(v) {
  return v.status === 'finished' ? 'ran' : v.status;
}

/** Lights up `drawn` (from renderGraph) with `visits`; returns nothing. */
export function lightPath(drawn, visits, runStatus) {
  const svg = drawn.svg;
  // The marks sit in a layer of their own, outside the nodes, so that a
  // node's accessible name still holds all of its visible text.
  let marks = svg.querySelector('.path-marks');
  if (!marks) { marks = s('g', { class: 'path-marks', 'aria-hidden': 'true' }); svg.append(marks); }
  marks.replaceChildren();
  const byNode = new Map();
  for (const v of visits) (byNode.get(v.node) || byNode.set(v.node, []).get(v.node)).push(v);
  for (const el of svg.querySelectorAll('[data-testid="graph-node"]')) {
    const id = el.getAttribute('data-node');
    const vs = byNode.get(id) || [];
    const base = el.dataset.baseLabel || el.getAttribute('aria-label');
    el.dataset.baseLabel = base;
    el.classList.remove('on-path', 'path-failed', 'path-interrupted', 'path-running', 'path-finished');
    el.removeAttribute('data-path-order');
    el.removeAttribute('data-path-status');
    if (!vs.length) { el.setAttribute('aria-label', `${base}, not run`); continue; }
    const worst = vs.reduce((w, v) => ({ failed: 3, interrupted: 2, running: 1 }[v.status] || 0) > ({ failed: 3, interrupted: 2, running: 1 }[w] || 0) ? v.status : w, 'finished');
    el.classList.add('on-path', `path-${worst}`);
    el.setAttribute('data-path-order', vs.map((v) => v.order).join(' '));
    el.setAttribute('data-path-status', worst);
    const fan = Math.max(...vs.map((v) => v.tasks));
    const retries = vs.reduce((a, v) => a + v.retries, 0);
    el.setAttribute('aria-label', `${base}, ${statusWord({ status: worst })} as step ${vs.map((v) => v.order).join(', ')} of the path${fan > 1 ? `, ${fan} parallel tasks` : ''}${retries ? `, ${retries} retries` : ''}`);
    const n = drawn.layout.nodes.get(id);
    const box = { x: n.x - n.w / 2, y: n.y - n.h / 2, width: n.w };
    const tags = [vs.map((v) => v.order).join(',')];
    if (fan > 1) tags.push(`×${fan}`);
    if (retries) tags.push(`↻${retries}`);
    if (worst === 'failed') tags.push('✕');
    if (worst === 'interrupted') tags.push('⏸');
    const text = tags.join(' ');
    const w = Math.max(22, text.length * 7 + 10);
    marks.append(s('g', { class: `path-mark path-mark-${worst}`, transform: `translate(${box.x + box.width - w / 2 + 6},${box.y - 4})`, 'data-testid': 'path-mark', 'data-node': id },
      s('rect', { x: -w / 2, y: -9, width: w, height: 18, rx: 9 }),
      s('text', { 'text-anchor': 'middle', y: 4 }, text)));
  }
  const taken = edgesTaken(visits, runStatus);
  for (const e of svg.querySelectorAll('[data-testid="graph-edge"]')) {
    const from = e.getAttribute('data-from');
    const to = e.getAttribute('data-to');
    e.classList.toggle('on-path', taken.has(`${from}->${to}`));
  }
}

export function mount(el, ctx) {
  const graphHost = h('div', { class: 'graph-wrap', 'data-testid': 'path-graph' }, h('p', { class: 'muted' }, 'Loading the graph…'));
  const order = h('ol', { class: 'path-list', 'data-testid': 'path-list', 'aria-label': 'The path, in order' });
  const nodeInfo = h('div', { 'data-testid': 'path-node', 'aria-live': 'polite' });
  const summary = h('p', { class: 'muted small', 'data-testid': 'path-summary' });
  el.append(summary, graphHost, nodeInfo, h('h2', { class: 'card-title', style: 'margin-top:12px' }, 'Nodes run, in order'), order);
  let drawn = null;
  let visits = [];

  const toTimeline = (step) => ctx.openTab('timeline', { step, focus: true });
  const stepLink = (v) => h('button', { type: 'button', class: 'btn-link', 'data-testid': 'path-step-link', 'data-step': v.step, onclick: () => toTimeline(v.step) }, `step ${v.step}`);

  function showNode(node) {
    const vs = visits.filter((v) => v.node === node.id);
    nodeInfo.replaceChildren(h('div', { class: 'card', 'data-testid': 'path-node-card', 'data-node': node.id },
      h('b', null, node.id), ' ',
      vs.length ? ['ran at ', vs.map((v, i) => [i ? ', ' : '', stepLink(v), v.tasks > 1 ? ` (${v.tasks} tasks)` : '', v.status !== 'finished' ? ` — ${v.status}` : ''])] : h('span', { class: 'muted' }, 'did not run in this run')));
  }

  function draw() {
    visits = visitsOf(ctx.timeline);
    const status = ctx.run?.status;
    summary.textContent = `${visits.length} node run${visits.length === 1 ? '' : 's'} over ${new Set(visits.map((v) => v.step)).size} steps${status === 'running' ? ' · live' : ''}`;
    summary.dataset.status = status || '';
    if (drawn) lightPath(drawn, visits, status);
    order.replaceChildren(...visits.map((v) => h('li', { 'data-testid': 'path-item', 'data-node': v.node, 'data-status': v.status, class: `path-item path-${v.status}` },
      h('b', null, v.node), ' · ', stepLink(v),
      v.tasks > 1 ? ` · ${v.tasks} parallel tasks` : '',
      v.retries ? ` · ${v.retries} retr${v.retries === 1 ? 'y' : 'ies'}` : '',
      v.status !== 'finished' ? h('span', { class: `badge badge-${v.status}`, style: 'margin-left:6px' }, v.status) : null)));
    if (!visits.length) order.append(h('li', { class: 'muted' }, ctx.timelineError ? 'The timeline is unavailable.' : 'No node ran yet.'));
  }

  (async () => {
    try {
      const detail = await ctx.graph();
      drawn = renderGraph(detail, { label: `Graph ${detail.id} with the path of run ${ctx.id}`, onSelect: showNode });
      graphHost.replaceChildren(drawn.svg);
      draw();
    } catch (e) {
      graphHost.replaceChildren(errorBox(e, `Could not load graph ${ctx.run.graph}: `));
    }
  })();
  draw();
  const off = ctx.on((kind) => { if (kind === 'timeline' || kind === 'run') draw(); });
  return { cleanup: off };
}
