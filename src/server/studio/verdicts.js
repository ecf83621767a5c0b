// A judge model's verdicts on an answer (stategraph eval --criterion, the Eval
// page): each criterion with its verdict and the judge's reason, in a table.
// Shared by the run page (stored verdicts, GET /api/runs/{id}) and the Eval
// page (the verdicts of this evaluation).

import { h, fmtTime } from './util.js';

const CLASS = { pass: 'ok', fail: 'error', error: 'error', skipped: 'neutral' };

function verdictBadge(v) {
  return h('span', { class: `badge badge-${CLASS[v] || 'neutral'}`, 'data-testid': 'verdict-value' }, v === 'skipped' ? 'not judged' : v);
}

/** A table of verdicts: `[{criterion, verdict, reason, judge?, model?, createdAt?, source?}]`. */
export function verdictTable(list, caption) {
  const stored = list.some((v) => v.createdAt !== undefined);
  return h('table', { class: 'table', 'data-testid': 'verdicts' },
    h('caption', { class: 'sr-only' }, caption),
    h('thead', null, h('tr', null,
      h('th', { scope: 'col' }, 'Criterion'), h('th', { scope: 'col' }, 'Verdict'), h('th', { scope: 'col' }, 'Reason'),
      h('th', { scope: 'col' }, 'Judge'), stored ? h('th', { scope: 'col' }, 'When') : null)),
    h('tbody', null, list.map((v) => h('tr', { 'data-testid': 'verdict', 'data-verdict': v.verdict },
      h('td', { 'data-testid': 'verdict-criterion' }, v.criterion),
      h('td', null, verdictBadge(v.verdict)),
      h('td', { 'data-testid': 'verdict-reason' }, v.reason),
      h('td', { class: 'small' }, v.model ? `${v.judge} (${v.model})` : (v.judge || '—')),
      stored ? h('td', { class: 'small' }, `${fmtTime(v.createdAt)} · ${v.source}`) : null))));
}

/** The run page's card: what judges said of this run's answer. */
export function verdictsCard(run) {
  const list = run.verdicts || [];
  if (!list.length) return null;
  const answers = [...new Set(list.map((v) => v.answer))];
  return h('section', { class: 'card', 'data-testid': 'run-verdicts', 'aria-labelledby': 'run-verdicts-h' },
    h('h2', { id: 'run-verdicts-h', class: 'card-title' }, 'Judged'),
    h('p', { class: 'muted small' }, 'A judge model checked the answer this run\'s input gets (when evaluated) against each criterion.'),
    verdictTable(list, 'Verdicts on this run'),
    h('details', null, h('summary', null, answers.length > 1 ? `The ${answers.length} answers judged` : 'The answer judged'),
      answers.map((a) => h('pre', { class: 'json', tabindex: '0' }, a || '—'))));
}
