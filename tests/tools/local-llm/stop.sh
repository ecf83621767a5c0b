#!/usr/bin/env bash
# stop.sh [PORT] — stops the llama-server that start.sh started on PORT.
set -euo pipefail
port="${1:-8097}"
home="${STATEGRAPH_LLM_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/stategraph-tests/llm}"
pidfile="$home/run/llama-server-$port.pid"
[ -f "$pidfile" ] || exit 0
pid=$(cat "$pidfile")
if kill -0 "$pid" 2>/dev/null && grep -q llama-server "/proc/$pid/cmdline" 2>/dev/null; then
  kill "$pid"
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
fi
rm -f "$pidfile"
