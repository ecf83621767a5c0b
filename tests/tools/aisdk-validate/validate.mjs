#!/usr/bin/env node
// Checks an AI SDK UI message stream with the `ai` package's own parser.
//
// The stream is read the way `useChat` (DefaultChatTransport) reads it:
// `parseJsonEventStream` with `uiMessageChunkSchema` validates each chunk,
// and `readUIMessageStream` assembles the message. On top of that come the
// rules the SDK leaves to the server: `data: [DONE]` last, every part and
// step closed, nothing after `finish`, the stream's headers.
//
//   node validate.mjs FILE|-                        a capture (or stdin)
//   node validate.mjs URL [--text T | --body F]     POST a chat, check the answer
//   node validate.mjs URL --resume --chat-id ID     GET URL/ID/stream (204: nothing active)
//   node validate.mjs --request F                   a request body, as useChat sends it
//
// Options: --header "k: v" (repeatable), --json (the report as JSON on
// stdout), --quiet, --timeout MS (default 60000), --fail-on-error-chunk.
// Exit: 0 valid, 1 invalid, 2 usage, IO or HTTP error.
//
// The `ai` version is pinned in this directory's package-lock.json;
// tests/run.sh installs it with `npm ci`.

import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { checkChunks, scanSse } from './rules.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));

class UsageError extends Error {}

function parseArgs(argv) {
  const o = { headers: {}, inputs: [], timeout: 60000 };
  const take = (i, flag) => {
    if (i + 1 >= argv.length) throw new UsageError(`${flag} needs a value`);
    return argv[i + 1];
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--text') o.text = take(i++, a);
    else if (a === '--body') o.body = take(i++, a);
    else if (a === '--chat-id') o.chatId = take(i++, a);
    else if (a === '--request') o.request = take(i++, a);
    else if (a === '--timeout') o.timeout = Number(take(i++, a));
    else if (a === '--header') {
      const h = take(i++, a);
      const k = h.indexOf(':');
      if (k < 1) throw new UsageError(`bad header "${h}"`);
      o.headers[h.slice(0, k).trim().toLowerCase()] = h.slice(k + 1).trim();
    } else if (a === '--resume') o.resume = true;
    else if (a === '--json') o.json = true;
    else if (a === '--quiet') o.quiet = true;
    else if (a === '--fail-on-error-chunk') o.failOnErrorChunk = true;
    else if (a.startsWith('--')) throw new UsageError(`unknown option ${a}`);
    else o.inputs.push(a);
  }
  if (!o.request && o.inputs.length === 0) throw new UsageError('nothing to check');
  if (o.resume && !o.chatId) throw new UsageError('--resume needs --chat-id');
  return o;
}

/** The `ai` package installed beside this script, through its own exports. */
async function loadAi() {
  const manifest = path.join(here, 'node_modules', 'ai', 'package.json');
  if (!fs.existsSync(manifest)) {
    throw new Error(`the AI SDK is not installed: run \`npm ci\` in ${here} (tests/run.sh does)`);
  }
  const pkg = JSON.parse(fs.readFileSync(manifest, 'utf8'));
  let entry = pkg.exports?.['.'];
  while (entry && typeof entry === 'object') entry = entry.import ?? entry.default;
  const mod = await import(pathToFileURL(path.join(path.dirname(manifest), entry ?? pkg.main)).href);
  return { ai: mod, version: pkg.version };
}

/** A random id of the shape the SDK's own generator gives. */
const randomId = (prefix) => `${prefix}-${Math.random().toString(36).slice(2, 12)}`;

/** The response body for a URL input, after checking status and headers. */
async function fetchStream(opts, url, report) {
  let init;
  if (opts.resume) {
    url = `${url.replace(/\/+$/, '')}/${encodeURIComponent(opts.chatId)}/stream`;
    init = { method: 'GET', headers: opts.headers };
  } else {
    let body = opts.body;
    if (body && fs.existsSync(body)) body = fs.readFileSync(body, 'utf8');
    // What DefaultChatTransport sends for `sendMessage({ text })` on a new chat.
    body ??= JSON.stringify({
      id: opts.chatId ?? randomId('chat'),
      messages: [{ id: randomId('msg'), role: 'user', parts: [{ type: 'text', text: opts.text ?? 'Hello' }] }],
      trigger: 'submit-message',
    });
    init = { method: 'POST', headers: { 'content-type': 'application/json', ...opts.headers }, body };
  }
  init.signal = AbortSignal.timeout(opts.timeout);
  report.request = { method: init.method, url };
  const res = await fetch(url, init);
  report.http = { status: res.status, headers: Object.fromEntries(res.headers) };
  if (opts.resume && res.status === 204) return null;
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${(await res.text()).slice(0, 500)}`);
  const type = res.headers.get('content-type') ?? '';
  if (!type.startsWith('text/event-stream')) report.protocolErrors.push(`content-type is "${type}", not text/event-stream`);
  const version = res.headers.get('x-vercel-ai-ui-message-stream');
  if (version !== 'v1') report.protocolErrors.push(`x-vercel-ai-ui-message-stream is ${JSON.stringify(version)}, not "v1"`);
  return res.body;
}

/** The first line of each zod issue, for a readable schema error. */
function describeSchemaError(error) {
  const issues = error?.cause?.issues;
  if (!Array.isArray(issues)) return `${error?.name ?? 'Error'}: ${String(error?.message).split('\n')[0]}`;
  return issues.map((i) => `${(i.path ?? []).join('.') || '(chunk)'}: ${i.message}`).join('; ');
}

/** Runs the SDK's parser and assembler over `stream`, filling the report. */
async function checkStream(ai, stream, opts, report) {
  const [sdkSide, rawSide] = stream.tee();
  const rawText = new Response(rawSide).text();
  const chunks = [];
  const errorTexts = [];
  const validated = ai.parseJsonEventStream({ stream: sdkSide, schema: ai.uiMessageChunkSchema }).pipeThrough(
    new TransformStream({
      transform(result, out) {
        if (!result.success) {
          // DefaultChatTransport throws here; useChat goes to status "error".
          report.schemaErrors.push(`${describeSchemaError(result.error)} in ${JSON.stringify(result.rawValue ?? null).slice(0, 300)}`);
          return;
        }
        const chunk = result.value;
        chunks.push(chunk);
        report.chunkCounts[chunk.type] = (report.chunkCounts[chunk.type] ?? 0) + 1;
        if (chunk.type === 'error') {
          report.errorChunks.push(chunk.errorText);
          errorTexts.push(chunk.errorText);
        }
        out.enqueue(chunk);
      },
    }),
  );
  // The assembler stops at its first error; the other branch sees every chunk.
  const [forAssembly, forDrain] = validated.tee();
  const drained = new Response(forDrain.pipeThrough(new TransformStream({ transform() {} }))).text();
  const onError = (e) => {
    // An `error` chunk reaches onError as Error(errorText): that is not an
    // assembly failure.
    const text = e instanceof Error ? e.message : String(e);
    const k = errorTexts.indexOf(text);
    if (k === -1) report.assemblyErrors.push(`${e?.name ?? 'Error'}: ${text}`);
    else errorTexts.splice(k, 1);
  };
  let message = null;
  for await (const snapshot of ai.readUIMessageStream({ stream: forAssembly, onError })) message = snapshot;
  await drained;
  const raw = await rawText;

  const sse = scanSse(raw);
  report.sse = { events: sse.events.length, comments: sse.comments, bytes: Buffer.byteLength(raw) };
  const done = sse.events.findIndex((e) => e.data === '[DONE]');
  if (done === -1) report.protocolErrors.push('no terminating "data: [DONE]"');
  else if (done !== sse.events.length - 1) report.protocolErrors.push(`${sse.events.length - 1 - done} event(s) after "data: [DONE]"`);
  if (sse.unterminated) report.protocolErrors.push('the last event is not ended by a blank line');
  for (const e of sse.events) {
    if (e.event && e.event !== 'message') report.warnings.push(`line ${e.line}: "event: ${e.event}" (the AI SDK ignores it)`);
  }
  checkChunks(chunks, report);
  if (opts.failOnErrorChunk && report.errorChunks.length) report.protocolErrors.push(`${report.errorChunks.length} error chunk(s)`);
  report.message = message;
}

async function checkRequest(ai, file, report) {
  const body = JSON.parse(fs.readFileSync(file, 'utf8'));
  const messages = body.messages ?? (body.message ? [body.message] : undefined);
  const result = await ai.safeValidateUIMessages({ messages });
  if (!result.success) report.schemaErrors.push(`request messages: ${result.error.message}`);
  if (body.trigger != null && !['submit-message', 'regenerate-message'].includes(body.trigger)) {
    report.protocolErrors.push(`request trigger "${body.trigger}" is not one useChat sends`);
  }
  report.requestValidation = { file, valid: result.success, messageCount: messages?.length ?? 0 };
}

function printReport(report, opts) {
  const p = (...a) => console.log(...a);
  p(`ai@${report.aiVersion}`);
  if (report.http) p(`HTTP ${report.http.status} content-type=${report.http.headers['content-type']}`);
  if (report.resume) p(report.resume);
  if (report.sse) p(`SSE: ${report.sse.events} events, ${report.sse.comments} comments, ${report.sse.bytes} bytes`);
  const counts = Object.entries(report.chunkCounts).map(([k, v]) => `${k}=${v}`);
  if (counts.length) p(`chunks: ${counts.join(' ')}`);
  for (const t of report.errorChunks) p(`error chunk: ${t}`);
  if (report.message && !opts.quiet) {
    p(`message ${JSON.stringify(report.message.id)} (${report.message.role})`);
    report.message.parts.forEach((part, i) => p(`  [${i}] ${JSON.stringify(part)}`));
  }
  for (const w of report.warnings) p(`warning: ${w}`);
  for (const [label, list] of [['schema', report.schemaErrors], ['assembly', report.assemblyErrors], ['protocol', report.protocolErrors]]) {
    for (const e of list) p(`${label} error: ${e}`);
  }
  p(report.valid ? 'VALID' : 'INVALID');
}

async function main() {
  let opts;
  try {
    opts = parseArgs(process.argv.slice(2));
  } catch (e) {
    console.error(`${e.message}\n${fs.readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n').slice(1, 19).join('\n')}`);
    process.exit(2);
  }
  const { ai, version } = await loadAi();
  const report = {
    aiVersion: version,
    schemaErrors: [],
    assemblyErrors: [],
    protocolErrors: [],
    warnings: [],
    errorChunks: [],
    chunkCounts: {},
  };
  if (opts.request) await checkRequest(ai, opts.request, report);
  const input = opts.inputs[0];
  if (input) {
    let stream;
    if (/^https?:\/\//.test(input)) stream = await fetchStream(opts, input, report);
    else stream = Readable.toWeb(input === '-' ? process.stdin : fs.createReadStream(input));
    if (stream) await checkStream(ai, stream, opts, report);
    else report.resume = 'HTTP 204: nothing to resume';
  }
  report.valid = report.schemaErrors.length + report.assemblyErrors.length + report.protocolErrors.length === 0;
  if (opts.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  else printReport(report, opts);
  process.exit(report.valid ? 0 : 1);
}

main().catch((e) => {
  console.error(`error: ${e?.message ?? e}`);
  process.exit(2);
});
