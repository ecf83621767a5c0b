// Playground: chat with a graph through POST /api/chat exactly like useChat,
// rendering the UI message stream; stop, regenerate, resume after reload.

import { h, json, hrefFor, replaceHash, randomId, announce, errorBox, fmtMs, rovingList, fmtTime } from './util.js';
import { getJSON, request, errorOf, readUIStream, graphDetail } from './api.js';
import { assistantMessage, applyChunk, closeMessage, toUIMessage } from './uistream.js';
import { interruptCard, optionText } from './hitl.js';
import * as breakpoints from './breakpoints.js';

const LAST_GRAPH = 'stategraph.studio.graph';
const chatKey = (g) => `stategraph.studio.chat.${g}`;
const store = {
  get: (k) => { try { return localStorage.getItem(k); } catch { return null; } },
  set: (k, v) => { try { localStorage.setItem(k, v); } catch { /* */ } },
};

function textOf(m) {
  return m.parts.filter((p) => p.type === 'text').map((p) => p.text).join('\n');
}

function toolName(p) {
  return p.type === 'dynamic-tool' ? p.toolName : p.type.slice(5);
}

function jsonBlock(v, testid) {
  return h('pre', { class: 'json', tabindex: '0', 'data-testid': testid }, v === undefined ? '—' : json(v));
}

function renderThinking(m, items) {
  const running = items.some((p) => p.data?.status === 'running') || m._status === 'streaming';
  const open = m._ui?.thinking ?? running;
  const det = h('details', { class: 'thinking', 'data-testid': 'thinking-panel', open },
    h('summary', null, `Thinking · ${items.length} step${items.length === 1 ? '' : 's'}${running && m._status === 'streaming' ? ' (working…)' : ''}`),
    items.map((p) => {
      const d = p.data || {};
      return h('div', { class: 'think-item', 'data-testid': 'thinking-item', 'data-node': d.node },
        h('div', { class: 'row small' }, h('b', null, d.node || p.id || 'step'), d.kind ? h('span', { class: 'muted' }, d.kind) : null,
          d.status ? h('span', { class: `badge ${d.status === 'done' ? 'badge-ok' : d.status === 'failed' || d.status === 'error' ? 'badge-failed' : 'badge-running'}` }, d.status) : null,
          d.durationMs !== undefined ? h('span', { class: 'muted' }, fmtMs(d.durationMs)) : null),
        d.text ? h('div', { class: 'msg-text small', 'data-testid': 'thinking-text' }, d.text) : null,
        (d.notes || []).length ? h('ul', { class: 'small muted' }, d.notes.map((n) => h('li', null, typeof n === 'string' ? n : json(n)))) : null,
        (d.toolCalls || []).map((t) => h('div', { class: 'tool small', 'data-testid': 'thinking-tool' },
          h('div', { class: 'tool-head' }, h('code', null, t.toolName), h('span', { class: 'muted' }, t.state || '')),
          h('div', null, 'input'), jsonBlock(t.input),
          t.output !== undefined ? [h('div', null, 'output'), jsonBlock(t.output)] : null,
          t.errorText ? h('div', { class: 'alert alert-error' }, t.errorText) : null)));
    }));
  det.addEventListener('toggle', () => { if (det.open !== open) (m._ui ||= {}).thinking = det.open; });
  return det;
}

/**
 * What a paused answer waits for that the tool part itself cannot answer:
 * a client tool's call (an input for its output, sent back as `addToolOutput`
 * would) and a question (its options as buttons, or typed: the next user
 * message answers it). Only on the newest answer while it still waits.
 */
function renderWaits(m, ctx) {
  if (!ctx.waiting(m)) return [];
  const out = [];
  for (const p of m.parts) {
    if ((p.type === 'dynamic-tool' || p.type.startsWith('tool-')) && p.state === 'input-available') {
      out.push(interruptCard({ id: p.toolCallId, type: 'client_tool', tool: toolName(p), args: p.input }, (v) => ctx.onToolOutput(m, p, v)));
    } else if (p.type === 'data-interrupt' && p.data?.type === 'question') {
      out.push(interruptCard(p.data, (v) => ctx.send(typeof v === 'string' ? v : optionText(v))));
    } else if (p.type === 'data-interrupt' && p.data?.type === 'breakpoint') {
      out.push(breakpoints.pausedCard(p.data, ctx.breakpointHooks(m)));
    }
  }
  return out;
}

function renderTool(m, p, onApproval) {
  const state = p.state || '';
  return h('div', { class: 'tool', 'data-testid': 'tool-call', 'data-tool': toolName(p), 'data-state': state },
    h('div', { class: 'tool-head' }, h('span', null, 'Tool'), h('code', null, toolName(p)),
      h('span', { class: `badge ${state === 'output-error' || state === 'output-denied' ? 'badge-failed' : state === 'output-available' ? 'badge-ok' : 'badge-neutral'}` }, state),
      p.preliminary ? h('span', { class: 'muted small' }, 'preliminary') : null),
    h('div', { class: 'small muted' }, 'Input'), jsonBlock(p.input ?? (p._inputText || undefined), 'tool-input'),
    p.output !== undefined ? [h('div', { class: 'small muted' }, 'Output'), jsonBlock(p.output, 'tool-output')] : null,
    p.errorText ? h('div', { class: 'alert alert-error', 'data-testid': 'tool-error' }, p.errorText) : null,
    state === 'approval-requested'
      ? h('div', { class: 'row', 'data-testid': 'tool-approval' }, h('span', null, 'This tool call needs approval.'),
        h('button', { type: 'button', class: 'btn btn-primary btn-small', 'data-testid': 'tool-approve', onclick: () => onApproval(m, p, true) }, 'Approve'),
        h('button', { type: 'button', class: 'btn btn-danger btn-small', 'data-testid': 'tool-deny', onclick: () => onApproval(m, p, false) }, 'Deny'))
      : null);
}

export function renderMessage(m, ctx) {
  if (m.role !== 'assistant') {
    return h('article', { class: 'msg msg-user', 'data-testid': `message-${m.role}`, 'data-id': m.id, 'aria-label': m.role === 'user' ? 'Your message' : `${m.role} message` },
      h('div', { class: 'msg-head' }, m.role === 'user' ? 'You' : m.role),
      h('div', { class: 'msg-text' }, textOf(m)));
  }
  const thinking = m.parts.filter((p) => p.type === 'data-thinking');
  const sources = m.parts.filter((p) => p.type === 'source-url' || p.type === 'source-document');
  const followups = m.parts.filter((p) => p.type === 'data-followups');
  const otherData = m.parts.filter((p) => p.type.startsWith('data-') && p.type !== 'data-thinking' && p.type !== 'data-followups' && !(p.type === 'data-interrupt' && ctx.waiting(m)));
  const runId = m.metadata?.runId || m._runId;
  const usage = m.metadata?.usage;
  const body = [];
  if (thinking.length) body.push(renderThinking(m, thinking));
  for (const p of m.parts) {
    if (p.type === 'text') {
      body.push(h('div', { class: `msg-text${p.state === 'streaming' && m._status === 'streaming' ? ' cursor' : ''}`, 'data-testid': 'answer-text' }, p.text));
    } else if (p.type === 'reasoning') {
      const det = h('details', { class: 'thinking', 'data-testid': 'reasoning', open: m._ui?.reasoning ?? m._status === 'streaming' },
        h('summary', null, 'Reasoning'), h('div', { class: 'msg-text small' }, p.text));
      const initial = det.open;
      det.addEventListener('toggle', () => { if (det.open !== initial) (m._ui ||= {}).reasoning = det.open; });
      body.push(det);
    } else if (p.type === 'dynamic-tool' || p.type.startsWith('tool-')) {
      body.push(renderTool(m, p, ctx.onApproval));
    } else if (p.type === 'file') {
      body.push(h('div', { class: 'small' }, 'File: ', h('a', { href: p.url, target: '_blank', rel: 'noopener' }, p.filename || p.mediaType)));
    }
  }
  if (sources.length) {
    body.push(h('div', { 'data-testid': 'sources' }, h('h3', null, 'Sources'),
      h('ol', { class: 'sources' }, sources.map((p) => h('li', { 'data-testid': 'source' },
        p.type === 'source-url' ? h('a', { href: p.url, target: '_blank', rel: 'noopener noreferrer' }, p.title || p.url) : `${p.title} (${p.mediaType})`,
        h('span', { class: 'muted small' }, ` [${p.sourceId}]`))))));
  }
  body.push(...renderWaits(m, ctx));
  for (const e of m._errors || []) body.push(h('div', { class: 'alert alert-error', role: 'alert', 'data-testid': 'stream-error' }, `Error: ${e}`));
  if (followups.length) {
    const qs = followups.flatMap((p) => (Array.isArray(p.data?.questions) ? p.data.questions : Array.isArray(p.data) ? p.data : []));
    body.push(h('div', { class: 'followups', role: 'group', 'aria-label': 'Follow-up questions', 'data-testid': 'followups' },
      qs.map((q) => h('button', { type: 'button', class: 'btn btn-small', 'data-testid': 'followup', disabled: ctx.busy(), onclick: () => ctx.send(String(q)) }, String(q)))));
  }
  for (const p of otherData) {
    body.push(h('details', { class: 'data-part', 'data-testid': 'data-part', 'data-type': p.type },
      h('summary', null, `${p.type}${p.id !== undefined ? ` · ${p.id}` : ''}`), jsonBlock(p.data)));
  }
  let status;
  if (m._status === 'streaming') status = h('span', { class: 'badge badge-running' }, 'streaming');
  else if (m._status === 'aborted') status = h('span', { class: 'badge badge-cancelled' }, 'stopped');
  else if (m._status === 'error') status = h('span', { class: 'badge badge-failed' }, 'error');
  else status = h('span', { class: 'badge badge-ok', 'data-testid': 'finish' }, `finish: ${m._finish || m.metadata?.finishReason || 'stop'}`);
  return h('article', { class: 'msg', 'data-testid': 'message-assistant', 'data-id': m.id, 'data-status': m._status || 'done', 'aria-label': 'Assistant message' },
    h('div', { class: 'msg-head' }, h('b', null, 'Assistant'), status,
      m.metadata?.graph ? h('span', null, `graph ${m.metadata.graph}`) : null,
      usage ? h('span', null, `${usage.totalTokens ?? (usage.promptTokens || 0) + (usage.completionTokens || 0)} tokens`) : null,
      m.metadata?.offlineModel ? h('span', { title: m.metadata.notice || '' }, 'offline model') : null,
      h('span', { class: 'spacer' }),
      runId ? h('a', { href: hrefFor(['runs', runId]), 'data-testid': 'run-link' }, 'View run') : null),
    body);
}

export function mount(main, r) {
  let graph = r.parts[1] || store.get(LAST_GRAPH) || 'chat';
  let chatId = r.query.get('chat') || store.get(chatKey(graph)) || randomId('chat_');
  store.set(LAST_GRAPH, graph);
  store.set(chatKey(graph), chatId);
  replaceHash(hrefFor(['playground', graph], { chat: chatId }));

  let messages = [];
  let streaming = false;
  let reader = null; // AbortController of the current stream read
  let alive = true;
  const els = new Map();
  const dirty = new Set();

  const graphSel = h('select', { id: 'pg-graph', 'data-testid': 'graph-select', onchange: () => {
    const g = graphSel.value;
    location.hash = hrefFor(['playground', g], { chat: store.get(chatKey(g)) || randomId('chat_') });
  } }, h('option', { value: graph }, graph));
  const chatsEl = h('ul', { class: 'list', role: 'listbox', 'aria-label': 'Chats', 'data-testid': 'chat-list' });
  const list = h('div', { class: 'messages', role: 'log', 'aria-label': 'Conversation', 'data-testid': 'messages' });
  const errorSlot = h('div', { 'data-testid': 'chat-error' });
  const input = h('textarea', { id: 'pg-input', rows: 2, placeholder: 'Ask something… (Enter to send, Shift+Enter for a new line)', 'data-testid': 'chat-input' });
  const sendBtn = h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'send' }, 'Send');
  const stopBtn = h('button', { type: 'button', class: 'btn', disabled: true, 'data-testid': 'stop', onclick: stop }, 'Stop');
  const regenBtn = h('button', { type: 'button', class: 'btn', disabled: true, 'data-testid': 'regenerate', onclick: regenerate }, 'Regenerate');
  // While an answer streams (one sent here, or an active run resumed on
  // load) a message is not sent, and its text stays in the box: clearing it
  // first would lose what the person typed.
  const submit = (ev) => {
    ev.preventDefault();
    const t = input.value.trim();
    if (!t) return;
    if (streaming) { announce('Wait for the answer to finish, then send'); return; }
    input.value = '';
    send(t);
  };
  const form = h('form', { class: 'composer', 'aria-label': 'Send a message', 'data-testid': 'composer', onsubmit: submit },
    h('label', { for: 'pg-input', class: 'sr-only' }, 'Message'), input, sendBtn, stopBtn, regenBtn);
  input.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); form.requestSubmit(); }
  });
  let bpPicker = null; // the breakpoint picker, once the graph's nodes are known
  const bpSlot = h('div', { style: 'margin-top:12px' });
  const chatIdEl = h('code', { 'data-testid': 'chat-id' }, chatId);
  main.append(h('div', { class: 'split', 'data-testid': 'playground-screen' },
    h('div', null,
      h('div', { class: 'field' }, h('label', { for: 'pg-graph' }, 'Graph'), graphSel),
      h('div', { class: 'row', style: 'margin:10px 0' },
        h('button', { type: 'button', class: 'btn', 'data-testid': 'new-chat', onclick: () => { location.hash = hrefFor(['playground', graph], { chat: randomId('chat_') }); } }, 'New chat')),
      h('h2', { class: 'list-title' }, 'Recent chats'), chatsEl, bpSlot),
    h('section', { class: 'chat', 'aria-labelledby': 'pg-title' },
      h('div', { class: 'row' }, h('h1', { id: 'pg-title' }, `Playground · ${graph}`), h('span', { class: 'spacer' }),
        h('span', { class: 'muted small' }, 'chat ', chatIdEl), h('a', { href: hrefFor(['runs'], { chat: chatId }), class: 'btn btn-small' }, 'Runs of this chat'),
        h('a', { href: hrefFor(['chats', chatId]), class: 'btn btn-small', 'data-testid': 'open-thread' }, 'Thread')),
      list, errorSlot, form)));
  rovingList(chatsEl, '[role="option"]', { onActivate: (el) => el.click() });

  const ctx = { send, busy: () => streaming, onApproval, onToolOutput, waiting, breakpointHooks };

  /** What a paused-at-a-breakpoint card needs: the chat, the graph's fields, the breakpoints, and what follows the action. */
  function breakpointHooks(m) {
    return {
      chatId, detail: bpPicker?.detail, breakpoints: () => bpPicker?.get(),
      done: (action) => {
        m.metadata = { ...m.metadata, interrupted: false };
        if (action === 'abort') { touch(m); return; }
        follow();
      },
    };
  }

  /** Streams the chat's active run (after a resume through the runs API). */
  async function follow() {
    try {
      const res = await request(`/api/chat/${encodeURIComponent(chatId)}/stream`);
      if (res.status !== 200 || !alive) return;
      streaming = true;
      setButtons();
      await consume(res, { resume: true });
    } catch (e) {
      errorSlot.replaceChildren(errorBox(e, 'Could not follow the run: '));
    } finally {
      streaming = false;
      setButtons();
      linkRuns();
    }
  }

  /** Whether `m` is the newest message, finished, and paused for the user. */
  function waiting(m) {
    return m === messages[messages.length - 1] && m._status === 'done' && !!m.metadata?.interrupted;
  }

  function paint() {
    for (const m of dirty) {
      const el = renderMessage(m, ctx);
      const old = els.get(m);
      if (old && old.isConnected) old.replaceWith(el);
      else list.append(el);
      els.set(m, el);
    }
    dirty.clear();
  }
  let frame = 0;
  function touch(m) {
    dirty.add(m);
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; paint(); });
  }
  function redrawAll() {
    list.replaceChildren();
    els.clear();
    if (!messages.length) list.append(h('p', { class: 'empty', 'data-testid': 'empty-chat' }, `Start a conversation with the ${graph} graph.`));
    for (const m of messages) dirty.add(m);
    paint();
    setButtons();
  }
  function setButtons() {
    sendBtn.disabled = streaming;
    stopBtn.disabled = !streaming;
    regenBtn.disabled = streaming || !messages.some((m) => m.role === 'user');
    for (const b of list.querySelectorAll('[data-testid="followup"]')) b.disabled = streaming;
  }

  async function loadBreakpoints() {
    try {
      const detail = await graphDetail(graph);
      if (!alive) return;
      bpPicker = { ...breakpoints.picker(detail), detail };
      bpSlot.replaceChildren(bpPicker.el);
      if (messages.length) redrawAll();
    } catch { /* no picker */ }
  }

  async function loadGraphs() {
    try {
      const d = await getJSON('/api/graphs');
      const ids = d.graphs.map((g) => g.id);
      if (!ids.includes(graph)) ids.unshift(graph);
      graphSel.replaceChildren(...ids.map((id) => h('option', { value: id, selected: id === graph }, id)));
    } catch { /* keep the single option */ }
  }

  async function loadChats() {
    try {
      const d = await getJSON('/api/chats');
      const chats = (d.chats || []).sort((a, b) => (b.updatedAt || 0) - (a.updatedAt || 0)).slice(0, 30);
      chatsEl.replaceChildren(...chats.map((c, i) => h('li', {
        role: 'option', tabindex: (c.id === chatId || (i === 0 && !chats.some((x) => x.id === chatId))) ? '0' : '-1', 'aria-selected': String(c.id === chatId), 'data-testid': 'chat-item',
        onclick: () => { location.hash = hrefFor(['playground', graph], { chat: c.id }); },
      }, h('span', null, c.title || c.id), h('span', { class: 'muted small' }, fmtTime(c.updatedAt).slice(5, 16)))));
      if (!chats.length) chatsEl.append(h('li', { class: 'muted small', style: 'padding:6px' }, 'No chats yet'));
    } catch (e) {
      chatsEl.replaceChildren(h('li', null, errorBox(e)));
    }
  }

  // Runs of this chat by messageId, for messages without metadata.runId.
  async function linkRuns() {
    if (!messages.some((m) => m.role === 'assistant' && !m.metadata?.runId && !m._runId)) return;
    try {
      const d = await getJSON(`/api/runs?chat=${encodeURIComponent(chatId)}&limit=200`);
      for (const m of messages) {
        const run = d.runs.find((x) => x.messageId === m.id);
        if (run && !m.metadata?.runId) { m._runId = run.id; touch(m); }
      }
    } catch { /* no links */ }
  }

  async function consume(res, { resume = false, into = null } = {}) {
    reader = new AbortController();
    let m = into;
    const target = () => {
      if (!m) {
        m = assistantMessage(randomId('msg_'));
        messages.push(m);
        list.querySelector('[data-testid="empty-chat"]')?.remove();
      }
      return m;
    };
    try {
      for await (const chunk of readUIStream(res, reader.signal)) {
        if (!alive) return;
        if (chunk.type === 'start' && chunk.messageId) {
          const existing = messages.find((x) => x.id === chunk.messageId);
          if (existing && existing !== m) {
            if (m && !m.parts.length) { messages.splice(messages.indexOf(m), 1); els.get(m)?.remove(); }
            m = existing;
            if (resume) { m.parts = []; m._errors = []; m._text = {}; m._reasoning = {}; m._finish = null; }
            m._status = 'streaming';
          }
        }
        applyChunk(target(), chunk);
        touch(m);
      }
    } catch (e) {
      if (alive && m) { m._errors.push(`stream interrupted: ${e.message}`); m._status = 'error'; }
    } finally {
      if (m) { closeMessage(m); touch(m); }
      reader = null;
    }
    return m;
  }

  async function post(body, { into = null } = {}) {
    streaming = true;
    errorSlot.replaceChildren();
    setButtons();
    try {
      const bp = bpPicker?.get();
      const res = await request('/api/chat', { method: 'POST', json: { ...body, graph, ...(bp ? { breakpoints: bp } : {}) } });
      if (!res.ok) throw await errorOf(res);
      const m = await consume(res, { into });
      if (m) announce(m._status === 'error' ? 'The answer ended with an error' : 'Answer complete');
    } catch (e) {
      errorSlot.replaceChildren(errorBox(e, 'Request failed: '));
    } finally {
      streaming = false;
      setButtons();
      loadChats();
      linkRuns();
    }
  }

  function send(text) {
    if (streaming) return Promise.resolve();
    const user = { id: randomId('u_'), role: 'user', parts: [{ type: 'text', text }], metadata: {} };
    messages.push(user);
    list.querySelector('[data-testid="empty-chat"]')?.remove();
    touch(user);
    return post({ id: chatId, messages: messages.map(toUIMessage), trigger: 'submit-message' });
  }

  function regenerate() {
    if (streaming) return;
    let last = -1;
    messages.forEach((m, i) => { if (m.role === 'user') last = i; });
    if (last < 0) return;
    const dropped = messages.slice(last + 1);
    const assistant = dropped.find((m) => m.role === 'assistant');
    messages = messages.slice(0, last + 1);
    for (const m of dropped) { els.get(m)?.remove(); els.delete(m); }
    const body = { id: chatId, messages: messages.map(toUIMessage), trigger: 'regenerate-message' };
    if (assistant) body.messageId = assistant.id;
    post(body);
  }

  /** A client tool's output typed in the studio, sent back the way `addToolOutput` and `sendAutomaticallyWhen` do. */
  function onToolOutput(m, p, value) {
    if (streaming) return Promise.resolve();
    if (value.error !== undefined) { p.state = 'output-error'; p.errorText = String(value.error); } else { p.state = 'output-available'; p.output = value.output; }
    m.metadata = { ...m.metadata, interrupted: false };
    touch(m);
    m._status = 'streaming';
    return post({ id: chatId, messages: messages.map(toUIMessage), trigger: 'submit-message', messageId: m.id }, { into: m });
  }

  function onApproval(m, p, approved) {
    if (streaming) return;
    p.state = 'approval-responded';
    p.approval = { ...(p.approval || {}), approved };
    m.metadata = { ...m.metadata, interrupted: false };
    touch(m);
    m._status = 'streaming';
    post({ id: chatId, messages: messages.map(toUIMessage), trigger: 'submit-message', messageId: m.id }, { into: m });
  }

  async function stop() {
    stopBtn.disabled = true;
    try {
      const res = await request(`/api/chat/${encodeURIComponent(chatId)}/stop`, { method: 'POST' });
      if (!res.ok && res.status !== 404) throw await errorOf(res);
    } catch (e) {
      errorSlot.replaceChildren(errorBox(e, 'Stop failed: '));
      reader?.abort();
    }
  }

  async function load() {
    loadGraphs();
    loadChats();
    loadBreakpoints();
    try {
      const res = await request(`/api/chat/${encodeURIComponent(chatId)}`);
      if (res.ok) {
        const chat = await res.json();
        messages = (chat.messages || []).map((m) => ({ ...m, parts: m.parts || [], metadata: m.metadata || {}, _status: 'done', _errors: [], _finish: m.metadata?.finishReason || null }));
        const g = [...messages].reverse().find((m) => m.metadata?.graph)?.metadata.graph;
        if (g && g !== graph && !r.parts[1]) {
          location.hash = hrefFor(['playground', g], { chat: chatId });
          return;
        }
      } else if (res.status !== 404) throw await errorOf(res);
    } catch (e) {
      errorSlot.replaceChildren(errorBox(e, 'Could not load the chat: '));
    }
    if (!alive) return;
    redrawAll();
    linkRuns();
    // Resume an active run (the stream replays from the start).
    try {
      const res = await request(`/api/chat/${encodeURIComponent(chatId)}/stream`);
      if (res.status === 200 && alive) {
        streaming = true;
        setButtons();
        announce('Resuming the active answer');
        await consume(res, { resume: true });
        streaming = false;
        setButtons();
        linkRuns();
      }
    } catch { /* nothing to resume */ }
  }

  // `data-ready` once the chat is loaded and any active answer followed:
  // what a test (or a person) types after that is not raced by the load.
  load().finally(() => { form.dataset.ready = 'true'; });

  return {
    cleanup() { alive = false; reader?.abort(); if (frame) cancelAnimationFrame(frame); },
    update(nr) {
      return nr.parts[0] === 'playground' && (nr.parts[1] || graph) === graph && (nr.query.get('chat') || chatId) === chatId;
    },
  };
}
