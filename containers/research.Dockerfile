# Research image: what a research sandbox needs when the machine has no checkout of this project
# (the scale path: many machines, a cluster). Trainer and harness runtime (torch, transformers,
# peft, the project's own engines in /opt/vtb) and the tools a CLI research agent works with
# (bash, git, patch, curl, Node.js for Claude Code / Codex / Gemini CLI). On one machine
# sandbox=docker needs none of this: it runs vtb/runtime with the host's runtime mounted read-only.
#
# Build (a registry reachable):   scripts/build_images.sh stage && docker build -f containers/research.Dockerfile -t vtb/research .
# Build offline (no registry):    scripts/build_images.sh full   (FROM the debootstrap base)
ARG BASE=debian:bookworm-slim
FROM ${BASE}
ARG TORCH_SPEC="torch==2.13.0"
# Wheels put in .wheels/ by scripts/build_images.sh (e.g. a CPU torch build) are preferred; add
# --build-arg PIP_ARGS="--extra-index-url https://download.pytorch.org/whl/cpu" where reachable.
ARG PIP_ARGS=""
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        python3 python3-venv bash git patch curl ca-certificates nodejs npm \
    && rm -rf /var/lib/apt/lists/*
COPY .wheels /tmp/wheels
COPY pyproject.toml README.md /opt/vtb/
# Only the sandbox layout of vtb (vtb.sandbox.runtime.SANDBOX_CODE, staged by
# scripts/build_images.sh): no generators, graders, loaders or environments in the image.
COPY .sandbox-code/vtb /opt/vtb/vtb
# a CA bundle the build script found (a TLS-intercepting proxy in front of PyPI) is trusted
RUN if [ -f /tmp/wheels/ca-bundle.crt ]; then export PIP_CERT=/tmp/wheels/ca-bundle.crt; fi \
    && python3 -m venv /opt/vtb/.venv \
    && /opt/vtb/.venv/bin/pip install -q --no-cache-dir --find-links /tmp/wheels ${PIP_ARGS} "${TORCH_SPEC}" \
    && /opt/vtb/.venv/bin/pip install -q --no-cache-dir --find-links /tmp/wheels ${PIP_ARGS} /opt/vtb \
    && rm -rf /tmp/wheels
ENV PATH=/opt/vtb/.venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
WORKDIR /ws
