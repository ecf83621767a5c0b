// Browser test of the studio's judge verdicts against a running stategraph
// server whose model is a script with a judge's rules (tests/integration/
// studio.rs, `studio_eval_judges_and_the_run_page_shows_the_verdicts`):
//
//   STUDIO_URL=http://127.0.0.1:PORT STUDIO_ARTIFACTS=/tmp/studio node judge.test.mjs
//
// Two chats are sent through POST /api/chat; the Eval page is run with two
// criteria and the judge role `judge`; each turn's card must show both
// verdicts with the judge's reasons beside the answers; the run page must
// show the verdicts the evaluation stored. Chromium: CHROMIUM_PATH, else
// /usr/bin/chromium.

import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';

const BASE = (process.env.STUDIO_URL || '').replace(/\/+$/, '');
const ART = process.env.STUDIO_ARTIFACTS || 'artifacts';
const T = 45_000;
if (!BASE) {
  console.error('judge test: set STUDIO_URL');
  process.exit(2);
}
fs.mkdirSync(ART, { recursive: true });

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

for (const [i, text] of ['hello there', 'hello again'].entries()) {
  const r = await fetch(`${BASE}/api/chat`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ id: `judged-${i}`, graph: 'chat', trigger: 'submit-message', messages: [{ id: `u${i}`, role: 'user', parts: [{ type: 'text', text }] }] }),
  });
  const body = await r.text();
  assert(r.ok && body.includes('"type":"finish"'), `chat ${i}: ${r.status} ${body.slice(0, 300)}`);
}

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
  await page.goto(`${BASE}/studio#/eval`);
  await page.locator('[data-testid="eval-graph"] option[value="chat"]').waitFor({ state: 'attached' });
  await page.locator('[data-testid="eval-graph"]').selectOption('chat');
  await page.locator('[data-testid="eval-criteria"]').fill('the answer is polite\nthe answer cites a source');
  await page.locator('[data-testid="eval-judge"]').fill('judge');
  await page.locator('[data-testid="eval-run-button"]').click();
  await page.locator('[data-testid="eval-headline"]').waitFor({ timeout: 120_000 });
  const cards = page.locator('[data-testid="eval-run"]');
  assert(await cards.count() === 2, `2 turns shown (a judge failed each), got ${await cards.count()}`);
  for (let i = 0; i < 2; i++) {
    const card = cards.nth(i);
    const rows = await card.locator('[data-testid="eval-judged"] [data-testid="verdict"]').evaluateAll((els) => els.map((e) => [e.dataset.verdict, e.querySelector('[data-testid="verdict-reason"]').textContent]));
    assert(JSON.stringify(rows) === JSON.stringify([['pass', 'It greets the user.'], ['fail', 'No source is named.']]), `card ${i} verdicts: ${JSON.stringify(rows)}`);
    const answer = await card.textContent();
    assert(answer.includes('Hello! Ask me about development data.'), 'the answer is not beside the verdicts');
  }
  const summary = await page.locator('[data-testid="eval-summary"]').textContent();
  assert(summary.includes('2 pass, 2 fail, 0 not judged'), `summary: ${summary}`);
  await page.screenshot({ path: path.join(ART, 'eval-judged.png'), fullPage: true });

  await cards.nth(0).locator('a.mono').click();
  await page.locator('[data-testid="run-verdicts"]').waitFor();
  const stored = await page.locator('[data-testid="run-verdicts"] [data-testid="verdict"]').evaluateAll((els) => els.map((e) => [e.dataset.verdict, e.querySelector('[data-testid="verdict-reason"]').textContent]));
  assert(JSON.stringify(stored) === JSON.stringify([['pass', 'It greets the user.'], ['fail', 'No source is named.']]), `run page verdicts: ${JSON.stringify(stored)}`);
  const card = await page.locator('[data-testid="run-verdicts"]').textContent();
  assert(card.includes('scripted:models') && card.includes('studio'), `the run page names no judge model or source: ${card}`);
  await page.screenshot({ path: path.join(ART, 'run-verdicts.png'), fullPage: true });
  assert(errors.length === 0, `page errors: ${errors.join('\n')}`);
} catch (e) {
  failed = e;
  await page.screenshot({ path: path.join(ART, 'judge-failure.png'), fullPage: true }).catch(() => {});
}
await browser.close();
if (failed) {
  console.error(`FAIL judge: ${failed.message}${errors.length ? `\npage errors:\n${errors.join("\n")}` : ""}`);
  process.exit(1);
}
console.log('ok judge: Eval page verdicts and reasons beside the answers; the run page shows the stored verdicts');
