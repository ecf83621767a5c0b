// Browser test of the studio (/studio) against a running stategraph server.
//
//   STUDIO_URL=http://127.0.0.1:PORT STUDIO_ARTIFACTS=/tmp/studio node studio.test.mjs
//
// The server must serve a `chat` graph and an invalid `graphs/broken.yaml`.
// With STUDIO_GRAPHS_DIR (that graphs directory), the test also fixes
// broken.yaml and checks that the Graphs screen picks the change up live.
// Chromium: CHROMIUM_PATH, else /usr/bin/chromium (no browser download).
// Exits non-zero with a message naming the failed check; screenshots of each
// screen (and of a failure) go to STUDIO_ARTIFACTS.

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
const BASE = (process.env.STUDIO_URL || '').replace(/\/+$/, '');
const ART = process.env.STUDIO_ARTIFACTS || path.join(here, 'artifacts');
const T = 45_000; // generous: the CI machine has 2 slow cores
const STREAM_T = 120_000;

if (!BASE) {
  console.error('studio test: set STUDIO_URL to the server base URL, e.g. http://127.0.0.1:8080');
  process.exit(2);
}
fs.mkdirSync(ART, { recursive: true });

function browserPath() {
  const candidates = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].filter(Boolean);
  const found = candidates.find((p) => fs.existsSync(p));
  if (!found) throw new Error(`no Chromium found (tried ${candidates.join(', ')}); install Debian's chromium or set CHROMIUM_PATH`);
  return found;
}

const browser = await chromium.launch({
  executablePath: browserPath(),
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
const page = await context.newPage();
page.setDefaultTimeout(T);
const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(`${e.message}\n${e.stack || ''}`));
page.on('console', (m) => { if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) pageErrors.push(`console: ${m.text()}`); });

let current = '';
const passed = [];

async function shot(name) {
  await page.screenshot({ path: path.join(ART, `${name}.png`), fullPage: true });
}

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

async function check(name, fn) {
  current = name;
  const t0 = Date.now();
  await fn();
  if (pageErrors.length) throw new Error(`JavaScript error in the page: ${pageErrors.join('\n')}`);
  passed.push(name);
  console.log(`ok   ${name} (${Date.now() - t0} ms)`);
}

const axeSource = path.join(here, 'node_modules', 'axe-core', 'axe.min.js');
async function axe(screen) {
  if (!(await page.evaluate(() => typeof window.axe !== 'undefined'))) await page.addScriptTag({ path: axeSource });
  const res = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 5).map((n) => `${n.target.join(' ')} — ${n.failureSummary?.split('\n').slice(0, 2).join(' ')}`) }));
  });
  const bad = res.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  const minor = res.filter((v) => !bad.includes(v));
  if (minor.length) console.log(`     axe (${screen}): ${minor.length} minor/moderate: ${minor.map((v) => v.id).join(', ')}`);
  assert(!bad.length, `axe found serious/critical violations on the ${screen} screen:\n${bad.map((v) => `  [${v.impact}] ${v.id}: ${v.help}\n    ${v.nodes.join('\n    ')}`).join('\n')}`);
}

const go = (hash) => page.evaluate((h) => { location.hash = h; }, hash);
const visible = (sel) => page.locator(sel).first().waitFor({ state: 'visible' });

let runId = null;
const chatId = `studio-test-${Date.now().toString(36)}`;

try {
  await check('studio loads at /studio', async () => {
    const res = await page.goto(`${BASE}/studio`, { waitUntil: 'domcontentloaded' });
    assert(res && res.ok(), `GET /studio answered ${res && res.status()}`);
    await visible('[data-testid="main-nav"]');
    await visible('[data-testid="graph-list"] [data-testid="graph-item"]');
  });

  await check('chat graph drawn as SVG with conditional edge labels', async () => {
    await page.locator('[data-testid="graph-item"][data-graph="chat"]').click();
    const svg = 'svg[data-testid="graph-svg"][data-graph="chat"]';
    await visible(`${svg} [data-testid="graph-node"][data-node="router"]`);
    for (const n of ['summarizer', 'router', 'narrator', 'followup', 'direct']) {
      assert(await page.locator(`${svg} [data-testid="graph-node"][data-node="${n}"]`).isVisible(), `node ${n} is not drawn`);
    }
    assert(await page.locator(`${svg} [data-testid="graph-start"]`).count() === 1, 'no START node');
    assert(await page.locator(`${svg} [data-testid="graph-end"]`).count() === 1, 'no END node');
    const labels = await page.locator(`${svg} [data-testid="edge-label"]`).allTextContents();
    for (const l of ['QUICK_ANSWER', 'RESEARCH', 'EXPLAIN', 'default']) assert(labels.includes(l), `edge label ${l} missing (labels: ${labels.join(', ')})`);
    await shot('graphs');
  });

  await check('clicking a node opens its panel with settings and prompt', async () => {
    await page.locator('svg[data-graph="chat"] [data-testid="graph-node"][data-node="router"]').click();
    await visible('[data-testid="node-panel"][data-node="router"]');
    const kind = await page.locator('[data-testid="node-kind"]').textContent();
    assert(kind.trim() === 'router', `panel kind is ${kind}`);
    const settings = await page.locator('[data-testid="node-settings"]').textContent();
    assert(/intents/.test(settings) && /QUICK_ANSWER/.test(settings), `settings do not show the router's intents: ${settings.slice(0, 200)}`);
    const prompt = await page.locator('[data-testid="node-prompt"]').textContent();
    assert(/router/.test(prompt), `prompt section does not name the router prompt: ${prompt.slice(0, 200)}`);
    if (await page.locator('[data-testid="node-prompt-text"]').count()) {
      const text = await page.locator('[data-testid="node-prompt-text"]').textContent();
      assert(text.trim().length > 20, 'prompt text is empty');
    }
    await shot('graph-node-panel');
  });

  await check('graphs screen passes axe (no serious/critical)', async () => {
    await axe('graphs');
  });

  await check('broken graph shows its diagnostics as file:line:col', async () => {
    await page.locator('[data-testid="graph-item"][data-graph="broken"]').click();
    await visible('[data-testid="diagnostic"]');
    const lines = await page.locator('[data-testid="diagnostic"]').allTextContents();
    assert(lines.some((l) => /broken\.ya?ml:\d+:\d+\s+\S+\s+\S/.test(l)), `no file:line:col diagnostic: ${lines.join(' | ')}`);
    await shot('graph-broken');
  });

  await check('keyboard: Tab reaches the main navigation and a graph node; Enter opens it', async () => {
    await page.goto('about:blank');
    await page.goto(`${BASE}/studio#/graphs/chat`, { waitUntil: 'domcontentloaded' });
    await visible('svg[data-graph="chat"] [data-testid="graph-node"]');
    let sawNav = false;
    let node = null;
    for (let i = 0; i < 60 && !node; i++) {
      await page.keyboard.press('Tab');
      const a = await page.evaluate(() => {
        const el = document.activeElement;
        return { nav: !!el?.closest('[data-testid="main-nav"]'), node: el?.getAttribute('data-testid') === 'graph-node' ? el.getAttribute('data-node') : null };
      });
      sawNav ||= a.nav;
      node = a.node;
    }
    assert(sawNav, 'Tab never reached the main navigation');
    assert(node, 'Tab never reached a graph node');
    const ring = await page.evaluate(() => getComputedStyle(document.activeElement).outlineStyle);
    assert(ring !== 'none', 'the focused graph node has no visible focus outline');
    await page.keyboard.press('Enter');
    await visible(`[data-testid="node-panel"][data-node="${node}"]`);
    await page.keyboard.press('Escape');
    await page.locator('[data-testid="node-panel"]').waitFor({ state: 'detached' });
  });

  await check('playground streams an answer and the thinking panel', async () => {
    await go(`#/playground/chat?chat=${chatId}`);
    await visible('[data-testid="chat-input"]');
    await page.locator('[data-testid="composer"][data-ready="true"]').waitFor();
    await page.locator('[data-testid="chat-input"]').fill('explain tides');
    await page.keyboard.press('Enter');
    await visible('[data-testid="message-user"]');
    await page.locator('[data-testid="message-assistant"][data-status="done"], [data-testid="message-assistant"][data-status="error"]').first().waitFor({ timeout: STREAM_T });
    const status = await page.locator('[data-testid="message-assistant"]').last().getAttribute('data-status');
    assert(status === 'done', `the answer ended with status ${status}: ${await page.locator('[data-testid="message-assistant"]').last().textContent()}`);
    const answer = (await page.locator('[data-testid="answer-text"]').allTextContents()).join('');
    assert(answer.trim().length > 0, 'no answer text was streamed');
    const panel = page.locator('[data-testid="thinking-panel"]').last();
    await panel.waitFor();
    if (!(await panel.evaluate((d) => d.open))) await panel.locator('summary').click();
    await visible('[data-testid="thinking-item"]');
    const thinking = (await page.locator('[data-testid="thinking-item"]').allTextContents()).join(' ');
    assert(thinking.trim().length > 10, 'the thinking panel is empty');
    const link = page.locator('[data-testid="message-assistant"] [data-testid="run-link"]').last();
    await link.waitFor();
    const href = await link.getAttribute('href');
    runId = decodeURIComponent(href.split('#/runs/')[1] || '');
    assert(runId, `run link has no run id: ${href}`);
    await shot('playground');
  });

  await check('playground passes axe (no serious/critical)', async () => {
    await axe('playground');
  });

  await check('regenerate replaces the answer with a new run; the chat survives a reload', async () => {
    const answers = page.locator('[data-testid="message-assistant"]');
    assert(await answers.count() === 1, `expected one answer before regenerating, saw ${await answers.count()}`);
    await page.locator('[data-testid="regenerate"]').last().click();
    await page.waitForFunction((id) => {
      const a = [...document.querySelectorAll('[data-testid="message-assistant"]')].pop();
      const link = a?.querySelector('[data-testid="run-link"]');
      return a?.dataset.status === 'done' && link && !link.getAttribute('href').includes(id);
    }, runId, { timeout: STREAM_T });
    assert(await answers.count() === 1, `regenerate added an answer instead of replacing it (${await answers.count()} answers)`);
    const regenerated = (await page.locator('[data-testid="answer-text"]').allTextContents()).join('');
    assert(regenerated.trim().length > 0, 'the regenerated answer is empty');
    await page.reload({ waitUntil: 'domcontentloaded' });
    await visible('[data-testid="message-user"]');
    await page.locator('[data-testid="message-assistant"] [data-testid="answer-text"]').first().waitFor();
    const stored = (await page.locator('[data-testid="answer-text"]').allTextContents()).join('');
    assert(stored.trim() === regenerated.trim(), `after a reload the answer differs: ${stored.slice(0, 120)} vs ${regenerated.slice(0, 120)}`);
  });

  await check('the run opens from the runs list', async () => {
    await page.locator('[data-testid="nav-runs"]').click();
    const row = page.locator(`[data-testid="run-row"][data-run="${runId}"]`);
    await row.waitFor();
    // The run's cost (none here: the offline model has no price).
    const listed = (await row.locator('[data-testid="run-cost"]').textContent()).trim();
    assert(listed === '—' || /^\$\d/.test(listed), `the runs list shows no cost: ${listed}`);
    await row.locator('[data-testid="run-open"]').click();
    await visible(`[data-testid="run-screen"][data-run="${runId}"] [data-testid="run-header"]`);
    const cost = (await page.locator('[data-testid="run-header"] [data-testid="run-cost"]').textContent()).trim();
    assert(cost.startsWith('—') || /^\$\d/.test(cost), `the run shows no cost: ${cost}`);
    await visible('[data-testid="tl-task"]');
    const nodes = await page.locator('[data-testid="tl-task"]').evaluateAll((els) => els.map((e) => e.dataset.node));
    assert(nodes.includes('router'), `timeline has no router task: ${nodes.join(', ')}`);
    await shot('run-timeline');
  });

  await check('run screen passes axe (no serious/critical)', async () => {
    await axe('run');
  });

  await check('stepping through states changes the state view and shows a diff', async () => {
    await page.locator('[data-testid="tab-state"]').click();
    await page.locator('[data-testid="step-item"][data-step="0"]').click();
    await visible('[data-testid="state-json"][data-step="0"]');
    let prev = await page.locator('[data-testid="state-json"]').textContent();
    let changed = false;
    let diffSeen = false;
    const last = await page.locator('[data-testid="step-item"]').count() - 1;
    for (let s = 1; s <= last; s++) {
      await page.locator('[data-testid="step-next"]').click();
      await visible(`[data-testid="state-json"][data-step="${s}"]`);
      const text = await page.locator('[data-testid="state-json"]').textContent();
      if (text !== prev) changed = true;
      prev = text;
      if (await page.locator('[data-testid="diff-entry"]').count()) {
        diffSeen = true;
        const highlighted = await page.locator('[data-testid="state-json"] [data-op]').count();
        assert(highlighted > 0, `step ${s}: the diff lists changes but no state line is highlighted`);
        if (changed) break;
      }
    }
    assert(changed, 'the state view did not change between steps');
    assert(diffSeen, 'no step showed a diff from the previous one');
    await shot('run-state');
    await axe('run (state tab)');
  });

  await check('fork from a step with an edited field lands on the new run', async () => {
    await page.locator('[data-testid="step-item"][data-step="2"]').click();
    await visible('[data-testid="state-json"][data-step="2"]');
    await page.locator('[data-testid="fork-from-step"]').click();
    await visible('[data-testid="fork-submit"]');
    assert(await page.locator('[data-testid="fork-step"]').inputValue() === '2', 'the fork tab did not take the chosen step');
    await page.locator('[data-testid="fork-field-select"] option[value="intent"]').waitFor({ state: 'attached' });
    await page.locator('[data-testid="fork-field-select"]').selectOption('intent');
    await page.locator('[data-testid="fork-add-field"]').click();
    const editor = page.locator('[data-testid="fork-editor"][data-field="intent"]');
    await editor.waitFor();
    await editor.fill('{"oops"');
    await page.locator('[data-testid="fork-check"][data-valid="false"]').waitFor();
    assert(await page.locator('[data-testid="fork-submit"]').isDisabled(), 'fork is enabled with invalid JSON');
    await editor.fill('42');
    await page.locator('[data-testid="fork-check"][data-valid="false"]').waitFor();
    const typeMsg = await page.locator('[data-testid="fork-check"]').textContent();
    assert(/type/i.test(typeMsg), `a number for a text field is not reported as a type error: ${typeMsg}`);
    await editor.fill('"DIRECT"');
    await page.locator('[data-testid="fork-check"][data-valid="true"]').waitFor();
    await shot('run-fork');
    await axe('run (fork tab)');
    await page.locator('[data-testid="fork-submit"]').click();
    await page.waitForFunction((id) => /#\/runs\/[^?]+/.test(location.hash) && !location.hash.includes(id), runId);
    const newId = await page.evaluate(() => decodeURIComponent(location.hash.split('#/runs/')[1].split('?')[0]));
    await visible(`[data-testid="run-screen"][data-run="${newId}"] [data-testid="run-header"]`);
    const origin = page.locator('[data-testid="run-origin"]');
    await origin.waitFor();
    assert((await origin.getAttribute('href')).includes(runId), 'the new run does not link to its parent');
    await page.locator('[data-testid="run-status"]:not([data-status="running"])').waitFor({ timeout: STREAM_T });
    await shot('run-forked');
  });

  await check('replay: re-stream the recorded SSE and re-execute the fork without divergence', async () => {
    await page.locator('[data-testid="tab-replay"]').click();
    await page.locator('[data-testid="restream"]').click();
    await visible('[data-testid="raw-sse"]');
    await page.waitForFunction(() => /data: \[DONE\]/.test(document.querySelector('[data-testid="raw-sse"]')?.textContent || ''));
    const sse = await page.locator('[data-testid="raw-sse"]').textContent();
    assert(/"type":"text-delta"/.test(sse), `the re-streamed SSE has no text: ${sse.slice(0, 300)}`);
    await page.locator('[data-testid="reexecute"]').click();
    await page.locator('[data-testid="reexecute-same"], [data-testid="reexecute-diverged"], [data-testid="reexecute-result"] .alert-error').first().waitFor();
    const result = await page.locator('[data-testid="reexecute-result"]').textContent();
    assert(await page.locator('[data-testid="reexecute-same"]').count() === 1, `re-executing the fork diverged or failed: ${result}`);
    // Save as test: the run written as a test file, to download or copy.
    await page.locator('[data-testid="case-name"]').fill('the forked run');
    await page.locator('[data-testid="save-as-test"]').click();
    await page.locator('[data-testid="test-yaml"], [data-testid="save-as-test-result"] .alert-error').first().waitFor();
    const yaml = await page.locator('[data-testid="save-as-test-result"]').textContent();
    assert(/cases:\s+- name: "the forked run"/.test(yaml), `save as test gave no case: ${yaml.slice(0, 300)}`);
    assert(/expect:/.test(yaml), `the saved case has no expectations: ${yaml.slice(0, 300)}`);
    const download = page.locator('[data-testid="download-test"]');
    assert(/_recorded\.yaml$/.test(await download.getAttribute('download')), 'the download has no test-file name');
    await shot('run-replay');
    await axe('run (replay tab)');
  });

  await check('eval: the stored chats run again against the graphs now, with a summary', async () => {
    await page.locator('[data-testid="nav-eval"]').click();
    await visible('[data-testid="eval-screen"]');
    await page.locator('[data-testid="eval-all"]').check();
    await page.locator('[data-testid="eval-run-button"]').click();
    await page.locator('[data-testid="eval-headline"], [data-testid="eval-result"] .alert-error').first().waitFor({ timeout: STREAM_T });
    const headline = await page.locator('[data-testid="eval-result"]').textContent();
    assert(/of \d+ chat turns took another route/.test(headline), `no eval summary: ${headline.slice(0, 300)}`);
    assert(await page.locator('[data-testid="eval-run"]').count() > 0, 'no evaluated turn is shown');
    await shot('eval');
    await axe('eval');
  });

  await check('a graph file fixed on disk is picked up live', async () => {
    const dir = process.env.STUDIO_GRAPHS_DIR;
    if (!dir) { console.log('     (STUDIO_GRAPHS_DIR not set: not editing graph files)'); return; }
    await page.locator('[data-testid="nav-graphs"]').click();
    await page.locator('[data-testid="graph-item"][data-graph="broken"]').click();
    await visible('[data-testid="diagnostic"]');
    const file = path.join(dir, 'broken.yaml');
    fs.writeFileSync(file, fs.readFileSync(file, 'utf8').replace(/-> revew\b/, '-> END'));
    await page.locator('svg[data-testid="graph-svg"][data-graph="broken"] [data-testid="graph-node"][data-node="review"]').waitFor();
    assert(await page.locator('[data-testid="graph-item"][data-graph="broken"] .badge').count() === 0, 'the fixed graph is still marked invalid');
    assert(await page.locator('[data-testid="diagnostic"]').count() === 0, 'the fixed graph still shows diagnostics');
    await shot('graph-fixed');
  });

  await check('runs list screenshot', async () => {
    await page.locator('[data-testid="nav-runs"]').click();
    await visible('[data-testid="run-row"]');
    await shot('runs');
  });
} catch (e) {
  console.error(`FAIL ${current}\n     ${String(e && e.stack ? e.message : e).split('\n').join('\n     ')}`);
  try { await shot(`failure-${current.replace(/[^a-z0-9]+/gi, '-').slice(0, 60)}`); } catch { /* page gone */ }
  await browser.close();
  console.error(`studio test failed (${passed.length} checks passed before it); screenshots in ${ART}`);
  process.exit(1);
}

await browser.close();
console.log(`studio test passed: ${passed.length} checks; screenshots in ${ART}`);
