#!/usr/bin/env bash
# GPU smoke on one GPU (< 8 min): the `gpu` pytest suite (tests/gpu/), then scripts/gpu_smoke.py,
# which trains the tiny model a few steps with DeepSpeed and grades it with vLLM on the math
# miniature, printing tokens/s of vLLM vs the transformers engine and the GPU-seconds charged.
# It fails (non-zero) on any failing GPU test, a fallback from vLLM to transformers, an unanswered
# episode, more than one harness restart, or a run past 8 minutes in all.
# Needs: an NVIDIA GPU and driver, bubblewrap, gcc and python3-dev, and `scripts/install.sh --gpu`
# (offline after that). Usage: scripts/gpu_smoke.sh [GPU_INDEX] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
GPU=${1:-0}
OUT=${2:-/tmp/vtb-gpu-smoke}
PY=${PYTHON:-.venv/bin/python}
BUDGET_S=${BUDGET_S:-480}
mkdir -p "$OUT"
export VTB_REQUIRE_GPU=1 VTB_TEST_GPU="$GPU" PYTHONUNBUFFERED=1
start=$(date +%s)
"$PY" -m pytest -m gpu tests/gpu -q -x -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log"
left=$(( BUDGET_S - ($(date +%s) - start) ))
"$PY" scripts/gpu_smoke.py --gpu "$GPU" --out "$OUT" --budget-s "$left" 2>&1 | tee "$OUT/smoke.log"
echo "[gpu-smoke] passed; total $(( $(date +%s) - start )) s (budget ${BUDGET_S} s)"
