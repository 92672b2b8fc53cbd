"""Official-layout SWE-bench instance images: swebench's own builder online, a stand-in offline.

Why two: an official image (sweb.eval.x86_64.<instance_id>) is built by swebench from its task
repo's Dockerfile, which clones the project from GitHub and installs its dependencies: that
needs network (and `docker buildx`, which swebench 5 builds with). `build_official` runs
swebench's own code (swebench.image_builder.prepare_images) and checks every image it was
asked for exists afterwards, or says why not. Offline (tests, CI), `build_stand_in` makes an
image in the same layout from a local git checkout: FROM vtb/hostroot (scripts/hostroot.py),
the checkout at /testbed, and /opt/miniconda3/bin/activate with a `conda activate testbed`
that puts a Python with pytest first on PATH, so an official eval script runs unchanged.

    python scripts/swe_images.py build --task-repo <task repo> [-i <instance_id> ...]   # online
    python scripts/swe_images.py stand-in --testbed <git checkout> -i <instance_id> ...  # offline
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import tarfile
from pathlib import Path

HOSTROOT = "vtb/hostroot:latest"
ACTIVATE = """# stand-in for miniconda's activate: `conda activate ENV` puts ENV's bin first on PATH
conda() {
  case "$1" in
    activate) export CONDA_DEFAULT_ENV="${2:-base}" PATH="/opt/miniconda3/envs/${2:-base}/bin:$PATH" ;;
    *) echo "conda stand-in: only 'activate'" >&2; return 1 ;;
  esac
}
"""
PYTEST = '#!/bin/sh\nexec /opt/miniconda3/envs/testbed/bin/python -m pytest "$@"\n'
DOCKERFILE = "FROM {base}\nCOPY opt /opt\nCOPY testbed /testbed\nWORKDIR /testbed\n"
OFFLINE_HINT = (
    "building the official images needs network (their Dockerfiles clone the project from GitHub "
    "and install its dependencies); offline: `docker load` images saved elsewhere, or build "
    "stand-ins in the official layout (python scripts/swe_images.py stand-in)"
)


class BuildError(RuntimeError):
    """An image could not be built; the message names it and the fix."""


def local_name(iid: str) -> str:
    """The image name swebench's harness gives an instance built here (no namespace)."""
    return f"sweb.eval.x86_64.{iid}:latest".lower()


# --- online: swebench's own builder -----------------------------------------------------------
def build_official(task_repo: str, instance_ids: list[str] | None = None, workers: int = 4) -> list[str]:
    """Build instance images with swebench's harness from its task repo; the names built.

    task_repo: a local task repo or a GitHub "owner/name" (swebench clones it). Raises BuildError
    naming each image that is missing afterwards, with swebench's build log and the offline fix.
    """
    try:
        import docker
        from swebench.image_builder.prepare_images import main as prepare_images
        from swebench.image_builder.prepare_images import resolve_task_repo
        from swebench.task.publish import CheckFailed
        from swebench.task.repo import UnknownDataset, select_tasks
    except ImportError as e:
        raise BuildError(
            f"swebench's image builder is not installed ({e}): pip install 'swebench>=5'"
        ) from None
    if subprocess.run(["docker", "buildx", "version"], capture_output=True).returncode != 0:
        raise BuildError(
            "swebench builds its images with `docker buildx`, which this Docker CLI lacks "
            "(install the buildx plugin: docker-buildx on Debian 13, docker-buildx-plugin from Docker's own "
            "packages; Debian 12's docker.io has none); " + OFFLINE_HINT
        )
    try:
        ids = list(instance_ids or [])
        if not ids:  # everything the task repo publishes
            with resolve_task_repo(task_repo) as root:
                ids = [t["instance_id"] for t in select_tasks(root, None)]
        prepare_images(
            task_repo=task_repo,
            instance_ids=ids,
            datasets=None,
            max_workers=workers,
            force_rebuild=False,
            open_file_limit=4096,
            namespace=None,
            tag="latest",
            dry_run=False,
        )
    except (CheckFailed, UnknownDataset, RuntimeError, FileNotFoundError, KeyError) as e:
        raise BuildError(f"task repo {task_repo}: {e}; {OFFLINE_HINT}") from None
    client = docker.from_env()
    missing = []
    for iid in ids:
        try:
            client.images.get(local_name(iid))
        except docker.errors.ImageNotFound:
            missing.append(iid)
    if missing:
        logs = Path("logs/image_builder").resolve()
        raise BuildError(
            f"{len(missing)} image(s) did not build: "
            + ", ".join(local_name(i) for i in missing)
            + f" (swebench's build logs: {logs}/<image>/build_image.log); {OFFLINE_HINT}"
        )
    return [local_name(i) for i in ids]


# --- offline: the stand-in in the official layout --------------------------------------------
def stand_in_context(testbed: Path, base: str = HOSTROOT) -> bytes:
    """A tar build context: the Dockerfile, /testbed (with .git) and the conda stand-in."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def add(name: str, text: str, mode: int = 0o644) -> None:
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))

        add("Dockerfile", DOCKERFILE.format(base=base))
        add("opt/miniconda3/bin/activate", ACTIVATE)
        add("opt/miniconda3/envs/testbed/bin/pytest", PYTEST, 0o755)
        link = tarfile.TarInfo("opt/miniconda3/envs/testbed/bin/python")
        link.type, link.linkname, link.mtime = tarfile.SYMTYPE, "/usr/bin/python3", 0
        tar.addfile(link)
        for path in sorted(testbed.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=f"testbed/{path.relative_to(testbed)}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_file():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue()


def build_stand_in(testbed: Path, instance_ids: list[str], base: str = HOSTROOT) -> list[str]:
    """One stand-in image from a git checkout, tagged as swebench names each instance's image.

    Built once per content (cached under a hash tag of the base image and the context), offline,
    with no network during the build. Returns the instance image names.
    """
    import docker

    testbed = Path(testbed)
    if not (testbed / ".git").exists():
        raise BuildError(
            f"{testbed}: not a git checkout (the stand-in's /testbed must be one, at base_commit)"
        )
    client = docker.from_env()
    try:
        base_image = client.images.get(base)
    except docker.errors.ImageNotFound:
        raise BuildError(
            f"base image {base} is not here: scripts/build_images.sh hostroot (offline)"
        ) from None
    context = stand_in_context(testbed, base)
    digest = hashlib.sha256(base_image.id.encode() + context).hexdigest()[:12]
    cached = f"vtb/swe-stand-in:{digest}"
    try:
        image = client.images.get(cached)
    except docker.errors.ImageNotFound:
        image, _ = client.images.build(
            fileobj=io.BytesIO(context),
            custom_context=True,
            tag=cached,
            pull=False,
            network_mode="none",
            rm=True,
        )
    names = [local_name(iid) for iid in instance_ids]
    for name in names:
        image.tag(*name.rsplit(":", 1))
    return names


def head_commit(testbed: Path) -> str:
    """The checkout's HEAD (compared with each instance's base_commit before tagging)."""
    git = shutil.which("git") or "git"
    done = subprocess.run([git, "-C", str(testbed), "rev-parse", "HEAD"], capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(f"{testbed}: git rev-parse HEAD failed: {done.stderr.strip()}")
    return done.stdout.strip()
