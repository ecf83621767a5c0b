#!/usr/bin/env node
// The validator's own test: streams written by the AI SDK's server side
// (`createUIMessageStreamResponse`) must pass, and streams broken in one way
// each must fail. Run with `npm test` in this directory.

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { createUIMessageStream, createUIMessageStreamResponse } from 'ai';

const here = path.dirname(fileURLToPath(import.meta.url));
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'aisdk-validate-'));

/** The SSE bytes the SDK itself writes for these chunks. */
async function sdkStream(chunks) {
  const stream = createUIMessageStream({
    execute: ({ writer }) => {
      for (const c of chunks) writer.write(c);
    },
  });
  return createUIMessageStreamResponse({ stream }).text();
}

const sse = (chunks) => `${chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join('')}data: [DONE]\n\n`;

const answer = [
  { type: 'start', messageId: 'm1' },
  { type: 'start-step' },
  { type: 'reasoning-start', id: 'r1' },
  { type: 'reasoning-delta', id: 'r1', delta: 'thinking' },
  { type: 'reasoning-end', id: 'r1' },
  { type: 'tool-input-start', toolCallId: 'c1', toolName: 'search' },
  { type: 'tool-input-delta', toolCallId: 'c1', inputTextDelta: '{"q":"x"}' },
  { type: 'tool-input-available', toolCallId: 'c1', toolName: 'search', input: { q: 'x' } },
  { type: 'tool-output-available', toolCallId: 'c1', output: { hits: 1 } },
  { type: 'text-start', id: 't1' },
  { type: 'text-delta', id: 't1', delta: 'Hello' },
  { type: 'text-end', id: 't1' },
  { type: 'data-followups', id: 'f1', data: ['more?'] },
  { type: 'finish-step' },
  { type: 'finish' },
];

const cases = [
  ['sdk answer', 0, await sdkStream(answer)],
  ['sdk error', 0, await sdkStream([{ type: 'start' }, { type: 'error', errorText: 'boom' }, { type: 'finish' }])],
  ['abort', 0, sse([{ type: 'start' }, { type: 'start-step' }, { type: 'abort' }])],
  ['unknown chunk type', 1, sse([{ type: 'start' }, { type: 'text-middle', id: 'x' }, { type: 'finish' }])],
  ['delta before start', 1, sse([{ type: 'start' }, { type: 'text-delta', id: 't', delta: 'a' }, { type: 'finish' }])],
  ['text never ends', 1, sse([{ type: 'start' }, { type: 'start-step' }, { type: 'text-start', id: 't' }, { type: 'finish-step' }, { type: 'finish' }])],
  ['chunk after finish', 1, sse([{ type: 'start' }, { type: 'finish' }, { type: 'data-x', data: 1 }])],
  ['no [DONE]', 1, sse([{ type: 'start' }, { type: 'finish' }]).replace('data: [DONE]\n\n', '')],
  ['no finish', 1, sse([{ type: 'start' }])],
  ['bad JSON', 1, 'data: {"type":"start"\n\ndata: [DONE]\n\n'],
];

let failed = 0;
for (const [name, expected, text] of cases) {
  const file = path.join(dir, `${name.replace(/\W+/g, '-')}.sse`);
  fs.writeFileSync(file, text);
  let code = 0;
  try {
    execFileSync(process.execPath, [path.join(here, 'validate.mjs'), file, '--quiet'], { stdio: 'pipe' });
  } catch (e) {
    code = e.status;
  }
  const ok = code === expected;
  if (!ok) failed++;
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}: exit ${code}, expected ${expected}`);
}
fs.rmSync(dir, { recursive: true });
console.log(failed ? `${failed} failed` : 'all passed');
process.exit(failed ? 1 : 0);
