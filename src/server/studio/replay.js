// Replay tab: re-stream the recorded SSE bytes, re-execute from the recording,
// save the run as a test case (GET /api/runs/{id}/test-case; docs/testing.md).

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
  const caseName = h('input', { type: 'text', id: 'case-name', 'data-testid': 'case-name', maxlength: '200', placeholder: 'the run id and the user\'s message', style: 'min-width:22em' });
  const caseBtn = h('button', { type: 'button', class: 'btn', 'data-testid': 'save-as-test', onclick: saveAsTest }, 'Save as test');
  const caseInfo = h('div', { 'data-testid': 'save-as-test-result', 'aria-live': 'polite' });

  el.append(
    h('section', { class: 'card', 'aria-labelledby': 'rs-title' },
      h('h2', { class: 'card-title', id: 'rs-title' }, 'Recorded stream'),
      h('p', { class: 'small muted' }, 'The exact bytes the client received (', h('code', null, 'GET /api/runs/{id}/events'), ' with ', h('code', null, 'Accept: text/event-stream'), ').'),
      h('div', { class: 'row' }, rawBtn), rawInfo, raw),
    h('section', { class: 'card', 'aria-labelledby': 'rx-title' },
      h('h2', { class: 'card-title', id: 'rx-title' }, 'Re-execute'),
      h('p', { class: 'small muted' }, 'Runs the graph again with every LLM and tool result served from the recording (no network) and reports the first event that differs — e.g. after a prompt or graph edit.'),
      h('div', { class: 'row' }, rexBtn), rexInfo),
    h('section', { class: 'card', 'aria-labelledby': 'st-title' },
      h('h2', { class: 'card-title', id: 'st-title' }, 'Save as test'),
      h('p', { class: 'small muted' }, 'Writes this run as a test case: its model and tool outputs become the script, its path, routes, tool calls and answer the expectations. Save the file as ', h('code', null, 'graphs/tests/NAME.yaml'), ' and run ', h('code', null, 'stategraph test'), '; trim what should stay loose. (', h('code', null, 'stategraph test --from-run RUN'), ' does the same from a terminal.)'),
      h('div', { class: 'row' }, h('label', { for: 'case-name' }, 'Case name '), caseName, caseBtn), caseInfo));

  async function saveAsTest() {
    caseBtn.disabled = true;
    caseInfo.replaceChildren(h('p', { class: 'muted' }, 'Writing the case…'));
    try {
      const name = caseName.value.trim();
      const res = await request(`/api/runs/${id}/test-case${name ? `?name=${encodeURIComponent(name)}` : ''}`);
      if (!res.ok) throw await errorOf(res);
      const yaml = await res.text();
      const file = (/filename="([^"]+)"/.exec(res.headers.get('content-disposition') || '') || [])[1] || 'recorded.yaml';
      const url = URL.createObjectURL(new Blob([yaml], { type: 'application/yaml' }));
      const copied = h('span', { class: 'muted small', 'aria-live': 'polite' });
      const copy = h('button', { type: 'button', class: 'btn btn-small', 'data-testid': 'copy-test', onclick: async () => {
        try { await navigator.clipboard.writeText(yaml); copied.textContent = ' Copied.'; } catch { copied.textContent = ' Copy failed: select the text below.'; }
      } }, 'Copy');
      fill(caseInfo,
        h('div', { class: 'row' }, h('a', { class: 'btn btn-small', href: url, download: file, 'data-testid': 'download-test' }, `Download ${file}`), copy, copied),
        h('pre', { class: 'json', tabindex: '0', 'data-testid': 'test-yaml' }, yaml));
    } catch (e) {
      caseInfo.replaceChildren(errorBox(e, 'Could not write the case: '));
    } finally {
      caseBtn.disabled = false;
    }
  }

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
  const caseName = h('input', { type: 'text', id: 'case-name', 'data-testid': 'case-name', maxlength: '200', placeholder: 'the run id and the user\'s message', style: 'min-width:22em' });
  const caseBtn = h('button', { type: 'button', class: 'btn', 'data-testid': 'save-as-test', onclick: saveAsTest }, 'Save as test');
  const caseInfo = h('div', { 'data-testid': 'save-as-test-result', 'aria-live': 'polite' });
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
