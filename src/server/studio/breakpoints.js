// Breakpoints in the playground: choose nodes to pause before or after
// (sent with each chat request as `breakpoints: {before, after}`), and,
// while a run is paused at one, its state, field edits checked against
// the fields' types (as forks check them), and Continue / Step / Abort
// (POST /api/runs/{id}/resume with `action`, `set` and the breakpoints).

import { h, json, errorBox } from './util.js';
import { getJSON, request, errorOf } from './api.js';
import { fieldSchema, checkType, describe } from './fork.js';

/** The breakpoint picker for `detail`'s nodes; `get()` is the `breakpoints` body field, or undefined when none is set. */
export function picker(detail) {
  const chosen = { before: new Set(), after: new Set() };
  const rows = (detail.nodes || []).map((n) => h('tr', { 'data-node': n.id },
    h('th', { scope: 'row', class: 'mono small' }, n.id),
    ['before', 'after'].map((when) => h('td', null, h('input', {
      type: 'checkbox', 'aria-label': `Pause ${when} ${n.id}`, 'data-testid': `bp-${when}`, 'data-node': n.id,
      onchange: (ev) => { if (ev.target.checked) chosen[when].add(n.id); else chosen[when].delete(n.id); count(); },
    })))));
  const summary = h('summary', null, 'Breakpoints');
  const el = h('details', { class: 'breakpoints', 'data-testid': 'breakpoints' }, summary,
    h('table', { class: 'table small' }, h('caption', { class: 'sr-only' }, 'Pause the next runs before or after these nodes'),
      h('thead', null, h('tr', null, h('th', { scope: 'col' }, 'Node'), h('th', { scope: 'col' }, 'Before'), h('th', { scope: 'col' }, 'After'))),
      h('tbody', null, rows)));
  function count() {
    const n = chosen.before.size + chosen.after.size;
    summary.textContent = n ? `Breakpoints (${n})` : 'Breakpoints';
  }
  return {
    el,
    get() {
      if (!chosen.before.size && !chosen.after.size) return undefined;
      return { before: [...chosen.before], after: [...chosen.after] };
    },
  };
}

/**
 * The card of a run paused at breakpoint `it`: the paused state, field
 * editors, and Continue / Step / Abort. The run is `runId`, or the paused
 * run of chat `chatId`. `breakpoints()`, when given, replaces the run's
 * breakpoints on continuing (without it the run keeps its own).
 * `done(action)` runs after the server accepted the action (the caller
 * follows the run).
 */
export function pausedCard(it, { chatId, runId: knownRun, detail, breakpoints, done }) {
  const stateBox = h('pre', { class: 'json', tabindex: '0', 'data-testid': 'bp-state' }, 'Loading the state…');
  const fields = (detail?.state?.fields || []).filter((f) => fieldSchema(f).type !== 'messages');
  const edits = new Map(); // field → {input, check}
  const editors = h('div', { 'data-testid': 'bp-editors' });
  const select = h('select', { id: `bp-field-${it.id}`, 'data-testid': 'bp-field-select' }, fields.map((f) => h('option', { value: f.name }, f.name)));
  const status = h('div', { 'aria-live': 'polite', 'data-testid': 'bp-status' });
  const buttons = ['continue', 'step', 'abort'].map((action) => h('button', {
    type: 'button', class: `btn btn-small${action === 'continue' ? ' btn-primary' : action === 'abort' ? ' btn-danger' : ''}`, 'data-testid': `bp-${action}`,
    onclick: () => act(action),
  }, { continue: 'Continue', step: 'Step', abort: 'Abort' }[action]));
  let state = {};
  let runId = knownRun || null;

  function validate() {
    let ok = true;
    for (const [name, e] of edits) {
      const f = fields.find((x) => x.name === name);
      let msg = null;
      try { msg = checkType(JSON.parse(e.input.value), fieldSchema(f)); } catch (err) { msg = `not JSON: ${err.message}`; }
      e.check.textContent = msg || `fits ${describe(fieldSchema(f))}`;
      e.check.dataset.valid = String(!msg);
      e.check.className = msg ? 'small ev-error' : 'small muted';
      ok &&= !msg;
    }
    for (const b of buttons.slice(0, 2)) b.disabled = !ok;
    return ok;
  }
  function addEditor() {
    const name = select.value;
    if (!name || edits.has(name)) return;
    const input = h('textarea', { id: `bp-edit-${it.id}-${name}`, rows: 3, class: 'mono', spellcheck: 'false', 'data-testid': 'bp-editor', 'data-field': name, oninput: validate }, JSON.stringify(state[name] ?? null, null, 2));
    const check = h('div', { class: 'small muted', 'data-testid': 'bp-check' });
    edits.set(name, { input, check });
    editors.append(h('div', { class: 'field' }, h('label', { for: input.id }, `Set ${name}`), input, check));
    validate();
    input.focus();
  }
  async function act(action) {
    if (action !== 'abort' && !validate()) return;
    const body = { action };
    if (action !== 'abort') {
      const set = {};
      for (const [name, e] of edits) set[name] = JSON.parse(e.input.value);
      if (Object.keys(set).length) body.set = set;
      if (breakpoints) body.breakpoints = breakpoints() || { before: [], after: [] };
    }
    for (const b of buttons) b.disabled = true;
    status.replaceChildren(h('p', { class: 'muted small' }, 'Sending…'));
    try {
      const res = await request(`/api/runs/${encodeURIComponent(runId)}/resume`, { method: 'POST', json: body });
      if (!res.ok) throw await errorOf(res);
      status.replaceChildren(h('p', { class: 'small', 'data-testid': 'bp-sent' }, action === 'abort' ? 'Aborted.' : 'Continuing…'));
      done(action);
    } catch (e) {
      for (const b of buttons) b.disabled = false;
      validate();
      status.replaceChildren(errorBox(e));
    }
  }

  (async () => {
    try {
      if (!runId) {
        const runs = await getJSON(`/api/runs?chat=${encodeURIComponent(chatId)}&status=interrupted&limit=1`);
        runId = runs.runs[0]?.id;
      }
      if (!runId) throw new Error('no paused run in this chat');
      const d = await getJSON(`/api/runs/${encodeURIComponent(runId)}/state`);
      state = d.state || {};
      stateBox.textContent = json(state);
    } catch (e) {
      stateBox.replaceWith(errorBox(e, 'Could not load the paused state: '));
      for (const b of buttons) b.disabled = true;
    }
  })();

  const where = it.when === 'after' ? `after ${(it.nodes || [it.node]).join(', ')}` : it.when === 'step' ? 'after one step' : `before ${(it.nodes || [it.node]).join(', ')}`;
  return h('section', { class: 'card hitl', 'aria-label': 'Paused at a breakpoint', 'data-testid': 'bp-paused', 'data-when': it.when, 'data-node': it.node },
    h('h2', { class: 'card-title' }, `Paused ${where}`, h('span', { class: 'muted small' }, ` · step ${it.step}${it.next?.length ? ` · next: ${it.next.join(', ')}` : ''}`)),
    h('details', { open: true }, h('summary', null, 'State'), stateBox),
    fields.length ? h('div', { class: 'row', style: 'margin-top:8px' },
      h('label', { for: select.id }, 'Edit a field'), select,
      h('button', { type: 'button', class: 'btn btn-small', 'data-testid': 'bp-add-field', onclick: addEditor }, 'Edit')) : null,
    editors,
    h('div', { class: 'row', style: 'margin-top:8px' }, buttons),
    status);
}
