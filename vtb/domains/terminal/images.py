"""A Terminal-Bench / Harbor task's image, built from its own Dockerfile with the docker SDK.

Published tasks make their environment in the Dockerfile (`RUN apt-get ...`, `COPY data.csv
/app/`); loaders.py keeps such a task's Dockerfile and build context in the task dict. Here the
image is built once per content: the tag is `vtb-task/<id>:<sha256 of the Dockerfile after base
mapping and of every context file>`, so an edited task builds anew and an unchanged one never
does. Builds run with `pull=False` and no network unless asked for, as this project runs
offline by default; `base_images` maps a Dockerfile's base (`python:3.13-slim`) to one this
machine has (`vtb/hostroot:latest`, scripts/build_images.sh hostroot), and a missing base is an
error that names it and that setting. A Harbor task's `build_timeout_sec` stops its build (the
connection is closed, so the engine cancels it) and names the limit; a failed build names the
task, the engine's error and the last lines of the build's output, so preflight can refuse the
run before any budget is spent.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import tarfile
import threading
import time

from vtb.domains.terminal.loaders import safe_relpath

TAG_REPO = "vtb-task"
_FROM = re.compile(r"^(\s*FROM\s+(?:--\S+\s+)*)(\S+)(.*)$", re.IGNORECASE | re.MULTILINE)
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()
TAIL_LINES = 8  # of the build's output, in a BuildError
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NOISE = ("--->", "Removing intermediate container")
FIX = (
    "fix the task's Dockerfile (the step above failed) or remove the task from task.path; builds run "
    "offline and never pull: task.build_network=host lets RUN steps download"
)


class BuildError(RuntimeError):
    """A task's image could not be built: the task, what went wrong, the build's last lines, the fix."""

    def __init__(self, task_id: str, what: str, fix: str = FIX, tail: list[str] | None = None):
        self.task_id, self.what, self.fix, self.tail = str(task_id), what, fix, list(tail or [])
        shown = "".join(f"\n    | {line}" for line in self.tail)
        end = "\n" if shown else ". "
        super().__init__(f"task {self.task_id}: {what}{shown}{end}Fix: {fix}")

    def detail(self) -> str:
        """What went wrong with the build's last lines, for a preflight Problem."""
        return self.what + ("; last lines of the build: " + " | ".join(self.tail) if self.tail else "")


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
    """The task's image tag, built now if this engine does not have it yet (one build per tag).

    The build is stopped past the task's own `build_timeout_sec` (Harbor's [environment]), if any.
    """
    tag = image_tag(task, base_images)
    with _locks_guard:
        lock = _locks.setdefault(tag, threading.Lock())
    with lock:
        if _exists(api, tag):
            return tag
        _build(api, task, tag, base_images, network)
        _drop_older(api, tag)
    return tag


def _drop_older(api, tag: str) -> None:
    """Remove the task's images of other contents: one image per task id stays in the engine.

    Each edit of a task's environment makes a new tag; without this they piled up (one per edit,
    and one per test run on fresh files). An image a container still uses is left, not forced.
    """
    import docker

    repo = tag.rsplit(":", 1)[0]
    for image in api.images(name=repo):
        for old in image.get("RepoTags") or []:
            if old != tag and old.rsplit(":", 1)[0] == repo:
                try:
                    api.remove_image(old, noprune=False)
                except docker.errors.APIError:
                    pass  # in use by a running episode: the next build of this task retries


def built_image(sandbox, task: dict, base_images: dict[str, str], network: str = "none") -> tuple[str, str]:
    """(tag, working dir) of the task's image on a docker sandbox, built now when missing."""
    tag = ensure_image(sandbox.api, task, base_images, network)
    workdir = (sandbox.api.inspect_image(tag).get("Config") or {}).get("WorkingDir") or "/"
    return tag, workdir


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
            task["id"],
            f"its Dockerfile starts FROM {', '.join(missing)}, which this Docker Engine "
            "does not have and a build here does not pull",
            "pre-load it (`docker pull` / `docker load -i`), or map it to a local image: "
            f"task.base_images='[\"{missing[0]}=vtb/hostroot:latest\"]' "
            "(scripts/build_images.sh hostroot builds that one offline)",
        )
    limit = (task.get("resources") or {}).get("build_timeout_sec")
    log: list[str] = []
    start = time.monotonic()
    stream = None
    try:
        # timeout: no read waits longer than the limit (a silent RUN step), and the time is checked
        # at every chunk; leaving the stream closes the connection, which cancels the build.
        stream = api.build(
            fileobj=_context_tar(env, dockerfile),
            custom_context=True,
            dockerfile=env["dockerfile"],
            tag=tag,
            rm=True,
            forcerm=True,
            pull=False,
            network_mode=network,
            decode=True,
            labels={"vtb.task": str(task["id"])[:200]},
            timeout=limit,
        )
        for chunk in stream:
            if "error" in chunk:
                raise BuildError(
                    task["id"], f"its image build failed: {chunk['error'].strip()}", tail=_tail(log)
                )
            log += str(chunk.get("stream", "")).splitlines()
            if limit and time.monotonic() - start > limit:
                raise TimeoutError
    except BuildError:
        raise
    except Exception as e:  # noqa: BLE001 (the engine's own errors, a read past the limit: name the task)
        if limit and time.monotonic() - start >= limit:
            raise BuildError(
                task["id"],
                f"its image build took longer than its build_timeout_sec = {limit:g} "
                "(task.toml [environment]) and was stopped",
                "raise build_timeout_sec in the task's task.toml, or build the image beforehand "
                f"(tagged {tag}, it is then found and not built)",
                _tail(log),
            ) from None
        raise BuildError(task["id"], f"its image build failed: {e}", tail=_tail(log)) from e
    finally:
        if stream is not None:
            stream.close()


def _tail(log: list[str]) -> list[str]:
    """The build's last lines that say something: no colour codes, no layer ids, no clean-up notes."""
    lines = [_ANSI.sub("", line).rstrip() for line in log]
    lines = [x for x in lines if x.strip() and not x.lstrip().startswith(_NOISE)]
    return [x[:300] for x in lines[-TAIL_LINES:]]


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
