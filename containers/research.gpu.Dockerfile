# Research image for GPUs (the scale path): CUDA runtime, torch with CUDA, vLLM and DeepSpeed,
# plus the research tools of research.Dockerfile. Run with sandbox=docker sandbox.gpus=all
# (needs the NVIDIA Container Toolkit on the host). Needs a registry for the CUDA base image.
#
# Build:  scripts/build_images.sh stage && docker build -f containers/research.gpu.Dockerfile -t vtb/research:gpu .
ARG BASE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04
FROM ${BASE}
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        python3 python3-venv python3-dev build-essential bash git patch curl ca-certificates nodejs npm \
    && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md /opt/vtb/
# Only the sandbox layout of vtb (vtb.sandbox.runtime.SANDBOX_CODE, staged by
# scripts/build_images.sh stage): no generators, graders, loaders or environments in the image.
COPY .sandbox-code/vtb /opt/vtb/vtb
RUN python3 -m venv /opt/vtb/.venv \
    && /opt/vtb/.venv/bin/pip install -q --no-cache-dir vllm deepspeed pynvml \
    && /opt/vtb/.venv/bin/pip install -q --no-cache-dir /opt/vtb
ENV PATH=/opt/vtb/.venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
WORKDIR /ws
