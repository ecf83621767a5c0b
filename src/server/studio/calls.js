// Model calls tab: what each model call of the run was asked and answered
// (GET /api/runs/{id}/calls and /calls/{n}; docs/studio.md "Model calls").
// Per call: the rendered system prompt next to the template it came from,
// the conversation as sent, the tools offered, the response format and the
// settings, and the answer — text, reasoning, tool calls, usage, latency.

import { h, fill, json, errorBox, fmtMs } from './util.js';
import { getJSON } from './api.js';

const PREVIEW = 4000;

function text(v) {
  if (typeof v === 'string') return v;
  return v === undefined || v === null ? '' : json(v);
}

/** A <pre> of `t`, shortened with a "show all" toggle when long. */
function block(t, attrs = {}) {
  const pre = h('pre', { class: 'json calls-text', tabindex: '0', ...attrs }, t.length > PREVIEW ? `${t.slice(0, PREVIEW)}…` : t);
  if (t.length <= PREVIEW) return pre;
  const more = h('button', { type: 'button', class: 'btn btn-small', onclick: () => { pre.textContent = t; more.remove(); } }, `Show all ${t.length} characters`);
  return h('div', null, pre, more);
}

function summaryLine(c) {
  const r = c.request || {};
  const parts = [`#${c.index}`, `step ${c.step}`, c.node, c.model];
  if (typeof r.messages === 'number') parts.push(`${r.messages} messages`);
  if (Array.isArray(r.tools) && r.tools.length) parts.push(`${r.tools.length} tools`);
  return parts.join(' · ');
}

function promptPair(call) {
  const msgs = call.request?.messages || [];
  const system = msgs.filter((m) => m && m.role === 'system').map((m) => m.content).join('\n\n');
  const t = call.template;
  return h('div', { class: 'calls-pair' },
    h('section', { 'aria-label': 'Rendered system prompt' },
      h('h3', { class: 'list-title' }, 'Rendered system prompt'),
      system ? block(system, { 'data-testid': 'call-system' }) : h('p', { class: 'muted', 'data-testid': 'call-system' }, 'No system message.')),
    h('section', { 'aria-label': 'Template' },
      h('h3', { class: 'list-title' }, 'Template ', t ? h('code', { 'data-testid': 'call-template-name', style: 'text-transform:none' }, t.name) : null),
      t && t.text !== null && t.text !== undefined
        ? block(t.text, { 'data-testid': 'call-template' })
        : h('p', { class: 'muted', 'data-testid': 'call-template' }, t ? 'The prompt file is not loaded now.' : 'This node has no prompt file.')));
}

function messages(call) {
  const msgs = call.request?.messages || [];
  return h('details', { open: msgs.length <= 12 },
    h('summary', null, `Messages sent (${msgs.length})`),
    h('ol', { class: 'calls-messages', 'data-testid': 'call-messages' }, msgs.map((m) => h('li', { 'data-testid': 'call-message', 'data-role': m?.role || '' },
      h('b', null, m?.role || '(gone)'), m?.call_id ? h('span', { class: 'muted small' }, ` (answers ${m.call_id})`) : null,
      block(text(m?.content)),
      m?.tool_calls?.length ? block(json(m.tool_calls)) : null))));
}

function tools(call) {
  const list = call.request?.tools || [];
  if (!list.length) return h('p', { class: 'muted', 'data-testid': 'call-tools' }, 'No tools offered.');
  return h('ul', { class: 'calls-tools', 'data-testid': 'call-tools' }, list.map((t) => h('li', { 'data-testid': 'call-tool' },
    h('code', null, t?.name || '(gone)'), ' — ', t?.description || '',
    h('details', null, h('summary', null, 'parameters'), block(json(t?.parameters ?? null))))));
}

function response(call) {
  const r = call.response;
  if (!r) return h('p', { class: 'muted', 'data-testid': 'call-response' }, 'No answer yet.');
  if (r.error) return h('div', { class: 'alert alert-error', 'data-testid': 'call-response' }, r.error);
  const u = r.usage || {};
  return h('div', { 'data-testid': 'call-response' },
    h('p', { class: 'small muted' }, `finish: ${r.finish_reason} · ${u.prompt_tokens ?? 0} prompt + ${u.completion_tokens ?? 0} completion tokens · ${fmtMs(r.latency_ms)}`),
    r.reasoning ? h('details', null, h('summary', null, 'Reasoning'), block(r.reasoning)) : null,
    block(r.text || '(no text)'),
    r.tool_calls?.length ? [h('h3', { class: 'list-title' }, 'Tool calls'), block(json(r.tool_calls))] : null);
}

function detail(call) {
  const r = call.request;
  const notice = call.content === 'expired'
    ? h('p', { class: 'alert', 'data-testid': 'call-expired' }, 'Content expired ([calls] retention): the request is gone; the answer stays with the run.')
    : call.content === 'not_recorded' ? h('p', { class: 'alert' }, 'This call\'s request was not recorded.') : null;
  return h('div', { 'data-testid': 'call-detail', 'data-index': String(call.index) },
    h('dl', { class: 'kv' },
      h('dt', null, 'Model'), h('dd', null, `${call.model} (role ${call.role})`, r?.endpoint ? h('span', { class: 'muted small' }, ` · ${r.endpoint}`) : null),
      h('dt', null, 'Where'), h('dd', null, `step ${call.step} · ${call.node} · task ${call.task} · call ${call.call}`),
      r ? [h('dt', null, 'Settings'), h('dd', { class: 'mono small' }, JSON.stringify(r.settings || {}))] : null,
      r?.redactions ? [h('dt', null, 'Redacted'), h('dd', null, `${r.redactions} texts`)] : null),
    notice,
    call.content === 'recorded' ? [
      promptPair(call),
      messages(call),
      h('h3', { class: 'list-title' }, 'Tools offered'), tools(call),
      r.response_format ? [h('h3', { class: 'list-title' }, 'Response format'), block(json(r.response_format), { 'data-testid': 'call-format' })] : null,
    ] : null,
    h('h3', { class: 'list-title' }, 'Response'), response(call));
}

export function mount(el, ctx) {
  const id = encodeURIComponent(ctx.id);
  const list = h('div', { class: 'list', role: 'listbox', 'aria-label': 'Model calls', 'data-testid': 'calls-list' });
  const pane = h('div', { 'aria-live': 'polite' });
  el.append(h('section', { class: 'card', 'aria-labelledby': 'calls-h' },
    h('h2', { class: 'card-title', id: 'calls-h' }, 'Model calls'),
    h('p', { class: 'small muted' }, 'What each model call was sent — after templating — and what it answered.'),
    h('div', { class: 'calls-layout' }, list, pane)));
  let selected = 0;

  async function open(n) {
    selected = n;
    for (const o of list.children) o.setAttribute('aria-selected', String(+o.dataset.index === n));
    fill(pane, h('p', { class: 'muted' }, 'Loading the call…'));
    try {
      fill(pane, detail(await getJSON(`/api/runs/${id}/calls/${n}`)));
    } catch (e) {
      fill(pane, errorBox(e, 'Could not load the call: '));
    }
  }

  async function load() {
    try {
      const d = await getJSON(`/api/runs/${id}/calls`);
      const calls = d.calls || [];
      fill(list, calls.length ? calls.map((c) => h('div', {
        role: 'option', tabindex: '0', 'data-index': String(c.index), 'data-testid': 'call-item', 'aria-selected': 'false',
        onclick: () => open(c.index), onkeydown: (ev) => { if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); open(c.index); } },
      }, h('span', null, summaryLine(c)), h('span', { class: `badge badge-${c.status === 'failed' ? 'failed' : c.status}` }, c.status))) : h('p', { class: 'muted' }, 'No model calls in this run.'));
      if (calls.length) await open(Math.min(selected, calls.length - 1));
      else fill(pane);
    } catch (e) {
      fill(list, errorBox(e, 'Could not load the calls: '));
    }
  }

  load();
  const off = ctx.on((kind) => { if (kind === 'timeline') load(); });
  return { show: load, cleanup: off };
}
