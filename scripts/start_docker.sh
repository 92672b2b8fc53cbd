#!/usr/bin/env bash
# Makes sandbox=docker usable on this machine: installs Debian's docker.io if no engine is
# installed, starts dockerd if none answers, and builds the runtime image (offline, seconds).
# Usage: scripts/start_docker.sh          (idempotent; .ci/run calls it before the tests)
# dockerd runs as root; on a host without iptables or a bridge (containers, CI machines)
# `--iptables=false --bridge=none` is enough: sandboxes use network_mode=none anyway.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"

if ! command -v dockerd >/dev/null 2>&1; then
  echo "[docker] installing docker.io (apt)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq docker.io >/dev/null
fi
DOCKER=docker
[ -x /usr/bin/docker ] && DOCKER=/usr/bin/docker   # Debian's client matches Debian's engine
if ! $SUDO $DOCKER info >/dev/null 2>&1; then
  echo "[docker] starting dockerd (log: /tmp/vtb-dockerd.log)"
  $SUDO sh -c 'nohup dockerd --iptables=false --bridge=none >/tmp/vtb-dockerd.log 2>&1 &'
  for _ in $(seq 60); do $SUDO $DOCKER info >/dev/null 2>&1 && break; sleep 1; done
  $SUDO $DOCKER info >/dev/null 2>&1 || { echo "[docker] dockerd did not come up:"; tail -20 /tmp/vtb-dockerd.log; exit 1; }
fi
DOCKER=$DOCKER scripts/build_images.sh runtime
