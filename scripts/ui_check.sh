#!/usr/bin/env bash
# Watch one bench in the Prefect UI as a user would, in headless Chromium, and check what it shows.
#
# Starts scripts/prefect_server.sh on a free port (a throwaway PREFECT_HOME), checks that the UI's
# /ui-settings names that port's API, runs one shrunken bench (math, greedy, 2 iterations, a
# 1-layer model: about 2 minutes) against it, then scripts/ui_check.py renders the flow run, its
# Task Runs, Logs and Artifacts tabs and the artifacts' pages with Chromium (--dump-dom and
# --screenshot) and checks the tags, the task run names, the iteration lines in the Logs tab, the
# budget progress artifact's final figure and the report's tables. Exit 0 when every check passed.
#
# Usage: scripts/ui_check.sh [--out DIR]     (pages, screenshots, logs; default .cache/ui-check)
# Needs: Debian's chromium (apt-get install -y chromium; or CHROMIUM=/path/to/chrome), bubblewrap.
#        VTB_PYTHON overrides the Python the bench runs with (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
OUT=$REPO/.cache/ui-check
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
PY=${VTB_PYTHON:-$REPO/.venv/bin/python}
CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
[ -n "$CHROMIUM" ] || { echo "[ui-check] no chromium: apt-get install -y chromium (or set CHROMIUM)" >&2; exit 2; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/vtb-ui-check-XXXXXX")
PORT=$("$PY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
UI="http://127.0.0.1:$PORT"
echo "[ui-check] $(date -u '+%Y-%m-%d %H:%M:%S UTC') server on port $PORT, work dir $WORK, output $OUT"

env -u PREFECT_API_URL -u PREFECT_UI_API_URL PREFECT_HOME="$WORK/prefect-home" \
  setsid scripts/prefect_server.sh --port "$PORT" >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill -- -"$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 480); do
  grep -q "export PREFECT_API_URL=" "$OUT/server.log" && break
  kill -0 "$SERVER" 2>/dev/null || { echo "[ui-check] the server exited:"; tail -20 "$OUT/server.log"; exit 1; }
  sleep 0.5
done
grep -q "export PREFECT_API_URL=" "$OUT/server.log" || { echo "[ui-check] no server after 4 min" >&2; exit 1; }

SETTINGS=$("$PY" -c "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())" "$UI/ui-settings")
if [[ "$SETTINGS" == *"\"api_url\":\"$UI/api\""* ]]; then
  echo "[ui-check] PASS  /ui-settings names this port's API: $UI/api"
else
  echo "[ui-check] FAIL  /ui-settings: $SETTINGS"; exit 1
fi

echo "[ui-check] running a shrunken bench (log: $OUT/bench.log)"
export PREFECT_API_URL=$UI/api
"$PY" -m flows.bench agent=greedy agent.max_iterations=2 \
  task.n_pool=200 task.n_val=10 task.n_test=10 task.max_steps=1 task.initial_data_size=40 \
  model.n_layer=1 model.n_embd=32 model.pretrain_steps=5 model.pretrain_texts=200 trainer.epochs=1 \
  budget.limit=2e10 +budget.flops_per_cpu_second=1e9 reference=false null_model_check=false \
  base_model_check=true runs_dir="$WORK/runs" cache_dir="$WORK/cache" \
  hydra/job_logging=none hydra/hydra_logging=none hydra.run.dir="$WORK/hydra" >"$OUT/bench.log" 2>&1 \
  || { echo "[ui-check] the bench failed:"; tail -30 "$OUT/bench.log"; exit 1; }
RESULT=$(ls "$WORK"/runs/*/result.json)
cp "$RESULT" "$OUT/result.json"
"$PY" scripts/ui_check.py --ui "$UI" --result "$RESULT" --chromium "$CHROMIUM" --out "$OUT"
