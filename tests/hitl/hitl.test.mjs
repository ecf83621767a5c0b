#!/usr/bin/env node
// Human in the loop, driven by the AI SDK's own client code: its chat class
// (`AbstractChat`, what `useChat` wraps) with `DefaultChatTransport`, against
// a running stategraph server that serves the graphs of
// tests/integration/human_in_the_loop/interrupts.rs (`approval`: `delete_record` needs
// approval, `pick_record` is a client-side tool; `ask`: a question into an
// integer field).
//
//   node tests/hitl/hitl.test.mjs http://127.0.0.1:PORT
//
// Run by tests/integration/human_in_the_loop/hitl_client.rs, which starts the server and
// checks afterwards how often `delete_record` really ran. Exit code 0 when
// every case passes, 1 on a failed check, 2 when the SDK is missing.
//
// The SDK comes from tests/tools/aisdk-validate (tests/run.sh installs
// it); STATEGRAPH_AISDK_DIR overrides where to look.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const sdkDir =
  process.env.STATEGRAPH_AISDK_DIR ?? path.join(repo, 'tests/tools/aisdk-validate');

/** The `ai` package installed under `dir`, loaded through its own exports. */
async function loadAi(dir) {
  const pj = path.join(dir, 'node_modules', 'ai', 'package.json');
  if (!fs.existsSync(pj)) {
    console.error(`the AI SDK is not installed: no ${pj} (run \`npm ci\` in ${dir}; tests/run.sh does)`);
    process.exit(2);
  }
  const pkg = JSON.parse(fs.readFileSync(pj, 'utf8'));
  let entry = pkg.exports?.['.'];
  if (typeof entry === 'object') entry = entry.import ?? entry.default;
  if (typeof entry === 'object') entry = entry.default;
  const mod = await import(pathToFileURL(path.join(path.dirname(pj), entry)).href);
  return { ai: mod, version: pkg.version };
}

const { ai, version } = await loadAi(sdkDir);
const {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
} = ai;

const base = process.argv[2];
if (!base) {
  console.error('usage: node tests/hitl/hitl.test.mjs http://127.0.0.1:PORT');
  process.exit(2);
}

/**
 * The chat class with its state in memory: what `useChat` is, minus React.
 * Every request it sends and every answer it finishes are recorded.
 */
class Chat extends AbstractChat {
  constructor({ id, graph, sendAutomaticallyWhen, onToolCall, messages = [] }) {
    const requests = [];
    const finished = [];
    const state = {
      status: 'ready',
      error: undefined,
      messages,
      pushMessage(m) {
        this.messages = this.messages.concat(m);
      },
      popMessage() {
        this.messages = this.messages.slice(0, -1);
      },
      replaceMessage(i, m) {
        this.messages = [...this.messages.slice(0, i), structuredClone(m), ...this.messages.slice(i + 1)];
      },
      snapshot: (x) => structuredClone(x),
    };
    const transport = new DefaultChatTransport({
      api: `${base}/api/chat`,
      body: { graph },
      fetch: async (url, init) => {
        const resp = await fetch(url, init);
        requests.push({ body: JSON.parse(init.body), status: resp.status });
        return resp;
      },
    });
    super({
      id,
      transport,
      state,
      sendAutomaticallyWhen,
      onToolCall: onToolCall && ((o) => onToolCall(this, o)),
      onFinish: (o) => finished.push(o),
    });
    this.requests = requests;
    this.finished = finished;
  }

  /** Waits until `n` answers have finished (automatic resends included). */
  async finishes(n, what) {
    const deadline = Date.now() + 30_000;
    while (this.finished.length < n || this.status === 'submitted' || this.status === 'streaming') {
      if (Date.now() > deadline) {
        assert.fail(`${what}: ${this.finished.length} of ${n} answers finished in 30 s (status ${this.status})`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  /** The tool part of `call` in message `m`. */
  static toolPart(m, call) {
    return m.parts.find((p) => p.toolCallId === call);
  }
}

const toolParts = (m) => m.parts.filter((p) => p.type === 'dynamic-tool' || p.type.startsWith('tool-'));
const textOf = (m) => m.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');

async function getJson(p) {
  const r = await fetch(`${base}${p}`);
  assert.equal(r.status, 200, `GET ${p}`);
  return r.json();
}

/** The newest run of a chat, with its events. */
async function newestRun(chat) {
  const runs = await getJson(`/api/runs?chat=${encodeURIComponent(chat)}`);
  const run = await getJson(`/api/runs/${runs.runs[0].id}`);
  const events = (await getJson(`/api/runs/${run.id}/events`)).events.map((e) => e.event);
  return { run, events };
}

/** The chat paused at `delete record 42`: the chat, its message and tool part. */
async function pausedAtApproval(id) {
  const chat = new Chat({
    id,
    graph: 'approval',
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  await chat.sendMessage({ text: 'delete record 42' });
  await chat.finishes(1, 'the first answer');
  assert.equal(chat.status, 'ready', `status after the paused answer: ${chat.error}`);
  assert.equal(chat.messages.length, 2);
  const message = chat.messages[1];
  assert.equal(message.role, 'assistant');
  const [part] = toolParts(message);
  assert.ok(part, `a tool part: ${JSON.stringify(message)}`);
  assert.equal(part.state, 'approval-requested', JSON.stringify(part));
  assert.deepEqual(part.input, { id: 42 });
  assert.ok(part.approval?.id, 'the part carries the approval id');
  assert.equal(chat.finished[0].finishReason, 'tool-calls');
  const { run } = await newestRun(id);
  assert.equal(run.status, 'interrupted');
  assert.equal(run.interrupts[0].id, part.approval.id);
  return { chat, message, part };
}

/** (a) approve → the automatic resend continues the same message; once. */
async function approve() {
  const { chat, message, part } = await pausedAtApproval('sdk-approve');
  await chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
  await chat.finishes(2, 'the continuation after approving');
  assert.equal(chat.status, 'ready', `status after the continuation: ${chat.error}`);
  // The resend is what PROTOCOLS.md §1.1 says: submit-message, messageId =
  // the assistant message, the whole history.
  assert.equal(chat.requests.length, 2, 'one automatic resend, no more');
  const resend = chat.requests[1].body;
  assert.equal(resend.trigger, 'submit-message');
  assert.equal(resend.messageId, message.id);
  assert.equal(resend.messages.length, 2);
  assert.equal(Chat.toolPart(resend.messages[1], part.toolCallId).state, 'approval-responded');
  // The answer continued into the same message.
  assert.equal(chat.messages.length, 2, 'no new message');
  const after = chat.messages[1];
  assert.equal(after.id, message.id);
  const done = Chat.toolPart(after, part.toolCallId);
  assert.equal(done.state, 'output-available', JSON.stringify(done));
  assert.deepEqual(done.output, { deleted: 42 });
  assert.equal(done.approval?.approved, true);
  assert.ok(textOf(after).length > 0, 'the model answers after the tool');
  assert.equal(chat.finished[1].finishReason, 'stop');
  const { run, events } = await newestRun('sdk-approve');
  assert.equal(run.status, 'finished');
  const results = events.filter((e) => e.type === 'tool_result' && e.tool === 'delete_record');
  assert.equal(results.length, 1, 'the approved call ran once');
  assert.equal(events.filter((e) => e.type === 'run_resumed').length, 1);

  // Repeated: a second tab still holding the approval sends it again.
  const stale = new Chat({
    id: 'sdk-approve',
    graph: 'approval',
    messages: structuredClone(resend.messages),
  });
  await stale.sendMessage();
  await stale.finishes(1, 'the repeated approval');
  assert.equal(stale.requests[0].status, 409);
  assert.equal(stale.status, 'error');
  assert.match(String(stale.error?.message), /not_interrupted/);
}

/** (b) a forged approval is refused; deny → output-denied, never runs. */
async function deny() {
  const { chat, part } = await pausedAtApproval('sdk-deny');
  // Forged: the same message answered with an approval id the run never
  // issued, sent the way the SDK resends.
  const forgedMessages = structuredClone(chat.messages);
  const forgedPart = Chat.toolPart(forgedMessages[1], part.toolCallId);
  forgedPart.state = 'approval-responded';
  forgedPart.approval = { id: 'approval-forged', approved: true };
  const forger = new Chat({ id: 'sdk-deny', graph: 'approval', messages: forgedMessages });
  await forger.sendMessage();
  await forger.finishes(1, 'the forged approval');
  assert.equal(forger.requests[0].status, 400);
  assert.equal(forger.status, 'error');
  assert.match(String(forger.error?.message), /unknown_interrupt/);
  assert.equal((await newestRun('sdk-deny')).run.status, 'interrupted', 'nothing changed');

  await chat.addToolApprovalResponse({ id: part.approval.id, approved: false, reason: 'keep it' });
  await chat.finishes(2, 'the continuation after denying');
  assert.equal(chat.status, 'ready', `status after the continuation: ${chat.error}`);
  assert.equal(chat.messages.length, 2);
  const denied = Chat.toolPart(chat.messages[1], part.toolCallId);
  assert.equal(denied.state, 'output-denied', JSON.stringify(denied));
  assert.equal(denied.approval?.approved, false);
  const { run, events } = await newestRun('sdk-deny');
  assert.equal(run.status, 'finished');
  assert.equal(events.filter((e) => e.type === 'tool_result').length, 0, 'a denied call never runs');
  const denial = events.find((e) => e.type === 'tool_denied');
  assert.equal(denial?.reason, 'keep it');
}

/** (c) a client-side tool answered with `addToolOutput` in `onToolCall`. */
async function clientTool() {
  const calls = [];
  const chat = new Chat({
    id: 'sdk-client',
    graph: 'approval',
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
    onToolCall: (c, { toolCall }) => {
      calls.push(toolCall);
      // Not awaited, as the SDK's docs advise inside onToolCall.
      void c.addToolOutput({
        tool: toolCall.toolName,
        toolCallId: toolCall.toolCallId,
        output: { picked: 7 },
      });
    },
  });
  await chat.sendMessage({ text: 'pick record 3' });
  await chat.finishes(2, 'the answer and its continuation');
  assert.equal(chat.status, 'ready', `status after the continuation: ${chat.error}`);
  assert.equal(calls.length, 1, 'the front end ran the tool once');
  assert.equal(calls[0].toolName, 'pick_record');
  assert.deepEqual(calls[0].input, { count: 3 });
  assert.equal(chat.finished[0].finishReason, 'tool-calls');
  assert.equal(chat.requests.length, 2);
  const resend = chat.requests[1].body;
  assert.equal(resend.trigger, 'submit-message');
  assert.equal(resend.messageId, chat.messages[1].id);
  assert.equal(chat.messages.length, 2, 'the same message');
  const part = Chat.toolPart(chat.messages[1], calls[0].toolCallId);
  assert.equal(part.type, 'tool-pick_record');
  assert.equal(part.state, 'output-available');
  assert.deepEqual(part.output, { picked: 7 });
  assert.ok(textOf(chat.messages[1]).length > 0, 'the model answers after the tool');
  assert.equal(chat.finished[1].finishReason, 'stop');
  const { run, events } = await newestRun('sdk-client');
  assert.equal(run.status, 'finished');
  assert.equal(events.filter((e) => e.type === 'run_resumed').length, 1);
}

/** (d) a question answered by the next message. */
async function question() {
  const chat = new Chat({
    id: 'sdk-ask',
    graph: 'ask',
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  await chat.sendMessage({ text: 'the report' });
  await chat.finishes(1, 'the question');
  assert.equal(chat.status, 'ready', `status after the question: ${chat.error}`);
  assert.equal(chat.requests.length, 1, 'a question is not resent by itself');
  const asked = chat.messages[1];
  assert.equal(asked.role, 'assistant');
  assert.equal(textOf(asked), 'How many copies of the report?');
  const data = asked.parts.find((p) => p.type === 'data-interrupt');
  assert.ok(data, `a data-interrupt part: ${JSON.stringify(asked)}`);
  assert.deepEqual(data.data.options, [1, 2, 3]);
  assert.equal((await newestRun('sdk-ask')).run.status, 'interrupted');

  await chat.sendMessage({ text: '2' });
  await chat.finishes(2, 'the continuation');
  assert.equal(chat.status, 'ready', `status after the answer: ${chat.error}`);
  assert.deepEqual(
    chat.messages.map((m) => m.role),
    ['user', 'assistant', 'user', 'assistant'],
  );
  const answer = chat.messages[3];
  assert.notEqual(answer.id, asked.id, 'a new assistant message');
  assert.equal(textOf(answer), 'Printing 2 copies.');
  const { run } = await newestRun('sdk-ask');
  assert.equal(run.status, 'finished');
  // The stored chat is the client's.
  const stored = await getJson('/api/chat/sdk-ask');
  assert.deepEqual(
    stored.messages.map((m) => m.id),
    chat.messages.map((m) => m.id),
  );
}

const cases = { approve, deny, clientTool, question };
let failed = 0;
console.log(`ai ${version} against ${base}`);
for (const [name, run] of Object.entries(cases)) {
  try {
    await run();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.stack ?? e}`);
  }
}
process.exit(failed ? 1 : 0);
