"""Write a self-contained root filesystem, as a tar stream, from this host's own programs.

A stand-in for the public base images (`python:3.13-slim`, `ubuntu:24.04`, SWE-bench's
environment images) on a machine with no registry: bash, the core utilities, git, patch and
Python 3 with pytest, each with the shared libraries `ldd` says it needs, copied from the host.
Unlike vtb/runtime (mount points only, programs mounted from the host), an image made from this
runs with nothing mounted, as a published image does, so tests exercise the same code path.

    python scripts/hostroot.py | docker import - vtb/hostroot:latest    # scripts/build_images.sh hostroot

Offline, in seconds; about 150 MB.
"""

from __future__ import annotations

import importlib.metadata as md
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

from packaging.requirements import Requirement

PROGRAMS = (
    "bash sh ls cat cp mv rm mkdir rmdir echo env sed grep awk head tail wc sort uniq cut tr find "
    "xargs chmod touch diff cmp tee basename dirname pwd test true false sleep printf mktemp ln "
    "readlink realpath stat id uname date tar gzip mkfifo git patch which python3 timeout"
).split()
PYTHON = "/usr/bin/python3"  # the system interpreter: its stdlib lives under /usr/lib
PYTEST_DISTS = ("pytest",)  # with their requirements, copied from this interpreter's site-packages
SITE = "usr/lib/python3/dist-packages"  # on a Debian python3's default sys.path
SKIP_STDLIB = re.compile(r"/(test|idlelib|tkinter|turtledemo|__pycache__|ensurepip|config-[^/]*)(/|$)")
LINKS = {"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}
ETC = {
    "etc/passwd": "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n",
    "etc/group": "root:x:0:\nnogroup:x:65534:\n",
    "etc/os-release": 'NAME="vtb hostroot"\nID=vtb-hostroot\n',
}


def libraries(path: str) -> set[str]:
    """The shared objects `ldd` resolves for an ELF file (empty for scripts)."""
    done = subprocess.run(["ldd", path], capture_output=True, text=True)
    found = set()
    for line in done.stdout.splitlines():
        m = re.search(r"(/\S+) \(0x", line)
        if m:
            found.add(m.group(1))
    return found


def program_files() -> set[str]:
    files = set()
    for name in PROGRAMS:
        path = (
            os.path.realpath(PYTHON)
            if name == "python3"
            else shutil.which(name, path="/usr/bin:/bin:/usr/sbin")
        )
        if path is None:
            raise SystemExit(f"hostroot: {name} is not installed on this host")
        files.add(path)
    git = os.stat(os.path.realpath(shutil.which("git") or "/usr/bin/git"))
    for p in Path("/usr/lib/git-core").glob("*"):  # its built-ins are links to git itself: see main()
        if p.is_file() and not p.is_symlink() and not os.path.samestat(p.stat(), git):
            files.add(str(p))
    return files


def git_builtins() -> list[str]:
    """git-core's programs that are git itself (hard links), made symlinks to it in the root."""
    git = os.stat(os.path.realpath(shutil.which("git") or "/usr/bin/git"))
    return sorted(p.name for p in Path("/usr/lib/git-core").glob("*") if os.path.samestat(p.stat(), git))


def stdlib_files() -> set[str]:
    version = subprocess.run(
        [PYTHON, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    root = Path(f"/usr/lib/python{version}")
    return {str(p) for p in root.rglob("*") if p.is_file() and not SKIP_STDLIB.search(str(p))}


def pytest_files() -> dict[str, str]:
    """{host path: path in the root} of pytest and everything it requires."""
    site = Path(sysconfig.get_paths()["purelib"])
    out, todo, seen = {}, list(PYTEST_DISTS), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        dist = md.distribution(name)
        for f in dist.files or []:
            src = Path(dist.locate_file(f))
            src = src.resolve()
            if src.is_file() and "__pycache__" not in f.parts and site in src.parents:
                out[str(src)] = f"{SITE}/{src.relative_to(site)}"
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return out


def main() -> None:
    elves = program_files() | stdlib_files()
    libs = set()
    for path in elves:
        if path.endswith(".so") or os.access(path, os.X_OK):
            libs |= libraries(path)
    files = {p: _usr(p) for p in elves | libs} | pytest_files()
    with tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as tar:
        for name in ("tmp", "root", "proc", "dev", "sys", "run", "etc", "usr/bin", "usr/sbin", "usr/lib"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
        for name, target in LINKS.items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
        for rel, text in ETC.items():
            info = tarfile.TarInfo(rel)
            info.size, info.mode = len(text.encode()), 0o644
            tar.addfile(info, io.BytesIO(text.encode()))
        for rel, src in sorted({rel: src for src, rel in files.items()}.items()):  # one entry per path
            tar.add(os.path.realpath(src), arcname=rel, recursive=False)
        for name in git_builtins():
            info = tarfile.TarInfo(f"usr/lib/git-core/{name}")
            info.type, info.linkname = tarfile.SYMTYPE, "/usr/bin/git"
            tar.addfile(info)
        for alias in ("python", "python3"):  # /usr/bin/python -> python3.x, as images have
            info = tarfile.TarInfo(f"usr/bin/{alias}")
            info.type, info.linkname = tarfile.SYMTYPE, os.path.basename(os.path.realpath(PYTHON))
            tar.addfile(info)


def _usr(src: str) -> str:
    """Where a host file goes in the root: under usr/, as on a merged-/usr system (/lib -> usr/lib)."""
    return ("/usr" + src if src.startswith(("/lib", "/bin", "/sbin")) else src).lstrip("/")


if __name__ == "__main__":
    main()
