// Bundles page.jsx (React, assistant-ui, the AI SDK) into dist/page.js with
// esbuild, for assistant-ui.test.mjs to serve to Chromium.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const here = path.dirname(fileURLToPath(import.meta.url));

export async function bundle() {
  const out = path.join(here, 'dist', 'page.js');
  await build({
    entryPoints: [path.join(here, 'page.jsx')],
    bundle: true,
    outfile: out,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    jsx: 'automatic',
    define: { 'process.env.NODE_ENV': '"production"' },
    logLevel: 'warning',
  });
  return out;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await bundle();
