// Browser test of the studio's Model calls tab against a running stategraph
// server (tests/integration/studio_ui/studio_calls.rs,
// `studio_shows_a_chat_runs_model_call_with_its_prompt_and_tools`):
//
//   STUDIO_URL=http://127.0.0.1:PORT STUDIO_ARTIFACTS=/tmp/studio STUDIO_GRAPH=talk \
//   EXPECT_SYSTEM='You are…' EXPECT_TOOLS=calculator,current_time node calls.test.mjs
//
// A chat turn is sent through POST /api/chat; the run's page, tab "Model
// calls", must show the call's rendered system prompt beside the template
// file it came from, the tools offered, and the answer; axe-core finds no
// serious accessibility violation there. Chromium: CHROMIUM_PATH, else
// /usr/bin/chromium.

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const BASE = (process.env.STUDIO_URL || '').replace(/\/+$/, '');
const ART = process.env.STUDIO_ARTIFACTS || 'artifacts';
const GRAPH = process.env.STUDIO_GRAPH || 'talk';
const SYSTEM = process.env.EXPECT_SYSTEM || '';
const TOOLS = (process.env.EXPECT_TOOLS || '').split(',').filter(Boolean);
const TEMPLATE = process.env.EXPECT_TEMPLATE || '';
const T = 45_000;
if (!BASE || !SYSTEM) {
  console.error('calls test: set STUDIO_URL and EXPECT_SYSTEM');
  process.exit(2);
}
fs.mkdirSync(ART, { recursive: true });
const here = path.dirname(fileURLToPath(import.meta.url));

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

const chat = `calls-${Date.now()}`;
const r = await fetch(`${BASE}/api/chat`, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ id: chat, graph: GRAPH, trigger: 'submit-message', messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'What is the derivative of x^2?' }] }] }),
});
const body = await r.text();
assert(r.ok && body.includes('"type":"finish"'), `chat: ${r.status} ${body.slice(0, 300)}`);
const runs = await (await fetch(`${BASE}/api/runs?chat=${chat}`)).json();
const run = runs.runs?.[0]?.id;
assert(run, `no run for the chat: ${JSON.stringify(runs).slice(0, 300)}`);

const browser = await chromium.launch({
  executablePath: [process.env.CHROMIUM_PATH, '/usr/bin/chromium'].find((p) => p && fs.existsSync(p)),
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
});
const page = await (await browser.newContext({ viewport: { width: 1400, height: 1000 } })).newPage();
page.setDefaultTimeout(T);
const errors = [];
page.on('pageerror', (e) => errors.push(e.message));
let failed = null;
try {
  await page.goto(`${BASE}/studio#/runs/${run}`);
  await page.locator('[data-testid="tab-calls"]').click();
  const items = page.locator('[data-testid="call-item"]');
  await items.first().waitFor();
  assert(await items.count() === 1, `one model call listed, got ${await items.count()}`);
  const system = page.locator('[data-testid="call-system"]');
  await system.waitFor();
  const shown = await system.textContent();
  assert(shown.includes(SYSTEM), `rendered system prompt: ${shown}`);
  const template = await page.locator('[data-testid="call-template"]').textContent();
  assert(template.includes(TEMPLATE || SYSTEM.slice(0, 20)), `template: ${template}`);
  const name = await page.locator('[data-testid="call-template-name"]').textContent();
  assert(name.endsWith('.md'), `template file name: ${name}`);
  const tools = await page.locator('[data-testid="call-tool"] code').allTextContents();
  assert(JSON.stringify(tools) === JSON.stringify(TOOLS), `tools offered: ${JSON.stringify(tools)}`);
  const msgs = await page.locator('[data-testid="call-message"]').evaluateAll((els) => els.map((e) => e.dataset.role));
  assert(JSON.stringify(msgs) === JSON.stringify(['system', 'user']), `messages: ${JSON.stringify(msgs)}`);
  const answer = await page.locator('[data-testid="call-response"]').textContent();
  assert(/finish: stop/.test(answer) && answer.length > 40, `response: ${answer}`);

  // Accessibility of the tab (axe-core, as the studio test checks every screen).
  await page.addScriptTag({ path: path.join(here, 'node_modules', 'axe-core', 'axe.min.js') });
  const serious = await page.evaluate(async () => {
    const res = await window.axe.run(document, { resultTypes: ['violations'] });
    return res.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => `${v.id}: ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
  });
  assert(serious.length === 0, `axe: ${serious.join('\n')}`);
  await page.locator('[data-testid="call-detail"]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(ART, 'calls.png'), fullPage: false });
  assert(errors.length === 0, `page errors: ${errors.join('\n')}`);
} catch (e) {
  failed = e;
  await page.screenshot({ path: path.join(ART, 'calls-failure.png'), fullPage: true }).catch(() => {});
}
await browser.close();
if (failed) {
  console.error(`FAIL calls: ${failed.message}${errors.length ? `\npage errors:\n${errors.join('\n')}` : ''}`);
  process.exit(1);
}
console.log('ok calls: the model call shows its rendered system prompt beside its template, its tools and its answer');
