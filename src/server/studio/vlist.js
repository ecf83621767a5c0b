// A virtualised list: fixed row height, only the visible rows (plus a small
// overscan) are in the DOM. Keyboard: a listbox with aria-activedescendant.

import { h } from './util.js';

export class VirtualList {
  /**
   * @param {object} o
   * @param {number} o.rowHeight
   * @param {(i:number) => HTMLElement} o.renderRow   a row for index i (placeholder when not loaded)
   * @param {(first:number, last:number) => void} [o.onRange]  visible range changed (load pages)
   * @param {(i:number) => void} [o.onActivate]  Enter / click on a row
   * @param {string} [o.label]
   */
  constructor({ rowHeight, renderRow, onRange, onActivate, label = 'List', testid = 'vlist' }) {
    this.rowHeight = rowHeight;
    this.renderRow = renderRow;
    this.onRange = onRange;
    this.onActivate = onActivate;
    this.count = 0;
    this.active = -1;
    this.rows = new Map();
    this.uid = `vl${Math.random().toString(36).slice(2, 8)}`;
    this.inner = h('div', { class: 'vlist-inner' });
    this.el = h('div', { class: 'vlist', role: 'listbox', tabindex: '0', 'aria-label': label, 'data-testid': testid }, this.inner);
    this.frame = 0;
    this.el.addEventListener('scroll', () => this.schedule());
    this.el.addEventListener('keydown', (ev) => this.key(ev));
    this.el.addEventListener('click', (ev) => {
      const row = ev.target.closest('[data-index]');
      if (!row) return;
      this.setActive(+row.dataset.index);
      this.onActivate?.(this.active);
    });
    this.el.addEventListener('focus', () => { if (this.active < 0 && this.count) this.setActive(this.first()); });
    if (typeof ResizeObserver !== 'undefined') new ResizeObserver(() => this.schedule()).observe(this.el);
  }

  first() {
    return Math.max(0, Math.floor(this.el.scrollTop / this.rowHeight));
  }

  setCount(n) {
    this.count = n;
    this.inner.style.height = `${n * this.rowHeight}px`;
    this.schedule();
  }

  schedule() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => { this.frame = 0; this.draw(); });
  }

  /** Re-renders the visible rows (e.g. after a page arrived). */
  refresh() {
    for (const el of this.rows.values()) el.remove();
    this.rows.clear();
    this.draw();
  }

  draw() {
    const top = this.el.scrollTop;
    const height = this.el.clientHeight || 400;
    const over = 8;
    const first = Math.max(0, Math.floor(top / this.rowHeight) - over);
    const last = Math.min(this.count - 1, Math.ceil((top + height) / this.rowHeight) + over);
    for (const [i, el] of this.rows) {
      if (i < first || i > last) { el.remove(); this.rows.delete(i); }
    }
    for (let i = first; i <= last; i++) {
      if (this.rows.has(i)) continue;
      const el = this.renderRow(i);
      el.classList.add('vrow');
      el.style.top = `${i * this.rowHeight}px`;
      el.setAttribute('role', 'option');
      el.id = `${this.uid}-${i}`;
      el.dataset.index = String(i);
      el.setAttribute('aria-selected', String(i === this.active));
      el.setAttribute('aria-setsize', String(this.count));
      el.setAttribute('aria-posinset', String(i + 1));
      this.inner.append(el);
      this.rows.set(i, el);
    }
    if (this.count) this.onRange?.(first, last);
  }

  setActive(i) {
    if (!this.count) return;
    i = Math.max(0, Math.min(this.count - 1, i));
    this.rows.get(this.active)?.setAttribute('aria-selected', 'false');
    this.active = i;
    this.scrollToIndex(i);
    this.draw();
    this.rows.get(i)?.setAttribute('aria-selected', 'true');
    this.el.setAttribute('aria-activedescendant', `${this.uid}-${i}`);
  }

  scrollToIndex(i) {
    const y = i * this.rowHeight;
    const h2 = this.el.clientHeight;
    if (y < this.el.scrollTop) this.el.scrollTop = y;
    else if (y + this.rowHeight > this.el.scrollTop + h2) this.el.scrollTop = y + this.rowHeight - h2;
  }

  key(ev) {
    const page = Math.max(1, Math.floor(this.el.clientHeight / this.rowHeight) - 1);
    const moves = { ArrowDown: 1, ArrowUp: -1, PageDown: page, PageUp: -page };
    if (ev.key in moves) this.setActive((this.active < 0 ? this.first() : this.active) + moves[ev.key]);
    else if (ev.key === 'Home') this.setActive(0);
    else if (ev.key === 'End') this.setActive(this.count - 1);
    else if ((ev.key === 'Enter' || ev.key === ' ') && this.active >= 0) this.onActivate?.(this.active);
    else return;
    ev.preventDefault();
  }
}
