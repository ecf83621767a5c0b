// Browser test: assistant-ui on stategraph's AI SDK stream.
//
//   AUI_URL=http://127.0.0.1:PORT AUI_ARTIFACTS=/tmp/aui node assistant-ui.test.mjs
//
// The server must serve the shipped `chat` graph (the offline model does).
// page.jsx — @assistant-ui/react + @assistant-ui/react-ai-sdk, as pinned by
// package-lock.json — is bundled with esbuild and served to Chromium on the
// server's own origin (Playwright answers /aui/ itself, so the page's
// fetches to /api/chat are same-origin, as in a deployed app). It sends
// three messages, reloads, and checks each answer with its thinking and
// follow-up parts, and that assistant-ui threw nothing (with `steps` as a
// number in the finish metadata it failed on the second answer: "steps is
// not iterable"). Chromium: CHROMIUM_PATH, else /usr/bin/chromium.

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { bundle } from './build.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const BASE = (process.env.AUI_URL || '').replace(/\/+$/, '');
const ART = process.env.AUI_ARTIFACTS || path.join(here, 'artifacts');
const T = 45_000; // the CI machine has 2 slow cores
const STREAM_T = 120_000;
const QUESTIONS = [
  'What is the population of Kenya in 2020?',
  'And what is the population of Ghana in 2020?',
  'What was the GDP of Peru in 2019?',
];

if (!BASE) {
  console.error('assistant-ui test: set AUI_URL to the server base URL, e.g. http://127.0.0.1:8080');
  process.exit(2);
}
fs.mkdirSync(ART, { recursive: true });

function browserPath() {
  const candidates = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser'].filter(Boolean);
  const found = candidates.find((p) => fs.existsSync(p));
  if (!found) throw new Error(`no Chromium found (tried ${candidates.join(', ')}); install Debian's chromium or set CHROMIUM_PATH`);
  return found;
}

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

const script = fs.readFileSync(await bundle());
const html = '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>assistant-ui on stategraph</title></head>'
  + '<body><div id="root"></div><script type="module" src="/aui/page.js"></script></body></html>';

const browser = await chromium.launch({
  executablePath: browserPath(),
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const context = await browser.newContext({ viewport: { width: 1200, height: 1000 } });
await context.route(`${BASE}/aui/**`, (route) => {
  const url = new URL(route.request().url());
  if (url.pathname === '/aui/page.js') return route.fulfill({ status: 200, contentType: 'text/javascript', body: script });
  return route.fulfill({ status: 200, contentType: 'text/html; charset=utf-8', body: html });
});
const page = await context.newPage();
page.setDefaultTimeout(T);
const errors = [];
page.on('pageerror', (e) => errors.push(`${e.message}\n${e.stack || ''}`));
// A new chat's GET /api/chat/{id} is a 404 (Chromium logs it): not an error of the page.
page.on('console', (m) => { if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) errors.push(`console: ${m.text()}`); });
const sent = [];
page.on('request', (r) => {
  if (r.method() === 'POST' && new URL(r.url()).pathname === '/api/chat') sent.push(JSON.parse(r.postData() || '{}'));
});

const chat = `aui-${Date.now().toString(36)}`;
const messages = () => page.locator('[data-testid="aui-message"]');

/** Waits until `n` assistant messages are shown and no run is going. */
async function answered(n) {
  await page.waitForFunction((want) => {
    const done = document.querySelectorAll('[data-testid="aui-message"][data-role="assistant"]').length === want;
    return done && !document.querySelector('[data-testid="aui-running"]');
  }, n, { timeout: STREAM_T });
}

/** Each message's role, text and what its data parts rendered. */
async function shown() {
  return messages().evaluateAll((els) => els.map((el) => ({
    role: el.dataset.role,
    text: el.textContent,
    thinking: el.querySelectorAll('[data-testid="aui-thinking"]').length,
    followups: el.querySelectorAll('[data-testid="aui-followup"]').length,
  })));
}

function checkThread(list, when) {
  assert(list.length === 6, `${when}: 6 messages, got ${list.length}: ${JSON.stringify(list)}`);
  list.forEach((m, i) => {
    assert(m.role === (i % 2 ? 'assistant' : 'user'), `${when}: message ${i} is ${m.role}`);
    if (m.role === 'user') {
      assert(m.text.includes(QUESTIONS[i / 2]), `${when}: user message ${i}: ${m.text}`);
    } else {
      assert(m.text.includes('[offline model]'), `${when}: answer ${i} has no text: ${m.text}`);
      assert(m.thinking > 0, `${when}: answer ${i} rendered no data-thinking part`);
    }
  });
  const followups = list.filter((m) => m.role === 'assistant').map((m) => m.followups);
  assert(followups[0] > 0 && followups[1] > 0, `${when}: the data-followups parts did not render: ${followups}`);
}

let failed = null;
try {
  await page.goto(`${BASE}/aui/?chat=${chat}`);
  await page.locator('[data-testid="aui-ready"][data-history="0"]').waitFor();
  for (const [i, q] of QUESTIONS.entries()) {
    await page.locator('[data-testid="aui-input"]').fill(q);
    await page.locator('[data-testid="aui-send"]').click();
    await answered(i + 1);
    assert(errors.length === 0, `assistant-ui threw after answer ${i + 1}:\n${errors.join('\n')}`);
  }
  const before = await shown();
  checkThread(before, 'live');
  assert(sent.length === 3, `3 requests, got ${sent.length}`);
  sent.forEach((b, i) => {
    assert(b.id === chat && b.graph === 'chat', `request ${i}: id ${b.id}, graph ${b.graph}`);
    assert(b.messages.length === 2 * i + 1, `request ${i} carried ${b.messages.length} messages`);
  });
  await page.screenshot({ path: path.join(ART, 'assistant-ui-live.png'), fullPage: true });

  await page.reload();
  await page.locator('[data-testid="aui-ready"][data-history="6"]').waitFor();
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="aui-message"]').length === 6);
  const after = await shown();
  checkThread(after, 'after reload');
  assert(JSON.stringify(after) === JSON.stringify(before), `the reloaded thread differs:\n${JSON.stringify(before)}\n${JSON.stringify(after)}`);
  await page.screenshot({ path: path.join(ART, 'assistant-ui-reloaded.png'), fullPage: true });

  // The chat goes on after the reload.
  await page.locator('[data-testid="aui-input"]').fill('thanks!');
  await page.locator('[data-testid="aui-send"]').click();
  await answered(4);
  assert(sent.length === 4 && sent[3].messages.length === 7, `the 4th request carried ${sent[3]?.messages.length} messages`);
  assert(errors.length === 0, `assistant-ui threw:\n${errors.join('\n')}`);
} catch (e) {
  failed = e;
  await page.screenshot({ path: path.join(ART, 'assistant-ui-failure.png'), fullPage: true }).catch(() => {});
}
await browser.close();
if (failed) {
  console.error(`FAIL assistant-ui: ${failed.message}${errors.length ? `\npage errors:\n${errors.join('\n')}` : ''}`);
  process.exit(1);
}
console.log('ok assistant-ui: three messages, reload, thinking and follow-up parts, a fourth message after the reload');
