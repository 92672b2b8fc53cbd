#!/usr/bin/env bash
# The local Prefect server and its UI, for flow runs, the nightly deployment and its workers.
# Offline; analytics off. The database is $PREFECT_HOME/prefect.db, PREFECT_HOME defaulting to
# <repo>/.cache/prefect (always made absolute). Runs in the foreground until Ctrl-C / SIGTERM.
#
# Usage: scripts/prefect_server.sh [--host 127.0.0.1] [--port 4200]
#        (or PREFECT_SERVER_API_HOST / PREFECT_SERVER_API_PORT)
# Then, in other shells:
#        export PREFECT_API_URL=http://127.0.0.1:4200/api   # printed once the server is healthy
#        scripts/deploy.sh --worker                         # prefect.yaml's nightly sweep + a worker
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
HOST=${PREFECT_SERVER_API_HOST:-127.0.0.1}
PORT=${PREFECT_SERVER_API_PORT:-4200}
while [ $# -gt 0 ]; do
  case "$1" in
    --host) HOST=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

PREFECT_HOME=${PREFECT_HOME:-$REPO/.cache/prefect}
mkdir -p "$PREFECT_HOME"
PREFECT_HOME=$(cd "$PREFECT_HOME" && pwd)
export PREFECT_HOME PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1
unset PREFECT_API_URL   # the server is the API; a client setting here would only confuse it

URL_HOST=$HOST
case "$HOST" in 0.0.0.0|::) URL_HOST=127.0.0.1 ;; esac
API="http://$URL_HOST:$PORT/api"
# The UI asks /ui-settings where the API is; Prefect builds that from these settings, not from
# `--port`, so without them a UI on any port but 4200 calls 4200 ("Can't connect to Server API").
# A PREFECT_UI_API_URL already set wins (a browser on another machine needs this host's name).
export PREFECT_SERVER_API_HOST=$HOST PREFECT_SERVER_API_PORT=$PORT
export PREFECT_UI_API_URL=${PREFECT_UI_API_URL:-$API}

echo "[prefect] server on $HOST:$PORT, PREFECT_HOME=$PREFECT_HOME, the UI calls $PREFECT_UI_API_URL"
.venv/bin/prefect server start --host "$HOST" --port "$PORT" &
PID=$!
trap 'kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true' INT TERM EXIT

for _ in $(seq 240); do   # ~7 s on an idle machine, ~20 s on a new database; up to 2 min loaded
  kill -0 "$PID" 2>/dev/null || { echo "[prefect] the server exited (port $PORT in use?)" >&2; exit 1; }
  if .venv/bin/python -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" \
      "$API/health" >/dev/null 2>&1; then
    echo "[prefect] ready. UI: http://$URL_HOST:$PORT"
    echo "export PREFECT_API_URL=$API"
    wait "$PID"
    exit $?
  fi
  sleep 0.5
done
echo "[prefect] the server did not answer $API/health within 2 min" >&2
exit 1
