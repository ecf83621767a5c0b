// Runs list: filters (graph, chat, status, time range) and cursor paging.

import { h, hrefFor, fmtTime, fmtMs, fmtCost, badge, errorBox, rovingList } from './util.js';
import { getJSON } from './api.js';

const STATUSES = ['running', 'finished', 'failed', 'cancelled', 'interrupted'];
const PAGE = 50;

function toLocalInput(ms) {
  if (!ms) return '';
  const d = new Date(+ms);
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
}

/**
 * A run id short enough to scan and long enough to tell runs apart. Run
 * ids are UUIDv7: they open with their creation time, so runs of one chat
 * share their first characters; the random end is what differs.
 */
export function shortId(id) {
  return id && id.length > 16 ? `…${id.slice(-8)}` : id;
}

/** For ids shown together: each one's shortest end (8 characters or more) that no other shares. */
export function distinctIds(ids) {
  const out = new Map();
  for (const id of ids) {
    let n = 8;
    while (n < id.length && ids.some((o) => o !== id && o.endsWith(id.slice(-n)))) n += 4;
    out.set(id, n >= id.length ? id : `…${id.slice(-n)}`);
  }
  return out;
}

/** The fork origin of a run: `fork` (newer servers) or `parent` {run_id, step}. */
export function originOf(run) {
  const p = run.parent;
  if (!p) return null;
  const parent = typeof p === 'string' ? p : p.run_id || p.runId || p.id;
  const step = run.fork?.step ?? (typeof p === 'object' ? p.step : undefined);
  return { parent, step, node: run.fork?.node || null, mode: run.fork?.mode || null, set: run.fork?.set || null };
}

export function mount(main, r) {
  const q = r.query;
  const filters = {
    graph: q.get('graph') || '', chat: q.get('chat') || '', status: q.get('status') || '',
    since: q.get('since') || '', until: q.get('until') || '',
  };
  let runs = [];
  let next = null;
  let legacy = false; // server without filter/cursor support: filter here, page by limit
  let limit = PAGE;
  let alive = true;

  const graphSel = h('select', { id: 'f-graph', name: 'graph', 'data-testid': 'filter-graph' }, h('option', { value: '' }, 'All graphs'),
    filters.graph ? h('option', { value: filters.graph, selected: true }, filters.graph) : null);
  const chatIn = h('input', { id: 'f-chat', type: 'text', name: 'chat', value: filters.chat, placeholder: 'chat id', 'data-testid': 'filter-chat' });
  const statusSel = h('select', { id: 'f-status', name: 'status', 'data-testid': 'filter-status' }, h('option', { value: '' }, 'Any status'),
    STATUSES.map((st) => h('option', { value: st, selected: st === filters.status }, st)));
  const sinceIn = h('input', { id: 'f-since', type: 'datetime-local', value: toLocalInput(filters.since), 'data-testid': 'filter-since' });
  const untilIn = h('input', { id: 'f-until', type: 'datetime-local', value: toLocalInput(filters.until), 'data-testid': 'filter-until' });
  const field = (id, label, el) => h('div', { class: 'field' }, h('label', { for: id }, label), el);
  const form = h('form', { class: 'filters card', role: 'search', 'aria-label': 'Filter runs', onsubmit: (ev) => {
    ev.preventDefault();
    const nq = {};
    if (graphSel.value) nq.graph = graphSel.value;
    if (chatIn.value.trim()) nq.chat = chatIn.value.trim();
    if (statusSel.value) nq.status = statusSel.value;
    if (sinceIn.value) nq.since = String(new Date(sinceIn.value).getTime());
    if (untilIn.value) nq.until = String(new Date(untilIn.value).getTime());
    location.hash = hrefFor(['runs'], nq);
  } },
  field('f-graph', 'Graph', graphSel), field('f-chat', 'Chat', chatIn), field('f-status', 'Status', statusSel),
  field('f-since', 'From', sinceIn), field('f-until', 'Until', untilIn),
  h('div', { class: 'row' }, h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'filter-apply' }, 'Apply'),
    h('a', { class: 'btn', href: '#/runs' }, 'Clear')));
  const tbody = h('tbody', { 'data-testid': 'runs-body' });
  const note = h('div');
  const more = h('button', { type: 'button', class: 'btn hidden', 'data-testid': 'runs-more', onclick: () => load(true) }, 'Load more');
  const count = h('p', { class: 'muted small', 'aria-live': 'polite' });
  main.append(h('div', { 'data-testid': 'runs-screen' },
    h('div', { class: 'row' }, h('h1', null, 'Runs'), h('span', { class: 'spacer' }), h('button', { type: 'button', class: 'btn', onclick: () => load(false) }, 'Refresh')),
    form, note,
    h('table', { class: 'table', 'data-testid': 'runs-table' },
      h('caption', { class: 'sr-only' }, 'Runs, newest first. Up and down arrows move between runs.'),
      h('thead', null, h('tr', null, ['Run', 'Graph', 'Status', 'Started', 'Duration', 'Tokens', 'Cost', 'Chat', 'Origin'].map((t) => h('th', { scope: 'col' }, t)))),
      tbody),
    h('div', { class: 'row', style: 'margin-top:10px' }, more, count)));
  rovingList(tbody, 'a.run-link');

  getJSON('/api/graphs').then((d) => {
    const ids = [...new Set([...d.graphs.map((g) => g.id), ...(filters.graph ? [filters.graph] : [])])].sort();
    graphSel.replaceChildren(h('option', { value: '' }, 'All graphs'), ...ids.map((id) => h('option', { value: id, selected: id === filters.graph }, id)));
  }).catch(() => {});

  function matches(run) {
    if (filters.graph && run.graph !== filters.graph) return false;
    if (filters.status && run.status !== filters.status) return false;
    if (filters.since && run.createdAt < +filters.since) return false;
    if (filters.until && run.createdAt >= +filters.until) return false;
    return true;
  }

  function row(run, i) {
    const o = originOf(run);
    const dur = run.finishedAt ? run.finishedAt - run.createdAt : null;
    const tokens = (run.usage?.promptTokens || 0) + (run.usage?.completionTokens || 0);
    return h('tr', { 'data-testid': 'run-row', 'data-run': run.id, 'data-message': run.messageId || '' },
      h('td', null, h('a', { class: 'run-link mono', href: hrefFor(['runs', run.id]), tabindex: i === 0 ? '0' : '-1', 'data-testid': 'run-open', title: run.id }, shortId(run.id))),
      h('td', null, run.graph),
      h('td', null, badge(run.status)),
      h('td', { class: 'small' }, fmtTime(run.createdAt)),
      h('td', { class: 'small' }, run.status === 'running' ? '…' : fmtMs(dur)),
      h('td', { class: 'small' }, String(tokens)),
      h('td', { class: 'small', 'data-testid': 'run-cost' }, fmtCost(run.usage?.costNanoUsd)),
      h('td', { class: 'small' }, run.chatId ? h('a', { href: hrefFor(['chats', run.chatId], { run: run.id }), title: 'The chat as a thread' }, run.chatId) : '—'),
      h('td', { class: 'small' }, o ? h('a', { href: hrefFor(['runs', o.parent]) }, `fork of ${shortId(o.parent)}${o.step !== undefined ? ` @${o.step}` : ''}`) : '—'));
  }

  async function load(append) {
    const params = new URLSearchParams();
    if (filters.chat) params.set('chat', filters.chat);
    if (append && !legacy && next) params.set('cursor', next);
    if (append && legacy) limit = Math.min(500, limit + PAGE);
    params.set('limit', String(legacy ? limit : PAGE));
    if (filters.graph) params.set('graph', filters.graph);
    if (filters.status) params.set('status', filters.status);
    if (filters.since) params.set('since', filters.since);
    if (filters.until) params.set('until', filters.until);
    more.disabled = true;
    try {
      const d = await getJSON(`/api/runs?${params}`);
      if (!alive) return;
      legacy = !('next' in d);
      let page = d.runs || [];
      if (legacy) {
        const full = page.length >= limit && limit < 500;
        page = page.filter(matches);
        runs = page;
        next = full ? 'more' : null;
        const filtering = filters.graph || filters.status || filters.since || filters.until;
        note.replaceChildren(filtering ? h('p', { class: 'alert alert-info small' }, 'This server does not filter runs by graph, status or time yet: the newest runs are filtered in the browser.') : '');
      } else {
        runs = append ? runs.concat(page) : page;
        next = d.next;
      }
      tbody.replaceChildren(...runs.map(row));
      if (!runs.length) tbody.append(h('tr', null, h('td', { colspan: 8, class: 'empty' }, 'No runs match.')));
      more.classList.toggle('hidden', !next);
      more.disabled = false;
      count.textContent = `${runs.length} run${runs.length === 1 ? '' : 's'}${next ? ' (more available)' : ''}`;
    } catch (e) {
      tbody.replaceChildren(h('tr', null, h('td', { colspan: 8 }, errorBox(e, 'Could not list runs: '))));
    }
  }

  load(false);
  return { cleanup() { alive = false; } };
}
