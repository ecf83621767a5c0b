// Replay tab: re-stream the recorded SSE bytes, re-execute from the recording.

import { h, fill, json, errorBox } from './util.js';
import { request, errorOf, postJSON } from './api.js';
import { diff, diffList } from './diff.js';

const MAX_SHOWN = 400000;

export function mount(el, ctx) {
  const id = encodeURIComponent(ctx.id);
  const raw = h('pre', { class: 'raw-sse', 'data-testid': 'raw-sse', tabindex: '0', 'aria-label': 'Recorded SSE bytes' }, '');
  const rawInfo = h('p', { class: 'muted small', 'aria-live': 'polite' });
  const rawBtn = h('button', { type: 'button', class: 'btn', 'data-testid': 'restream', onclick: restream }, 'Re-stream the recorded SSE');
  const rexInfo = h('div', { 'data-testid': 'reexecute-result', 'aria-live': 'polite' });
  const rexBtn = h('button', { type: 'button', class: 'btn', 'data-testid': 'reexecute', onclick: reexecute }, 'Re-execute from the recording');
  raw.classList.add('hidden');

  el.append(
    h('section', { class: 'card', 'aria-labelledby': 'rs-title' },
      h('h2', { class: 'card-title', id: 'rs-title' }, 'Recorded stream'),
      h('p', { class: 'small muted' }, 'The exact bytes the client received (', h('code', null, 'GET /api/runs/{id}/events'), ' with ', h('code', null, 'Accept: text/event-stream'), ').'),
      h('div', { class: 'row' }, rawBtn), rawInfo, raw),
    h('section', { class: 'card', 'aria-labelledby': 'rx-title' },
      h('h2', { class: 'card-title', id: 'rx-title' }, 'Re-execute'),
      h('p', { class: 'small muted' }, 'Runs the graph again with every LLM and tool result served from the recording (no network) and reports the first event that differs — e.g. after a prompt or graph edit.'),
      h('div', { class: 'row' }, rexBtn), rexInfo));

  async function restream() {
    rawBtn.disabled = true;
    rawInfo.textContent = 'Loading…';
    try {
      const res = await request(`/api/runs/${id}/events`, { headers: { accept: 'text/event-stream' } });
      if (!res.ok) throw await errorOf(res);
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let text = '';
      let bytes = 0;
      raw.classList.remove('hidden');
      raw.textContent = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        bytes += value.length;
        if (text.length < MAX_SHOWN) {
          const chunk = dec.decode(value, { stream: true });
          text += chunk;
          raw.append(chunk);
        }
        rawInfo.textContent = `${bytes.toLocaleString()} bytes…`;
      }
      const events = (text.match(/^data: /gm) || []).length;
      rawInfo.textContent = `${bytes.toLocaleString()} bytes, ${events} data events${bytes > MAX_SHOWN ? ` (first ${MAX_SHOWN.toLocaleString()} characters shown)` : ''}.`;
    } catch (e) {
      rawInfo.textContent = '';
      raw.classList.add('hidden');
      rawInfo.replaceChildren(errorBox(e, 'Could not re-stream: '));
    } finally {
      rawBtn.disabled = false;
    }
  }

  async function reexecute() {
    rexBtn.disabled = true;
    rexInfo.replaceChildren(h('p', { class: 'muted' }, 'Re-executing…'));
    try {
      const r = await postJSON(`/api/runs/${id}/reexecute`, {});
      if (!r.diverged) {
        rexInfo.replaceChildren(h('div', { class: 'alert alert-info', 'data-testid': 'reexecute-same' }, `No divergence: the ${r.events} events of the re-execution match the recording.`));
      } else {
        const d = r.divergence || {};
        const changes = d.expected && d.got ? diff(d.expected, d.got) : [];
        fill(rexInfo, h('div', { class: 'alert alert-warn', 'data-testid': 'reexecute-diverged' }, `Diverged at event ${d.seq ?? '?'}: ${d.message || ''}`),
          changes.length ? [h('h3', null, 'Differences (recorded → re-executed)'), diffList(changes, { 'data-testid': 'divergence-diff' })] : '',
          h('div', { class: 'state-grid', style: 'grid-template-columns:1fr 1fr' },
            h('div', null, h('h3', null, 'Recorded (expected)'), h('pre', { class: 'json', tabindex: '0' }, d.expected ? json(d.expected) : '— (no event)')),
            h('div', null, h('h3', null, 'Re-executed (got)'), h('pre', { class: 'json', tabindex: '0' }, d.got ? json(d.got) : '— (no event)'))),
          h('p', { class: 'muted small' }, `${r.events} events re-executed.`));
      }
    } catch (e) {
      rexInfo.replaceChildren(errorBox(e, 'Re-execution failed: '));
    } finally {
      rexBtn.disabled = false;
    }
  }
}
