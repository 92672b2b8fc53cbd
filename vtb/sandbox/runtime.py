"""What every sandbox needs to run programs: system dirs, the Python runtime and the sandbox layout of `vtb`.

A sandbox root starts EMPTY; only these and the caller's own mounts are visible, read-only.
Of the repository only the paths in `SANDBOX_CODE` are mounted (each at its host path), so run
records (`runs/`), configs, generators, graders, loaders, environments and user simulators stay
out of reach of sandboxed code: a research command cannot import the generator and rebuild the
test split, nor read a grader's answers.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path

import vtb
from vtb.sandbox.base import USAGE_FILE, Limits, Mount

# Top-level host dirs a program needs to run (binaries, shared libraries, loader). /etc is not
# one of them: a sandbox gets `etc_dir()`, a copy of the few host entries programs read.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64")

# What of the host's /etc a sandbox sees: the loader's cache, name-service and locale basics,
# CA certificates (public), Debian's alternatives links (/usr/bin/awk -> /etc/alternatives/awk),
# fonts, terminfo and Python's config. Nothing else: host configs hold tokens (pip.conf, npmrc,
# gitconfig credential helpers), service keys and the host's users. passwd and group are
# stand-ins (root and nobody), hostname is "sandbox"; resolv.conf is there for docker to mount onto.
ETC_ENTRIES = (
    *("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf", "host.conf", "gai.conf", "hosts"),
    *("localtime", "timezone", "locale.alias", "os-release", "debian_version", "lsb-release"),
    *("ssl/certs", "ssl/openssl.cnf", "ca-certificates", "ca-certificates.conf", "pki/tls/certs"),
    *("alternatives", "fonts", "terminfo", "mime.types", "magic", "magic.mime", "inputrc", "shells"),
    *("protocols", "services", "networks", "bash.bashrc", "profile", "python3", "python3.11", "python3.12"),
)
ETC_STANDINS = {
    "passwd": "root:x:0:0:root:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n",
    "group": "root:x:0:\nnogroup:x:65534:\n",
    "hostname": "sandbox\n",
    "resolv.conf": "# no name service inside a sandbox (docker mounts its own file here)\n",
}

# Secrets that would live inside a mounted system dir. Sandboxed code runs as uid 0 of its own user
# namespace, which the kernel maps to the host's uid; files owned by that uid (e.g. a root-owned
# /etc/shadow) would stay readable without these masks. With /etc a stand-in (etc_dir) they are
# not there; the masks stay for a caller that mounts a host /etc of its own.
MASKED_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/security/opasswd")
MASKED_DIRS = ("/etc/ssh", "/etc/ssl/private")


# The sandbox layout of the `vtb` package, relative to it: the ONLY project code any sandbox
# (research, train, harness play, grading, shell tasks) sees, here and in the docker images
# (containers/*.Dockerfile copy the same list, staged by scripts/build_images.sh). A folder is
# mounted whole; everything not listed (vtb/config.py, runner, pipeline, the domains'
# generators, graders, loaders, environments) does not exist inside.
# Every domain folder with a kit/ (vtb/domains/<d>/kit): a new domain's kit is mounted with no list to edit.
DOMAINS = tuple(
    sorted(p.parent.name for p in (Path(vtb.__file__).resolve().parent / "domains").glob("*/kit"))
)
SANDBOX_CODE: tuple[str, ...] = (
    "__init__.py",
    "protocol.py",  # the harness protocol
    "serve",  # the model server, its in-sandbox bridge and the harnesses' client
    "engine",  # trainers (vtb.engine.sft, ds_launch) and inference engines
    "models",  # vtb.models.build (the tiny base model is built in a sandbox)
    "registry.py",  # what vtb.sandbox imports for its backends' names (a leaf)
    "sandbox/__init__.py",  # `python -m vtb.sandbox.egress`, the CLI agent's in-sandbox bridge ...
    "sandbox/base.py",  # ... and what its package imports (no backend, no secrets)
    "sandbox/runtime.py",
    "sandbox/egress.py",
    "domains/__init__.py",  # import-free (vtb.domains.registry is orchestrator-only)
    "domains/kit",  # what the kits share
    *(f"domains/{d}/{part}" for d in DOMAINS for part in ("__init__.py", "kit")),
)


def sandbox_code() -> list[str]:
    """Absolute host paths of `SANDBOX_CODE` in this checkout (resolved, so links cannot widen it)."""
    root = Path(vtb.__file__).resolve().parent
    paths = [os.path.realpath(root / rel) for rel in SANDBOX_CODE]
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise FileNotFoundError(f"sandbox layout paths missing from the checkout: {missing}")
    outside = [p for p in paths if not is_inside(p, str(root))]
    if outside:
        raise ValueError(f"sandbox layout paths resolve outside the vtb package: {outside}")
    return paths


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
    """The host dirs every sandbox binds at their own path: the system dirs, the interpreter's
    prefixes, and any other package dir on its import path (a `.pth` file or PYTHONPATH naming
    another environment's site-packages: conda layers, a venv reusing another's packages)."""
    paths = list(_layout()[1])
    for extra in (sys.base_prefix, sys.prefix, *_site_dirs()):
        resolved = os.path.realpath(extra)
        # A prefix inside an already-mounted dir (a system Python under /usr) needs no mount.
        if not any(is_inside(resolved, p) for p in paths):
            paths.append(resolved)
    return tuple(paths)


def _site_dirs() -> list[str]:
    """The package dirs on the import path: named site-packages or dist-packages, never a
    checkout or a working dir (only those are mounted whole; the rest of sys.path stays out)."""
    return [
        p
        for p in sys.path
        if p
        and os.path.basename(os.path.normpath(p)) in ("site-packages", "dist-packages")
        and os.path.isdir(p)
    ]


@functools.cache
def masked_packages() -> tuple[str, ...]:
    """This project's orchestrator packages that a runtime mount would expose (a non-editable
    install puts vtb/, flows/ and steps/ in site-packages): each gets an empty stand-in, and
    vtb/ the skeleton beneath the `SANDBOX_CODE` binds, so a sandbox sees the same files as
    with an editable install (the generators, the scorers and the orchestrator stay out)."""
    package = Path(vtb.__file__).resolve().parent
    mounted = _runtime_paths()
    siblings = [package.parent / name for name in ("flows", "steps")]
    return tuple(
        str(p)
        for p in siblings
        if p.is_dir() and (p / "__init__.py").exists() and any(is_inside(str(p), m) for m in mounted)
    )


def _linked_prefixes() -> list[tuple[str, str]]:
    """(real dir, path the interpreter names it by) for a prefix reached through a symlink (a
    `.venv` that links to a virtualenv elsewhere): sandboxed commands run `sys.executable` by
    that path, so the real dir is bound there too, not only at its own path."""
    out = []
    for prefix in (sys.prefix, sys.base_prefix):
        named, real = os.path.abspath(prefix), os.path.realpath(prefix)
        if named != real and (real, named) not in out:
            out.append((real, named))
    return out


@functools.cache
def _skeleton() -> str:
    """A host dir holding the package's layout as empty folders and files, mounted read-only at
    the package's path beneath the `SANDBOX_CODE` binds.

    Without it the sandbox itself would make the folders between the binds (vtb/, domains/math/),
    and where the checkout lies under a path that is a private tmpfs inside (a clone under /tmp)
    those would be writable: harmless to the host, but a package dir the sandbox could add
    modules to. Made once per process, owned by the orchestrator, removed at exit.
    """
    root = Path(tempfile.mkdtemp(prefix="vtb-layout-"))
    atexit.register(shutil.rmtree, root, True)
    package = Path(vtb.__file__).resolve().parent
    for rel in SANDBOX_CODE:
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if (package / rel).is_dir():
            target.mkdir(exist_ok=True)
        else:
            target.touch()
    return str(root)


@functools.cache
def _empty_dir() -> str:
    """An empty read-only stand-in for a host dir that a mount would otherwise expose."""
    root = tempfile.mkdtemp(prefix="vtb-empty-")
    atexit.register(shutil.rmtree, root, True)
    os.chmod(root, 0o755)
    return root


@functools.cache
def etc_dir() -> str:
    """The /etc every sandbox sees: a host dir with copies of ETC_ENTRIES (links kept as links,
    never followed) and the stand-ins; made once per process, owned by the orchestrator."""
    root = Path(tempfile.mkdtemp(prefix="vtb-etc-"))
    atexit.register(shutil.rmtree, root, True)
    for rel in ETC_ENTRIES:
        src, dst = Path("/etc") / rel, root / rel
        if not os.path.lexists(src):
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir() and not src.is_symlink():
            shutil.copytree(src, dst, symlinks=True, ignore_dangling_symlinks=True)
        else:
            shutil.copy2(src, dst, follow_symlinks=False)
    for name, text in ETC_STANDINS.items():
        (root / name).write_text(text)
    os.chmod(root, 0o755)
    return str(root)


def runtime_mounts() -> list[Mount]:
    """Read-only mounts for system dirs, the Python runtime (base + venv) and `SANDBOX_CODE`.

    A fresh list each call, so callers can append their own mounts (workspace rw, base model
    ro, data ro, ...). Each path appears at its own location, so interpreter paths, venv
    symlinks and the editable install's package mapping keep working inside.
    """
    package = str(Path(vtb.__file__).resolve().parent)
    return [
        *(Mount(Path(p), p) for p in _runtime_paths()),
        *(Mount(Path(real), link) for real, link in _linked_prefixes()),
        Mount(Path(etc_dir()), "/etc"),
        Mount(Path(_skeleton()), package),
        *(Mount(Path(_empty_dir()), p) for p in masked_packages()),
        *(Mount(Path(p), p) for p in sandbox_code()),
    ]


def masked_paths(mounts: list[Mount]) -> tuple[list[str], list[str]]:
    """(files, dirs) to hide because a mount exposes them at their host path."""
    own_path = [m.target for m in mounts if os.path.realpath(m.source) == m.target]

    def exposed(path: str) -> bool:
        return os.path.lexists(path) and any(is_inside(path, t) for t in own_path)

    return [f for f in MASKED_FILES if exposed(f)], [d for d in MASKED_DIRS if exposed(d)]


SANDBOX_PATH = f"{sys.prefix}/bin:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"


# The reproducible CPU mode (sandbox.reproducible, on by default; issue 38): the same CPU code
# paths on every x86-64 machine with AVX2, so the same config and seed give the same losses,
# FLOPs, val path and scores. Measured: 40 AdamW steps of a small GPT-2 end with losses that
# differ in the last bits between PyTorch's AVX-512, AVX2 and default kernels, and between MKL's
# code paths (MKL_CBWR=COMPATIBLE against this AMD machine's own), and training grows them into
# different scores. PyTorch's kernels are pinned to AVX2, MKL to its AVX2 path in strict
# conditional-numerical-reproducibility mode (bit-identical for a fixed thread count, which
# sandbox.threads fixes), oneDNN to AVX2. A machine without AVX2 runs PyTorch's default kernels
# and gets another fingerprint (vtb/repro.py). Applied last: they hold over any caller's env.
REPRODUCIBLE_CPU = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "AVX2,STRICT",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "MKL_DYNAMIC": "FALSE",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}


def thread_env(threads: int) -> dict[str, str]:
    """The variables that set how many threads the math libraries and torch use in a sandbox."""
    n = str(threads)
    keys = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RAYON_NUM_THREADS", "VTB_THREADS")
    return dict.fromkeys(keys, n)


def sandbox_env(
    threads: int, limits: Limits, env: dict[str, str] | None, reproducible: bool = True
) -> dict[str, str]:
    """The whole environment inside a sandbox (any backend): nothing is inherited from the orchestrator."""
    out = {
        "PATH": SANDBOX_PATH,
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",  # every mount but the workspace is read-only
        "PYTHONUNBUFFERED": "1",  # a harness that forgets to flush must not stall the protocol
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": "/tmp/hf",
        "TOKENIZERS_PARALLELISM": "false",
        # Idle OpenMP threads sleep instead of spinning: CPU-seconds then meter work, not load
        # (measured: 3.3x fewer CPU-seconds for the same training under 3x oversubscription).
        "OMP_WAIT_POLICY": "PASSIVE",
        **thread_env(threads),
    }
    out.update(env or {})
    if reproducible:
        out.update(REPRODUCIBLE_CPU)
    out["VTB_USAGE_FILE"] = USAGE_FILE
    if limits.max_flops is not None:
        out["VTB_MAX_FLOPS"] = repr(float(limits.max_flops))
    return out
