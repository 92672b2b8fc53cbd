"""A Terminal-Bench / Harbor task's image, built from its own Dockerfile with the docker SDK.

Published tasks make their environment in the Dockerfile (`RUN apt-get ...`, `COPY data.csv
/app/`); loaders.py keeps such a task's Dockerfile and build context in the task dict. Here the
image is built once per content: the tag is `vtb-task/<id>:<sha256 of the Dockerfile after base
mapping and of every context file>`, so an edited task builds anew and an unchanged one never
does. Builds run with `pull=False` and no network unless asked for, as this project runs
offline by default; `base_images` maps a Dockerfile's base (`python:3.13-slim`) to one this
machine has (`vtb/hostroot:latest`, scripts/build_images.sh hostroot), and a missing base is an
error that names it and that setting.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import tarfile
import threading

from vtb.domains.terminal.loaders import safe_relpath

TAG_REPO = "vtb-task"
_FROM = re.compile(r"^(\s*FROM\s+(?:--\S+\s+)*)(\S+)(.*)$", re.IGNORECASE | re.MULTILINE)
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


class BuildError(RuntimeError):
    """A task's image could not be built; the message names the task and the cause."""


def map_bases(dockerfile: str, base_images: dict[str, str]) -> str:
    """The Dockerfile with each `FROM <base>` that `base_images` names replaced by its mapping."""
    return _FROM.sub(lambda m: m.group(1) + base_images.get(m.group(2), m.group(2)) + m.group(3), dockerfile)


def bases(dockerfile: str) -> list[str]:
    return [m.group(2) for m in _FROM.finditer(dockerfile)]


def image_tag(task: dict, base_images: dict[str, str]) -> str:
    env = task["environment"]
    digest = hashlib.sha256(map_bases(_dockerfile(env), base_images).encode())
    for rel in sorted(env["context"]):
        spec = env["context"][rel]
        digest.update(f"\0{rel}\0{spec.get('mode', 0o644)}\0{spec['b64']}".encode())
    name = re.sub(r"[^a-z0-9._-]", "-", str(task["id"]).lower()).strip(".-")[:64] or "task"
    return f"{TAG_REPO}-{name}:{digest.hexdigest()[:20]}"


def ensure_image(api, task: dict, base_images: dict[str, str], network: str = "none") -> str:
    """The task's image tag, built now if this engine does not have it yet (one build per tag)."""
    tag = image_tag(task, base_images)
    with _locks_guard:
        lock = _locks.setdefault(tag, threading.Lock())
    with lock:
        if _exists(api, tag):
            return tag
        _build(api, task, tag, base_images, network)
    return tag


def _exists(api, ref: str) -> bool:
    import docker

    try:
        api.inspect_image(ref)
        return True
    except docker.errors.ImageNotFound:
        return False


def _dockerfile(env: dict) -> str:
    return base64.b64decode(env["context"][env["dockerfile"]]["b64"]).decode("utf-8")


def _build(api, task: dict, tag: str, base_images: dict[str, str], network: str) -> None:
    env = task["environment"]
    dockerfile = map_bases(_dockerfile(env), base_images)
    missing = [b for b in bases(dockerfile) if b.lower() != "scratch" and not _exists(api, b)]
    if missing:
        raise BuildError(
            f"task {task['id']}: its Dockerfile starts FROM {', '.join(missing)}, which this Docker Engine "
            "does not have and a build here does not pull. Pre-load it (`docker pull` / `docker load -i`), "
            f"or map it to a local image: task.base_images='[\"{missing[0]}=vtb/hostroot:latest\"]' "
            "(scripts/build_images.sh hostroot builds that one offline)"
        )
    context = _context_tar(env, dockerfile)
    log: list[str] = []
    try:
        for chunk in api.build(
            fileobj=context,
            custom_context=True,
            dockerfile=env["dockerfile"],
            tag=tag,
            rm=True,
            forcerm=True,
            pull=False,
            network_mode=network,
            decode=True,
            labels={"vtb.task": str(task["id"])[:200]},
        ):
            if "error" in chunk:
                raise BuildError(
                    f"task {task['id']}: the image build failed: {chunk['error'].strip()}\n"
                    + "".join(log[-20:])
                )
            if "stream" in chunk:
                log.append(chunk["stream"])
    except BuildError:
        raise
    except Exception as e:  # noqa: BLE001 (the engine's own errors: name the task)
        raise BuildError(f"task {task['id']}: the image build failed: {e}") from e


def _context_tar(env: dict, dockerfile: str) -> io.BytesIO:
    """The build context as an in-memory tar: the task's files (paths checked), the mapped Dockerfile."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel, spec in sorted(env["context"].items()):
            data = dockerfile.encode() if rel == env["dockerfile"] else base64.b64decode(spec["b64"])
            info = tarfile.TarInfo(str(safe_relpath(rel)))
            info.size, info.mode = len(data), int(spec.get("mode", 0o644)) & 0o777
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf
