// Human in the loop: what a paused run waits for, and the controls that
// answer it. Used by the run page (answers go to POST /api/runs/{id}/resume)
// and by the playground (answers go back through POST /api/chat, as useChat
// sends them). The answer shapes are those of docs/human-in-the-loop.md:
// an approval `{approved, reason?}`, a client tool `{output}` or `{error}`,
// a question a value of its field's type.

import { h, json, jsonLine } from './util.js';

/** Reads typed text as a value of `schema`: text for a string field, else JSON (or the text). */
export function parseAnswer(text, schema) {
  const t = (schema && schema.type) || null;
  if (t === 'string') return text;
  if (t === 'boolean' && /^(yes|no|true|false)$/i.test(text.trim())) return /^(yes|true)$/i.test(text.trim());
  try { return JSON.parse(text); } catch { return text; }
}

/** How a question's option is written as a chat message (the server reads it back by type). */
export function optionText(o) {
  return typeof o === 'string' ? o : JSON.stringify(o);
}

/** A labelled text input and a button; `onSubmit(text)` when the button is pressed or Enter typed. */
function typed({ id, label, placeholder, button, testid, multiline, onSubmit, disabled }) {
  const input = h(multiline ? 'textarea' : 'input', {
    id, rows: multiline ? 3 : null, type: multiline ? null : 'text', placeholder, spellcheck: 'false',
    class: multiline ? 'mono' : null, 'data-testid': `${testid}-input`, disabled,
  });
  const go = () => { const v = input.value.trim(); if (v) onSubmit(v); };
  input.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); go(); }
  });
  return h('div', { class: 'field hitl-typed' }, h('label', { for: id }, label),
    h('div', { class: 'row' }, input, h('button', { type: 'button', class: 'btn btn-primary btn-small', 'data-testid': `${testid}-send`, disabled, onclick: go }, button)));
}

let seq = 0;

/**
 * One interrupt as a card: what it asks and the controls to answer it.
 * `answer(value)` sends the answer in the shape its kind takes; it returns
 * a promise (the card disables itself while it is pending).
 */
export function interruptCard(it, answer, { disabled = false } = {}) {
  const n = ++seq;
  const status = h('div', { 'aria-live': 'polite', 'data-testid': 'hitl-status' });
  const card = h('section', { class: 'card hitl', 'aria-labelledby': `hitl-h-${n}`, 'data-testid': 'hitl', 'data-kind': it.type, 'data-interrupt': it.id });
  const send = async (value) => {
    for (const el of card.querySelectorAll('button, input, textarea')) el.disabled = true;
    status.replaceChildren(h('p', { class: 'muted small' }, 'Sending…'));
    try {
      await answer(value);
      status.replaceChildren(h('p', { class: 'small', 'data-testid': 'hitl-sent' }, 'Answered — the run continues.'));
    } catch (e) {
      for (const el of card.querySelectorAll('button, input, textarea')) el.disabled = false;
      status.replaceChildren(h('div', { class: 'alert alert-error', role: 'alert' }, `${e.message}${e.code ? ` (${e.code})` : ''}`));
    }
  };
  const where = it.node ? h('span', { class: 'muted small' }, ` · ${it.node}, step ${it.step}${it.expires_at ? ` · expires ${new Date(it.expires_at / 1000).toLocaleString()}` : ''}`) : null;
  if (it.type === 'approval') {
    card.append(
      h('h2', { id: `hitl-h-${n}`, class: 'card-title' }, 'Waiting for approval', where),
      h('p', null, 'The model wants to call ', h('code', { 'data-testid': 'hitl-tool' }, it.tool), ' with:'),
      h('pre', { class: 'json', tabindex: '0', 'data-testid': 'hitl-args' }, json(it.args)),
      h('div', { class: 'row' },
        h('button', { type: 'button', class: 'btn btn-primary', 'data-testid': 'hitl-approve', disabled, onclick: () => send({ approved: true }) }, 'Approve'),
        h('button', { type: 'button', class: 'btn btn-danger', 'data-testid': 'hitl-deny', disabled, onclick: () => send({ approved: false, reason: 'Denied in the studio' }) }, 'Deny')));
  } else if (it.type === 'client_tool') {
    card.append(
      h('h2', { id: `hitl-h-${n}`, class: 'card-title' }, 'Waiting for a client tool\'s output', where),
      h('p', null, 'The model called ', h('code', { 'data-testid': 'hitl-tool' }, it.tool), ', which the front end runs, with:'),
      h('pre', { class: 'json', tabindex: '0', 'data-testid': 'hitl-args' }, json(it.args)),
      typed({ id: `hitl-out-${n}`, label: 'Its output (JSON, or text)', placeholder: '{"picked": 2}', button: 'Send output', testid: 'hitl-output', multiline: true, disabled,
        onSubmit: (v) => send({ output: parseAnswer(v, null) }) }));
  } else if (it.type === 'question') {
    const options = it.options || [];
    card.append(
      h('h2', { id: `hitl-h-${n}`, class: 'card-title' }, 'Waiting for an answer', where),
      h('p', { class: 'hitl-question', 'data-testid': 'hitl-question' }, it.question),
      h('p', { class: 'muted small' }, 'Into ', h('code', null, it.field), ` (${jsonLine(it.schema, 80)})`),
      options.length ? h('div', { class: 'row', role: 'group', 'aria-label': 'Options' },
        options.map((o) => h('button', { type: 'button', class: 'btn', 'data-testid': 'hitl-option', 'data-value': optionText(o), disabled, onclick: () => send(o) }, optionText(o)))) : null,
      typed({ id: `hitl-q-${n}`, label: options.length ? 'Or type an answer' : 'Your answer', button: 'Answer', testid: 'hitl-answer', disabled,
        onSubmit: (v) => send(parseAnswer(v, it.schema)) }));
  } else {
    card.append(h('h2', { id: `hitl-h-${n}`, class: 'card-title' }, `Waiting (${it.type})`, where),
      h('pre', { class: 'json', tabindex: '0' }, json(it)));
  }
  card.append(status);
  return card;
}
