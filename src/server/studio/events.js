// Events tab: the raw event log in a virtualised list, fetched in pages
// (?after=&limit=) as rows scroll into view; new events of a running run appended.

import { h, fill, fmtUs, json, jsonLine } from './util.js';
import { getJSON } from './api.js';
import { VirtualList } from './vlist.js';

const PAGE = 250;
const ROW = 28;

function summary(ev) {
  const e = ev.event || {};
  switch (e.type) {
    case 'text_delta': case 'reasoning_delta': return `#${e.call} ${JSON.stringify(e.delta)}`;
    case 'node_started': return `attempt ${e.attempt}${e.item !== undefined ? ` item ${jsonLine(e.item, 60)}` : ''}`;
    case 'node_finished': return `${fmtUs(e.duration_us)} patch ${jsonLine(e.patch, 200)}`;
    case 'llm_started': return `#${e.call} ${e.role} ${e.model}`;
    case 'llm_finished': return `#${e.call} ${fmtUs(e.duration_us)} ${e.usage ? `${e.usage.prompt_tokens}+${e.usage.completion_tokens} tok` : ''}`;
    case 'tool_call_ready': return `${e.tool} ${jsonLine(e.args, 160)}`;
    case 'tool_result': return `${e.tool} ${fmtUs(e.duration_us)}${e.cached ? ' cached' : ''} → ${jsonLine(e.output, 160)}`;
    case 'thinking': return jsonLine(e.text, 200);
    case 'custom': return `${e.name} ${jsonLine(e.data, 160)}`;
    default: {
      const { type, ...rest } = e;
      void type;
      return jsonLine(rest, 220);
    }
  }
}

export function mount(el, ctx) {
  const id = ctx.id;
  const bySeq = new Map();
  const pending = new Set(); // page numbers being fetched
  const loaded = new Set();
  let first = ctx.timeline?.firstSeq || 1;
  let last = ctx.run.lastSeq || 0;
  const detail = h('div', { class: 'card', style: 'margin-top:10px', 'data-testid': 'event-detail' }, h('p', { class: 'muted small' }, 'Select an event (click, or arrow keys and Enter) to see it in full.'));
  const status = h('span', { class: 'muted small', 'data-testid': 'events-status' });
  let rangeTimer = 0;
  let shownSeq = null; // the event in the detail card

  /** The detail card for `seq`: the event, or (its page not here yet) a fetch and a note that fills in when it arrives. */
  function showDetail(seq) {
    shownSeq = seq;
    const ev = bySeq.get(seq);
    if (!ev) fetchPage(pageOf(seq));
    fill(detail, ev
      ? [h('h2', { class: 'card-title' }, `Event ${ev.seq} · ${ev.event?.type}`), h('pre', { class: 'json', tabindex: '0', 'data-testid': 'event-json' }, json(ev))]
      : h('p', { class: 'muted', 'data-testid': 'event-loading' }, `Loading event ${seq}…`));
  }
  /** After events arrive: the detail card waiting for one of them is filled. */
  function refreshDetail() {
    if (shownSeq !== null && bySeq.has(shownSeq) && !detail.querySelector('[data-testid="event-json"]')) showDetail(shownSeq);
  }

  const list = new VirtualList({
    rowHeight: ROW,
    label: 'Run events',
    testid: 'events-list',
    renderRow(i) {
      const seq = first + i;
      const ev = bySeq.get(seq);
      if (!ev) {
        return h('div', { class: 'loading', 'data-seq': seq, 'data-testid': 'event-row' }, h('span', null, seq), h('span', null, ''), h('span', null, loaded.has(pageOf(seq)) ? '(none)' : 'loading…'));
      }
      const type = ev.event?.type || '?';
      return h('div', { 'data-seq': seq, 'data-testid': 'event-row', 'data-type': type },
        h('span', { class: 'muted' }, ev.seq),
        h('span', { class: 'muted' }, `s${ev.step}`),
        h('span', null, ev.node ? `${ev.node}${ev.task ? `#${ev.task}` : ''}` : ''),
        h('span', { class: `ev-type${/fail|error/.test(type) ? ' ev-failed' : ''}` }, type),
        h('span', null, summary(ev)));
    },
    onRange(a, b) {
      // Wait for scrolling to settle so a fling does not fetch every page it passes.
      clearTimeout(rangeTimer);
      rangeTimer = setTimeout(() => ensure(first + a, first + b), 60);
    },
    onActivate(i) { showDetail(first + i); },
  });

  el.append(h('div', { class: 'row', style: 'margin-bottom:6px' }, h('span', { class: 'small muted' }, 'seq · step · node · type · summary'), h('span', { class: 'spacer' }), status),
    list.el, detail);

  function pageOf(seq) {
    return Math.floor((seq - first) / PAGE);
  }

  async function fetchPage(p) {
    if (pending.has(p) || loaded.has(p)) return;
    pending.add(p);
    try {
      const after = first + p * PAGE - 1;
      const d = await getJSON(`/api/runs/${encodeURIComponent(id)}/events?after=${after}&limit=${PAGE}`);
      for (const ev of d.events) bySeq.set(ev.seq, ev);
      loaded.add(p);
      const maxSeq = d.events.length ? d.events[d.events.length - 1].seq : 0;
      if (maxSeq > last) { last = maxSeq; list.setCount(last - first + 1); }
      list.refresh();
      refreshDetail();
    } catch (e) {
      status.textContent = `Could not load events: ${e.message}`;
    } finally {
      pending.delete(p);
      status.textContent = `${last - first + 1} events · ${bySeq.size} loaded`;
    }
  }

  function ensure(a, b) {
    for (let p = pageOf(a); p <= pageOf(b); p++) fetchPage(p);
  }

  list.setCount(Math.max(0, last - first + 1));
  status.textContent = `${last - first + 1} events`;

  const off = ctx.on((kind, data) => {
    if (kind !== 'events') return;
    for (const ev of data) bySeq.set(ev.seq, ev);
    const maxSeq = data[data.length - 1].seq;
    const atEnd = list.el.scrollTop + list.el.clientHeight >= list.inner.offsetHeight - ROW * 2;
    if (maxSeq > last) {
      last = maxSeq;
      list.setCount(last - first + 1);
    }
    list.refresh();
    refreshDetail();
    if (atEnd) list.el.scrollTop = list.inner.offsetHeight;
    status.textContent = `${last - first + 1} events · live`;
  });
  /** Back on the tab: the log may have grown while it was hidden (the run went on), and the rows are drawn again. */
  function show() {
    const runLast = ctx.run.lastSeq || 0;
    if (runLast > last) { last = runLast; list.setCount(last - first + 1); }
    list.refresh();
    refreshDetail();
  }
  return { cleanup() { off(); clearTimeout(rangeTimer); }, show };
}
