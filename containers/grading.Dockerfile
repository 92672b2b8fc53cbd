# Grading image: the harness runtime and nothing of the research tools (no git, no compilers,
# no Node.js, no agent CLIs): a submitted harness gets python, torch, transformers and the
# project's inference engine, the submission and the test inputs, and no network.
#
# Build (a registry reachable):   docker build -f containers/grading.Dockerfile -t vtb/grading .
# Build offline (no registry):    scripts/build_images.sh full   (FROM the debootstrap base)
ARG BASE=debian:bookworm-slim
FROM ${BASE}
ARG TORCH_SPEC="torch==2.13.0"
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md /opt/vtb/
COPY vtb /opt/vtb/vtb
COPY flows /opt/vtb/flows
COPY steps /opt/vtb/steps
RUN python3 -m venv /opt/vtb/.venv \
    && /opt/vtb/.venv/bin/pip install -q --no-cache-dir --extra-index-url ${TORCH_INDEX} "${TORCH_SPEC}" \
    && /opt/vtb/.venv/bin/pip install -q --no-cache-dir /opt/vtb
ENV PATH=/opt/vtb/.venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
WORKDIR /submission
