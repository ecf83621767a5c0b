// LangGraph's `useStream` (@langchain/langgraph-sdk/react, pinned by
// package-lock.json) in Chromium against `stategraph serve`
// (tests/integration/server_api/langgraph_api.rs starts it with CORS open):
// usestream/app.jsx is bundled with esbuild, served from a page of its own
// origin, and driven with playwright-core.
//
//   node usestream.test.mjs URL KEY [CHROMIUM]
//
// Prints `ok   CASE` or `FAIL CASE: why`; exits 1 on any failure.
import assert from "node:assert/strict";
import http from "node:http";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";
import { chromium } from "playwright-core";

const [api, key, browserPath = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium"] = process.argv.slice(2);
const here = fileURLToPath(new URL(".", import.meta.url));
const bundle = await esbuild.build({
  entryPoints: [`${here}usestream/app.jsx`],
  bundle: true,
  write: false,
  format: "esm",
  jsx: "automatic",
  define: { "process.env.NODE_ENV": '"production"' },
  logLevel: "error",
});
const js = bundle.outputFiles[0].text;
const page = `<!doctype html><meta charset="utf-8"><title>useStream</title><div id="root"></div><script type="module" src="/app.js"></script>`;
const server = http.createServer((req, res) => {
  if (req.url.startsWith("/app.js")) {
    res.writeHead(200, { "content-type": "text/javascript" }).end(js);
  } else {
    res.writeHead(200, { "content-type": "text/html" }).end(page);
  }
});
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const origin = `http://127.0.0.1:${server.address().port}`;

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

const browser = await chromium.launch({ executablePath: browserPath, args: ["--no-sandbox"] });
const tab = await browser.newPage();
const logs = [];
tab.on("console", (m) => logs.push(`${m.type()}: ${m.text()}`));
tab.on("pageerror", (e) => logs.push(`pageerror: ${e.message}`));
await tab.goto(`${origin}/?api=${encodeURIComponent(api)}&key=${encodeURIComponent(key)}`);

const items = () => tab.$$eval("#messages li", (li) => li.map((l) => [l.dataset.type, l.textContent]));
const idle = () => tab.waitForFunction(() => document.querySelector("#status")?.textContent === "idle", null, { timeout: 20000 });
async function say(text) {
  await tab.fill("#draft", text);
  await tab.click("#send");
}

await check("useStream streams a reply", async () => {
  await say("hello from the browser");
  await tab.waitForFunction(() => document.querySelector("#status")?.textContent === "loading", null, { timeout: 10000 });
  // Mid-stream, a partial reply is shown (tokens through messages-tuple).
  await tab.waitForFunction(
    () => [...document.querySelectorAll("#messages li")].some((l) => l.dataset.type === "ai" && l.textContent.length > 0),
    null,
    { timeout: 10000 },
  );
  await idle();
  const shown = await items();
  assert.deepEqual(shown.map((m) => m[0]), ["human", "ai"]);
  assert.match(shown[1][1], /hello from the browser/);
  assert.ok((await tab.textContent("#thread")).length > 0, "the thread id came back");
});

await check("a second turn on the same thread", async () => {
  await say("and a second one");
  await idle();
  await tab.waitForFunction(() => document.querySelectorAll("#messages li").length === 4, null, { timeout: 10000 });
  const shown = await items();
  assert.deepEqual(shown.map((m) => m[0]), ["human", "ai", "human", "ai"]);
});

await check("an interrupt and its answer", async () => {
  await say("please approve the budget");
  await tab.waitForSelector("#interrupt", { timeout: 15000 });
  assert.match(await tab.textContent("#interrupt"), /approve the budget/);
  await idle();
  await tab.fill("#draft", "yes, approved");
  await tab.click("#resume");
  await tab.waitForFunction(() => !document.querySelector("#interrupt"), null, { timeout: 15000 });
  await idle();
  await tab.waitForFunction(
    () => [...document.querySelectorAll("#messages li")].at(-1)?.textContent.includes("yes, approved"),
    null,
    { timeout: 15000 },
  );
});

await check("stop a slow run", async () => {
  await say("slow one");
  await tab.waitForFunction(() => document.querySelector("#status")?.textContent === "loading", null, { timeout: 10000 });
  await tab.waitForTimeout(400);
  await tab.click("#stop");
  await idle();
  assert.equal(await tab.$("#error"), null, "no error shown");
});

if (failed) console.log(logs.join("\n"));
await browser.close();
server.close();
process.exit(failed ? 1 : 0);
