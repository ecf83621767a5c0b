// Timeline tab: supersteps × tasks with duration bars, attempts/retries, LLM
// and tool calls, errors. Data from GET /api/runs/{id}/timeline (or, on
// servers without it, built here from the events of a small run).

import { h, fill, fmtUs, errorBox, jsonLine } from './util.js';
import { getJSON } from './api.js';

const FALLBACK_MAX_EVENTS = 20000;
const STEPS_PER_PAGE = 200;
const TASKS_PER_STEP = 100; // a wide map fan-out shows its first tasks until asked for all

/** The timeline shape of the server endpoint, computed from events. */
export function build(events) {
  const steps = new Map();
  const tasks = new Map();
  const calls = new Map();
  const tools = new Map();
  const taskOf = (e) => {
    const key = `${e.step}|${e.node}|${e.task ?? ''}`;
    let t = tasks.get(key);
    if (!t) {
      t = { node: e.node, task: e.task ?? null, startedAt: e.at, durationUs: null, status: 'running', attempts: 0, retries: [], llm: [], tools: [] };
      tasks.set(key, t);
      if (!steps.has(e.step)) steps.set(e.step, { step: e.step, tasks: [] });
      steps.get(e.step).tasks.push(t);
    }
    return t;
  };
  for (const e of events) {
    if (!e.node) continue;
    const ev = e.event || {};
    const t = taskOf(e);
    const ck = `${e.step}|${e.node}|${e.task ?? ''}|${ev.call}`;
    switch (ev.type) {
      case 'node_started': t.attempts = ev.attempt ?? t.attempts + 1; break;
      case 'node_finished': t.status = 'finished'; t.durationUs = ev.duration_us ?? e.at - t.startedAt; break;
      case 'node_failed': t.status = 'failed'; t.error = jsonLine(ev.error, 300); t.durationUs = e.at - t.startedAt; break;
      case 'node_retrying': t.retries.push({ attempt: ev.attempt, error: jsonLine(ev.error, 200), delayMs: ev.delay_ms }); break;
      case 'llm_started': {
        const c = { call: ev.call, role: ev.role, model: ev.model, durationUs: null, promptTokens: 0, completionTokens: 0 };
        t.llm.push(c);
        calls.set(ck, c);
        break;
      }
      case 'llm_finished': {
        const c = calls.get(ck);
        if (c) {
          c.durationUs = ev.duration_us ?? null;
          c.promptTokens = ev.usage?.prompt_tokens ?? 0;
          c.completionTokens = ev.usage?.completion_tokens ?? 0;
        }
        break;
      }
      case 'llm_failed': { const c = calls.get(ck); if (c) c.error = jsonLine(ev.error, 200); break; }
      case 'tool_call_ready': {
        const c = { callId: ev.call_id, tool: ev.tool, durationUs: null, cached: false };
        t.tools.push(c);
        tools.set(ev.call_id, c);
        break;
      }
      case 'tool_result': {
        let c = tools.get(ev.call_id);
        if (!c) { c = { callId: ev.call_id, tool: ev.tool, durationUs: null, cached: false }; t.tools.push(c); tools.set(ev.call_id, c); }
        c.durationUs = ev.duration_us ?? null;
        c.cached = !!ev.cached;
        break;
      }
      case 'tool_error': {
        let c = tools.get(ev.call_id);
        if (!c) { c = { callId: ev.call_id, tool: ev.tool, durationUs: null, cached: false }; t.tools.push(c); }
        c.error = jsonLine(ev.error, 200);
        break;
      }
      default:
        if (/interrupt/.test(ev.type || '')) t.status = 'interrupted';
    }
  }
  return { steps: [...steps.values()].sort((a, b) => a.step - b.step), firstSeq: events[0]?.seq ?? 0, lastSeq: events[events.length - 1]?.seq ?? 0, computed: true };
}

/** Fetches every event of a small run and builds its timeline. */
export async function fromEvents(id, lastSeq) {
  if (lastSeq > FALLBACK_MAX_EVENTS) throw new Error(`This server has no timeline endpoint, and the run has ${lastSeq} events: too many to build the timeline in the browser.`);
  const all = [];
  let after = 0;
  for (;;) {
    const d = await getJSON(`/api/runs/${encodeURIComponent(id)}/events?after=${after}&limit=5000`);
    all.push(...d.events);
    if (d.next === null || d.next === undefined || !d.events.length) break;
    after = d.next;
  }
  return build(all);
}

function task(t, t0, span) {
  const left = span > 0 ? ((t.startedAt - t0) / span) * 100 : 0;
  const width = span > 0 && t.durationUs ? Math.max(0.4, (t.durationUs / span) * 100) : 0.4;
  const tokens = t.llm.reduce((a, c) => a + (c.promptTokens || 0) + (c.completionTokens || 0), 0);
  const details = [];
  if (t.attempts > 1 || t.retries.length) details.push(h('div', null, `attempts: ${t.attempts}`));
  for (const r of t.retries) details.push(h('div', { class: 'ev-error' }, `retry after attempt ${r.attempt} (wait ${r.delayMs} ms): ${r.error}`));
  for (const c of t.llm) {
    details.push(h('div', { 'data-testid': 'tl-llm' }, `LLM #${c.call} ${c.role || ''} · ${c.model || '?'} · ${fmtUs(c.durationUs)} · ${c.promptTokens ?? 0}+${c.completionTokens ?? 0} tokens`,
      c.error ? h('span', { class: 'ev-error' }, ` · ${c.error}`) : null));
  }
  for (const c of t.tools) {
    details.push(h('div', { 'data-testid': 'tl-tool' }, `tool ${c.tool} · ${fmtUs(c.durationUs)}${c.cached ? ' · cached' : ''}`,
      c.error ? h('span', { class: 'ev-error' }, ` · ${c.error}`) : null));
  }
  if (t.error) details.push(h('div', { class: 'ev-error', 'data-testid': 'tl-error' }, `error: ${typeof t.error === 'string' ? t.error : jsonLine(t.error, 300)}`));
  return h('div', { class: `tl-task ${t.status}`, 'data-testid': 'tl-task', 'data-node': t.node, 'data-status': t.status },
    h('div', { class: 'tl-head' },
      h('div', null, h('b', null, t.node), t.task !== null && t.task !== undefined && t.task !== 0 ? h('span', { class: 'muted' }, ` #${t.task}`) : null,
        t.status !== 'finished' ? h('span', { class: `badge badge-${t.status === 'failed' ? 'failed' : t.status === 'running' ? 'running' : 'interrupted'}`, style: 'margin-left:6px' }, t.status) : null),
      h('div', { class: 'tl-track', role: 'img', 'aria-label': `${t.node}: ${fmtUs(t.durationUs)}` },
        h('div', { class: `tl-bar ${t.status}`, style: `left:${Math.min(99.6, left).toFixed(2)}%;width:${Math.min(100, width).toFixed(2)}%` })),
      h('div', { class: 'small', style: 'text-align:right' }, fmtUs(t.durationUs), tokens ? h('div', { class: 'muted' }, `${tokens} tok`) : null)),
    details.length ? h('div', { class: 'tl-details' }, details) : null);
}

export function mount(el, ctx) {
  let shown = STEPS_PER_PAGE;
  const allTasks = new Set(); // steps whose every task is shown
  function draw() {
    const tl = ctx.timeline;
    if (!tl) {
      el.replaceChildren(ctx.timelineError ? errorBox(ctx.timelineError, 'Timeline unavailable: ') : h('p', { class: 'muted' }, 'Loading timeline…'));
      return;
    }
    const all = tl.steps.flatMap((s) => s.tasks);
    const t0 = all.reduce((m, t) => Math.min(m, t.startedAt), Infinity);
    const t1 = all.reduce((m, t) => Math.max(m, t.startedAt + (t.durationUs || 0)), -Infinity);
    const span = all.length ? Math.max(1, t1 - t0) : 1;
    const steps = tl.steps.slice(0, shown);
    fill(el,
      tl.computed ? h('p', { class: 'alert alert-info small' }, 'This server has no timeline endpoint: the timeline was built in the browser from the run\'s events.') : null,
      h('p', { class: 'muted small' }, `${tl.steps.length} steps · ${all.length} tasks · events ${tl.firstSeq}–${tl.lastSeq} · bars are placed on the run's time axis`),
      !tl.steps.length ? h('p', { class: 'empty' }, 'No node ran yet.') : null,
      h('div', { class: 'timeline', 'data-testid': 'timeline' },
        steps.map((s) => h('div', { class: 'tl-step', 'data-testid': 'tl-step', 'data-step': s.step },
          h('div', { class: 'tl-step-label' }, h('button', { type: 'button', class: 'btn-link', title: 'Show the state after this step', onclick: () => ctx.openTab('state', { step: s.step }) }, `Step ${s.step}`)),
          h('div', null, (allTasks.has(s.step) ? s.tasks : s.tasks.slice(0, TASKS_PER_STEP)).map((t) => task(t, t0, span)),
            s.tasks.length > TASKS_PER_STEP && !allTasks.has(s.step)
              ? h('button', { type: 'button', class: 'btn btn-small', 'data-testid': 'tl-more-tasks', onclick: () => { allTasks.add(s.step); draw(); } }, `Show all ${s.tasks.length} tasks of step ${s.step}`)
              : null)))),
      tl.steps.length > shown ? h('button', { type: 'button', class: 'btn', style: 'margin-top:8px', onclick: () => { shown += STEPS_PER_PAGE; draw(); } }, `Show more steps (${tl.steps.length - shown} left)`) : null);
  }
  /** Scrolls to the step another tab asked for (the Path tab's step links) and marks it. */
  function focusStep() {
    if (ctx.focusStep === null || ctx.focusStep === undefined) return;
    const want = ctx.focusStep;
    const i = ctx.timeline?.steps.findIndex((st) => st.step === want) ?? -1;
    if (i >= shown) { shown = i + 1; draw(); }
    const row = el.querySelector(`[data-testid="tl-step"][data-step="${want}"]`);
    if (!row) return;
    for (const r of el.querySelectorAll('.tl-focus')) r.classList.remove('tl-focus');
    row.classList.add('tl-focus');
    row.scrollIntoView({ block: 'center' });
    row.querySelector('button')?.focus({ preventScroll: true });
    ctx.focusStep = null;
  }
  draw();
  focusStep();
  const off = ctx.on((kind) => { if (kind === 'timeline') draw(); });
  return { cleanup: off, show: focusStep };
}
