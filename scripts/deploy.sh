#!/usr/bin/env bash
# Deploys prefect.yaml (the nightly sweep and the bench) to the Prefect server at PREFECT_API_URL:
# creates the `vtb-local` process work pool if missing, then `prefect --no-prompt deploy`. Offline:
# the flow runs start in this checkout (VTB_REPO, exported here, is the pull step's directory).
#
# Usage: scripts/deploy.sh [--name nightly-sweep] [--docker] [--worker]
#   --name N   deploy only deployment N (default: nightly-sweep and bench, the vtb-local ones)
#   --docker   also create the `vtb-docker` pool (needs prefect-docker) and deploy bench-docker;
#              its data folder is VTB_DOCKER_DATA (default /srv/vtb), its result storage
#              VTB_RESULTS (default $VTB_DOCKER_DATA/results); refused unless vtb/orchestrator
#              was built from this checkout as it is (scripts/build_images.sh orchestrator)
#   --worker   then start a worker for the vtb-local pool here, in the foreground (Ctrl-C stops it)
# PREFECT_API_URL defaults to http://127.0.0.1:4200/api (scripts/prefect_server.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
POOL=vtb-local   # prefect.yaml's work_pool.name
NAME=""
WORKER=0
DOCKER=0
while [ $# -gt 0 ]; do
  case "$1" in
    --name) NAME=$2; shift 2 ;;
    --worker) WORKER=1; shift ;;
    --docker) DOCKER=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [ "$DOCKER" = 1 ] && ! scripts/build_images.sh orchestrator-check; then
  echo "[deploy] nothing deployed: a bench-docker flow run would start in that image" >&2
  exit 1
fi

export VTB_REPO VTB_DOCKER_DATA VTB_RESULTS VTB_SALT_DIR
VTB_REPO=$(pwd)
# The folder of this installation's test salt (made here if new): sweeps pass its file to every
# bench, so the bench-docker container mounts it read-only at the same path (never a sandbox).
VTB_SALT_DIR=$(.venv/bin/python -c "from vtb.salt import installation_salt; print(installation_salt().parent)")
VTB_DOCKER_DATA=${VTB_DOCKER_DATA:-/srv/vtb}
VTB_RESULTS=${VTB_RESULTS:-$VTB_DOCKER_DATA/results}
export PREFECT_API_URL=${PREFECT_API_URL:-http://127.0.0.1:4200/api}
export PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1
PREFECT=.venv/bin/prefect

if ! .venv/bin/python -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)" \
    "$PREFECT_API_URL/health" >/dev/null 2>&1; then
  echo "[deploy] no Prefect server answers at $PREFECT_API_URL: start one with scripts/prefect_server.sh" >&2
  exit 1
fi
if $PREFECT work-pool inspect "$POOL" >/dev/null 2>&1; then
  echo "[deploy] work pool $POOL exists"
else
  $PREFECT work-pool create "$POOL" --type process
fi
NAMES=(--name nightly-sweep --name bench)
[ -n "$NAME" ] && NAMES=(--name "$NAME")
if [ "$DOCKER" = 1 ]; then
  if $PREFECT work-pool inspect vtb-docker >/dev/null 2>&1; then
    echo "[deploy] work pool vtb-docker exists"
  else
    $PREFECT work-pool create vtb-docker --type docker
  fi
  [ "$NAME" = bench-docker ] || NAMES+=(--name bench-docker)
  mkdir -p "$VTB_DOCKER_DATA"
fi
$PREFECT --no-prompt deploy "${NAMES[@]}"

echo "[deploy] deployed from prefect.yaml to $PREFECT_API_URL (flow runs start in $VTB_REPO)"
echo "[deploy] a worker runs them:  PREFECT_API_URL=$PREFECT_API_URL $PREFECT worker start --pool $POOL"
echo "[deploy] run one now:         PREFECT_API_URL=$PREFECT_API_URL $PREFECT deployment run vibetraining-nightly-sweep/nightly-sweep"
if [ "$WORKER" = 1 ]; then
  echo "[deploy] starting the worker (Ctrl-C stops it)"
  exec $PREFECT worker start --pool "$POOL"
fi
