// The rules of the UI message stream that the AI SDK's parser does not
// enforce itself, but a server must keep for `useChat` to show the message
// right: SSE framing, and the order of chunks.

/**
 * Splits SSE text into events, following the WHATWG EventSource rules for
 * lines, fields and comments.
 */
export function scanSse(text) {
  const events = [];
  let data = [];
  let event = '';
  let comments = 0;
  let start = 1;
  const lines = text.split(/\r\n|\r|\n/);
  lines.forEach((line, i) => {
    if (line === '') {
      if (data.length) events.push({ data: data.join('\n'), event, line: start });
      data = [];
      event = '';
      start = i + 2;
      return;
    }
    if (line.startsWith(':')) {
      comments++;
      return;
    }
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    const value = colon === -1 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'data') data.push(value);
    else if (field === 'event') event = value;
  });
  const unterminated = data.length > 0;
  if (unterminated) events.push({ data: data.join('\n'), event, line: start });
  return { events, comments, unterminated };
}

/**
 * Checks the order of parsed chunks: steps and parts opened before they are
 * used and closed before the step ends; tool calls in their states' order;
 * one `finish` (or an `abort`) and nothing after it. Errors go to
 * `report.protocolErrors`, doubtful but legal things to `report.warnings`.
 */
export function checkChunks(chunks, report) {
  const error = (m) => report.protocolErrors.push(m);
  const warn = (m) => report.warnings.push(m);
  const open = { text: new Set(), reasoning: new Set() };
  const tools = new Map();
  let step = false;
  let finished = false;
  let aborted = false;
  let failed = false;
  let starts = 0;
  // After `error` or `abort` the SDK itself leaves parts open, so an
  // unclosed part is only a warning then.
  const unclosed = (m) => (failed || aborted ? warn(`${m} (after error/abort)`) : error(m));

  chunks.forEach((c, i) => {
    const at = `chunk ${i} (${c.type})`;
    if (finished) error(`${at} comes after "finish"`);
    const kind = c.type.startsWith('text') ? 'text' : 'reasoning';
    switch (c.type) {
      case 'start':
        if (++starts > 1) warn(`${at}: a second "start"`);
        break;
      case 'start-step':
        if (step) error(`${at}: the previous step is not finished`);
        step = true;
        break;
      case 'finish-step':
        if (!step) error(`${at}: no step is open`);
        for (const k of ['text', 'reasoning']) {
          for (const id of open[k]) unclosed(`${at}: ${k} part "${id}" is still open`);
          open[k].clear();
        }
        step = false;
        break;
      case 'text-start':
      case 'reasoning-start':
        if (open[kind].has(c.id)) warn(`${at}: "${c.id}" started twice`);
        open[kind].add(c.id);
        break;
      case 'text-delta':
      case 'reasoning-delta':
        if (!open[kind].has(c.id)) error(`${at}: "${c.id}" is not open`);
        break;
      case 'text-end':
      case 'reasoning-end':
        if (!open[kind].delete(c.id)) error(`${at}: "${c.id}" is not open`);
        break;
      case 'tool-input-start':
        if (tools.has(c.toolCallId)) warn(`${at}: tool call "${c.toolCallId}" reused`);
        tools.set(c.toolCallId, 'streaming');
        break;
      case 'tool-input-delta':
        if (tools.get(c.toolCallId) !== 'streaming') error(`${at}: "${c.toolCallId}" has no open input`);
        break;
      case 'tool-input-available':
      case 'tool-input-error':
        tools.set(c.toolCallId, 'input');
        break;
      case 'tool-approval-request':
        if (!tools.has(c.toolCallId)) error(`${at}: approval for unknown call "${c.toolCallId}"`);
        tools.set(c.toolCallId, 'approval');
        break;
      case 'tool-output-available':
      case 'tool-output-error':
      case 'tool-output-denied':
        // A continuation may answer a call of the previous message.
        if (!tools.has(c.toolCallId)) warn(`${at}: call "${c.toolCallId}" is not in this stream`);
        else if (tools.get(c.toolCallId) === 'streaming') error(`${at}: output before the input is complete`);
        tools.set(c.toolCallId, 'output');
        break;
      case 'finish':
        finished = true;
        break;
      case 'abort':
        aborted = true;
        break;
      case 'error':
        failed = true;
        break;
      default:
        break;
    }
  });
  const firstError = chunks.findIndex((c) => c.type === 'error');
  if (firstError !== -1 && firstError < chunks.length - 1) {
    warn(`${chunks.length - 1 - firstError} chunk(s) after the first "error": useChat stops reading there`);
  }
  if (!starts) warn('no "start" chunk: useChat keeps its own message id');
  if (!finished && !aborted) error('neither "finish" nor "abort"');
  if (step) unclosed('the last step is not finished');
  for (const k of ['text', 'reasoning']) for (const id of open[k]) unclosed(`${k} part "${id}" never ends`);
  for (const [id, state] of tools) if (state === 'streaming') unclosed(`tool call "${id}" never gets its input`);
}
