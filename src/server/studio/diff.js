// JSON diff (paths as JSON pointers) and a JSON view with changed lines highlighted.

import { h, jsonLine } from './util.js';

const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const esc = (k) => String(k).replace(/~/g, '~0').replace(/\//g, '~1');

/** Differences from `a` to `b`: [{op: added|removed|changed, path, before, after}]. */
export function diff(a, b, path = '', out = []) {
  if (a === b) return out;
  if (isObj(a) && isObj(b)) {
    for (const k of Object.keys(a)) {
      if (!(k in b)) out.push({ op: 'removed', path: `${path}/${esc(k)}`, before: a[k] });
      else diff(a[k], b[k], `${path}/${esc(k)}`, out);
    }
    for (const k of Object.keys(b)) if (!(k in a)) out.push({ op: 'added', path: `${path}/${esc(k)}`, after: b[k] });
    return out;
  }
  if (Array.isArray(a) && Array.isArray(b)) {
    const n = Math.min(a.length, b.length);
    for (let i = 0; i < n; i++) diff(a[i], b[i], `${path}/${i}`, out);
    for (let i = n; i < a.length; i++) out.push({ op: 'removed', path: `${path}/${i}`, before: a[i] });
    for (let i = n; i < b.length; i++) out.push({ op: 'added', path: `${path}/${i}`, after: b[i] });
    return out;
  }
  if (JSON.stringify(a) !== JSON.stringify(b)) out.push({ op: 'changed', path: path || '/', before: a, after: b });
  return out;
}

/** Pretty JSON as lines, each tagged with the pointer of the value it shows. */
export function jsonLines(value) {
  const lines = [];
  const walk = (v, path, indent, prefix, comma) => {
    const pad = '  '.repeat(indent);
    if (isObj(v) && Object.keys(v).length) {
      lines.push({ text: `${pad}${prefix}{`, path });
      const keys = Object.keys(v);
      keys.forEach((k, i) => walk(v[k], `${path}/${esc(k)}`, indent + 1, `${JSON.stringify(k)}: `, i < keys.length - 1 ? ',' : ''));
      lines.push({ text: `${pad}}${comma}`, path });
    } else if (Array.isArray(v) && v.length) {
      lines.push({ text: `${pad}${prefix}[`, path });
      v.forEach((x, i) => walk(x, `${path}/${i}`, indent + 1, '', i < v.length - 1 ? ',' : ''));
      lines.push({ text: `${pad}]${comma}`, path });
    } else {
      lines.push({ text: `${pad}${prefix}${JSON.stringify(v)}${comma}`, path });
    }
  };
  walk(value, '', 0, '', '');
  return lines;
}

/** The state as JSON; lines under an added/changed path get that class. */
export function jsonView(value, changes = [], attrs = {}) {
  const ops = new Map(changes.filter((c) => c.op !== 'removed').map((c) => [c.path === '/' ? '' : c.path, c.op]));
  const opOf = (path) => {
    for (let p = path; ; p = p.slice(0, p.lastIndexOf('/'))) {
      if (ops.has(p)) return ops.get(p);
      if (!p) return null;
    }
  };
  const lines = jsonLines(value);
  const MAX = 4000;
  const el = h('div', { class: 'jv', tabindex: '0', role: 'region', ...attrs });
  const frag = document.createDocumentFragment();
  for (const l of lines.slice(0, MAX)) {
    const op = ops.size ? opOf(l.path) : null;
    frag.append(h('div', { class: `ln${op ? ` ${op}` : ''}`, 'data-path': l.path, ...(op ? { 'data-op': op } : {}) }, l.text));
  }
  if (lines.length > MAX) frag.append(h('div', { class: 'ln muted' }, `… ${lines.length - MAX} more lines`));
  el.append(frag);
  return el;
}

/** The list of changes, one line each. */
export function diffList(changes, attrs = {}) {
  if (!changes.length) return h('p', { class: 'muted', ...attrs }, 'No changes from the previous step.');
  const sym = { added: '+', removed: '−', changed: '~' };
  return h('ul', { class: 'diff-list', ...attrs }, changes.slice(0, 500).map((c) => h('li', { class: c.op, 'data-testid': 'diff-entry', 'data-op': c.op, 'data-path': c.path },
    h('span', { class: 'diff-op', 'aria-label': c.op }, sym[c.op]), h('b', null, c.path), ' ',
    c.op === 'changed' ? `${jsonLine(c.before, 80)} → ${jsonLine(c.after, 120)}` : jsonLine(c.op === 'added' ? c.after : c.before, 160))),
  changes.length > 500 ? h('li', { class: 'muted' }, `… ${changes.length - 500} more`) : null);
}
