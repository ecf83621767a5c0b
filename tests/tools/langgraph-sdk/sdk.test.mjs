// LangGraph's own JS SDK (@langchain/langgraph-sdk, pinned by
// package-lock.json) against `stategraph serve` serving
// examples/langgraph_api (tests/integration/server_api/langgraph_api.rs starts it).
//
//   node sdk.test.mjs URL KEY_A KEY_B
//
// Prints `ok   CASE` or `FAIL CASE: why` per case; exits 1 on any failure.
// The protocol rules checked are LangGraph's server's (langgraph_api 0.16:
// api/runs.py, stream.py, sse.py, serde.py) as the SDK reads them.
import assert from "node:assert/strict";
import { Client } from "@langchain/langgraph-sdk";

const [url, keyA, keyB] = process.argv.slice(2);
const a = new Client({ apiUrl: url, apiKey: keyA });
const b = new Client({ apiUrl: url, apiKey: keyB });
let failed = 0;

async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e?.stack ?? e}`);
  }
}

async function collect(iter) {
  const out = [];
  for await (const part of iter) out.push(part);
  return out;
}

async function status404(fn) {
  try {
    await fn();
  } catch (e) {
    assert.equal(e.status, 404, `expected 404, got ${e.status}: ${e.message}`);
    return;
  }
  assert.fail("expected a 404");
}

const human = (text) => ({ messages: [{ type: "human", content: text }] });
const lastValues = (parts) => parts.filter((p) => p.event === "values").at(-1)?.data;

// uuid5(NAMESPACE_GRAPH, "agent"), as langgraph_api/graph.py names a graph's assistant.
const AGENT = "fe096781-5601-53d2-b2f6-0d3403f7e9ca";
let thread;

await check("assistants", async () => {
  const found = await a.assistants.search({ graphId: "agent" });
  assert.equal(found.length, 1);
  assert.equal(found[0].assistant_id, AGENT);
  assert.equal(found[0].graph_id, "agent");
  assert.equal((await a.assistants.get("agent")).assistant_id, AGENT);
  assert.equal((await a.assistants.get(AGENT)).graph_id, "agent");
  const graph = await a.assistants.getGraph(AGENT);
  const ids = graph.nodes.map((n) => n.id);
  for (const id of ["__start__", "triage", "ask", "reply", "__end__"]) assert.ok(ids.includes(id), id);
  assert.ok(graph.edges.some((e) => e.source === "__start__" && e.target === "triage"));
  assert.ok(graph.edges.some((e) => e.source === "reply" && e.target === "__end__"));
  const schemas = await a.assistants.getSchemas("agent");
  assert.equal(schemas.graph_id, "agent");
  assert.equal(schemas.state_schema.properties.messages.type, "array");
  assert.equal(schemas.state_schema.properties.query.type, "string");
});

await check("threads", async () => {
  thread = await a.threads.create({ metadata: { tags: ["sdk-js"], owner: "a" } });
  assert.ok(thread.thread_id);
  assert.equal(thread.status, "idle");
  assert.deepEqual(thread.metadata, { tags: ["sdk-js"], owner: "a" });
  const got = await a.threads.get(thread.thread_id);
  assert.equal(got.thread_id, thread.thread_id);
  const patched = await a.threads.update(thread.thread_id, { metadata: { topic: "greeting" } });
  assert.equal(patched.metadata.topic, "greeting");
  assert.equal(patched.metadata.owner, "a", "PATCH merges metadata");
  const found = await a.threads.search({ metadata: { topic: "greeting" }, status: "idle" });
  assert.deepEqual(found.map((t) => t.thread_id), [thread.thread_id]);
  assert.equal((await a.threads.search({ metadata: { topic: "nothing" } })).length, 0);
  await assert.rejects(a.threads.create({ threadId: thread.thread_id }), (e) => e.status === 409);
});

let firstRun;
await check("stream every mode", async () => {
  const parts = await collect(
    a.runs.stream(thread.thread_id, "agent", {
      input: human("hello there"),
      streamMode: ["values", "updates", "messages-tuple", "custom", "debug"],
    }),
  );
  assert.equal(parts[0].event, "metadata", "metadata comes first");
  firstRun = parts[0].data.run_id;
  assert.match(firstRun, /^[0-9a-f-]{36}$/);
  const events = new Set(parts.map((p) => p.event));
  for (const e of ["values", "updates", "messages", "debug"]) assert.ok(events.has(e), `${e} in ${[...events]}`);
  const updates = parts.filter((p) => p.event === "updates").map((p) => Object.keys(p.data)[0]);
  assert.deepEqual(updates, ["triage", "reply"]);
  const tokens = parts.filter((p) => p.event === "messages");
  assert.ok(tokens.length > 5, "the reply streams token by token");
  const [chunk, meta] = tokens[0].data;
  assert.equal(chunk.type, "AIMessageChunk");
  assert.equal(meta.langgraph_node, "reply");
  assert.equal(typeof meta.langgraph_step, "number");
  const streamed = tokens.map((t) => t.data[0].content).join("");
  const final = lastValues(parts);
  assert.deepEqual(final.messages.map((m) => m.type), ["human", "ai"]);
  assert.equal(final.messages[1].content, streamed, "the streamed tokens are the final message");
  assert.match(streamed, /hello there/);
  const debug = parts.filter((p) => p.event === "debug").map((p) => p.data.type);
  for (const t of ["checkpoint", "task", "task_result"]) assert.ok(debug.includes(t), t);
});

// stream_mode "events": astream_events (v2) events, as the SDK types them
// (EventsStreamEvent: {event, name, run_id, tags, metadata, parent_ids, data}).
await check("events mode", async () => {
  const parts = await collect(a.runs.stream(null, "agent", { input: human("events please"), streamMode: "events" }));
  const events = parts.filter((p) => p.event === "events").map((p) => p.data);
  assert.ok(parts.every((p) => ["metadata", "events"].includes(p.event)), "only the events mode");
  const root = parts[0].data.run_id;
  assert.deepEqual([events[0].event, events[0].name, events[0].run_id], ["on_chain_start", "LangGraph", root]);
  const last = events.at(-1);
  assert.deepEqual([last.event, last.name], ["on_chain_end", "LangGraph"]);
  assert.equal(last.data.output.messages.at(-1).type, "ai");
  const starts = events.filter((e) => e.event === "on_chain_start" && e.name !== "LangGraph");
  assert.deepEqual(starts.map((e) => e.name), ["triage", "reply"]);
  const replyRun = starts[1].run_id;
  assert.deepEqual(starts[1].parent_ids, [root]);
  const end = events.find((e) => e.event === "on_chain_end" && e.run_id === replyRun);
  assert.ok(end, "the node's end has its start's run id");
  const tokens = events.filter((e) => e.event === "on_chat_model_stream");
  assert.ok(tokens.length > 5, "tokens stream");
  assert.equal(tokens[0].data.chunk.type, "AIMessageChunk");
  assert.equal(tokens[0].metadata.langgraph_node, "reply");
  assert.deepEqual(tokens[0].parent_ids.slice(0, 2), [root, replyRun]);
  const text = tokens.map((t) => t.data.chunk.content).join("");
  assert.equal(last.data.output.messages.at(-1).content, text);
  const kinds = new Set(events.map((e) => e.event));
  for (const k of ["on_chat_model_start", "on_chat_model_end"]) assert.ok(kinds.has(k), k);
});

await check("state and history", async () => {
  const state = await a.threads.getState(thread.thread_id);
  assert.deepEqual(state.values.messages.map((m) => m.type), ["human", "ai"]);
  assert.deepEqual(state.next, []);
  assert.ok(state.checkpoint.checkpoint_id);
  const history = await a.threads.getHistory(thread.thread_id, { limit: 10 });
  assert.ok(history.length >= 3, `${history.length} checkpoints`);
  assert.equal(history[0].checkpoint.checkpoint_id, state.checkpoint.checkpoint_id, "newest first");
  for (let i = 0; i + 1 < history.length; i++) {
    assert.equal(history[i].parent_checkpoint.checkpoint_id, history[i + 1].checkpoint.checkpoint_id);
    assert.ok(history[i].checkpoint.checkpoint_id > history[i + 1].checkpoint.checkpoint_id, "ids sort by time");
  }
  const past = await a.threads.getState(thread.thread_id, history[1].checkpoint.checkpoint_id);
  assert.equal(past.checkpoint.checkpoint_id, history[1].checkpoint.checkpoint_id);
});

await check("second turn", async () => {
  const parts = await collect(
    a.runs.stream(thread.thread_id, "agent", { input: human("and again"), streamMode: "values" }),
  );
  const final = lastValues(parts);
  assert.deepEqual(final.messages.map((m) => m.type), ["human", "ai", "human", "ai"]);
  assert.match(final.messages[3].content, /and again/);
  const runs = await a.runs.list(thread.thread_id);
  assert.equal(runs.length, 2);
  assert.ok(runs.every((r) => r.status === "success"));
  assert.equal((await a.runs.get(thread.thread_id, firstRun)).run_id, firstRun);
});

await check("wait", async () => {
  const values = await a.runs.wait(thread.thread_id, "agent", { input: human("third") });
  assert.equal(values.messages.length, 6);
  const stateless = await a.runs.wait(null, "agent", { input: human("no thread") });
  assert.match(stateless.messages.at(-1).content, /no thread/);
  // A stateless run rejoined by its id alone (its Location: /runs/{id}/stream).
  const bg = await a.runs.create(null, "agent", { input: human("stateless, rejoined") });
  const parts = await collect(a.runs.joinStream(null, bg.run_id, { lastEventId: "-1", streamMode: "values" }));
  assert.equal(parts[0].event, "metadata");
  assert.match(lastValues(parts).messages.at(-1).content, /stateless, rejoined/);
});

await check("interrupt and resume", async () => {
  const t = await a.threads.create();
  const parts = await collect(
    a.runs.stream(t.thread_id, "agent", { input: human("please approve the plan"), streamMode: ["values", "updates"] }),
  );
  const paused = parts.filter((p) => p.event === "values" && p.data.__interrupt__);
  assert.equal(paused.length, 1, "the interrupt comes as values.__interrupt__");
  const [intr] = paused[0].data.__interrupt__;
  assert.ok(intr.id);
  assert.equal(intr.value.type, "question");
  assert.ok(parts.some((p) => p.event === "updates" && p.data.__interrupt__));
  assert.equal((await a.threads.get(t.thread_id)).status, "interrupted");
  // A search reads every thread's status at once (the newest run per chat).
  const interrupted = (await a.threads.search({ status: "interrupted", limit: 100 })).map((x) => x.thread_id);
  assert.ok(interrupted.includes(t.thread_id), "the search finds it interrupted");
  const idle = (await a.threads.search({ status: "idle", limit: 100 })).map((x) => x.thread_id);
  assert.ok(!idle.includes(t.thread_id) && idle.length > 0, "and not idle, as others are");
  const state = await a.threads.getState(t.thread_id);
  assert.deepEqual(state.next, ["ask"]);
  assert.equal(state.tasks[0].interrupts[0].id, intr.id);
  const resumed = await collect(
    a.runs.stream(t.thread_id, "agent", { command: { resume: "ship it on friday" }, streamMode: ["values", "messages-tuple"] }),
  );
  assert.equal(resumed[0].event, "metadata");
  const final = lastValues(resumed);
  assert.equal(final.decision, "ship it on friday");
  assert.match(final.messages.at(-1).content, /ship it on friday/, "the reply quotes the typed answer");
  assert.equal((await a.threads.get(t.thread_id)).status, "idle");
  await assert.rejects(
    a.runs.wait(t.thread_id, "agent", { command: { resume: "again" } }),
    (e) => e.status === 409,
  );
});

await check("messages mode", async () => {
  // stream_mode "messages" (not the tuple): messages/metadata when a message
  // starts, then messages/partial with the message so far (langgraph_api stream.py).
  const t = await a.threads.create();
  const parts = await collect(a.runs.stream(t.thread_id, "agent", { input: human("partial please"), streamMode: ["messages", "values"] }));
  const meta = parts.filter((p) => p.event === "messages/metadata");
  const partial = parts.filter((p) => p.event === "messages/partial");
  assert.ok(meta.length >= 1 && partial.length > 1, parts.map((p) => p.event).join(","));
  assert.ok(!parts.some((p) => p.event === "messages"), "no tuples unless asked");
  const id = Object.keys(meta[0].data)[0];
  assert.equal(meta[0].data[id].metadata.langgraph_node, "reply");
  const mine = partial.filter((p) => p.data[0].id === id).map((p) => p.data[0].content);
  for (let i = 1; i < mine.length; i++) assert.ok(mine[i].startsWith(mine[i - 1]), "each partial extends the last");
  assert.equal(partial[0].data[0].type, "ai");
  assert.equal(mine.at(-1), lastValues(parts).messages.at(-1).content, "the last partial is the reply");
});

await check("interrupt_before and interrupt_after", async () => {
  const t = await a.threads.create();
  // Static breakpoints (langgraph_api: interrupt_before / interrupt_after on
  // a run): the thread stops before `reply` with it as `next`, and
  // `__interrupt__` is empty — nothing for a person to answer.
  const parts = await collect(
    a.runs.stream(t.thread_id, "agent", { input: human("hello there"), interruptBefore: ["reply"], streamMode: ["values", "updates"] }),
  );
  assert.ok(!parts.some((p) => p.event === "values" && p.data.__interrupt__?.length), "no interrupt value to answer");
  assert.equal((await a.threads.get(t.thread_id)).status, "interrupted");
  let state = await a.threads.getState(t.thread_id);
  assert.deepEqual(state.next, ["reply"]);
  assert.deepEqual(state.tasks[0].interrupts, []);
  assert.equal(state.values.messages.filter((m) => m.type === "ai").length, 0, "reply has not run");
  // Going on: no input, as LangGraph's clients continue a static interrupt;
  // this continuation stops after `reply`, at the end of the run.
  // `command.update` on the continuing run edits the paused state before
  // the paused step (as update_state then resume does).
  await a.runs.wait(t.thread_id, "agent", {
    input: null,
    command: { update: { decision: "edited" } },
    interruptAfter: ["reply"],
  });
  state = await a.threads.getState(t.thread_id);
  assert.equal(state.values.decision, "edited", "the update was applied");
  assert.deepEqual(state.next, [], "after the last node nothing is left");
  assert.equal((await a.threads.get(t.thread_id)).status, "interrupted");
  assert.match(state.values.messages.at(-1).content, /hello there/, "reply ran");
  const done = await a.runs.wait(t.thread_id, "agent", { input: null });
  assert.match(done.messages.at(-1).content, /hello there/);
  assert.equal((await a.threads.get(t.thread_id)).status, "idle");
  await assert.rejects(
    a.runs.wait(t.thread_id, "agent", { input: human("x"), interruptBefore: ["no_such_node"] }),
    (e) => e.status === 422,
  );
});

await check("updateState, goto and a run from a checkpoint", async () => {
  const t = await a.threads.create();
  await a.runs.wait(t.thread_id, "agent", { input: human("js first") });
  const before = await a.threads.getState(t.thread_id);
  const r = await a.threads.updateState(t.thread_id, { values: { decision: "from js" }, asNode: "reply" });
  const now = await a.threads.getState(t.thread_id);
  assert.equal(now.checkpoint.checkpoint_id, r.checkpoint.checkpoint_id);
  assert.equal(now.parent_checkpoint.checkpoint_id, before.checkpoint.checkpoint_id);
  assert.equal(now.values.decision, "from js");
  const parts = await collect(
    a.runs.stream(t.thread_id, "agent", { input: human("js goto"), command: { goto: "reply" }, streamMode: "updates" }),
  );
  assert.deepEqual(parts.filter((p) => p.event === "updates").flatMap((p) => Object.keys(p.data)), ["reply"]);
  const values = await a.runs.wait(t.thread_id, "agent", {
    input: human("js branch"),
    checkpointId: before.checkpoint.checkpoint_id,
  });
  assert.deepEqual(values.messages.filter((m) => m.type === "human").map((m) => m.content), ["js first", "js branch"]);
  await assert.rejects(a.threads.updateState(t.thread_id, { values: { nope: 1 } }), (e) => e.status === 422);
});

await check("errors are LangGraph's detail everywhere", async () => {
  const r = await fetch(`${url}/threads/${thread.thread_id}/no-such-path`, { headers: { "x-api-key": keyA } });
  assert.equal(r.status, 404);
  assert.equal(typeof (await r.json()).detail, "string");
  const created = Date.parse((await a.assistants.get(AGENT)).created_at);
  assert.ok(created > Date.parse("2020-01-01"), "an assistant's created_at is not the 1970 epoch");
});

await check("rejoin with the last event id", async () => {
  const t = await a.threads.create();
  const seen = [];
  const controller = new AbortController();
  let runId;
  try {
    for await (const part of a.runs.stream(t.thread_id, "agent", {
      input: human("slow please"),
      streamMode: ["values", "messages-tuple"],
      streamResumable: true,
      signal: controller.signal,
    })) {
      if (part.event === "metadata") runId = part.data.run_id;
      seen.push(part);
      if (seen.filter((p) => p.event === "messages").length === 10) controller.abort();
    }
  } catch (e) {
    if (e.name !== "AbortError") throw e;
  }
  const last = seen.at(-1).id;
  assert.ok(last, "resumable streams carry ids");
  const rest = await collect(a.runs.joinStream(t.thread_id, runId, { lastEventId: last, streamMode: ["values", "messages-tuple"] }));
  assert.ok(rest.length > 0);
  assert.ok(!rest.some((p) => seen.some((s) => s.id === p.id)), "nothing twice");
  const tokens = [...seen, ...rest].filter((p) => p.event === "messages").map((p) => p.data[0].content).join("");
  const final = lastValues(rest);
  const replies = final.messages.filter((m) => m.type === "ai").map((m) => m.content).join("");
  assert.equal(tokens, replies, "the two streams together are every token");
  assert.equal(final.rounds, 3);
  const all = await collect(a.runs.joinStream(t.thread_id, runId, { lastEventId: "-1", streamMode: "values" }));
  assert.equal(all[0].event, "metadata", "-1 replays from the start");
});

await check("cancel", async () => {
  const t = await a.threads.create();
  const run = await a.runs.create(t.thread_id, "agent", { input: human("slow again") });
  assert.equal(run.status, "running");
  await assert.rejects(
    a.runs.create(t.thread_id, "agent", { input: human("meanwhile") }),
    (e) => e.status === 409,
    "multitask_strategy reject",
  );
  await new Promise((r) => setTimeout(r, 300));
  await a.runs.cancel(t.thread_id, run.run_id);
  await a.runs.join(t.thread_id, run.run_id);
  assert.equal((await a.runs.get(t.thread_id, run.run_id)).status, "interrupted");
  const next = await a.runs.wait(t.thread_id, "agent", { input: human("after the cancel") });
  assert.match(next.messages.at(-1).content, /after the cancel/);
});

// LangGraph's enqueue (langgraph_api/api/runs.py: a run on a busy thread is
// created `pending` and returned at once; the queue starts runs in order).
await check("multitask_strategy enqueue", async () => {
  const t = await a.threads.create();
  const busy = await a.runs.create(t.thread_id, "agent", { input: human("slow enqueue") });
  const queued = await a.runs.create(t.thread_id, "agent", { input: human("queued one"), multitaskStrategy: "enqueue" });
  assert.equal(queued.status, "pending");
  const dropped = await a.runs.create(t.thread_id, "agent", { input: human("queued two"), multitaskStrategy: "enqueue" });
  assert.equal(dropped.status, "pending");
  assert.notEqual(dropped.run_id, queued.run_id);
  const listed = await a.runs.list(t.thread_id);
  assert.ok(listed.some((r) => r.run_id === queued.run_id && r.status === "pending"), "the queued run is listed pending");
  assert.equal((await a.runs.get(t.thread_id, queued.run_id)).status, "pending");
  await a.runs.cancel(t.thread_id, dropped.run_id);
  const values = await a.runs.join(t.thread_id, queued.run_id);
  assert.equal((await a.runs.get(t.thread_id, busy.run_id)).status, "success");
  assert.equal((await a.runs.get(t.thread_id, queued.run_id)).status, "success");
  assert.notEqual((await a.runs.get(t.thread_id, dropped.run_id)).status, "success", "a cancelled pending run never runs");
  const humans = values.messages.filter((m) => m.type === "human").map((m) => m.content);
  assert.deepEqual(humans, ["slow enqueue", "queued one"], "in order, the cancelled one left out");
  const state = await a.threads.getState(t.thread_id);
  assert.ok(!state.values.messages.some((m) => m.content === "queued two"));
});

await check("404s", async () => {
  await status404(() => a.threads.get("00000000-0000-4000-8000-000000000000"));
  await status404(() => a.assistants.get("no-such-graph"));
  await status404(() => a.runs.get(thread.thread_id, "00000000-0000-4000-8000-000000000000"));
  await status404(() => a.threads.getState("no-such-thread"));
  await status404(() => collect(a.runs.stream("no-such-thread", "agent", { input: human("x") })));
});

await check("another key sees nothing", async () => {
  await status404(() => b.threads.get(thread.thread_id));
  await status404(() => b.threads.getState(thread.thread_id));
  await status404(() => b.runs.list(thread.thread_id));
  await status404(() => b.runs.get(thread.thread_id, firstRun));
  await status404(() => collect(b.runs.joinStream(thread.thread_id, firstRun, { lastEventId: "-1" })));
  await status404(() => collect(b.runs.stream(thread.thread_id, "agent", { input: human("mine now") })));
  await status404(() => b.threads.delete(thread.thread_id));
  assert.equal((await b.threads.search({ metadata: { topic: "greeting" } })).length, 0);
  assert.equal((await a.threads.get(thread.thread_id)).messages, undefined);
});

await check("a wrong key is 401 with LangGraph's detail", async () => {
  const wrong = new Client({ apiUrl: url, apiKey: "not-a-key" });
  await assert.rejects(wrong.threads.search(), (e) => e.status === 401);
  const r = await fetch(`${url}/threads/search`, { method: "POST", headers: { "x-api-key": "not-a-key" } });
  assert.equal(r.status, 401);
  assert.equal(typeof (await r.json()).detail, "string");
});

await check("a chat from /api/chat reads as a thread", async () => {
  const chatId = `chat-${Date.now()}`;
  const resp = await fetch(`${url}/api/chat`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${keyA}` },
    body: JSON.stringify({
      id: chatId,
      graph: "agent",
      messages: [{ id: "u1", role: "user", parts: [{ type: "text", text: "from the chat endpoint" }] }],
    }),
  });
  assert.equal(resp.status, 200);
  await resp.text();
  const t = await a.threads.get(chatId);
  assert.equal(t.status, "idle");
  const state = await a.threads.getState(chatId);
  assert.deepEqual(state.values.messages.map((m) => m.type), ["human", "ai"]);
  assert.match(state.values.messages[1].content, /from the chat endpoint/);
  const more = await a.runs.wait(chatId, "agent", { input: human("and from the SDK") });
  assert.equal(more.messages.length, 4);
  const chat = await (await fetch(`${url}/api/chat/${chatId}`, { headers: { authorization: `Bearer ${keyA}` } })).json();
  assert.deepEqual(chat.messages.map((m) => m.role), ["user", "assistant", "user", "assistant"]);
});

await check("delete", async () => {
  const t = await a.threads.create();
  await a.threads.delete(t.thread_id);
  await status404(() => a.threads.get(t.thread_id));
});

process.exit(failed ? 1 : 0);
