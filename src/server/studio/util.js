// DOM helpers and formatting shared by every screen.

const SVG_NS = 'http://www.w3.org/2000/svg';

function apply(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.setAttribute('class', v);
    else if (k === 'text') el.textContent = v;
    else if (k === 'value' && 'value' in el) el.value = v;
    else if (k === 'checked' || k === 'disabled' || k === 'selected' || k === 'open') {
      if (el instanceof SVGElement) el.setAttribute(k, '');
      else el[k] = !!v;
    } else el.setAttribute(k, v === true ? '' : String(v));
  }
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** `h('button', {class: 'btn', onclick}, 'Save')` → an HTML element. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  apply(el, attrs);
  append(el, children);
  return el;
}

/** Replaces the children of `el` (null/false children are skipped). */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** The same for SVG elements. */
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  apply(el, attrs);
  append(el, children);
  return el;
}

/** Milliseconds since the epoch → `2026-11-23 18:18:12`. */
export function fmtTime(ms) {
  if (ms === null || ms === undefined) return '—';
  const d = new Date(ms);
  const p = (n, w = 2) => String(n).padStart(w, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** Microseconds → a short human duration. */
export function fmtUs(us) {
  if (us === null || us === undefined) return '—';
  if (us < 1000) return `${Math.round(us)} µs`;
  if (us < 1e6) return `${(us / 1000).toFixed(us < 1e4 ? 2 : 1)} ms`;
  if (us < 6e7) return `${(us / 1e6).toFixed(2)} s`;
  return `${Math.floor(us / 6e7)} min ${Math.round((us % 6e7) / 1e6)} s`;
}

export function fmtMs(ms) {
  if (ms === null || ms === undefined) return '—';
  return ms < 1000 ? `${Math.round(ms)} ms` : fmtUs(ms * 1000);
}

// A cost in US dollars from nano-dollars: cents for a dollar or more, four
// significant digits below (a model call costs fractions of a cent).
export function fmtCost(nano) {
  if (!nano) return '—';
  const usd = nano / 1e9;
  if (usd >= 1) return `$${usd.toFixed(2)}`;
  return `$${Number(usd.toPrecision(4)).toFixed(9).replace(/\.?0+$/, '')}`;
}

export function json(v) {
  return JSON.stringify(v, null, 2);
}

/** A compact one-line JSON, cut at `max` characters. */
export function jsonLine(v, max = 160) {
  let t;
  try { t = JSON.stringify(v); } catch { t = String(v); }
  if (t === undefined) t = 'undefined';
  return t.length > max ? `${t.slice(0, max - 1)}…` : t;
}

/** The current hash route: `#/runs/abc?x=1` → {parts:['runs','abc'], query}. */
export function route() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [p, q = ''] = raw.split('?');
  return { parts: p.split('/').filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(q) };
}

export function hrefFor(parts, query) {
  const q = query && [...new URLSearchParams(query)].length ? `?${new URLSearchParams(query)}` : '';
  return `#/${parts.map(encodeURIComponent).join('/')}${q}`;
}

/** Replaces the hash without a `hashchange` re-render. */
export function replaceHash(hash) {
  history.replaceState(null, '', hash);
}

export function randomId(prefix = '') {
  const b = crypto.getRandomValues(new Uint8Array(10));
  return prefix + [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
}

/** A polite live-region announcement for screen readers. */
export function announce(text) {
  const el = document.getElementById('live');
  if (!el) return;
  el.textContent = '';
  setTimeout(() => { el.textContent = text; }, 30);
}

/** A status badge: running / finished / failed / … */
export function badge(status, extra = {}) {
  return h('span', { class: `badge badge-${status}`, ...extra }, status);
}

/** A <section> with a heading. */
export function panel(title, attrs, ...children) {
  const id = randomId('h');
  return h('section', { class: 'card', 'aria-labelledby': id, ...attrs },
    h('h2', { id, class: 'card-title' }, title), ...children);
}

/** Error display for a caught exception (ApiError or other). */
export function errorBox(e, prefix = '') {
  const msg = e && e.message ? e.message : String(e);
  const code = e && e.code ? ` (${e.code})` : '';
  return h('div', { class: 'alert alert-error', role: 'alert' }, `${prefix}${msg}${code}`);
}

/** Arrow-key navigation over `items` inside `container` (roving tabindex). */
export function rovingList(container, selector, { orientation = 'vertical', onActivate } = {}) {
  container.addEventListener('keydown', (ev) => {
    const items = [...container.querySelectorAll(selector)];
    const i = items.indexOf(document.activeElement);
    if (i < 0) return;
    const next = orientation === 'vertical' ? ['ArrowDown'] : ['ArrowRight'];
    const prev = orientation === 'vertical' ? ['ArrowUp'] : ['ArrowLeft'];
    let j = null;
    if (next.includes(ev.key)) j = Math.min(items.length - 1, i + 1);
    else if (prev.includes(ev.key)) j = Math.max(0, i - 1);
    else if (ev.key === 'Home') j = 0;
    else if (ev.key === 'End') j = items.length - 1;
    else if ((ev.key === 'Enter' || ev.key === ' ') && onActivate) {
      ev.preventDefault();
      onActivate(items[i]);
      return;
    }
    if (j === null) return;
    ev.preventDefault();
    items.forEach((it, k) => it.setAttribute('tabindex', k === j ? '0' : '-1'));
    items[j].focus();
  });
}

export function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}
