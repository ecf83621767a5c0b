// HTTP access to the stategraph API: bearer key handling (401 → ask for a
// key, keep it in localStorage, retry), JSON errors, and an SSE reader.

const KEY = 'stategraph.studio.apiKey';

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function apiKey() {
  try { return localStorage.getItem(KEY) || ''; } catch { return ''; }
}

export function setApiKey(key) {
  try {
    if (key) localStorage.setItem(KEY, key);
    else localStorage.removeItem(KEY);
  } catch { /* storage unavailable */ }
}

let pendingKey = null;
let declined = false; // the user cancelled the dialog: do not ask again until they use the API key button

/** Lets the next 401 ask for a key again (the API key button). */
export function allowKeyPrompt() {
  declined = false;
}

/** Shows the API key dialog; resolves with the key, or null when cancelled. */
export function askForKey(reason) {
  if (pendingKey) return pendingKey;
  const dialog = document.getElementById('auth-dialog');
  if (!dialog) return Promise.resolve(null);
  const form = dialog.querySelector('form');
  const input = dialog.querySelector('input');
  const msg = dialog.querySelector('[data-testid="auth-reason"]');
  msg.textContent = reason || 'This server requires an API key.';
  input.value = '';
  pendingKey = new Promise((resolve) => {
    const done = (value) => {
      form.removeEventListener('submit', onSubmit);
      dialog.removeEventListener('close', onClose);
      if (dialog.open) dialog.close();
      pendingKey = null;
      resolve(value);
    };
    const onSubmit = (ev) => {
      ev.preventDefault();
      const key = input.value.trim();
      if (!key) { input.focus(); return; }
      setApiKey(key);
      declined = false;
      done(key);
    };
    const onClose = () => { declined = true; done(null); };
    form.addEventListener('submit', onSubmit);
    dialog.addEventListener('close', onClose);
    dialog.showModal();
    input.focus();
  });
  return pendingKey;
}

/**
 * fetch() with the stored bearer key. On 401 asks for a key and retries;
 * returns the final Response (never throws for HTTP statuses).
 * `opts.json` is sent as a JSON body.
 */
export async function request(path, opts = {}) {
  for (;;) {
    const headers = new Headers(opts.headers || {});
    const key = apiKey();
    if (key) headers.set('authorization', `Bearer ${key}`);
    let body = opts.body;
    if (opts.json !== undefined) {
      headers.set('content-type', 'application/json');
      body = JSON.stringify(opts.json);
    }
    const res = await fetch(path, { method: opts.method || 'GET', headers, body, signal: opts.signal, cache: 'no-store' });
    if (res.status !== 401 || declined) return res;
    let reason = 'This server requires an API key.';
    try { reason = (await res.clone().json()).error.message || reason; } catch { /* not JSON */ }
    const k = await askForKey(key ? `The stored key was refused: ${reason}` : reason);
    if (!k) return res;
  }
}

/** An ApiError from a non-2xx response (`{"error":{"code","message"}}`). */
export async function errorOf(res) {
  let code = `http_${res.status}`;
  let message = `${res.status} ${res.statusText}`;
  try {
    const text = await res.text();
    try {
      const j = JSON.parse(text);
      if (j && j.error) {
        code = j.error.code || code;
        message = j.error.message || message;
      }
    } catch {
      if (text) message = text.slice(0, 300);
    }
  } catch { /* no body */ }
  if (res.status === 404 && code === 'not_found' && /no such endpoint/.test(message)) {
    message = `${message} — this server does not provide this API yet`;
  }
  return new ApiError(res.status, code, message);
}

/** GET/POST returning parsed JSON; throws ApiError on non-2xx. */
export async function getJSON(path, opts = {}) {
  const res = await request(path, opts);
  if (!res.ok) throw await errorOf(res);
  if (res.status === 204) return null;
  return res.json();
}

export function postJSON(path, body, opts = {}) {
  return getJSON(path, { ...opts, method: 'POST', json: body });
}

/**
 * Reads a text/event-stream body; yields `{data, id, event}` per event.
 * Comments (`: keep-alive`) are skipped; multi-line data is joined with \n.
 */
export async function* readSSE(res, signal) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  let data = [];
  let id = null;
  let event = null;
  const onAbort = () => reader.cancel().catch(() => {});
  signal?.addEventListener('abort', onAbort);
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        let line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.endsWith('\r')) line = line.slice(0, -1);
        if (line === '') {
          if (data.length) yield { data: data.join('\n'), id, event };
          data = [];
          event = null;
          continue;
        }
        if (line.startsWith(':')) continue;
        const c = line.indexOf(':');
        const field = c < 0 ? line : line.slice(0, c);
        let val = c < 0 ? '' : line.slice(c + 1);
        if (val.startsWith(' ')) val = val.slice(1);
        if (field === 'data') data.push(val);
        else if (field === 'id') id = val;
        else if (field === 'event') event = val;
      }
    }
    if (data.length) yield { data: data.join('\n'), id, event };
  } finally {
    signal?.removeEventListener('abort', onAbort);
  }
}

/** Reads a UI message stream: yields parsed chunks until `[DONE]`. */
export async function* readUIStream(res, signal) {
  for await (const ev of readSSE(res, signal)) {
    if (ev.data === '[DONE]') return;
    let chunk;
    try { chunk = JSON.parse(ev.data); } catch {
      chunk = { type: 'error', errorText: `unparseable stream chunk: ${ev.data.slice(0, 200)}` };
    }
    yield chunk;
  }
}

// Small cache of graph details (by id and version) shared by screens.
const graphCache = new Map();
export async function graphDetail(id, { fresh = false } = {}) {
  if (!fresh && graphCache.has(id)) return graphCache.get(id);
  const g = await getJSON(`/api/graphs/${encodeURIComponent(id)}`);
  graphCache.set(id, g);
  return g;
}
export function forgetGraph(id) {
  graphCache.delete(id);
}
