// Eval page: the caller's stored chat turns run again against the graphs as
// served now (POST /api/eval; docs/testing.md) — a summary, then each changed
// turn with the recorded and the new run side by side. With criteria (one a
// line) and a judge model, each answer now is judged too: the verdicts and
// reasons sit beside the answers, and the server stores them with the runs.

import { h, hrefFor, errorBox, announce } from './util.js';
import { getJSON, postJSON } from './api.js';
import { verdictTable } from './verdicts.js';

function side(title, s) {
  if (!s) return h('div', null, h('h3', null, title), h('p', { class: 'muted' }, '— (did not run)'));
  const calls = (s.tool_calls || []).map((c) => `${c.name}(${JSON.stringify(c.args)})`).join('\n') || '(none)';
  return h('div', null,
    h('h3', null, title),
    h('dl', { class: 'kv' },
      h('dt', null, 'Path'), h('dd', { 'data-testid': 'eval-path' }, (s.path || []).join(' → ')),
      h('dt', null, 'Route'), h('dd', { 'data-testid': 'eval-route' }, (s.routes || []).join(', ') || '—'),
      h('dt', null, 'Status'), h('dd', null, s.status, s.error ? ` (${s.error})` : ''),
      h('dt', null, 'Tokens'), h('dd', null, `${s.tokens} · $${(s.cost_usd || 0).toFixed(4)} · ${Math.round(s.latency_ms)} ms`)),
    h('h4', null, 'Tool calls'), h('pre', { class: 'json', tabindex: '0' }, calls),
    h('h4', null, 'Answer'), h('pre', { class: 'json', tabindex: '0' }, s.answer || '—'));
}

function diffList(text) {
  return h('ul', { class: 'diff-list', 'data-testid': 'eval-answer-diff' }, text.split('\n').map((l) => {
    const cls = l.startsWith('- ') ? 'removed' : l.startsWith('+ ') ? 'added' : '';
    return h('li', { class: cls }, l);
  }));
}

/** Whether a judge failed the answer now (such a turn is shown even when nothing changed). */
function judgedFail(r) {
  return (r.judged || []).some((j) => j.verdict === 'fail' || j.verdict === 'error');
}

function card(r) {
  const changes = Object.entries(r.changes).filter(([, v]) => v).map(([k]) => k.replace('_', ' '));
  const judged = r.judged || [];
  return h('section', { class: 'card', 'data-testid': 'eval-run', 'data-chat': r.chat || '', 'data-changed': changes.length ? 'true' : 'false' },
    h('div', { class: 'row' },
      h('h2', { class: 'card-title', style: 'margin:0' }, r.chat ? `Chat ${r.chat}` : 'Run'),
      h('a', { class: 'mono small', href: hrefFor(['runs', r.run]) }, r.run),
      h('span', { class: 'spacer' }),
      h('span', { class: 'badge', 'data-testid': 'eval-changes' }, changes.length ? `changed: ${changes.join(', ')}` : 'same')),
    r.input ? h('p', { class: 'small' }, h('b', null, 'User: '), r.input) : null,
    r.error ? h('div', { class: 'alert alert-error', role: 'alert' }, r.error) : null,
    h('div', { class: 'state-grid', style: `grid-template-columns:${judged.length ? '1fr 1fr 1fr' : '1fr 1fr'}` },
      side('Recorded', r.before), side('Now', r.after),
      judged.length ? h('div', { 'data-testid': 'eval-judged' }, h('h3', null, 'Judged (the answer now)'), verdictTable(judged, 'Verdicts on the answer now')) : null),
    r.answer_diff ? [h('h3', null, 'Answer (- recorded, + now)'), diffList(r.answer_diff)] : null,
    h('p', { class: 'muted small' }, `${r.recorded_calls} model calls answered from the recording, ${r.live_calls} by the model.`));
}

export function mount(main) {
  const graphSel = h('select', { id: 'e-graph', 'data-testid': 'eval-graph' }, h('option', { value: '' }, 'All graphs'));
  const sinceIn = h('input', { id: 'e-since', type: 'datetime-local', 'data-testid': 'eval-since' });
  const limitIn = h('input', { id: 'e-limit', type: 'number', min: '1', max: '200', value: '50', 'data-testid': 'eval-limit' });
  const showAll = h('input', { id: 'e-all', type: 'checkbox', 'data-testid': 'eval-all' });
  const criteriaIn = h('textarea', { id: 'e-criteria', rows: '2', placeholder: 'the answer is polite', 'data-testid': 'eval-criteria' });
  const judgeIn = h('input', { id: 'e-judge', type: 'text', placeholder: '[testing] judge', 'data-testid': 'eval-judge' });
  const go = h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'eval-run-button' }, 'Evaluate');
  const out = h('div', { 'data-testid': 'eval-result', 'aria-live': 'polite' });
  const field = (id, label, el) => h('div', { class: 'field' }, h('label', { for: id }, label), el);
  let last = null;
  const form = h('form', { class: 'filters card', 'aria-label': 'Which chats to evaluate', onsubmit: (ev) => { ev.preventDefault(); run(); } },
    field('e-graph', 'Graph', graphSel), field('e-since', 'From', sinceIn), field('e-limit', 'At most', limitIn),
    h('div', { class: 'field' }, h('label', { for: 'e-all' }, 'Show unchanged'), showAll),
    field('e-criteria', 'Judge criteria (one a line)', criteriaIn), field('e-judge', 'Judge role', judgeIn),
    h('div', { class: 'row' }, go));
  showAll.addEventListener('change', () => last && show(last));
  main.append(h('div', { 'data-testid': 'eval-screen' },
    h('h1', null, 'Eval'),
    h('p', { class: 'muted' }, 'Runs your stored chat turns again against the graphs and prompts as served now — the recorded model outputs wherever a node still asks what it asked then, the configured model elsewhere — and shows what changed. With judge criteria, a judge model (that role’s, or ', h('code', null, '[testing] judge'), ') checks each answer now; its verdicts are stored with the runs. Nothing else is stored. The same as ', h('code', null, 'stategraph eval'), '.'),
    form, out));

  getJSON('/api/graphs').then((d) => {
    graphSel.append(...d.graphs.map((g) => g.id).sort().map((id) => h('option', { value: id }, id)));
  }).catch(() => {});

  function show(r) {
    const s = r.summary;
    const rows = [
      ['chat turns', s.runs], ['chats', s.chats], ['changed', s.changed], ['took another route', s.route],
      ['ran other nodes', s.nodes], ['made other tool calls', s.tool_calls], ['answered otherwise', s.answer], ['now fail', s.now_fail],
      ['tokens', `${s.tokens[0]} → ${s.tokens[1]}`], ['model calls', `${s.recorded_calls} recorded, ${s.live_calls} live`],
    ];
    if (s.judged_pass + s.judged_fail + s.not_judged > 0) {
      rows.push(['judged', `${s.judged_pass} pass, ${s.judged_fail} fail, ${s.not_judged} not judged${s.not_judged ? ' (no judge model)' : ''}`]);
    }
    const shown = r.runs.filter((x) => showAll.checked || Object.values(x.changes).some(Boolean) || judgedFail(x));
    out.replaceChildren(
      h('div', { class: 'card' },
        h('p', { 'data-testid': 'eval-headline' }, h('b', null, r.headline)),
        h('table', { class: 'table', 'data-testid': 'eval-summary' },
          h('caption', { class: 'sr-only' }, 'Summary'),
          h('tbody', null, rows.map(([k, v]) => h('tr', null, h('th', { scope: 'row' }, k), h('td', null, String(v)))))),
        h('p', { class: 'muted small' }, `${r.runs.length} turns in ${r.elapsed_ms} ms.`, r.verdicts_stored ? ` ${r.verdicts_stored} verdicts stored with their runs.` : '')),
      ...shown.map(card));
    announce(r.headline);
  }

  async function run() {
    go.disabled = true;
    out.replaceChildren(h('p', { class: 'muted' }, 'Evaluating…'));
    const body = { limit: Math.max(1, Math.min(200, +limitIn.value || 50)) };
    if (graphSel.value) body.graph = graphSel.value;
    if (sinceIn.value) body.since = new Date(sinceIn.value).getTime();
    const criteria = criteriaIn.value.split('\n').map((c) => c.trim()).filter(Boolean);
    if (criteria.length) body.criteria = criteria;
    if (judgeIn.value.trim()) body.judge = judgeIn.value.trim();
    try {
      last = await postJSON('/api/eval', body);
      show(last);
    } catch (e) {
      out.replaceChildren(errorBox(e, 'Could not evaluate: '));
    } finally {
      go.disabled = false;
    }
  }
  return {};
}
