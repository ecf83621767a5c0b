// State tab: pick a step, see the state after it and the diff from the step before.

import { h, errorBox } from './util.js';
import { diff, jsonView, diffList } from './diff.js';
import { originOf } from './runs.js';

export function mount(el, ctx) {
  // A fork starts after its origin step: the steps before it belong to the parent run.
  const forkStep = originOf(ctx.run)?.step;
  let step = ctx.step ?? (forkStep !== undefined ? ctx.run.lastStep ?? 0 : Math.min(1, ctx.run.lastStep ?? 0));
  let seq = 0;
  const list = h('ul', { class: 'list', role: 'listbox', 'aria-label': 'Steps', 'data-testid': 'step-list', style: 'max-height:60vh;overflow:auto' });
  const title = h('h2', { class: 'card-title', 'data-testid': 'state-title' }, '');
  const view = h('div', { 'data-testid': 'state-view' });
  const diffEl = h('div', { 'data-testid': 'state-diff' });
  const prevBtn = h('button', { type: 'button', class: 'btn btn-small', 'data-testid': 'step-prev', onclick: () => choose(step - 1, true) }, '← Previous');
  const nextBtn = h('button', { type: 'button', class: 'btn btn-small', 'data-testid': 'step-next', onclick: () => choose(step + 1, true) }, 'Next →');
  const forkBtn = h('button', { type: 'button', class: 'btn btn-small', 'data-testid': 'fork-from-step', onclick: () => ctx.openTab('fork', { step }) }, 'Fork from this step');
  el.append(h('div', { class: 'state-grid' },
    h('div', null, h('div', { class: 'list-title', id: 'steps-title' }, 'Steps'), list),
    h('div', { class: 'card', style: 'margin:0' }, h('div', { class: 'row' }, title, h('span', { class: 'spacer' }), prevBtn, nextBtn, forkBtn), view),
    h('div', { class: 'card', style: 'margin:0' }, h('h2', { class: 'card-title' }, 'Changes from the previous step'), diffEl)));

  // Step items: appended as the run grows, node names refreshed with the timeline.
  function items() {
    const last = ctx.run.lastStep ?? 0;
    for (let st = list.children.length; st <= last; st++) {
      list.append(h('li', {
        role: 'option', tabindex: st === step ? '0' : '-1', 'aria-selected': String(st === step), 'data-testid': 'step-item', 'data-step': st,
        onclick: () => choose(st, true),
      }, h('span', null, `Step ${st}`), h('span', { class: 'muted small' }, '')));
    }
    for (const li of list.children) {
      const st = +li.dataset.step;
      const names = forkStep !== undefined && st < forkStep ? 'parent run' : forkStep === st ? 'fork point' : (st === 0 ? ['input'] : ctx.nodesOf(st)).join(', ');
      if (li.lastChild.textContent !== names) li.lastChild.textContent = names;
    }
    nextBtn.disabled = step >= last;
  }

  list.addEventListener('keydown', (ev) => {
    const d = { ArrowDown: 1, ArrowUp: -1 }[ev.key];
    if (d) { ev.preventDefault(); choose(step + d, true, true); }
    else if (ev.key === 'Home') { ev.preventDefault(); choose(0, true, true); }
    else if (ev.key === 'End') { ev.preventDefault(); choose(ctx.run.lastStep ?? 0, true, true); }
  });

  async function choose(s, user, focus) {
    const last = ctx.run.lastStep ?? 0;
    s = Math.max(0, Math.min(last, s));
    step = s;
    ctx.step = s;
    if (user) ctx.setQuery();
    for (const li of list.children) {
      const on = +li.dataset.step === s;
      li.setAttribute('aria-selected', String(on));
      li.setAttribute('tabindex', on ? '0' : '-1');
      if (on && focus) { li.focus(); li.scrollIntoView({ block: 'nearest' }); }
    }
    prevBtn.disabled = s <= 0;
    nextBtn.disabled = s >= last;
    title.textContent = s === 0 ? 'State at step 0 (the input)' : `State after step ${s}`;
    const mine = ++seq;
    view.replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
    try {
      const [cur, prev] = await Promise.all([ctx.stateAt(s), s > 0 ? ctx.stateAt(s - 1) : Promise.resolve(null)]);
      if (mine !== seq) return;
      const changes = prev ? diff(prev.state, cur.state) : [];
      view.replaceChildren(jsonView(cur.state, changes, { 'data-testid': 'state-json', 'data-step': s, 'aria-label': `State after step ${s}` }));
      diffEl.replaceChildren(prev ? diffList(changes, { 'data-testid': 'diff-list' }) : h('p', { class: 'muted', 'data-testid': 'diff-list' }, 'Step 0 is the run\'s input: nothing to compare with.'));
    } catch (e) {
      if (mine !== seq) return;
      view.replaceChildren(errorBox(e, 'Could not load the state: '));
      diffEl.replaceChildren();
    }
  }

  items();
  choose(step, false);
  const off = ctx.on((kind) => { if (kind === 'timeline' || kind === 'run') items(); });
  return {
    cleanup: off,
    show() { if (ctx.step !== null && ctx.step !== step) choose(ctx.step, false); },
  };
}
