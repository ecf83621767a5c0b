// Fork tab: a new run from a checkpoint, optionally after/before a node, with
// edited fields (JSON editors checked live against the declared field types).

import { h, hrefFor, json, errorBox, randomId } from './util.js';
import { postJSON } from './api.js';

const LEGACY = { text: { type: 'string' }, string: { type: 'string' }, integer: { type: 'integer' }, number: { type: 'number' }, bool: { type: 'boolean' }, boolean: { type: 'boolean' }, list: { type: 'array' }, messages: { type: 'messages' } };

/** A field's type as a JSON-Schema-like object (newer `type`, or older `ty` + `nullable`). */
export function fieldSchema(f) {
  let t = f.type && typeof f.type === 'object' ? f.type : typeof f.type === 'string' ? { type: f.type } : LEGACY[f.ty] || {};
  if (f.nullable && !t.nullable) t = { ...t, nullable: true };
  return t;
}

export function describe(t) {
  if (!t || !Object.keys(t).length) return 'any JSON';
  let d = Array.isArray(t.type) ? t.type.join(' | ') : t.type || (t.anyOf || t.oneOf ? 'one of several types' : 'any JSON');
  if (t.type === 'array' && t.items && Object.keys(t.items).length) d = `array of ${describe(t.items)}`;
  if (t.enum) d += ` (one of ${t.enum.map((x) => JSON.stringify(x)).join(', ')})`;
  if (t.nullable) d += ' or null';
  return d;
}

const kindOf = (v) => (v === null ? 'null' : Array.isArray(v) ? 'array' : Number.isInteger(v) ? 'integer' : typeof v);

/** null when `v` fits schema `t`, else a message naming the first mismatch. */
export function checkType(v, t, path = '') {
  if (!t || typeof t !== 'object') return null;
  const at = path ? ` at ${path}` : '';
  if (v === null && (t.nullable || t.type === 'null' || (Array.isArray(t.type) && t.type.includes('null')))) return null;
  if (t.anyOf || t.oneOf) {
    const alts = t.anyOf || t.oneOf;
    return alts.some((a) => !checkType(v, a, path)) ? null : `${kindOf(v)}${at} matches none of the allowed types`;
  }
  if (t.enum && !t.enum.some((x) => JSON.stringify(x) === JSON.stringify(v))) return `${JSON.stringify(v)}${at} is not one of ${t.enum.map((x) => JSON.stringify(x)).join(', ')}`;
  if (t.const !== undefined && JSON.stringify(t.const) !== JSON.stringify(v)) return `expected ${JSON.stringify(t.const)}${at}`;
  const types = Array.isArray(t.type) ? t.type : t.type ? [t.type] : [];
  if (!types.length) return null;
  const ok = types.some((ty) => {
    switch (ty) {
      case 'string': return typeof v === 'string';
      case 'integer': return Number.isInteger(v);
      case 'number': return typeof v === 'number';
      case 'boolean': return typeof v === 'boolean';
      case 'null': return v === null;
      case 'object': return kindOf(v) === 'object';
      case 'array': case 'messages': return Array.isArray(v);
      default: return true;
    }
  });
  if (!ok) return `expected ${describe(t)}${at}, got ${kindOf(v)}`;
  if (types.includes('messages') && Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      const m = v[i];
      if (kindOf(m) !== 'object') return `message ${i}${at} must be an object`;
      if (!['system', 'user', 'assistant'].includes(m.role)) return `message ${i}${at} needs "role": "system", "user" or "assistant"`;
      for (const k of ['id', 'content']) if (k in m && typeof m[k] !== 'string') return `message ${i}${at}: "${k}" must be a string`;
    }
  }
  if (typeof v === 'number') {
    if (t.minimum !== undefined && v < t.minimum) return `${v}${at} is below the minimum ${t.minimum}`;
    if (t.maximum !== undefined && v > t.maximum) return `${v}${at} is above the maximum ${t.maximum}`;
  }
  if (typeof v === 'string' && t.maxLength !== undefined && [...v].length > t.maxLength) return `text${at} is longer than ${t.maxLength} characters`;
  if (Array.isArray(v) && t.maxItems !== undefined && v.length > t.maxItems) return `list${at} has more than ${t.maxItems} items`;
  if (Array.isArray(v) && t.items && typeof t.items === 'object') {
    for (let i = 0; i < v.length; i++) {
      const e = checkType(v[i], t.items, `${path}[${i}]`);
      if (e) return e;
    }
  }
  if (kindOf(v) === 'object' && t.properties) {
    for (const [k, sub] of Object.entries(t.properties)) {
      if (k in v) { const e = checkType(v[k], sub, `${path}.${k}`); if (e) return e; }
    }
    for (const k of t.required || []) if (!(k in v)) return `missing "${k}"${at}`;
    if (t.additionalProperties === false) {
      const extra = Object.keys(v).find((k) => !(k in t.properties));
      if (extra) return `unexpected field "${extra}"${at}`;
    }
  }
  return null;
}

export function mount(el, ctx) {
  const last = ctx.run.lastStep ?? 0;
  let step = ctx.step ?? Math.min(1, last);
  let fields = [];
  const editors = new Map(); // field → {row, textarea, check}
  const uid = randomId('fk');

  const stepSel = h('select', { id: `${uid}-step`, 'data-testid': 'fork-step' },
    Array.from({ length: last + 1 }, (_, s) => h('option', { value: s, selected: s === step }, s === 0 ? 'Step 0 (input)' : `Step ${s}`)));
  const nodeSel = h('select', { id: `${uid}-node`, 'data-testid': 'fork-node', disabled: true });
  const radio = (value, label) => h('label', { class: 'row', style: 'font-weight:400' },
    h('input', { type: 'radio', name: `${uid}-mode`, value, checked: value === 'checkpoint', 'data-testid': `fork-mode-${value}`, onchange: modeChanged }), label);
  const modeSet = h('fieldset', { class: 'field', style: 'border:1px solid var(--border);border-radius:6px;padding:6px 10px' },
    h('legend', { class: 'small', style: 'font-weight:600' }, 'Start from'),
    radio('checkpoint', 'after the step (its node)'), radio('after', 'after a node of the step'), radio('before', 'before a node of the step'),
    h('div', { class: 'row' }, h('label', { for: `${uid}-node` }, 'Node'), nodeSel));
  const fieldSel = h('select', { id: `${uid}-field`, 'data-testid': 'fork-field-select' });
  const addBtn = h('button', { type: 'button', class: 'btn', 'data-testid': 'fork-add-field', onclick: () => addField(fieldSel.value) }, 'Edit field');
  const rows = h('div', { 'data-testid': 'fork-fields' });
  const attach = h('input', { type: 'checkbox', id: `${uid}-attach`, 'data-testid': 'fork-attach' });
  const submit = h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'fork-submit' }, 'Fork');
  const result = h('div', { 'data-testid': 'fork-result', 'aria-live': 'polite' });
  const form = h('form', { class: 'card', 'aria-labelledby': `${uid}-title`, onsubmit: (ev) => { ev.preventDefault(); doFork(); } },
    h('h2', { class: 'card-title', id: `${uid}-title` }, 'Fork this run'),
    h('p', { class: 'small muted' }, 'A new run starts from this one, linked to it as its parent. After a node, your edit is applied as if the node had written it (through each field\'s reducer) and what runs next is routed again; before a node, the fields you edit are replaced in what it saw and it runs again.'),
    h('div', { class: 'row', style: 'align-items:flex-start;gap:18px' },
      h('div', { class: 'field' }, h('label', { for: `${uid}-step` }, 'Step'), stepSel), modeSet),
    h('h3', null, 'Fields to change'),
    h('div', { class: 'row' }, h('label', { for: `${uid}-field` }, 'Field'), fieldSel, addBtn),
    rows,
    h('div', { class: 'row', style: 'margin:10px 0' }, attach, h('label', { for: `${uid}-attach`, style: 'font-weight:400' }, 'Attach the new run to this run\'s chat (', h('code', null, 'attach: true'), ')')),
    h('div', { class: 'row' }, submit), result);
  el.append(form);

  stepSel.addEventListener('change', () => { step = +stepSel.value; ctx.step = step; ctx.setQuery(); fillNodes(); });

  function mode() {
    return form.querySelector(`input[name="${uid}-mode"]:checked`).value;
  }
  function modeChanged() {
    nodeSel.disabled = mode() === 'checkpoint';
  }
  async function fillNodes() {
    const keep = nodeSel.value;
    let nodes = ctx.nodesOf(step);
    if (!nodes.length) {
      try { nodes = (await ctx.graph()).nodes.map((n) => n.id); } catch { nodes = []; }
    }
    nodeSel.replaceChildren(...nodes.map((n) => h('option', { value: n, selected: n === keep }, n)));
  }

  function fieldInfo(name) {
    return fields.find((f) => f.name === name) || { name };
  }

  function validate(name) {
    const ed = editors.get(name);
    const t = fieldSchema(fieldInfo(name));
    let msg;
    let ok = false;
    try {
      const v = JSON.parse(ed.textarea.value);
      const err = checkType(v, t);
      if (err) msg = `Type error: ${err}`;
      else { ok = true; msg = `Valid JSON · ${describe(t)}`; }
    } catch (e) {
      msg = `Invalid JSON: ${e.message}`;
    }
    ed.check.textContent = msg;
    ed.check.className = `small ${ok ? 'check-ok' : 'check-err'}`;
    ed.check.dataset.valid = String(ok);
    ed.textarea.setAttribute('aria-invalid', String(!ok));
    updateSubmit();
    return ok;
  }

  function updateSubmit() {
    const bad = [...editors.keys()].filter((k) => editors.get(k).check.dataset.valid !== 'true');
    submit.disabled = bad.length > 0;
    submit.title = bad.length ? `Fix ${bad.join(', ')} first` : '';
  }

  async function addField(name, { value } = {}) {
    if (!name) return;
    if (editors.has(name)) { editors.get(name).textarea.focus(); return; }
    const f = fieldInfo(name);
    const id = `${uid}-ed-${name}`;
    const textarea = h('textarea', { id, class: 'json-editor', rows: 5, spellcheck: 'false', 'data-testid': 'fork-editor', 'data-field': name, 'aria-describedby': `${id}-check` });
    const check = h('div', { id: `${id}-check`, class: 'small', 'data-testid': 'fork-check', 'aria-live': 'polite' });
    const row = h('div', { class: 'card', style: 'margin:8px 0;padding:10px', 'data-testid': 'fork-field', 'data-field': name },
      h('div', { class: 'row' }, h('label', { for: id }, h('code', null, name)), h('span', { class: 'muted small' }, `${describe(fieldSchema(f))}${f.reducer ? ` · reducer ${f.reducer}` : ''}`),
        h('span', { class: 'spacer' }),
        h('button', { type: 'button', class: 'btn btn-small', onclick: () => load(name) }, `Value at step ${step}`),
        h('button', { type: 'button', class: 'btn btn-small btn-danger', 'aria-label': `Remove ${name}`, onclick: () => { editors.delete(name); row.remove(); updateSubmit(); } }, 'Remove')),
      f.doc ? h('p', { class: 'small muted', style: 'margin:2px 0 6px' }, f.doc.trim()) : null,
      textarea, check);
    textarea.addEventListener('input', () => validate(name));
    editors.set(name, { row, textarea, check });
    rows.append(row);
    if (value !== undefined) { textarea.value = json(value); validate(name); } else await load(name);
    textarea.focus();
  }

  async function load(name) {
    const ed = editors.get(name);
    if (!ed) return;
    try {
      const s = await ctx.stateAt(step);
      ed.textarea.value = json(s.state?.[name] ?? null);
    } catch {
      ed.textarea.value = 'null';
    }
    validate(name);
  }

  async function doFork() {
    const set = {};
    for (const [name, ed] of editors) {
      if (!validate(name)) { ed.textarea.focus(); return; }
      set[name] = JSON.parse(ed.textarea.value);
    }
    const body = { at: step, set };
    const m = mode();
    if (m !== 'checkpoint') {
      if (!nodeSel.value) { result.replaceChildren(h('div', { class: 'alert alert-error', role: 'alert' }, 'Choose a node.')); return; }
      body[m] = nodeSel.value;
    }
    if (attach.checked) body.attach = true;
    submit.disabled = true;
    result.replaceChildren(h('p', { class: 'muted' }, 'Forking…'));
    try {
      const r = await postJSON(`/api/runs/${encodeURIComponent(ctx.id)}/fork`, body);
      const runId = r.runId || r.id;
      result.replaceChildren(h('p', null, 'Forked: ', h('a', { href: hrefFor(['runs', runId]) }, runId)));
      location.hash = hrefFor(['runs', runId]);
    } catch (e) {
      result.replaceChildren(errorBox(e, 'Fork failed: '));
    } finally {
      submit.disabled = false;
      updateSubmit();
    }
  }

  (async () => {
    fillNodes();
    try {
      const g = await ctx.graph();
      fields = Array.isArray(g.state?.fields) ? g.state.fields : [];
    } catch { fields = []; }
    if (!fields.length) {
      try { fields = Object.keys((await ctx.stateAt(step)).state || {}).map((name) => ({ name })); } catch { /* none */ }
    }
    fieldSel.replaceChildren(...fields.map((f) => h('option', { value: f.name }, f.name)));
  })();

  const off = ctx.on((kind) => { if (kind === 'timeline') fillNodes(); });
  return {
    cleanup: off,
    show() {
      if (ctx.step !== null && ctx.step !== step) {
        step = ctx.step;
        stepSel.value = String(step);
        fillNodes();
      }
    },
  };
}
