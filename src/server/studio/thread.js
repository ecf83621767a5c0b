// Chat thread (#/chats/<id>): the chat's turns in order — each question,
// its answer and the runs behind it (earlier attempts, regenerations,
// forks and their attached alternatives), the state after each turn, and
// links into each run. Run ids are shortened only as far as they stay
// distinct on the page.

import { h, hrefFor, fmtTime, badge, errorBox, json } from './util.js';
import { getJSON } from './api.js';
import { originOf, distinctIds } from './runs.js';

const textOf = (parts) => (parts || []).filter((p) => p.type === 'text').map((p) => p.text).join('\n');
const clip = (t, n = 400) => (t.length > n ? `${t.slice(0, n)}…` : t);

/** The user's runs that fork from `known` (any depth), found among runs created since `since`. */
async function forksOf(known, graphs, since) {
  const out = [];
  const ids = new Set(known.map((r) => r.id));
  for (const graph of graphs) {
    const d = await getJSON(`/api/runs?graph=${encodeURIComponent(graph)}&since=${since}&limit=500`);
    const candidates = (d.runs || []).filter((r) => !ids.has(r.id));
    let grew = true;
    while (grew) {
      grew = false;
      for (const r of candidates) {
        const o = originOf(r);
        if (o && ids.has(o.parent) && !ids.has(r.id)) { ids.add(r.id); out.push(r); grew = true; }
      }
    }
  }
  return out;
}

/** Groups messages into turns: a user message and the answers after it. */
function turnsOf(messages) {
  const turns = [];
  for (const m of messages) {
    if (m.role === 'user' || !turns.length) turns.push({ user: m.role === 'user' ? m : null, answers: [] });
    if (m.role !== 'user') turns[turns.length - 1].answers.push(m);
  }
  return turns;
}

export function mount(main, r) {
  const chatId = r.parts[1];
  const focusRun = r.query.get('run');
  const body = h('div', { 'data-testid': 'thread' }, h('p', { class: 'muted' }, 'Loading the chat…'));
  main.append(h('div', { 'data-testid': 'thread-screen', 'data-chat': chatId },
    h('nav', { 'aria-label': 'Breadcrumb', class: 'small', style: 'margin-bottom:8px' }, h('a', { href: '#/runs' }, 'Runs'), ' / chat ', h('span', { class: 'mono' }, chatId)),
    body));
  let alive = true;

  function runChip(run, names, label) {
    const o = originOf(run);
    return h('li', { class: `thread-run${run.id === focusRun ? ' thread-focus' : ''}`, 'data-testid': 'thread-run', 'data-run': run.id, 'data-role': label },
      h('a', { class: 'mono', href: hrefFor(['runs', run.id]), title: run.id, 'data-testid': 'thread-run-link' }, names.get(run.id)), ' ',
      badge(run.status), ' ',
      h('span', { class: 'muted small' }, `${label} · ${fmtTime(run.createdAt)}`),
      o ? h('span', { class: 'small' }, ` · fork of `, h('a', { class: 'mono', href: hrefFor(['runs', o.parent]), title: o.parent }, names.get(o.parent) || o.parent),
        o.step !== undefined ? ` at step ${o.step}` : '', o.node ? ` (${o.mode || 'after'} ${o.node})` : '',
        o.set && Object.keys(o.set).length ? ` — set ${Object.keys(o.set).join(', ')}` : '') : null);
  }

  function stateBox(runId) {
    const det = h('details', { class: 'thread-state', 'data-testid': 'thread-state', 'data-run': runId }, h('summary', null, 'State after this turn'));
    det.addEventListener('toggle', async () => {
      if (!det.open || det.dataset.loaded) return;
      det.dataset.loaded = '1';
      try {
        const d = await getJSON(`/api/runs/${encodeURIComponent(runId)}/state`);
        det.append(h('pre', { class: 'json', tabindex: '0', 'data-testid': 'thread-state-json' }, json(d.state ?? d)));
      } catch (e) { det.append(errorBox(e)); }
    }, { once: false });
    return det;
  }

  function answerBlock(m, runs, forks, names) {
    const mine = runs.filter((x) => x.messageId === m.id && !originOf(x)).sort((a, b) => a.createdAt - b.createdAt);
    const current = m.metadata?.runId || mine[mine.length - 1]?.id;
    const related = new Set(mine.map((x) => x.id));
    const myForks = [];
    let grew = true;
    while (grew) {
      grew = false;
      for (const f of forks) {
        const o = originOf(f);
        if (o && related.has(o.parent) && !related.has(f.id)) { related.add(f.id); myForks.push(f); grew = true; }
      }
    }
    const alts = m.metadata?.alternatives || [];
    return h('div', { class: 'thread-answer', 'data-testid': 'thread-answer', 'data-message': m.id },
      h('div', { class: 'msg-head' }, h('b', null, 'Answer'), m.metadata?.graph ? h('span', { class: 'muted small' }, ` graph ${m.metadata.graph}`) : null),
      h('div', { class: 'msg-text', 'data-testid': 'thread-answer-text' }, clip(textOf(m.parts)) || h('span', { class: 'muted' }, '(no text)')),
      h('ul', { class: 'thread-runs', 'aria-label': 'Runs of this answer' },
        mine.map((x) => runChip(x, names, x.id === current ? 'answer' : 'earlier attempt')),
        myForks.map((x) => runChip(x, names, alts.some((a) => a.runId === x.id) ? 'fork · alternative' : 'fork'))),
      alts.length ? h('div', { 'data-testid': 'thread-alternatives' }, h('h3', { class: 'small' }, `Alternatives (${alts.length})`),
        h('ul', null, alts.map((a) => h('li', { 'data-testid': 'thread-alternative', 'data-run': a.runId },
          h('a', { class: 'mono', href: hrefFor(['runs', a.runId]), title: a.runId }, names.get(a.runId) || a.runId), ' ', clip(textOf(a.parts), 200))))) : null,
      current ? stateBox(current) : null);
  }

  (async () => {
    try {
      const [chat, list] = await Promise.all([
        getJSON(`/api/chat/${encodeURIComponent(chatId)}`),
        getJSON(`/api/runs?chat=${encodeURIComponent(chatId)}&limit=500`),
      ]);
      const runs = list.runs || [];
      const since = runs.reduce((m, x) => Math.min(m, x.createdAt), Date.now());
      const graphs = [...new Set(runs.map((x) => x.graph))];
      // Forks: attached ones are runs of the chat; detached ones are found among the graph's runs since.
      const forks = [...runs.filter((x) => originOf(x)), ...(runs.length ? await forksOf(runs, graphs, since) : [])];
      if (!alive) return;
      const alternatives = (chat.messages || []).flatMap((m) => (m.metadata?.alternatives || []).map((a) => a.runId));
      const names = distinctIds([...new Set([...runs.map((x) => x.id), ...forks.map((x) => x.id), ...alternatives])]);
      const detached = forks.filter((f) => !runs.includes(f)).length;
      const turns = turnsOf(chat.messages || []);
      const graph = graphs[0] || chat.messages?.find((m) => m.metadata?.graph)?.metadata.graph || 'chat';
      body.replaceChildren(
        h('div', { class: 'row' }, h('h1', null, chat.title || 'Chat'), h('span', { class: 'spacer' }),
          h('a', { class: 'btn', href: hrefFor(['playground', graph], { chat: chatId }) }, 'Open in playground'),
          h('a', { class: 'btn', href: hrefFor(['runs'], { chat: chatId }) }, 'Runs of this chat')),
        h('p', { class: 'muted small', 'data-testid': 'thread-summary' }, `${turns.length} turn${turns.length === 1 ? '' : 's'} · ${runs.length} run${runs.length === 1 ? '' : 's'} · ${forks.length} fork${forks.length === 1 ? '' : 's'} (${detached} detached) · started ${fmtTime(since)}`),
        h('ol', { class: 'thread', 'aria-label': 'Turns' }, turns.map((t, i) => h('li', { class: 'card thread-turn', 'data-testid': 'thread-turn', 'data-turn': i + 1 },
          h('div', { class: 'msg-head' }, h('b', null, `Turn ${i + 1}`)),
          t.user ? h('div', { class: 'msg-text thread-user', 'data-testid': 'thread-user' }, clip(textOf(t.user.parts))) : null,
          t.answers.length ? t.answers.map((m) => answerBlock(m, runs, forks, names)) : h('p', { class: 'muted small' }, 'No answer stored.')))));
      if (!turns.length) body.append(h('p', { class: 'empty' }, 'This chat has no messages.'));
      body.querySelector('.thread-focus')?.scrollIntoView({ block: 'center' });
    } catch (e) {
      body.replaceChildren(errorBox(e, `Could not load chat ${chatId}: `));
    }
  })();
  return { cleanup() { alive = false; } };
}
