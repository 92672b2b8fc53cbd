#!/usr/bin/env bash
# GPU first light (issue 41), one command on a bare GPU machine, offline, under 8 minutes:
#
#   scripts/gpu_check.sh OUT [--cpu] [--bundle DIR] [--only STEPS]
#
# 1. an environment over the image's own Python (its CUDA torch, transformers, peft, accelerate:
#    a virtualenv with --system-site-packages) with the bundle (scripts/gpu_bundle.sh, default
#    .gpu-bundle) installed from its wheels, no index; bubblewrap from the bundle when the
#    machine has none;
# 2. scripts/gpu_check.py: each GPU path once, timed, pass/fail in OUT/report.json, logs beside it.
# Exit code: the check's (0: every step that ran passed). --cpu: the same on a machine without a
# GPU (CI, and gpu_bundle.sh --self-test). PYTHON picks the interpreter (default python3).
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/gpu_check.sh OUT [--cpu] [--bundle DIR] [--only STEPS]"; exit 2; }
OUT=$(realpath -m "$1"); shift
BUNDLE=.gpu-bundle
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) BUNDLE=$2; shift ;;
    *) ARGS+=("$1") ;;
  esac
  shift
done
BUNDLE=$(realpath -m "$BUNDLE")
PY=${PYTHON:-python3}
mkdir -p "$OUT"
start=$(date +%s)
say() { echo "[gpu-check $(( $(date +%s) - start ))s] $*"; }

say "environment over $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
if "$PY" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
  ENV=$("$PY" -c 'import sys; print(sys.prefix)')  # already a virtualenv (the self-test's): into it
  : >"$OUT/install.log"
else
  ENV="$OUT/env"
  if ! "$PY" -m venv --system-site-packages "$ENV" >"$OUT/install.log" 2>&1; then
    # no ensurepip (Debian's python3 without python3-venv): an environment without pip, filled by
    # the interpreter's own pip
    rm -rf "$ENV"
    "$PY" -m venv --system-site-packages --without-pip "$ENV" >>"$OUT/install.log" 2>&1 || {
      say "python -m venv failed (see install.log)"; exit 1; }
  fi
fi
PIP=("$ENV/bin/python" -m pip)
"$ENV/bin/python" -m pip --version >/dev/null 2>&1 || PIP=("$PY" -m pip --python "$ENV/bin/python")
if ! "${PIP[@]}" install --no-index --find-links "$BUNDLE/wheels" -r "$BUNDLE/requirements.txt" >>"$OUT/install.log" 2>&1; then
  say "installing the bundle failed: tail of install.log:"; tail -20 "$OUT/install.log"; exit 1
fi
# this project from the working tree, as an editable install would have it (no build step, no setuptools)
site=$("$ENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$PWD" >"$site/vibetraining-bench-checkout.pth"
if ! command -v bwrap >/dev/null; then
  mkdir -p "$ENV/bin"
  if ldd "$BUNDLE/bwrap/bwrap" | grep -q "not found"; then
    # the image lacks a library bwrap links: the bundle's copies, for bwrap alone
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$BUNDLE/bwrap/lib" "$BUNDLE/bwrap/bwrap" >"$ENV/bin/bwrap"
    chmod +x "$ENV/bin/bwrap"
  else
    ln -sf "$BUNDLE/bwrap/bwrap" "$ENV/bin/bwrap"
  fi
  say "bubblewrap from the bundle ($("$ENV/bin/bwrap" --version 2>&1))"
fi
export PATH="$ENV/bin:$PATH" PYTHONUNBUFFERED=1
say "bundle installed; running the steps"
"$ENV/bin/python" scripts/gpu_check.py --out "$OUT" "${ARGS[@]}"
rc=$?
say "done (exit $rc); report: $OUT/report.json"
exit $rc
