"""Task folders on disk: write ours in Terminal-Bench layout, read Terminal-Bench and Harbor folders.

Both formats read into the same task dict as `generator.make_task` builds (plus "format"), so
generated tasks and published ones run through one grading path.

Terminal-Bench (v1) folder::

    task.yaml            instruction, difficulty, category, tags, parser_name, timeouts
    run-tests.sh         pytest on $TEST_DIR/test_outputs.py with -rA (the docker path runs it)
    tests/test_outputs.py and any other test files
    solution.sh          (or solution.yaml, a list of {command: ...})
    Dockerfile           FROM vtb-terminal-base, COPY app/ /app/, WORKDIR /app
    app/                 the initial /app

Harbor / Terminal-Bench 2 folder::

    task.toml            [metadata] difficulty/category/tags, [agent]/[verifier] timeout_sec,
                         [environment] cpus, memory_mb, storage_mb, build_timeout_sec (kept as
                         "resources"; the older memory = "2G" / storage = "10G" read too)
    instruction.md
    tests/test.sh        writes the reward (1 or 0) to /logs/verifier/reward.txt
    solution/solve.sh
    environment/         Dockerfile, and by our convention environment/app/ (the initial /app)

A task whose Dockerfile only names a base and copies `app/` to /app (the layout `write_task`
writes) runs anywhere: /app starts as a copy of `app/` (Terminal-Bench) or `environment/app/`
(Harbor). Any other Dockerfile builds an environment (`RUN`, `ADD`, a `COPY` of other files):
the task then carries "environment" (its Dockerfile and build context, base64) and runs only
on sandbox=docker, in the image built from it (vtb/domains/terminal/images.py), never with a
silently empty /app. App files must be UTF-8 text; a Terminal-Bench run-tests.sh is kept as
"run_tests" (built tasks run it, as Terminal-Bench does; the others run pytest themselves).

A docker-compose.yaml (Terminal-Bench: beside task.yaml; Harbor: in environment/) that declares
services beyond the task's own container (Terminal-Bench's `client`, Harbor's `main`) makes a
multi-container task: kept as "compose" ({"file", "services"}) so that preflight refuses it by
name; this project runs one container per episode.
"""

from __future__ import annotations

import base64
import os
import re
import stat
import tomllib
from pathlib import Path, PurePosixPath

import yaml

BASE_IMAGE = "vtb-terminal-base"
DEFAULT_AGENT_TIMEOUT = 360  # Terminal-Bench's defaults, for folders that leave them out
DEFAULT_TEST_TIMEOUT = 60

RUN_TESTS = """#!/bin/bash
# Runs the hidden tests; the image vtb-terminal-base ships python3 and pytest.
python3 -m pytest "$TEST_DIR/test_outputs.py" -rA
"""
DOCKERFILE = f"FROM {BASE_IMAGE}\nCOPY app/ /app/\nWORKDIR /app\n"
# Dockerfile instructions that add no files: with only these (and `COPY app/ /app/`) the task's
# environment is its app/ folder and runs on any backend.
NO_FILES = {"FROM", "WORKDIR", "ENV", "LABEL", "CMD", "ENTRYPOINT", "USER", "ARG", "SHELL", "EXPOSE"}
APP_COPY = re.compile(r"^COPY\s+(?:--\S+\s+)*\.?/?app/?\s+/app/?$", re.IGNORECASE)
MAX_CONTEXT_BYTES = 64 << 20  # a build context held in the task dict (JSON, base64)
OWN_SERVICE = {"terminal-bench": "client", "harbor": "main"}  # the agent's container in a compose file
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml")
RESOURCES = ("cpus", "memory_mb", "storage_mb", "build_timeout_sec")  # Harbor's [environment]
NOT_CONTEXT = ("tests", "solution", "solution.sh", "solution.yaml", "run-tests.sh")  # never in the image


def safe_relpath(rel: str) -> PurePosixPath:
    """`rel` as a relative path that stays inside its folder; task dicts may come from anywhere."""
    path = PurePosixPath(rel)
    if not rel or path.is_absolute() or ".." in path.parts or "\0" in rel:
        raise ValueError(f"unsafe relative path in a task: {rel!r}")
    return path


def write_files(files: dict[str, str], folder: Path) -> None:
    """Write relpath -> text under `folder` (the tests/ of a task, a grading dir, ...)."""
    for rel, text in files.items():
        path = folder / safe_relpath(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def write_app(task: dict, folder: Path) -> None:
    """Materialise the task's initial /app (contents and modes) into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for rel, spec in task["files"].items():
        path = folder / safe_relpath(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(spec["content"])
        os.chmod(path, spec.get("mode", 0o644))


def write_task(task: dict, folder: Path) -> None:
    """Write a task in Terminal-Bench layout (see the module docstring) into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    meta = {
        "instruction": task["instruction"],
        "author_email": "none",
        "difficulty": task.get("difficulty", "easy"),
        "category": task.get("category", ""),
        "tags": list(task.get("tags", [])),
        "parser_name": task.get("parser_name", "pytest"),
        "max_agent_timeout_sec": task.get("max_agent_timeout_sec", DEFAULT_AGENT_TIMEOUT),
        "max_test_timeout_sec": task.get("max_test_timeout_sec", DEFAULT_TEST_TIMEOUT),
        "template": task.get("template", ""),  # ours; Terminal-Bench ignores unknown keys
    }
    (folder / "task.yaml").write_text(yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000))
    _write_exec(folder / "run-tests.sh", RUN_TESTS)
    _write_exec(folder / "solution.sh", f"#!/bin/bash\n{task['solution']}\n")
    write_files(task["tests"], folder / "tests")
    if "environment" in task:  # built from its own Dockerfile: its context as it was read
        env = task["environment"]
        for rel, spec in env["context"].items():
            path = folder / safe_relpath(rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(base64.b64decode(spec["b64"]))
            os.chmod(path, int(spec.get("mode", 0o644)) & 0o777)
        if "run_tests" in task:
            _write_exec(folder / "run-tests.sh", task["run_tests"])
        return
    (folder / "Dockerfile").write_text(DOCKERFILE)
    write_app(task, folder / "app")


def _write_exec(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def read_task(folder: Path) -> dict:
    """The task dict of a Terminal-Bench or Harbor folder; ValueError names what is missing."""
    folder = Path(folder)
    if (folder / "task.yaml").is_file():
        return _read_terminal_bench(folder)
    if (folder / "task.toml").is_file():
        return _read_harbor(folder)
    raise ValueError(
        f"{folder} is not a task folder: it has neither task.yaml (Terminal-Bench) nor task.toml (Harbor)"
    )


def load_tasks(path: Path) -> list[dict]:
    """Every task folder directly under `path`, sorted by name (or `path` itself if it is one)."""
    path = Path(path)
    if (path / "task.yaml").is_file() or (path / "task.toml").is_file():
        return [read_task(path)]
    if not path.is_dir():
        raise ValueError(f"no task folder at {path}")
    return [read_task(p) for p in sorted(path.iterdir()) if p.is_dir() and not p.name.startswith(".")]


def _require(folder: Path, rel: str, kind: str) -> Path:
    path = folder / rel
    if not path.is_file():
        raise ValueError(f"{folder} looks like a {kind} task but has no {rel}")
    return path


def _read_terminal_bench(folder: Path) -> dict:
    meta = yaml.safe_load((folder / "task.yaml").read_text()) or {}
    if not isinstance(meta, dict) or not isinstance(meta.get("instruction"), str):
        raise ValueError(f"{folder}/task.yaml has no instruction")
    _require(folder, "tests/test_outputs.py", "Terminal-Bench")
    solution = ""
    if (folder / "solution.sh").is_file():
        solution = _script_body((folder / "solution.sh").read_text())
    elif (folder / "solution.yaml").is_file():
        steps = yaml.safe_load((folder / "solution.yaml").read_text()) or []
        solution = "\n".join(str(s["command"]) for s in steps if isinstance(s, dict) and "command" in s)
    return _task(
        folder,
        "terminal-bench",
        instruction=meta["instruction"].strip(),
        meta=meta,
        parser_name=meta.get("parser_name", "pytest"),
        agent_timeout=meta.get("max_agent_timeout_sec"),
        test_timeout=meta.get("max_test_timeout_sec"),
        solution=solution,
        app=folder / "app",
        dockerfile=folder / "Dockerfile",
        run_tests=folder / "run-tests.sh",
        compose_dir=folder,
    )


def _read_harbor(folder: Path) -> dict:
    with open(folder / "task.toml", "rb") as f:
        config = tomllib.load(f)
    instruction = _require(folder, "instruction.md", "Harbor").read_text().strip()
    _require(folder, "tests/test.sh", "Harbor")
    solve = folder / "solution" / "solve.sh"
    return _task(
        folder,
        "harbor",
        instruction=instruction,
        meta=config.get("metadata", {}),
        parser_name="reward",  # the verifier's reward file, not a pytest log
        agent_timeout=config.get("agent", {}).get("timeout_sec"),
        test_timeout=config.get("verifier", {}).get("timeout_sec"),
        solution=_script_body(solve.read_text()) if solve.is_file() else "",
        app=folder / "environment" / "app",
        dockerfile=folder / "environment" / "Dockerfile",
        compose_dir=folder / "environment",
        resources=_resources(config.get("environment", {}), folder / "task.toml"),
    )


def _task(
    folder,
    fmt,
    *,
    instruction,
    meta,
    parser_name,
    agent_timeout,
    test_timeout,
    solution,
    app,
    dockerfile,
    compose_dir,
    run_tests=None,
    resources=None,
) -> dict:
    task = {
        "id": folder.name,
        "template": meta.get("template") or "external",
        "instruction": instruction,
        "files": _read_app(app),
        "solution": solution,
        "tests": _read_tree(folder / "tests"),
        "difficulty": meta.get("difficulty", "unknown"),
        "category": meta.get("category", ""),
        "tags": list(meta.get("tags") or []),
        "parser_name": parser_name,
        "max_agent_timeout_sec": _number(agent_timeout, DEFAULT_AGENT_TIMEOUT),
        "max_test_timeout_sec": _number(test_timeout, DEFAULT_TEST_TIMEOUT),
        "format": fmt,
    }
    if resources:
        task["resources"] = resources
    if compose := _compose(folder, compose_dir, OWN_SERVICE[fmt]):
        task["compose"] = compose
    if dockerfile.is_file() and needs_build(_text(dockerfile)):
        task["environment"] = _environment(dockerfile)
        if run_tests is not None and run_tests.is_file():  # only a built task runs it
            task["run_tests"] = _text(run_tests)
    return task


def _resources(env: object, where: Path) -> dict[str, float | int]:
    """Harbor's [environment] limits that this project enforces (see env.py), checked as numbers > 0.

    Harbor writes `memory_mb` and `storage_mb`; older task.toml files say `memory = "2G"` and
    `storage = "10G"`, read into the same fields.
    """
    if not isinstance(env, dict):
        raise ValueError(f"{where}: [environment] is not a table")
    raw = {k: env[k] for k in RESOURCES if k in env}
    for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
        if new not in raw and old in env:
            raw[new] = _megabytes(env[old], f"{where}: [environment] {old}")
    out: dict[str, float | int] = {}
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValueError(f"{where}: [environment] {key} = {value!r} is not a number above 0")
        out[key] = int(value) if key.endswith("_mb") else float(value)
    return out


def _megabytes(value: object, where: str) -> int:
    """'2G', '512M', '1024' (megabytes) as megabytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", str(value), re.IGNORECASE)
    if not m:
        raise ValueError(f"{where} = {value!r} is not a size such as '2G' or '512M'")
    scale = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[m.group(2).upper()]
    return max(1, round(float(m.group(1)) * scale))


def _compose(folder: Path, compose_dir: Path, own: str) -> dict | None:
    """{"file", "services"} when the task's compose file declares containers beyond its own."""
    for name in COMPOSE_FILES:
        path = compose_dir / name
        if not path.is_file():
            continue
        rel = path.relative_to(folder).as_posix()
        try:
            services = (yaml.safe_load(_text(path)) or {}).get("services") or {}
            names = sorted(str(s) for s in services) if isinstance(services, dict) else []
        except (yaml.YAMLError, AttributeError) as e:
            return {"file": rel, "services": [f"<unreadable: {str(e).splitlines()[0]}>"]}
        return {"file": rel, "services": names} if set(names) - {own} else None
    return None


def needs_build(dockerfile: str) -> bool:
    """Whether a Dockerfile adds files beyond `COPY app/ /app/` (so only its image is faithful)."""
    for line in _instructions(dockerfile):
        word = line.split(None, 1)[0].upper()
        if word not in NO_FILES and not APP_COPY.match(line):
            return True
    return False


def _instructions(dockerfile: str) -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments and blanks dropped."""
    out, current = [], ""
    for raw in dockerfile.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        current += line[:-1] + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            out.append(current.strip())
            current = ""
    return out + ([current.strip()] if current.strip() else [])


def _environment(dockerfile: Path) -> dict:
    """The task's Dockerfile and build context (its folder, minus tests and solutions), base64.

    Links and special files in the context are refused: a build context is copied by the
    engine, and a link would carry a host file into the image.
    """
    root = dockerfile.parent
    context, total = {}, 0
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.split("/", 1)[0] in NOT_CONTEXT or path.is_dir() and not path.is_symlink():
            continue
        if path.is_symlink() or not path.is_file():
            raise ValueError(f"{path}: a link or special file in the task's build context (not supported)")
        data = path.read_bytes()
        total += len(data)
        if total > MAX_CONTEXT_BYTES:
            raise ValueError(f"{root}: build context over {MAX_CONTEXT_BYTES >> 20} MB")
        context[rel] = {"b64": base64.b64encode(data).decode(), "mode": stat.S_IMODE(path.stat().st_mode)}
    return {"dockerfile": dockerfile.name, "context": context}


def _number(value, default: float) -> float | int:
    if value is None:
        return default
    return int(value) if float(value).is_integer() else float(value)


def _script_body(text: str) -> str:
    """A shell script without its shebang line: what the agent would have typed."""
    lines = text.splitlines()
    if lines and lines[0].startswith("#!"):
        lines = lines[1:]
    return "\n".join(lines).strip()


def _files_under(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text; task files must be text") from e


def _read_tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): _text(p) for p in _files_under(root)}


def _read_app(root: Path) -> dict[str, dict]:
    return {
        p.relative_to(root).as_posix(): {"content": _text(p), "mode": stat.S_IMODE(p.stat().st_mode)}
        for p in _files_under(root)
    }
