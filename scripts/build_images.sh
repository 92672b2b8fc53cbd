#!/usr/bin/env bash
# Builds the images of the docker sandbox backend (sandbox=docker) without any registry.
#
#   scripts/build_images.sh          vtb/runtime: an empty root with this host's top-level links
#                                    (/bin -> usr/bin, ...). Programs come from the same read-only
#                                    host mounts a bwrap sandbox gets. Seconds, offline. The default.
#   scripts/build_images.sh base     vtb/debian:bookworm: a Debian root made by debootstrap from
#                                    Debian's packages, then `docker import` (no registry needed).
#   scripts/build_images.sh full     base, then vtb/research and vtb/grading from containers/
#                                    (the Python stack from PyPI), for machines without this checkout.
#   scripts/build_images.sh hostroot vtb/hostroot: a self-contained root (bash, coreutils, git, patch,
#                                    Python 3 + pytest) copied from this host (scripts/hostroot.py);
#                                    the offline stand-in for public base images. Seconds.
#   scripts/build_images.sh orchestrator
#                                    vtb/orchestrator: this checkout with its .venv and the Python
#                                    it points to, at the paths they have here, for the `docker`
#                                    work pool (prefect.yaml, bench-docker). System dirs (/usr) come
#                                    from the Docker host read-only, as for vtb/runtime. Offline.
#   scripts/build_images.sh orchestrator-check
#                                    exit 0 if vtb/orchestrator (or $ORCHESTRATOR_IMAGE) was built
#                                    from this checkout, at this path, with these sources; else say
#                                    what differs and exit 1 (scripts/deploy.sh --docker runs it)
#   scripts/build_images.sh stage    only .sandbox-code/vtb (the sandbox layout the images copy), for
#                                    a manual `docker build -f containers/<image>.Dockerfile .`
# Needs a running Docker Engine (`dockerd --iptables=false --bridge=none &` as root works here).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-runtime}
DOCKER=${DOCKER:-docker}

runtime() {
  local root; root=$(mktemp -d)
  mkdir -p "$root"/{proc,dev,sys,tmp,run,etc,usr}
  for d in bin sbin lib lib32 lib64; do
    if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$root/$d"; fi
  done
  tar -C "$root" -c . | "$DOCKER" import -c 'LABEL vtb.image=runtime' - vtb/runtime:latest >/dev/null
  rm -rf "$root"
  echo "[images] vtb/runtime:latest (mount points only)"
}

base() {
  if "$DOCKER" image inspect vtb/debian:bookworm >/dev/null 2>&1; then
    echo "[images] vtb/debian:bookworm exists"; return
  fi
  command -v debootstrap >/dev/null || { echo "debootstrap missing: apt-get install debootstrap" >&2; exit 1; }
  local root; root=$(mktemp -d)
  echo "[images] debootstrap bookworm (Debian's packages, a few minutes)"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,bash,git,patch \
    bookworm "$root" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >/dev/null
  tar -C "$root" -c . | "$DOCKER" import -c 'CMD ["/bin/bash"]' - vtb/debian:bookworm >/dev/null
  rm -rf "$root"
  echo "[images] vtb/debian:bookworm"
}

hostroot() {
  "${PYTHON:-.venv/bin/python}" scripts/hostroot.py | "$DOCKER" import -c 'CMD ["/bin/bash"]' - vtb/hostroot:latest >/dev/null
  echo "[images] vtb/hostroot:latest (this host's bash, git, patch, python3 + pytest)"
}

# What the checkout holds now: HEAD and a hash of its uncommitted changes (a stale image is rebuilt).
source_id() {
  echo "$(git rev-parse HEAD 2>/dev/null || echo none)-$( { git diff HEAD; git ls-files --others --exclude-standard; } 2>/dev/null | sha1sum | cut -c1-12)"
}

# The orchestrator image: the flow run of a `docker` work pool runs in it. The checkout, its .venv
# and the base Python the venv points to sit at the paths they have on this host: a bench in it
# starts its sandboxes (sandbox=docker) through the host's Docker socket, and the host's daemon
# resolves their mounts (the vtb code, the Python runtime, temp dirs) on the host, so the paths
# must mean the same in both. /usr and the other system dirs are mount points, bound read-only
# from the host by the pool's job (prefect.yaml: bench-docker), exactly like vtb/runtime.
orchestrator() {
  local root repo base
  root=$(mktemp -d)
  repo=$(pwd)
  base=$(.venv/bin/python -c 'import sys; print(sys.base_prefix)')
  mkdir -p "$root"/{proc,dev,sys,tmp,run,usr,var/run,etc}
  for d in bin sbin lib lib32 lib64; do
    if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$root/$d"; fi
  done
  printf 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
  # .agents/ (the agent CLIs, ~2 GB) stays out: the pool's benches run the built-in agents; a CLI
  # agent needs it bound read-only at its host path in the job's volumes (docs/deployments.md, Docker pool)
  local ex=(--exclude="${repo#/}/.git" --exclude="${repo#/}/.cache" --exclude="${repo#/}/runs"
            --exclude="${repo#/}/.agents"
            --exclude="${repo#/}/.sandbox-code" --exclude="${repo#/}/.wheels" --exclude='__pycache__'
            --exclude="${base#/}/lib/python3*/site-packages" --exclude="${base#/}/lib/python3*/test")
  case "$base" in /usr|/usr/*) base="" ;; esac   # a system Python comes with /usr from the host
  tar -c "${ex[@]}" -C "$root" . -C / "${repo#/}" ${base:+"${base#/}"} |
    "$DOCKER" import -c 'LABEL vtb.image=orchestrator' -c "LABEL vtb.source=$(source_id)" \
      -c "LABEL vtb.checkout=$repo" \
      -c "ENV PATH=$repo/.venv/bin:/usr/local/bin:/usr/bin:/bin" \
      -c "ENV HOME=/tmp" -c "WORKDIR $repo" - vtb/orchestrator:latest >/dev/null
  rm -rf "$root"
  echo "[images] vtb/orchestrator:latest ($repo with .venv, Python from ${base:-/usr})"
}

# An orchestrator image works only for the checkout it was built from, at that path (the pull step
# enters it; the sandboxes' mounts name it), and runs the code it was built with: an image of
# another folder fails every flow run at its first step, one of other sources runs stale code.
orchestrator_check() {
  local image=${ORCHESTRATOR_IMAGE:-vtb/orchestrator:latest} have want
  if ! have=$("$DOCKER" image inspect -f \
      '{{ or (index .Config.Labels "vtb.checkout") "an unnamed folder" }} (sources {{ index .Config.Labels "vtb.source" }})' \
      "$image" 2>/dev/null); then
    echo "[images] $image does not exist: build it here with scripts/build_images.sh orchestrator" >&2
    return 1
  fi
  want="$(pwd) (sources $(source_id))"
  if [ "$have" != "$want" ]; then
    echo "[images] $image was built from $have, not from this checkout, $want:" \
      "rebuild it here with scripts/build_images.sh orchestrator" >&2
    return 1
  fi
}

# The sandbox layout of the vtb package (vtb.sandbox.runtime.SANDBOX_CODE, the one list of what
# any sandbox may see) copied to .sandbox-code/vtb: the images get that and nothing else of the
# project (no generators, graders, loaders, environments, configs, flows or steps).
stage_sandbox_code() {
  rm -rf .sandbox-code && mkdir -p .sandbox-code/vtb
  PYTHONPATH=. "${PYTHON:-python3}" -c 'from vtb.sandbox.runtime import SANDBOX_CODE; print("\n".join(SANDBOX_CODE))' |
    while read -r rel; do
      mkdir -p ".sandbox-code/vtb/$(dirname "$rel")"
      cp -r "vtb/$rel" ".sandbox-code/vtb/$rel"
    done
  find .sandbox-code -name __pycache__ -prune -exec rm -rf {} +
}

full() {
  base
  stage_sandbox_code
  # Local wheels (TORCH_WHEEL, or a CPU torch build in /opt/wheels) go into the build context;
  # the builds use the host's network (dockerd may run without a bridge) to reach PyPI.
  mkdir -p .wheels
  for w in ${TORCH_WHEEL:-/opt/wheels/torch-2.13.0+cpu-*.whl}; do [ -f "$w" ] && cp -u "$w" .wheels/; done
  cert=${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}
  if [ -n "$cert" ] && [ -f "$cert" ]; then cp "$cert" .wheels/ca-bundle.crt; fi
  for image in research grading; do
    echo "[images] vtb/$image (pip from PyPI; minutes)"
    "$DOCKER" build -q --network host -f "containers/$image.Dockerfile" --build-arg BASE=vtb/debian:bookworm \
      -t "vtb/$image:latest" . >/dev/null
  done
  echo "[images] vtb/research:latest vtb/grading:latest"
}

case "$what" in
  runtime) runtime ;;
  base) base ;;
  full) runtime; full ;;
  stage) stage_sandbox_code ;;
  hostroot) hostroot ;;
  orchestrator) runtime; orchestrator ;;
  orchestrator-check) orchestrator_check ;;
  source-id) source_id ;;
  *) echo "usage: $0 [runtime|base|full|hostroot|orchestrator|orchestrator-check|stage|source-id]" >&2; exit 2 ;;
esac
