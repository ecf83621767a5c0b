// The AI SDK UI message stream applied to a message, the way useChat's
// processUIMessageStream does it. Internal bookkeeping lives in `_`-prefixed
// keys, which `toUIMessage` strips before a message is sent back.

export function assistantMessage(id) {
  return { id, role: 'assistant', parts: [], metadata: {}, _status: 'streaming', _errors: [], _finish: null };
}

/** Strips internal keys: the UIMessage as the AI SDK would send it. */
export function toUIMessage(m) {
  const parts = m.parts.map((p) => Object.fromEntries(Object.entries(p).filter(([k]) => !k.startsWith('_'))));
  const out = { id: m.id, role: m.role, parts };
  if (m.metadata && Object.keys(m.metadata).length) out.metadata = m.metadata;
  return out;
}

function mergeMeta(m, meta) {
  if (meta && typeof meta === 'object') m.metadata = deepMerge(m.metadata || {}, meta);
}

function deepMerge(a, b) {
  if (!a || typeof a !== 'object' || Array.isArray(a) || !b || typeof b !== 'object' || Array.isArray(b)) return b;
  const out = { ...a };
  for (const [k, v] of Object.entries(b)) out[k] = k in a ? deepMerge(a[k], v) : v;
  return out;
}

function toolPart(m, id) {
  return m.parts.find((p) => p.toolCallId === id && (p.type === 'dynamic-tool' || p.type.startsWith('tool-')));
}

function ensureTool(m, c) {
  let p = toolPart(m, c.toolCallId);
  if (!p) {
    p = c.dynamic ? { type: 'dynamic-tool', toolName: c.toolName } : { type: `tool-${c.toolName || 'unknown'}` };
    p.toolCallId = c.toolCallId;
    p.state = 'input-streaming';
    if (c.title) p.title = c.title;
    if (c.providerExecuted !== undefined) p.providerExecuted = c.providerExecuted;
    m.parts.push(p);
  }
  return p;
}

/** Best effort parse of a partial JSON text (closes open strings, arrays, objects). */
export function parsePartialJson(text) {
  if (!text) return undefined;
  try { return JSON.parse(text); } catch { /* partial */ }
  const stack = [];
  let inStr = false;
  let esc = false;
  for (const ch of text) {
    if (inStr) {
      if (esc) esc = false;
      else if (ch === '\\') esc = true;
      else if (ch === '"') inStr = false;
      continue;
    }
    if (ch === '"') inStr = true;
    else if (ch === '{') stack.push('}');
    else if (ch === '[') stack.push(']');
    else if (ch === '}' || ch === ']') stack.pop();
  }
  let t = text + (inStr ? '"' : '');
  t = t.replace(/[,:]\s*$/, '');
  try { return JSON.parse(t + stack.reverse().join('')); } catch { return undefined; }
}

/** Applies one UI message stream chunk to `m`. Returns false for unknown chunks. */
export function applyChunk(m, c) {
  m._text ||= {};
  m._reasoning ||= {};
  switch (c.type) {
    case 'start':
      if (c.messageId) m.id = c.messageId;
      mergeMeta(m, c.messageMetadata);
      return true;
    case 'start-step':
      m.parts.push({ type: 'step-start' });
      return true;
    case 'finish-step':
      m._text = {};
      m._reasoning = {};
      return true;
    case 'text-start':
    case 'reasoning-start': {
      const kind = c.type.startsWith('text') ? 'text' : 'reasoning';
      const p = { type: kind, text: '', state: 'streaming' };
      if (c.providerMetadata) p.providerMetadata = c.providerMetadata;
      m.parts.push(p);
      m[`_${kind}`][c.id] = p;
      return true;
    }
    case 'text-delta':
    case 'reasoning-delta': {
      const kind = c.type.startsWith('text') ? 'text' : 'reasoning';
      let p = m[`_${kind}`][c.id];
      if (!p) { // delta without start: tolerate, but note it
        p = { type: kind, text: '', state: 'streaming' };
        m.parts.push(p);
        m[`_${kind}`][c.id] = p;
      }
      p.text += c.delta ?? '';
      return true;
    }
    case 'text-end':
    case 'reasoning-end': {
      const kind = c.type.startsWith('text') ? 'text' : 'reasoning';
      const p = m[`_${kind}`][c.id];
      if (p) p.state = 'done';
      return true;
    }
    case 'tool-input-start': {
      const p = ensureTool(m, c);
      p._inputText = '';
      return true;
    }
    case 'tool-input-delta': {
      const p = ensureTool(m, c);
      p._inputText = (p._inputText || '') + (c.inputTextDelta || '');
      p.input = parsePartialJson(p._inputText);
      return true;
    }
    case 'tool-input-available': {
      const p = ensureTool(m, c);
      p.state = 'input-available';
      p.input = c.input;
      return true;
    }
    case 'tool-input-error': {
      const p = ensureTool(m, c);
      p.state = 'output-error';
      p.input = c.input;
      p.errorText = c.errorText;
      return true;
    }
    case 'tool-approval-request': {
      const p = ensureTool(m, c);
      p.state = 'approval-requested';
      p.approval = { id: c.approvalId };
      return true;
    }
    case 'tool-output-available': {
      const p = ensureTool(m, c);
      p.state = 'output-available';
      p.output = c.output;
      if (c.preliminary) p.preliminary = true;
      else delete p.preliminary;
      return true;
    }
    case 'tool-output-error': {
      const p = ensureTool(m, c);
      p.state = 'output-error';
      p.errorText = c.errorText;
      return true;
    }
    case 'tool-output-denied': {
      const p = ensureTool(m, c);
      p.state = 'output-denied';
      return true;
    }
    case 'source-url':
      m.parts.push({ type: 'source-url', sourceId: c.sourceId, url: c.url, ...(c.title ? { title: c.title } : {}) });
      return true;
    case 'source-document':
      m.parts.push({ type: 'source-document', sourceId: c.sourceId, mediaType: c.mediaType, title: c.title, ...(c.filename ? { filename: c.filename } : {}) });
      return true;
    case 'file':
      m.parts.push({ type: 'file', url: c.url, mediaType: c.mediaType });
      return true;
    case 'message-metadata':
      mergeMeta(m, c.messageMetadata);
      return true;
    case 'error':
      m._errors.push(c.errorText);
      m._status = 'error';
      return true;
    case 'abort':
      m._status = 'aborted';
      m._abort = c.reason || 'stopped';
      return true;
    case 'finish':
      m._finish = c.finishReason || 'stop';
      mergeMeta(m, c.messageMetadata);
      if (m._status === 'streaming') m._status = 'done';
      return true;
    default:
      if (typeof c.type === 'string' && c.type.startsWith('data-')) {
        if (c.transient) { (m._transient ||= []).push(c); return true; }
        const existing = c.id !== undefined ? m.parts.find((p) => p.type === c.type && p.id === c.id) : null;
        if (existing) existing.data = c.data;
        else m.parts.push({ type: c.type, ...(c.id !== undefined ? { id: c.id } : {}), data: c.data });
        return true;
      }
      (m._unknown ||= []).push(c);
      return false;
  }
}

/** Marks open text/reasoning parts done when a stream ends. */
export function closeMessage(m) {
  for (const p of m.parts) if ((p.type === 'text' || p.type === 'reasoning') && p.state === 'streaming') p.state = 'done';
  if (m._status === 'streaming') m._status = 'done';
}
