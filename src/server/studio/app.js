// Studio shell: hash routing between the screens, navigation state, API key button.

import { route, h } from './util.js';
import { askForKey, apiKey, allowKeyPrompt } from './api.js';
import * as graphs from './graphs.js';
import * as playground from './playground.js';
import * as runs from './runs.js';
import * as run from './run.js';
import * as evaluation from './eval.js';
import * as thread from './thread.js';

const main = document.getElementById('main');
let current = null; // {name, screen, cleanup, update}

function pick(r) {
  const [top, id] = r.parts;
  if (top === 'playground') return ['playground', playground];
  if (top === 'runs' && id) return ['run', run];
  if (top === 'runs') return ['runs', runs];
  if (top === 'eval') return ['eval', evaluation];
  if (top === 'chats' && id) return ['thread', thread];
  return ['graphs', graphs];
}

function render() {
  const r = route();
  const [name, screen] = pick(r);
  const nav = name === 'run' || name === 'thread' ? 'runs' : name;
  for (const a of document.querySelectorAll('[data-nav]')) {
    if (a.dataset.nav === nav) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const key = `${name}:${name === 'run' || name === 'thread' ? r.parts[1] : ''}`;
  if (current && current.key === key && current.update && current.update(r) !== false) return;
  if (current?.cleanup) current.cleanup();
  main.replaceChildren();
  main.dataset.screen = name;
  document.title = `${{ graphs: 'Graphs', playground: 'Playground', runs: 'Runs', run: 'Run', eval: 'Eval', thread: 'Chat' }[name]} · stategraph studio`;
  const res = screen.mount(main, r) || {};
  current = { key, cleanup: res.cleanup, update: res.update };
}

/** Mounts the current screen afresh (after an API key change). */
function remount() {
  if (current?.cleanup) current.cleanup();
  current = null;
  render();
}

window.addEventListener('hashchange', render);

document.querySelector('[data-testid="skip-link"]').addEventListener('click', (ev) => {
  ev.preventDefault();
  main.focus();
});

document.querySelector('[data-testid="auth-cancel"]').addEventListener('click', (ev) => {
  ev.target.closest('dialog').close();
});

document.getElementById('key-button').addEventListener('click', async () => {
  allowKeyPrompt();
  const key = await askForKey(apiKey() ? 'A key is stored in this browser. Enter a new one, or cancel to keep it.' : 'Set the API key sent with every request (optional from this machine when the server allows local use).');
  allowKeyPrompt();
  if (key) remount();
});

if (!location.hash) history.replaceState(null, '', '#/graphs');
render();

// Exposed for debugging in the console.
window.studio = { render, h };
