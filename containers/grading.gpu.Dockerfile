# Grading image for GPUs: CUDA runtime, torch with CUDA and vLLM for the harness; none of the
# research tools. Run with sandbox=docker sandbox.gpus=all (NVIDIA Container Toolkit on the host).
#
# Build:  scripts/build_images.sh stage && docker build -f containers/grading.gpu.Dockerfile -t vtb/grading:gpu .
ARG BASE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04
FROM ${BASE}
# gcc, libc6-dev and python3-dev: Triton (vLLM's kernels) compiles a C launcher including Python.h
# at its first kernel launch (vtb/engine/toolchain.py checks them before vLLM starts); libc-bin
# gives it /sbin/ldconfig, which it runs to find libcuda.so.1.
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        python3 python3-venv python3-dev gcc libc6-dev libc-bin ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md /opt/vtb/
# Only the sandbox layout of vtb (vtb.sandbox.runtime.SANDBOX_CODE, staged by
# scripts/build_images.sh stage): no generators, graders, loaders or environments in the image.
COPY .sandbox-code/vtb /opt/vtb/vtb
RUN python3 -m venv /opt/vtb/.venv \
    && /opt/vtb/.venv/bin/pip install -q --no-cache-dir vllm \
    && /opt/vtb/.venv/bin/pip install -q --no-cache-dir /opt/vtb
ENV PATH=/opt/vtb/.venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
WORKDIR /submission
