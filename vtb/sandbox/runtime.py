"""What every sandbox needs to run programs: system dirs, the Python runtime and `vtb`, read-only.

A sandbox root starts EMPTY; only these and the caller's own mounts are visible. The
repository itself is never mounted, only its `vtb` package directory, so run records
(`runs/`), configs and anything else next to the package stay out of reach of sandboxed code.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import vtb
from vtb.sandbox.base import USAGE_FILE, Limits, Mount

# Top-level host dirs a program needs to run (binaries, shared libraries, loader, /etc configs).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc")

# Secrets that live inside a mounted system dir. Sandboxed code runs as uid 0 of its own user
# namespace, which the kernel maps to the host's uid; files owned by that uid (e.g. a root-owned
# /etc/shadow) would stay readable without these masks.
MASKED_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/security/opasswd")
MASKED_DIRS = ("/etc/ssh", "/etc/ssl/private")


def is_inside(path: str, parent: str) -> bool:
    """Whether `path` is `parent` or below it (plain string paths, both normalised)."""
    return path == parent or path.startswith(parent.rstrip("/") + "/")


@functools.cache
def _layout() -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """(symlinks to recreate, real dirs to bind at their own path), computed once per process."""
    real = [d for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    links, binds = [], list(real)
    for d in SYSTEM_DIRS:
        if not os.path.islink(d) or not os.path.exists(d):
            continue
        resolved = os.path.realpath(d)
        if any(is_inside(resolved, r) for r in real):
            links.append((os.readlink(d), d))  # merged /usr: /bin -> usr/bin stays a symlink
        else:
            binds.append(d)  # a link to somewhere unmounted: bind its target at the link's path
    return tuple(links), tuple(binds)


def system_symlinks() -> list[tuple[str, str]]:
    """(link text, path) for top-level system dirs that are symlinks into other system dirs."""
    return list(_layout()[0])


@functools.cache
def _runtime_paths() -> tuple[str, ...]:
    paths = list(_layout()[1])
    vtb_dir = str(Path(vtb.__file__).resolve().parent)
    for extra in (sys.base_prefix, sys.prefix, vtb_dir):
        resolved = os.path.realpath(extra)
        # A prefix inside an already-mounted dir (a system Python under /usr) needs no mount.
        if not any(is_inside(resolved, p) for p in paths):
            paths.append(resolved)
    return tuple(paths)


def runtime_mounts() -> list[Mount]:
    """Read-only mounts for system dirs, the Python runtime (base + venv) and the `vtb` package.

    A fresh list each call, so callers can append their own mounts (workspace rw, base model
    ro, data ro, ...). Each path appears at its own location, so interpreter paths, venv
    symlinks and the editable install's package mapping keep working inside.
    """
    return [Mount(Path(p), p) for p in _runtime_paths()]


def masked_paths(mounts: list[Mount]) -> tuple[list[str], list[str]]:
    """(files, dirs) to hide because a mount exposes them at their host path."""
    own_path = [m.target for m in mounts if os.path.realpath(m.source) == m.target]

    def exposed(path: str) -> bool:
        return os.path.lexists(path) and any(is_inside(path, t) for t in own_path)

    return [f for f in MASKED_FILES if exposed(f)], [d for d in MASKED_DIRS if exposed(d)]


def sandbox_env(threads: int, limits: Limits, env: dict[str, str] | None) -> dict[str, str]:
    """The whole environment inside a sandbox (any backend): nothing is inherited from the orchestrator."""
    n = str(threads)
    out = {
        "PATH": f"{sys.prefix}/bin:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",  # every mount but the workspace is read-only
        "PYTHONUNBUFFERED": "1",  # a harness that forgets to flush must not stall the protocol
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": "/tmp/hf",
        "TOKENIZERS_PARALLELISM": "false",
        **{k: n for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")},
        **{k: n for k in ("RAYON_NUM_THREADS", "VTB_THREADS")},
    }
    out.update(env or {})
    out["VTB_USAGE_FILE"] = USAGE_FILE
    if limits.max_flops is not None:
        out["VTB_MAX_FLOPS"] = repr(float(limits.max_flops))
    return out
