// What a studio browser test needs: Debian's Chromium through playwright-core
// (no browser download), named checks that stop at the first failure with a
// screenshot, page errors turned into failures, and axe-core.

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));

export const T = 45_000; // generous: the CI machine has 2 slow cores
export const STREAM_T = 120_000;

function browserPath() {
  const candidates = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'].filter(Boolean);
  const found = candidates.find((p) => fs.existsSync(p));
  if (!found) throw new Error(`no Chromium found (tried ${candidates.join(', ')}); install Debian's chromium or set CHROMIUM_PATH`);
  return found;
}

export function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

/** Starts Chromium; returns the harness of one test run. */
export async function start({ art }) {
  fs.mkdirSync(art, { recursive: true });
  const browser = await chromium.launch({
    executablePath: browserPath(),
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const pageErrors = [];
  const watch = (page) => {
    page.setDefaultTimeout(T);
    page.on('pageerror', (e) => pageErrors.push(`${e.message}\n${e.stack || ''}`));
    page.on('console', (m) => { if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) pageErrors.push(`console: ${m.text()}`); });
    return page;
  };
  const page = watch(await context.newPage());
  let current = '';
  const passed = [];
  const t = {
    browser, context, page,
    newPage: async () => watch(await context.newPage()),
    /** A screenshot of `p` (the main page by default) as ART/NAME.png. */
    async shot(name, p = page, opts = {}) {
      await p.screenshot({ path: path.join(art, `${name}.png`), fullPage: opts.fullPage ?? true, ...opts });
    },
    async check(name, fn) {
      current = name;
      const t0 = Date.now();
      await fn();
      if (pageErrors.length) throw new Error(`JavaScript error in the page: ${pageErrors.join('\n')}`);
      passed.push(name);
      console.log(`ok   ${name} (${Date.now() - t0} ms)`);
    },
    async axe(screen, p = page) {
      if (!(await p.evaluate(() => typeof window.axe !== 'undefined'))) await p.addScriptTag({ path: path.join(here, 'node_modules', 'axe-core', 'axe.min.js') });
      const res = await p.evaluate(async () => {
        const r = await window.axe.run(document, { resultTypes: ['violations'] });
        return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 5).map((n) => `${n.target.join(' ')} — ${n.failureSummary?.split('\n').slice(0, 2).join(' ')}`) }));
      });
      const bad = res.filter((v) => v.impact === 'serious' || v.impact === 'critical');
      const minor = res.filter((v) => !bad.includes(v));
      if (minor.length) console.log(`     axe (${screen}): ${minor.length} minor/moderate: ${minor.map((v) => v.id).join(', ')}`);
      assert(!bad.length, `axe found serious/critical violations on the ${screen} screen:\n${bad.map((v) => `  [${v.impact}] ${v.id}: ${v.help}\n    ${v.nodes.join('\n    ')}`).join('\n')}`);
    },
    /** Runs `body`; on a failure prints it, takes a screenshot and exits 1. */
    async run(label, body) {
      try {
        await body();
      } catch (e) {
        console.error(`FAIL ${current}\n     ${String(e && e.stack ? e.message : e).split('\n').join('\n     ')}`);
        if (pageErrors.length) console.error(`     errors in the page:\n     ${pageErrors.join('\n     ')}`);
        try { await t.shot(`failure-${current.replace(/[^a-z0-9]+/gi, '-').slice(0, 60)}`); } catch { /* page gone */ }
        await browser.close();
        console.error(`${label} failed (${passed.length} checks passed before it); screenshots in ${art}`);
        process.exit(1);
      }
      await browser.close();
      console.log(`${label} passed: ${passed.length} checks; screenshots in ${art}`);
    },
  };
  return t;
}
