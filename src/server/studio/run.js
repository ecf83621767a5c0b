// Run page: header, tabs (timeline, state, events, replay, fork, model calls), live updates
// while the run is running (events polled with ?after=lastSeq every 500 ms).

import { h, hrefFor, replaceHash, fmtTime, fmtMs, fmtCost, badge, errorBox, json, announce } from './util.js';
import { getJSON, graphDetail, request, errorOf } from './api.js';
import { shortId, originOf } from './runs.js';
import * as timeline from './timeline.js';
import * as states from './states.js';
import * as events from './events.js';
import * as replay from './replay.js';
import * as fork from './fork.js';
import { verdictsCard } from './verdicts.js';
import { interruptCard } from './hitl.js';
import { pausedCard } from './breakpoints.js';
import * as path from './path.js';
import * as calls from './calls.js';

const TABS = [
  ['timeline', 'Timeline', timeline],
  ['path', 'Path', path],
  ['state', 'State', states],
  ['events', 'Events', events],
  ['replay', 'Replay', replay],
  ['fork', 'Fork', fork],
  ['calls', 'Model calls', calls],
];
const POLL_MS = 500;

function errorText(err) {
  if (!err) return '';
  if (typeof err === 'string') return err;
  return err.message ? `${err.code ? `${err.code}: ` : ''}${err.message}` : json(err);
}

/** Steps run: the timeline's when it is loaded (an interrupted run's pausing step is not checkpointed, so `lastStep` misses it). */
function stepCount(run, tl) {
  const fromTimeline = tl ? tl.steps.reduce((m, st) => Math.max(m, st.step), 0) : 0;
  return Math.max(run.lastStep ?? 0, fromTimeline, tl ? tl.steps.length : 0);
}

function header(run, tl) {
  const o = originOf(run);
  const dur = run.finishedAt ? run.finishedAt - run.createdAt : run.status === 'running' ? Date.now() - run.createdAt : null;
  const u = run.usage || {};
  const origin = o ? [
    h('a', { href: hrefFor(['runs', o.parent]), 'data-testid': 'run-origin' }, `fork of ${shortId(o.parent)}`),
    o.step !== undefined ? ` from step ${o.step}` : '',
    o.node ? ` (${o.mode || 'after'} ${o.node})` : '',
    o.set && Object.keys(o.set).length ? h('span', { class: 'muted' }, ` — set ${Object.keys(o.set).join(', ')}`) : '',
  ] : '—';
  return h('div', { class: 'card', 'data-testid': 'run-header' },
    h('div', { class: 'row' },
      h('h1', { style: 'margin:0' }, 'Run ', h('span', { class: 'mono', 'data-testid': 'run-id', style: 'font-size:16px' }, run.id)),
      h('span', { 'data-testid': 'run-status', 'data-status': run.status }, badge(run.status)),
      h('span', { class: 'spacer' }),
      run.chatId ? h('a', { class: 'btn btn-small', href: hrefFor(['playground', run.graph], { chat: run.chatId }) }, 'Open chat') : null),
    h('dl', { class: 'kv', style: 'margin-top:10px' },
      h('dt', null, 'Graph'), h('dd', null, h('a', { href: hrefFor(['graphs', run.graph]), 'data-testid': 'run-graph' }, run.graph), h('span', { class: 'muted mono small' }, ` ${String(run.graphVersion || '').slice(0, 12)}`)),
      h('dt', null, 'Timing'), h('dd', null, `${fmtTime(run.createdAt)} → ${run.finishedAt ? fmtTime(run.finishedAt) : run.status === 'running' ? 'running' : '—'} · ${fmtMs(dur)}`),
      h('dt', null, 'Usage'), h('dd', { 'data-testid': 'run-usage' }, `${u.promptTokens ?? 0} prompt + ${u.completionTokens ?? 0} completion tokens`),
      h('dt', null, 'Cost'), h('dd', { 'data-testid': 'run-cost' }, u.costNanoUsd || !(u.promptTokens || u.completionTokens) ? fmtCost(u.costNanoUsd) : '— (no prices configured for its models)'),
      h('dt', null, 'Progress'), h('dd', { 'data-testid': 'run-progress' }, `${stepCount(run, tl)} steps · ${run.lastSeq ?? 0} events`),
      h('dt', null, 'Origin'), h('dd', null, origin),
      run.chatId ? [h('dt', null, 'Chat'), h('dd', { class: 'mono small' }, h('a', { href: hrefFor(['chats', run.chatId], { run: run.id }), 'data-testid': 'run-thread' }, run.chatId), run.messageId ? ` · message ${run.messageId}` : '')] : null,
      run.requestId ? [h('dt', null, 'Request'), h('dd', { class: 'mono small' }, run.requestId)] : null),
    run.error ? h('div', { class: 'alert alert-error', role: 'alert', 'data-testid': 'run-error' }, h('b', null, 'Error: '), errorText(run.error)) : null,
    verdictsCard(run));
}

export function mount(main, r) {
  const id = r.parts[1];
  let tab = TABS.some(([k]) => k === r.query.get('tab')) ? r.query.get('tab') : 'timeline';
  let alive = true;
  let timer = null;
  let lastTimeline = 0;
  const stateCache = new Map();
  const listeners = new Set();

  const ctx = {
    id,
    run: null,
    timeline: null,
    timelineError: null,
    step: r.query.has('step') ? +r.query.get('step') : null,
    graph: () => (ctx._graph ||= graphDetail(ctx.run.graph)),
    /** The state after step N (cached while the run is not running). */
    async stateAt(step) {
      const key = `${step}`;
      if (!stateCache.has(key) || ctx.run.status === 'running') stateCache.set(key, getJSON(`/api/runs/${encodeURIComponent(id)}/state?step=${step}`));
      try { return await stateCache.get(key); } catch (e) { stateCache.delete(key); throw e; }
    },
    /** Nodes that ran in a step (from the timeline). */
    nodesOf(step) {
      const tl = ctx.timeline;
      if (!tl) return [];
      if (ctx._stepIndex?.tl !== tl) ctx._stepIndex = { tl, map: new Map(tl.steps.map((x) => [x.step, x])) };
      const s = ctx._stepIndex.map.get(step);
      return s ? [...new Set(s.tasks.map((t) => t.node))] : [];
    },
    on(fn) { listeners.add(fn); return () => listeners.delete(fn); },
    emit(kind, data) { for (const fn of listeners) fn(kind, data); },
    openTab(name, opts = {}) {
      if (opts.step !== undefined) ctx.step = opts.step;
      ctx.focusStep = opts.focus ? opts.step : null;
      select(name, true);
    },
    setQuery() {
      const q = { tab };
      if (ctx.step !== null && (tab === 'state' || tab === 'fork')) q.step = ctx.step;
      replaceHash(hrefFor(['runs', id], q));
    },
  };

  const headSlot = h('div', null, h('div', { class: 'card' }, h('p', { class: 'muted' }, 'Loading run…')));
  const waitSlot = h('div', { 'data-testid': 'run-waiting' });
  /** The header, and what an interrupted run waits for with the controls that answer it. */
  function drawHead() {
    headSlot.replaceChildren(header(ctx.run, ctx.timeline));
    const waiting = ctx.run.status === 'interrupted' ? ctx.run.interrupts || ctx.run.waiting || [] : [];
    if (waitSlot.dataset.shown === JSON.stringify(waiting.map((i) => i.id))) return;
    waitSlot.dataset.shown = JSON.stringify(waiting.map((i) => i.id));
    waitSlot.replaceChildren(...waiting.map(waitCard));
  }
  /** The card of one interrupt: a breakpoint's (state, edits, continue/step/abort), or a person's answer. */
  function waitCard(it) {
    if (it.type !== 'breakpoint') return interruptCard(it, (value) => answer(it, value));
    const slot = h('div', null, h('p', { class: 'muted' }, 'Loading the paused state…'));
    const card = (detail) => slot.replaceChildren(pausedCard(it, { runId: id, detail, done: followResumed }));
    ctx.graph().then(card, () => card(null));
    return slot;
  }
  /** The run was sent on: follow it live until it pauses again or ends. */
  function followResumed() {
    ctx.run = { ...ctx.run, status: 'running' };
    drawHead();
    ctx.emit('run', ctx.run);
    clearTimeout(timer);
    timer = setTimeout(live, 50);
  }
  /** Answers one interrupt through POST /api/runs/{id}/resume, then follows the run live. */
  async function answer(it, value) {
    const res = await request(`/api/runs/${encodeURIComponent(id)}/resume`, { method: 'POST', json: { answers: { [it.id]: value } } });
    if (!res.ok) throw await errorOf(res);
    followResumed();
  }
  const tablist = h('div', { class: 'tabs', role: 'tablist', 'aria-label': 'Run views' });
  const panels = new Map();
  const mounted = new Map();
  for (const [key, label] of TABS) {
    const t = h('button', {
      type: 'button', role: 'tab', id: `tab-${key}`, 'aria-controls': `panel-${key}`, 'aria-selected': 'false', tabindex: '-1', 'data-testid': `tab-${key}`,
      onclick: () => select(key, true),
    }, label);
    tablist.append(t);
    panels.set(key, h('section', { role: 'tabpanel', id: `panel-${key}`, 'aria-labelledby': `tab-${key}`, class: 'hidden', tabindex: '0', 'data-testid': `panel-${key}` }));
  }
  tablist.addEventListener('keydown', (ev) => {
    const keys = TABS.map(([k]) => k);
    let i = keys.indexOf(tab);
    if (ev.key === 'ArrowRight') i = (i + 1) % keys.length;
    else if (ev.key === 'ArrowLeft') i = (i - 1 + keys.length) % keys.length;
    else if (ev.key === 'Home') i = 0;
    else if (ev.key === 'End') i = keys.length - 1;
    else return;
    ev.preventDefault();
    select(keys[i], true);
    tablist.querySelector(`#tab-${keys[i]}`).focus();
  });
  main.append(h('div', { 'data-testid': 'run-screen', 'data-run': id },
    h('nav', { 'aria-label': 'Breadcrumb', class: 'small', style: 'margin-bottom:8px' }, h('a', { href: '#/runs' }, 'Runs'), ' / ', h('span', { class: 'mono' }, shortId(id))),
    headSlot, waitSlot, tablist, ...panels.values()));

  function select(key, user) {
    tab = key;
    for (const [k] of TABS) {
      const t = tablist.querySelector(`#tab-${k}`);
      t.setAttribute('aria-selected', String(k === key));
      t.setAttribute('tabindex', k === key ? '0' : '-1');
      panels.get(k).classList.toggle('hidden', k !== key);
    }
    if (!ctx.run) return;
    const mod = TABS.find(([k]) => k === key)[2];
    if (!mounted.has(key)) mounted.set(key, mod.mount(panels.get(key), ctx) || {});
    else mounted.get(key).show?.();
    if (user) ctx.setQuery();
  }

  async function loadTimeline() {
    try {
      ctx.timeline = await getJSON(`/api/runs/${encodeURIComponent(id)}/timeline`);
      ctx.timelineError = null;
    } catch (e) {
      if (e.status === 404 && e.code !== 'not_found_run' && /endpoint|no such/i.test(e.message)) {
        // Older server: build the timeline from the events when the run is small enough.
        ctx.timelineError = e;
        try { ctx.timeline = await timeline.fromEvents(id, ctx.run.lastSeq); } catch (e2) { ctx.timeline = null; ctx.timelineError = e2; }
      } else {
        ctx.timeline = null;
        ctx.timelineError = e;
      }
    }
    lastTimeline = Date.now();
    if (ctx.run) drawHead();
    ctx.emit('timeline', ctx.timeline);
  }

  async function live() {
    if (!alive || !ctx.run || ctx.run.status !== 'running') return;
    try {
      const after = ctx.run.lastSeq || 0;
      const d = await getJSON(`/api/runs/${encodeURIComponent(id)}/events?after=${after}&limit=1000`);
      if (!alive) return;
      const evs = d.events || [];
      const run = await getJSON(`/api/runs/${encodeURIComponent(id)}`);
      if (!alive) return;
      if (evs.length) {
        run.lastSeq = Math.max(run.lastSeq || 0, evs[evs.length - 1].seq);
        ctx.emit('events', evs);
      }
      const ended = run.status !== 'running';
      ctx.run = run;
      drawHead();
      ctx.emit('run', run);
      if (ended || (evs.length && Date.now() - lastTimeline > 1500)) await loadTimeline();
      if (ended) { announce(`Run ${run.status}`); return; }
    } catch { /* retry on the next tick */ }
    if (alive) timer = setTimeout(live, POLL_MS);
  }

  (async () => {
    try {
      ctx.run = await getJSON(`/api/runs/${encodeURIComponent(id)}`);
    } catch (e) {
      headSlot.replaceChildren(errorBox(e, `Could not load run ${id}: `));
      tablist.classList.add('hidden');
      return;
    }
    if (!alive) return;
    drawHead();
    const tl = loadTimeline();
    select(tab, false);
    await tl;
    if (ctx.run.status === 'running') timer = setTimeout(live, POLL_MS);
  })();

  return {
    cleanup() {
      alive = false;
      clearTimeout(timer);
      for (const m of mounted.values()) m.cleanup?.();
    },
    update(nr) {
      const t = nr.query.get('tab');
      if (nr.query.has('step')) ctx.step = +nr.query.get('step');
      if (t && t !== tab && TABS.some(([k]) => k === t)) select(t, false);
      return true;
    },
  };
}
