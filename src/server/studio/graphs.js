// Graphs screen: served graphs, their diagrams, node details, diagnostics,
// live reload (polls GET /api/graphs every 2 s), "Reload now".

import { h, s, json, hrefFor, replaceHash, announce, errorBox, rovingList, fmtTime } from './util.js';
import { getJSON, request, errorOf, graphDetail, forgetGraph } from './api.js';
import { renderGraph, kindStyle, yamlNodeBlock } from './graph.js';

const POLL_MS = 2000;

/** `file:line:col  code  message  (hint)` */
export function diagnosticLine(d) {
  return `${d.file}:${d.line}:${d.column}  ${d.code}  ${d.message}${d.hint ? `  (${d.hint})` : ''}`;
}

function diagBelongs(d, id) {
  const base = (d.file || '').split('/').pop().replace(/\.(ya?ml)$/i, '');
  return base === id;
}

function renderDiagnostics(list, testid = 'diagnostics') {
  return h('div', { 'data-testid': testid, role: 'list', 'aria-label': 'Diagnostics' },
    list.map((d) => h('div', { class: `diag ${d.severity || 'error'}`, role: 'listitem', 'data-testid': 'diagnostic' }, diagnosticLine(d))));
}

function nodePanel(detail, node, { onClose }) {
  const headId = `np-${node.id}`;
  const [abbr, , stroke] = kindStyle(node.kind);
  const block = yamlNodeBlock(detail.source, node.id);
  const hasSettings = node.settings && typeof node.settings === 'object';
  let prompt = node.prompt;
  if (prompt === undefined && block) {
    const m = /^\s*prompt:\s*["']?([^"'\s#]+)/m.exec(block);
    if (m) prompt = { name: m[1], text: null };
  }
  const sub = node.subgraph || (node.kind === 'subgraph' && block ? (/^\s*graph:\s*["']?([\w-]+)/m.exec(block) || [])[1] : null);
  const inline = h('div', { class: 'subgraph-inline' });
  const list = (xs) => (xs && xs.length ? xs.map((x, i) => [i ? ', ' : '', h('code', null, x)]) : h('span', { class: 'muted' }, 'none'));
  const closeBtn = h('button', { type: 'button', class: 'btn btn-small', 'aria-label': 'Close node details', 'data-testid': 'node-panel-close', onclick: onClose }, 'Close');
  const panel = h('aside', { class: 'card side-panel', 'aria-labelledby': headId, 'data-testid': 'node-panel', 'data-node': node.id },
    h('div', { class: 'row' },
      s('svg', { width: 26, height: 26, 'aria-hidden': 'true' }, s('circle', { cx: 13, cy: 13, r: 12, fill: stroke }),
        s('text', { x: 13, y: 16.5, 'text-anchor': 'middle', 'font-size': 9, 'font-weight': 800, fill: '#fff' }, abbr)),
      h('h2', { id: headId, tabindex: '-1', style: 'margin:0' }, node.id), h('span', { class: 'spacer' }), closeBtn),
    h('dl', { class: 'kv', style: 'margin-top:10px' },
      h('dt', null, 'Kind'), h('dd', { 'data-testid': 'node-kind' }, node.kind),
      h('dt', null, 'Description'), h('dd', null, node.description || h('span', { class: 'muted' }, '—')),
      h('dt', null, 'Surface'), h('dd', null, node.surface || '—'),
      h('dt', null, 'Writes'), h('dd', { 'data-testid': 'node-writes' }, list(node.writes)),
      h('dt', null, 'Tools'), h('dd', { 'data-testid': 'node-tools' }, node.tools ? list(node.tools) : h('span', { class: 'muted' }, block && /^\s*tools:/m.test(block) ? 'see settings' : 'none')),
      sub ? [h('dt', null, 'Subgraph'), h('dd', null,
        h('a', { href: hrefFor(['graphs', sub]), 'data-testid': 'subgraph-link' }, `Open ${sub}`), ' ',
        h('button', {
          type: 'button', class: 'btn btn-small', 'aria-expanded': 'false', 'data-testid': 'subgraph-expand',
          onclick: async (ev) => {
            const btn = ev.currentTarget;
            const open = btn.getAttribute('aria-expanded') === 'true';
            btn.setAttribute('aria-expanded', String(!open));
            btn.textContent = open ? 'Show inline' : 'Hide';
            inline.replaceChildren();
            if (open) return;
            try {
              const child = await graphDetail(sub);
              const r = renderGraph(child, { label: `Subgraph ${sub}`, onSelect: (n) => { location.hash = hrefFor(['graphs', sub], { node: n.id }); } });
              r.svg.setAttribute('width', '100%');
              r.svg.removeAttribute('height');
              inline.append(h('div', { class: 'graph-wrap', style: 'margin-top:8px' }, r.svg));
            } catch (e) { inline.append(errorBox(e)); }
          },
        }, 'Show inline'))] : null),
    inline,
    h('h3', null, hasSettings ? 'Settings' : 'Settings (from the graph file)'),
    hasSettings
      ? h('pre', { class: 'json', tabindex: '0', 'data-testid': 'node-settings' }, json(node.settings))
      : h('pre', { class: 'json', tabindex: '0', 'data-testid': 'node-settings' }, block || 'No settings available from this server.'),
    h('h3', null, 'Prompt'),
    h('div', { 'data-testid': 'node-prompt' },
      prompt
        ? [h('div', { class: 'small' }, h('code', { 'data-testid': 'node-prompt-name' }, prompt.name || '(inline)')),
          prompt.text !== null && prompt.text !== undefined
            ? h('pre', { class: 'json', tabindex: '0', style: 'margin-top:6px', 'data-testid': 'node-prompt-text' }, prompt.text)
            : h('p', { class: 'muted small' }, 'The prompt text is not provided by this server version.')]
        : h('p', { class: 'muted' }, 'This node has no prompt.')));
  panel.addEventListener('keydown', (ev) => { if (ev.key === 'Escape') onClose(); });
  return panel;
}

function legend() {
  const styles = [
    ['edge', 'stroke:#4b5563;stroke-width:1.6'],
    ['default route', 'stroke:#4b5563;stroke-width:1.6;stroke-dasharray:5 4'],
    ['map fan-out', 'stroke:#7c3aed;stroke-width:2.4;stroke-dasharray:9 5'],
    ['join', 'stroke:#0f766e;stroke-width:2.2'],
    ['back edge (loop)', 'stroke:#c2410c;stroke-width:1.6'],
  ];
  return h('div', { class: 'legend', role: 'note', 'aria-label': 'Edge legend' },
    styles.map(([text, style]) => h('span', null,
      s('svg', { width: 34, height: 10, 'aria-hidden': 'true' }, s('line', { x1: 0, y1: 5, x2: 34, y2: 5, style })), ` ${text}`)));
}

export function mount(main, r) {
  let list = null; // last GET /api/graphs
  let sig = '';
  let selected = r.parts[1] || null;
  let nodeId = r.query.get('node');
  let detail = null;
  let drawn = null;
  let timer = null;
  let busy = false;
  let alive = true;

  const listEl = h('ul', { class: 'list', role: 'listbox', 'aria-labelledby': 'graphs-title', 'data-testid': 'graph-list' });
  const statusEl = h('p', { class: 'muted small', 'data-testid': 'poll-status', 'aria-live': 'off' }, 'Loading…');
  const reloadMsg = h('div', { 'data-testid': 'reload-result' });
  const reloadBtn = h('button', { type: 'button', class: 'btn', 'data-testid': 'reload-graphs', onclick: reloadNow }, 'Reload now');
  const content = h('section', { 'aria-label': 'Graph', 'data-testid': 'graph-content' }, h('p', { class: 'muted' }, 'Loading graphs…'));
  const panelHost = h('div', { class: 'hidden', 'data-testid': 'node-panel-host' });
  const root = h('div', { class: 'split3 no-panel', 'data-testid': 'graphs-screen' },
    h('div', null,
      h('h1', { class: 'list-title', id: 'graphs-title' }, 'Graphs'), listEl,
      h('div', { class: 'row', style: 'margin-top:10px' }, reloadBtn), reloadMsg, statusEl),
    content, panelHost);
  main.append(root);
  rovingList(listEl, '[role="option"]', { onActivate: (el) => { location.hash = hrefFor(['graphs', el.dataset.graph]); } });

  function signature(d) {
    return JSON.stringify([d.graphs.map((g) => [g.id, g.version, g.stale]), d.failed, d.diagnostics]);
  }

  function drawList() {
    const ids = [...list.graphs.map((g) => g.id)];
    for (const f of list.failed || []) if (!ids.includes(f)) ids.push(f);
    ids.sort();
    const focusedId = document.activeElement?.closest?.('[data-testid="graph-item"]')?.dataset.graph;
    listEl.replaceChildren(...ids.map((id) => {
      const g = list.graphs.find((x) => x.id === id);
      const failed = (list.failed || []).includes(id);
      const sel = id === selected;
      return h('li', {
        role: 'option', 'aria-selected': String(sel), tabindex: sel ? '0' : '-1', 'data-testid': 'graph-item', 'data-graph': id,
        onclick: () => { location.hash = hrefFor(['graphs', id]); },
      }, h('span', null, id),
      failed ? h('span', { class: g ? 'badge badge-stale' : 'badge badge-failed' }, g ? 'stale' : 'invalid') : h('span', { class: 'muted small' }, `${g.nodes} node${g.nodes === 1 ? '' : 's'}`));
    }));
    if (!listEl.querySelector('[tabindex="0"]') && listEl.firstChild) listEl.firstChild.setAttribute('tabindex', '0');
    if (focusedId) listEl.querySelector(`[data-graph="${CSS.escape(focusedId)}"]`)?.focus();
  }

  function openNode(node, { focusPanel = false } = {}) {
    nodeId = node ? node.id : null;
    if (selected) replaceHash(hrefFor(['graphs', selected], nodeId ? { node: nodeId } : null));
    drawn?.select(nodeId);
    panelHost.replaceChildren();
    panelHost.classList.toggle('hidden', !node);
    root.classList.toggle('no-panel', !node);
    if (!node) return;
    const full = detail.nodes.find((n) => n.id === node.id) || node;
    const p = nodePanel(detail, full, {
      onClose: () => { const id = nodeId; openNode(null); drawn?.focus(id); },
    });
    panelHost.append(p);
    if (focusPanel) p.querySelector('h2').focus();
  }

  async function drawGraph({ fresh = false } = {}) {
    const diags = (list.diagnostics || []).filter((d) => diagBelongs(d, selected));
    const summary = list.graphs.find((g) => g.id === selected);
    const failed = (list.failed || []).includes(selected);
    const parts = [];
    if (summary) {
      if (fresh) forgetGraph(selected);
      try {
        detail = await graphDetail(selected, { fresh });
      } catch (e) {
        content.replaceChildren(errorBox(e, `Could not load graph ${selected}: `));
        return;
      }
      if (!alive) return;
      parts.push(h('div', { class: 'row' },
        h('h1', { 'data-testid': 'graph-title' }, detail.id),
        failed ? h('span', { class: 'badge badge-stale' }, 'stale — the file has errors; the previous version is served') : null,
        h('span', { class: 'spacer' }),
        h('a', { class: 'btn', href: hrefFor(['playground', detail.id]), 'data-testid': 'open-playground' }, 'Open in playground'),
        h('a', { class: 'btn', href: hrefFor(['runs'], { graph: detail.id }) }, 'Runs')));
      parts.push(h('p', { class: 'muted', style: 'margin:2px 0 10px' }, detail.description || ''),
        h('dl', { class: 'kv small', style: 'margin-bottom:12px' },
          h('dt', null, 'Version'), h('dd', { class: 'mono', 'data-testid': 'graph-version' }, detail.version),
          h('dt', null, 'State'), h('dd', null, typeof detail.state === 'string' ? detail.state : detail.state?.name || '—'),
          h('dt', null, 'Entry'), h('dd', null, (detail.entry || []).join(', ')),
          h('dt', null, 'Recursion limit'), h('dd', null, String(detail.recursionLimit ?? '—'))));
    } else {
      detail = null;
      parts.push(h('h1', { 'data-testid': 'graph-title' }, selected),
        h('p', { class: 'alert alert-error' }, 'This graph failed validation and has no valid version to serve.'));
    }
    if (diags.length) parts.push(h('section', { class: 'card', 'aria-label': 'Diagnostics' }, h('h2', { class: 'card-title' }, `Diagnostics (${diags.length})`), renderDiagnostics(diags)));
    if (detail) {
      drawn = renderGraph(detail, { onSelect: (n) => openNode(n, { focusPanel: true }) });
      parts.push(h('div', { class: 'graph-wrap', 'data-testid': 'graph-wrap' }, drawn.svg), legend());
      if (detail.source) {
        parts.push(h('details', { class: 'card', style: 'margin-top:12px' }, h('summary', null, 'Graph file source'), h('pre', { class: 'json', tabindex: '0', style: 'margin-top:8px' }, detail.source)));
      }
    } else drawn = null;
    content.replaceChildren(...parts);
    if (detail && nodeId) {
      const n = detail.nodes.find((x) => x.id === nodeId);
      openNode(n || null);
    } else openNode(null);
  }

  async function poll(first = false) {
    if (busy || !alive) return;
    busy = true;
    try {
      const d = await getJSON('/api/graphs');
      if (!alive) return;
      const nsig = signature(d);
      const prev = list;
      list = d;
      statusEl.textContent = `Watching for changes · checked ${fmtTime(Date.now()).slice(11)}`;
      if (nsig === sig && !first) return;
      sig = nsig;
      if (!selected) {
        selected = d.graphs.find((g) => g.id === 'chat')?.id || d.graphs[0]?.id || (d.failed || [])[0] || null;
        if (selected) replaceHash(hrefFor(['graphs', selected]));
      }
      drawList();
      if (!selected) { content.replaceChildren(h('p', { class: 'empty' }, 'No graphs are served.')); return; }
      const before = prev && prev.graphs.find((g) => g.id === selected);
      const after = d.graphs.find((g) => g.id === selected);
      const diagChanged = !prev || JSON.stringify(prev.diagnostics.filter((x) => diagBelongs(x, selected))) !== JSON.stringify(d.diagnostics.filter((x) => diagBelongs(x, selected)));
      const versionChanged = !prev || before?.version !== after?.version || before?.stale !== after?.stale;
      if (first || versionChanged || diagChanged) {
        await drawGraph({ fresh: !first && versionChanged });
        if (!first) announce(`Graph ${selected} reloaded${after ? ` (version ${after.version.slice(0, 8)})` : ''}`);
      }
    } catch (e) {
      statusEl.textContent = `Could not check for changes: ${e.message}`;
      if (first) content.replaceChildren(errorBox(e, 'Could not list graphs: '));
    } finally {
      busy = false;
    }
  }

  async function reloadNow() {
    reloadBtn.disabled = true;
    reloadMsg.replaceChildren(h('p', { class: 'muted small' }, 'Reloading…'));
    try {
      const res = await request('/api/graphs/reload', { method: 'POST' });
      if (res.status === 200 || res.status === 422) {
        const rep = await res.json();
        const upd = rep.updated || [];
        const rej = rep.rejected || [];
        reloadMsg.replaceChildren(h('div', { class: `alert ${rej.length ? 'alert-warn' : 'alert-info'}`, role: 'status' },
          rej.length ? `Rejected: ${rej.join(', ')}` : 'Every graph file is valid.', upd.length ? ` Updated: ${upd.join(', ')}.` : ' Nothing changed.'));
      } else throw await errorOf(res);
      await poll();
    } catch (e) {
      reloadMsg.replaceChildren(errorBox(e, 'Reload failed: '));
    } finally {
      reloadBtn.disabled = false;
    }
  }

  poll(true);
  timer = setInterval(() => poll(), POLL_MS);

  return {
    cleanup() { alive = false; clearInterval(timer); },
    update(nr) {
      if (nr.parts[0] !== 'graphs' && nr.parts.length) return false;
      const id = nr.parts[1] || selected;
      const nid = nr.query.get('node');
      if (id !== selected) {
        selected = id;
        nodeId = nid;
        if (list) { drawList(); drawGraph(); }
      } else if (nid !== nodeId && detail) {
        openNode(detail.nodes.find((x) => x.id === nid) || null);
      }
      return true;
    },
  };
}

