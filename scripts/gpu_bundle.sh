#!/usr/bin/env bash
# The GPU check's bundle (issue 41): what a bare GPU machine (CUDA PyTorch, transformers, peft,
# accelerate, Python 3.12, no network, 64 MiB per command) lacks for scripts/gpu_check.sh.
#
#   scripts/gpu_bundle.sh [OUT]               build it (default .gpu-bundle, git-ignored; ~40 MiB)
#   scripts/gpu_bundle.sh --self-test [OUT]   build it, then install it offline into a fresh virtualenv
#                                             standing for that image and run the check there (--cpu)
#
# OUT/wheels: Hydra and OmegaConf, NVML's bindings, the DeepSpeed wheel, matplotlib, their dependencies,
# pure-Python or binary for CPython 3.11 and 3.12 on x86-64 (pip picks its own; `pip install
# --no-index`); OUT/requirements.txt names them. OUT/bwrap: bubblewrap from Debian's package, with
# the libraries it links, for a machine without it. Torch, transformers, peft and accelerate are the
# image's own and never carried. This project is not carried as a wheel: the device machine gets
# the working tree, and it runs from it as from a checkout, because a copy of vtb in site-packages
# would lie inside the runtime every sandbox mounts, generators and all (vtb/sandbox/runtime.py
# refuses to start a sandbox then). Needs PyPI and Debian's archive here.
set -euo pipefail
cd "$(dirname "$0")/.."
SELF_TEST=0
if [ "${1:-}" = "--self-test" ]; then SELF_TEST=1; shift; fi
OUT=$(realpath -m "${1:-.gpu-bundle}")
PY=${PYTHON:-.venv/bin/python}
MAX_MB=60
# pinned as this project's CPU install resolves them (pydantic-core goes with its pydantic)
PURE=(hydra-core==1.3.8 omegaconf==2.3.1 nvidia-ml-py==13.580.82 hjson==3.1.0 py-cpuinfo==9.0.0
      pydantic==2.14.4 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0
      einops==0.8.2 cycler==0.12.1 pyparsing==3.3.3 python-dateutil==2.9.0.post0 six==1.17.0)
# matplotlib and its own: the run record's plots (vtb/plots.py)
BINARY=(pydantic-core==2.50.5 msgpack==1.2.4 ninja==1.13.2 matplotlib==3.11.2 contourpy==1.3.3
        kiwisolver==1.5.1 pillow==13.0.0)
ANY=(fonttools==4.68.0)   # its pure-Python wheel: a fifth of the size of its compiled ones
SDIST=(antlr4-python3-runtime==4.9.3)   # on PyPI as a source archive only: built into a pure wheel

rm -rf "$OUT" && mkdir -p "$OUT/wheels" "$OUT/bwrap"
echo "[bundle] DeepSpeed 0.19.8 (no prebuilt ops) and ANTLR's runtime as wheels"
DS_BUILD_OPS=0 "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$OUT/wheels" deepspeed==0.19.8 "${SDIST[@]}"
echo "[bundle] pure-Python dependencies"
"$PY" -m pip download -q --no-deps --only-binary=:all: -d "$OUT/wheels" "${PURE[@]}"
"$PY" -m pip download -q --no-deps --only-binary=:all: -d "$OUT/wheels" --platform any --python-version 3.12 \
  --implementation py --abi none "${ANY[@]}"
for pyv in 3.11 3.12; do
  echo "[bundle] binary dependencies for CPython $pyv"
  "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$OUT/wheels" --implementation cp \
    --python-version "$pyv" --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 "${BINARY[@]}"
done
{
  printf '%s\n' "${PURE[@]}" "${BINARY[@]}" "${ANY[@]}" "${SDIST[@]}" deepspeed==0.19.8
} >"$OUT/requirements.txt"

echo "[bundle] bubblewrap (Debian's package) and the libraries it links"
work=$(mktemp -d)
(cd "$work" && apt-get download bubblewrap >/dev/null 2>&1) || { echo "[bundle] apt-get download bubblewrap failed (Debian's archive unreachable?)"; exit 1; }
dpkg-deb -x "$work"/bubblewrap_*.deb "$work/root"
cp "$work/root/usr/bin/bwrap" "$OUT/bwrap/bwrap"
mkdir -p "$OUT/bwrap/lib"
ldd "$OUT/bwrap/bwrap" | awk '/=> \// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in libc.so.*|ld-linux*) ;; *) cp -L "$lib" "$OUT/bwrap/lib/" ;; esac
done
rm -rf "$work"

size=$(du -sm "$OUT" | cut -f1)
echo "[bundle] $OUT: ${size} MiB, $(ls "$OUT/wheels" | wc -l) wheels"
if [ "$size" -gt "$MAX_MB" ]; then echo "[bundle] over ${MAX_MB} MiB: it would not reach the GPU machine"; exit 1; fi

if [ "$SELF_TEST" = 1 ]; then
  # A fresh virtualenv standing for the GPU image: torch (this machine's CPU wheel), transformers
  # 5.17 as the image has it, peft and accelerate; then the check installs the bundle offline.
  venv=${SELF_TEST_VENV:-$(mktemp -d)/image}   # SELF_TEST_VENV: reuse one made before
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    echo "[self-test] an image-like environment in $venv (torch, transformers 5.17, peft, accelerate)"
    "$venv/bin/pip" install -q torch==2.13.0 transformers==5.17.0 peft accelerate
  fi
  PYTHON="$venv/bin/python" scripts/gpu_check.sh "$(dirname "$venv")/report" --cpu --bundle "$OUT"
fi
