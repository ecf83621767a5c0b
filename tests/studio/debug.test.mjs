// Browser test of the studio's debugging views against a running stategraph
// server: the path a run took on its graph (finished, and live), answering a
// paused run from the studio (a tool approval from the run page and the
// playground, a question by its option button, a client tool's output),
// a breakpoint before the narrator with a state edit and continue, and a
// chat as a thread with a fork.
//
//   STUDIO_URL=http://127.0.0.1:PORT STUDIO_ARTIFACTS=/tmp/studio node debug.test.mjs
//
// The server serves the shipped `chat` graph and three graphs that pause
// (see tests/integration/studio_ui/studio_debug.rs): `approve` (an agent whose
// `current_time` needs approval), `pick` (a client tool `pick_record`) and
// `ask` (a question with options 1, 2, 3 into an integer field). Its offline
// model streams slowly enough (token_delay) that a run can be watched live.

import { start, assert, STREAM_T } from './harness.mjs';

const BASE = (process.env.STUDIO_URL || '').replace(/\/+$/, '');
if (!BASE) {
  console.error('debug test: set STUDIO_URL to the server base URL');
  process.exit(2);
}
const t = await start({ art: process.env.STUDIO_ARTIFACTS || 'artifacts' });
const { page } = t;
const stamp = Date.now().toString(36);
const visible = (sel, p = page) => p.locator(sel).first().waitFor({ state: 'visible' });

async function api(path, opts = {}) {
  const res = await fetch(`${BASE}${path}`, { ...opts, headers: { 'content-type': 'application/json', ...(opts.headers || {}) } });
  const body = await res.json().catch(() => null);
  assert(res.ok, `${opts.method || 'GET'} ${path}: ${res.status} ${JSON.stringify(body)}`);
  return body;
}

/** Opens the playground on a new chat of `graph` and sends `text`; waits until the answer ends. */
async function ask(graph, chat, text, { status = 'done' } = {}) {
  await page.goto(`${BASE}/studio#/playground/${graph}?chat=${chat}`, { waitUntil: 'domcontentloaded' });
  await visible('[data-testid="chat-input"]');
  await page.locator('[data-testid="composer"][data-ready="true"]').waitFor();
  await page.locator('[data-testid="chat-input"]').fill(text);
  await page.keyboard.press('Enter');
  await page.locator(`[data-testid="message-assistant"][data-status="${status}"], [data-testid="chat-error"] .alert`).last().waitFor({ timeout: STREAM_T });
  const failed = await page.locator('[data-testid="chat-error"] .alert').count();
  assert(!failed, `the chat request failed: ${await page.locator('[data-testid="chat-error"]').textContent()}`);
}

const newestRun = async (chat) => (await api(`/api/runs?chat=${chat}`)).runs[0];
const lastAnswer = () => page.locator('[data-testid="message-assistant"]').last();

let firstRun = null;
const chatChat = `dbg-chat-${stamp}`;

await t.run('studio debug test', async () => {
  await t.check('a finished run: its path lit up on the graph, in order, linked to the timeline', async () => {
    await ask('chat', chatChat, 'explain tides');
    firstRun = (await newestRun(chatChat)).id;
    await page.goto(`${BASE}/studio#/runs/${firstRun}?tab=path`, { waitUntil: 'domcontentloaded' });
    await visible('[data-testid="path-graph"] svg [data-testid="graph-node"].on-path');
    const items = await page.locator('[data-testid="path-item"]').evaluateAll((els) => els.map((e) => e.dataset.node));
    assert(items.length >= 3, `the path lists ${items.length} nodes: ${items.join(', ')}`);
    const tl = await api(`/api/runs/${firstRun}/timeline`);
    const expected = tl.steps.flatMap((s) => [...new Set(s.tasks.map((x) => x.node))]);
    assert(JSON.stringify(items) === JSON.stringify(expected), `the path ${items.join(' → ')} is not the timeline's order ${expected.join(' → ')}`);
    for (const [i, node] of items.entries()) {
      const order = await page.locator(`[data-testid="path-graph"] [data-testid="graph-node"][data-node="${node}"]`).getAttribute('data-path-order');
      assert(order && order.split(' ').includes(String(i + 1)), `node ${node} is not numbered ${i + 1} on the graph (${order})`);
    }
    const graph = await api('/api/graphs/chat');
    const notRun = graph.nodes.map((n) => n.id).filter((n) => !items.includes(n));
    assert(notRun.length > 0, 'every node ran: nothing tells the path apart');
    for (const n of notRun) {
      assert(await page.locator(`[data-testid="path-graph"] [data-testid="graph-node"][data-node="${n}"].on-path`).count() === 0, `${n} did not run but is lit`);
    }
    const edges = await page.locator('[data-testid="path-graph"] [data-testid="graph-edge"].on-path').count();
    assert(edges >= items.length, `only ${edges} edges lit for ${items.length} nodes`);
    await t.shot('run-path');
    await t.axe('run (path tab)');
    // A node's steps link into the timeline.
    const node = items[1];
    await page.locator(`[data-testid="path-graph"] [data-testid="graph-node"][data-node="${node}"]`).click();
    await visible(`[data-testid="path-node-card"][data-node="${node}"]`);
    const link = page.locator('[data-testid="path-node-card"] [data-testid="path-step-link"]').first();
    const step = await link.getAttribute('data-step');
    await link.click();
    await visible(`[data-testid="tl-step"][data-step="${step}"].tl-focus`);
    assert(await page.locator('[data-testid="tab-timeline"]').getAttribute('aria-selected') === 'true', 'the timeline tab is not selected');
    const nodes = await page.locator(`[data-testid="tl-step"][data-step="${step}"] [data-testid="tl-task"]`).evaluateAll((els) => els.map((e) => e.dataset.node));
    assert(nodes.includes(node), `step ${step} of the timeline has no ${node} task: ${nodes.join(', ')}`);
  });

  await t.check('the Events tab shows the event clicked after a tab switch', async () => {
    await page.locator('[data-testid="tab-events"]').click();
    await visible('[data-testid="event-row"][data-type]');
    await page.locator('[data-testid="tab-timeline"]').click();
    await page.locator('[data-testid="tab-events"]').click();
    await page.locator('[data-testid="event-row"][data-seq="3"]').click();
    await visible('[data-testid="event-json"]');
    assert(/"seq": 3\b/.test(await page.locator('[data-testid="event-json"]').textContent()), 'the detail is not event 3');
  });

  await t.check('a live run: its path grows on the graph while it streams', async () => {
    await page.goto(`${BASE}/studio#/playground/chat?chat=${chatChat}`, { waitUntil: 'domcontentloaded' });
    await visible('[data-testid="message-assistant"]');
    await page.locator('[data-testid="composer"][data-ready="true"]').waitFor();
    await page.locator('[data-testid="chat-input"]').fill('explain the moon');
    await page.keyboard.press('Enter');
    let live = null;
    for (let i = 0; i < 200 && !live; i++) {
      live = (await api(`/api/runs?chat=${chatChat}&status=running`)).runs[0]?.id;
      if (!live) await new Promise((r) => setTimeout(r, 50));
    }
    assert(live, 'no running run was seen');
    const watch = await t.newPage();
    await watch.goto(`${BASE}/studio#/runs/${live}?tab=path`, { waitUntil: 'domcontentloaded' });
    await visible('[data-testid="path-summary"][data-status="running"]', watch);
    await visible('[data-testid="path-graph"] [data-testid="graph-node"].on-path', watch);
    const during = await watch.locator('[data-testid="path-item"]').count();
    await t.shot('run-path-live', watch);
    await watch.locator('[data-testid="run-status"][data-status="finished"]').waitFor({ timeout: STREAM_T });
    await watch.locator('[data-testid="path-summary"][data-status="finished"]').waitFor();
    const after = await watch.locator('[data-testid="path-item"]').count();
    const tl = await api(`/api/runs/${live}/timeline`);
    const expected = tl.steps.reduce((n, s) => n + new Set(s.tasks.map((x) => x.node)).size, 0);
    assert(after === expected, `after the run the path has ${after} nodes, its timeline ${expected}`);
    assert(during < after, `the path did not grow while the run streamed (${during} then ${after})`);
    await watch.close();
    await lastAnswer().and(page.locator('[data-status="done"]')).waitFor({ timeout: STREAM_T });
  });

  await t.check('a tool approval: the run page says what waits, Approve continues the run', async () => {
    const chat = `dbg-approve-${stamp}`;
    await ask('approve', chat, 'what time is it?');
    const run = await newestRun(chat);
    assert(run.status === 'interrupted', `the run is ${run.status}`);
    await page.goto(`${BASE}/studio#/runs/${run.id}`, { waitUntil: 'domcontentloaded' });
    await visible('[data-testid="hitl"][data-kind="approval"]');
    assert((await page.locator('[data-testid="hitl-tool"]').textContent()) === 'current_time', 'the approval does not name the tool');
    await visible('[data-testid="hitl-args"]');
    await visible('[data-testid="tl-task"]');
    const progress = await page.locator('[data-testid="run-progress"]').textContent();
    const steps = await page.locator('[data-testid="tl-step"]').count();
    assert(progress.startsWith(`${steps} step`), `the header says "${progress}" while the timeline has ${steps} steps`);
    await t.shot('run-waiting');
    await t.axe('run (waiting for approval)');
    await page.locator('[data-testid="hitl-approve"]').click();
    await page.locator('[data-testid="run-status"][data-status="finished"]').waitFor({ timeout: STREAM_T });
    const events = (await api(`/api/runs/${run.id}/events?limit=10000`)).events;
    assert(events.some((e) => e.event.type === 'tool_result' && e.event.tool === 'current_time'), 'the approved tool did not run');
    const stored = (await api(`/api/chat/${chat}`)).messages.pop();
    assert(stored.parts.some((p) => p.toolCallId && p.state === 'output-available'), `the chat's message has no tool output: ${JSON.stringify(stored.parts).slice(0, 400)}`);
  });

  await t.check('a tool approval in the playground: Approve streams the rest into the same answer', async () => {
    const chat = `dbg-approve-pg-${stamp}`;
    await ask('approve', chat, 'what time is it?');
    const tool = lastAnswer().locator('[data-testid="tool-call"][data-tool="current_time"]');
    await tool.locator('[data-testid="tool-approval"]').waitFor();
    const id = await lastAnswer().getAttribute('data-id');
    await tool.locator('[data-testid="tool-approve"]').click();
    await page.locator(`[data-testid="message-assistant"][data-id="${id}"][data-status="done"] [data-testid="tool-call"][data-state="output-available"]`).waitFor({ timeout: STREAM_T });
    assert(await page.locator('[data-testid="message-assistant"]').count() === 1, 'the continuation is not in the same message');
    assert((await lastAnswer().locator('[data-testid="answer-text"]').allTextContents()).join('').trim(), 'no answer after the tool');
    assert((await newestRun(chat)).status === 'finished', 'the run did not finish');
  });

  await t.check('a question: its options are buttons, and one answers it', async () => {
    const chat = `dbg-ask-${stamp}`;
    await ask('ask', chat, 'the report');
    const card = lastAnswer().locator('[data-testid="hitl"][data-kind="question"]');
    await card.waitFor();
    assert(/How many copies of the report\?/.test(await card.locator('[data-testid="hitl-question"]').textContent()), 'the question is not shown');
    const options = await card.locator('[data-testid="hitl-option"]').allTextContents();
    assert(JSON.stringify(options) === '["1","2","3"]', `options: ${options.join(', ')}`);
    await visible('[data-testid="hitl-answer-input"]');
    await t.shot('playground-question');
    await t.axe('playground (question)');
    await card.locator('[data-testid="hitl-option"][data-value="2"]').click();
    await page.waitForFunction(() => [...document.querySelectorAll('[data-testid="answer-text"]')].some((e) => /Printing 2 copies/.test(e.textContent)), null, { timeout: STREAM_T });
    const run = await newestRun(chat);
    assert(run.status === 'finished', `the run is ${run.status}`);
    const state = await api(`/api/runs/${run.id}/state`);
    assert(state.state.copies === 2, `copies is ${JSON.stringify(state.state.copies)}`);
  });

  await t.check("a client tool: its call shown with an input for its output, which continues the run", async () => {
    const chat = `dbg-pick-${stamp}`;
    await ask('pick', chat, 'pick record 3');
    const card = lastAnswer().locator('[data-testid="hitl"][data-kind="client_tool"]');
    await card.waitFor();
    assert((await card.locator('[data-testid="hitl-tool"]').textContent()) === 'pick_record', 'the card does not name pick_record');
    assert(JSON.parse(await card.locator('[data-testid="hitl-args"]').textContent()).count === 3, 'the arguments are not shown');
    await card.locator('[data-testid="hitl-output-input"]').fill('{"picked": 2}');
    await t.shot('playground-client-tool');
    await card.locator('[data-testid="hitl-output-send"]').click();
    await page.locator('[data-testid="message-assistant"][data-status="done"] [data-testid="tool-call"][data-tool="pick_record"][data-state="output-available"]').waitFor({ timeout: STREAM_T });
    await page.locator('[data-testid="message-assistant"][data-status="done"]').last().waitFor({ timeout: STREAM_T });
    const run = await newestRun(chat);
    assert(run.status === 'finished', `the run is ${run.status}`);
    const events = (await api(`/api/runs/${run.id}/events?limit=10000`)).events;
    const resumed = events.find((e) => e.event.type === 'run_resumed');
    assert(resumed && JSON.stringify(resumed.event).includes('"picked":2'), `the output did not reach the run: ${JSON.stringify(resumed)}`);
  });

  await t.check('a breakpoint before the narrator: the state edited, continue, the answer reflects the edit', async () => {
    const chat = `dbg-bp-${stamp}`;
    await page.goto(`${BASE}/studio#/playground/chat?chat=${chat}`, { waitUntil: 'domcontentloaded' });
    await visible('[data-testid="breakpoints"]');
    await page.locator('[data-testid="breakpoints"] summary').click();
    await page.locator('[data-testid="bp-before"][data-node="narrator"]').check();
    await page.locator('[data-testid="composer"][data-ready="true"]').waitFor();
    await page.locator('[data-testid="chat-input"]').fill('explain tides');
    await page.keyboard.press('Enter');
    const card = page.locator('[data-testid="bp-paused"][data-node="narrator"]');
    await card.waitFor({ timeout: STREAM_T });
    assert(await card.getAttribute('data-when') === 'before', 'the pause is not before the narrator');
    await page.waitForFunction(() => /"query"/.test(document.querySelector('[data-testid="bp-state"]')?.textContent || ''));
    assert(/explain tides/.test(await card.locator('[data-testid="bp-state"]').textContent()), 'the paused state does not hold the question');
    const run = await newestRun(chat);
    assert(run.status === 'interrupted', `the run is ${run.status}`);
    await card.locator('[data-testid="bp-field-select"]').selectOption('query');
    await card.locator('[data-testid="bp-add-field"]').click();
    const editor = card.locator('[data-testid="bp-editor"][data-field="query"]');
    await editor.fill('42');
    await card.locator('[data-testid="bp-check"][data-valid="false"]').waitFor();
    assert(await card.locator('[data-testid="bp-continue"]').isDisabled(), 'continue is enabled with a number for a text field');
    await editor.fill('"explain volcanoes"');
    await card.locator('[data-testid="bp-check"][data-valid="true"]').waitFor();
    await t.shot('playground-breakpoint');
    await t.axe('playground (paused at a breakpoint)');
    await card.locator('[data-testid="bp-continue"]').click();
    await page.waitForFunction(() => [...document.querySelectorAll('[data-testid="message-assistant"] [data-testid="answer-text"]')].some((e) => /explain volcanoes/.test(e.textContent)), null, { timeout: STREAM_T });
    for (let i = 0; i < 100 && (await api(`/api/runs/${run.id}`)).status === 'running'; i++) await new Promise((r) => setTimeout(r, 100));
    const done = await api(`/api/runs/${run.id}`);
    assert(done.status === 'finished', `the run is ${done.status}`);
    const state = await api(`/api/runs/${run.id}/state`);
    assert(/explain volcanoes/.test(state.state.answer), `the answer does not reflect the edit: ${state.state.answer}`);
  });

  await t.check('a breakpoint on the run page: the paused state, Step pauses again, Continue finishes the run', async () => {
    const chat = `dbg-bp-run-${stamp}`;
    const res = await fetch(`${BASE}/api/chat`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ id: chat, graph: 'chat', trigger: 'submit-message', breakpoints: { after: ['router'] },
        messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'explain tides' }] }] }),
    });
    assert(res.ok, `POST /api/chat: ${res.status}`);
    await res.text();
    const run = await newestRun(chat);
    assert(run.status === 'interrupted', `the run is ${run.status}`);
    await page.goto(`${BASE}/studio#/runs/${run.id}`, { waitUntil: 'domcontentloaded' });
    const card = page.locator('[data-testid="bp-paused"][data-when="after"][data-node="router"]');
    await card.waitFor();
    await page.waitForFunction(() => /"intent": "EXPLAIN"/.test(document.querySelector('[data-testid="bp-state"]')?.textContent || ''));
    await t.axe('run (paused at a breakpoint)');
    await card.locator('[data-testid="bp-step"]').click();
    const again = page.locator('[data-testid="bp-paused"][data-when="step"]');
    await again.waitFor({ timeout: STREAM_T });
    const events = (await api(`/api/runs/${run.id}/events?limit=10000`)).events;
    assert(events.filter((e) => e.event.type === 'run_interrupted').length === 2, 'the step did not pause again');
    await again.locator('[data-testid="bp-continue"]').click();
    await page.locator('[data-testid="run-status"][data-status="finished"]').waitFor({ timeout: STREAM_T });
    assert(await page.locator('[data-testid="bp-paused"]').count() === 0, 'a finished run still shows a pause');
  });

  await t.check("a chat as a thread: turns, runs, a fork and an alternative, the state after a turn", async () => {
    const attached = await api(`/api/runs/${firstRun}/fork`, { method: 'POST', body: JSON.stringify({ at: 2, set: { intent: 'DIRECT' }, attach: true }) });
    const detached = await api(`/api/runs/${firstRun}/fork`, { method: 'POST', body: JSON.stringify({ at: 2, set: { intent: 'EXPLAIN' } }) });
    for (let i = 0; i < 400; i++) {
      const [a, d] = await Promise.all([api(`/api/runs/${attached.runId}`), api(`/api/runs/${detached.runId}`)]);
      if (a.status !== 'running' && d.status !== 'running') break;
      await new Promise((r) => setTimeout(r, 100));
    }
    await page.goto(`${BASE}/studio#/chats/${chatChat}`, { waitUntil: 'domcontentloaded' });
    await visible('[data-testid="thread-turn"]');
    assert(await page.locator('[data-testid="thread-turn"]').count() === 2, 'the chat has two turns');
    const first = page.locator('[data-testid="thread-turn"][data-turn="1"]');
    assert(/explain tides/.test(await first.locator('[data-testid="thread-user"]').textContent()), 'turn 1 is not the first question');
    await first.locator(`[data-testid="thread-run"][data-run="${firstRun}"][data-role="answer"]`).waitFor();
    await first.locator(`[data-testid="thread-run"][data-run="${attached.runId}"][data-role="fork · alternative"]`).waitFor();
    await first.locator(`[data-testid="thread-run"][data-run="${detached.runId}"][data-role="fork"]`).waitFor();
    await first.locator(`[data-testid="thread-alternative"][data-run="${attached.runId}"]`).waitFor();
    assert(await page.locator('[data-testid="thread-turn"][data-turn="2"] [data-testid="thread-run"]').count() >= 1, 'turn 2 lists no run');
    const names = await page.locator('[data-testid="thread-run-link"]').allTextContents();
    assert(new Set(names).size === names.length, `run ids shown alike: ${names.join(', ')}`);
    const starts = new Set(names.map((n) => n.replace(/^…/, '').slice(0, 4)));
    assert(starts.size > 1, `every run id shown starts the same: ${names.join(', ')}`);
    await first.locator('[data-testid="thread-state"] summary').click();
    await visible('[data-testid="thread-turn"][data-turn="1"] [data-testid="thread-state-json"]');
    assert(/"intent"/.test(await first.locator('[data-testid="thread-state-json"]').textContent()), 'the state after turn 1 has no intent');
    await t.shot('chat-thread');
    await t.axe('chat thread');
    await first.locator(`[data-testid="thread-run"][data-run="${detached.runId}"] [data-testid="thread-run-link"]`).click();
    await visible(`[data-testid="run-screen"][data-run="${detached.runId}"]`);
  });
});
