"""The terminal domain's preflight (vtb/preflight.py): what would otherwise fail after the budget is spent.

Before the base model or any budget, on the tasks of every split:

- a multi-container task (a docker-compose.yaml with services beyond the task's own) is refused
  by name: one container per episode is what this project runs;
- a task built from its Dockerfile needs sandbox=docker (bwrap would start it with an empty /app);
- on docker, the image of every such task a bench plays (val and test; pool tasks are training
  data, never played) is built now, or found by its content tag: a Dockerfile that cannot build
  (or not within its build_timeout_sec) is refused here, naming the task and the build's last
  lines, not at grading after the budget was spent;
- the grader runs on one task with a gold solution (a test task first): the solution, played as
  one shell command, must resolve, and doing nothing must not. A task whose tests cannot pass
  here (offline, without what its test script downloads) would score every system 0.

One gold task, not all: each play is a sandboxed shell and a test run (seconds on docker).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from vtb.config import SandboxConfig
from vtb.domains.terminal import images
from vtb.domains.terminal.env import TerminalEpisode
from vtb.preflight import SPLITS, Problem, sample, some
from vtb.runner import sandbox_for

LOG_LINES = 6  # of a test log, quoted in a refusal
NEEDS_DOCKER_FIX = "run it with sandbox=docker (the image is built offline; see task.base_images)"


def needs_docker(ids: list[str], backend: str) -> str:
    """Why tasks built from their Dockerfile cannot run on `backend` (the fix: NEEDS_DOCKER_FIX)."""
    shown = some(ids, 5)
    return (
        f"task {shown}: its environment is built from its Dockerfile (RUN / ADD / COPY steps beyond "
        f"app/), which sandbox={backend} cannot build, so /app would start without its inputs"
    )


def problems(domain, task, data_dir: Path, sandbox_cfg: SandboxConfig) -> list[Problem]:
    """Every problem found, in the order a user would fix them; [] when the run can go ahead."""
    splits = {s: domain.split(data_dir, s) for s in SPLITS}
    tasks = [t for s in SPLITS for t in splits[s]]
    found = [_multi_container(t) for t in tasks if t.get("compose")]
    built_ids = [t["id"] for t in tasks if "environment" in t]
    if built_ids and sandbox_cfg.backend != "docker":
        backend = sandbox_cfg.backend
        found.append(Problem(f"sandbox={backend}", needs_docker(built_ids, backend), NEEDS_DOCKER_FIX))
    if found:
        return found
    try:
        sandbox = sandbox_for(replace(sandbox_cfg, gpus=None))  # no GPU to check data
    except RuntimeError as e:
        return [Problem(f"sandbox={sandbox_cfg.backend}", str(e), "start the engine or use sandbox=bwrap")]
    built: dict[str, tuple[str, str]] = {}
    for t in splits["val"] + splits["test"]:
        if "environment" in t:
            try:
                built[t["id"]] = images.built_image(sandbox, t, task.base_map(), task.build_network)
            except images.BuildError as e:
                found.append(Problem(f"task {t['id']}", e.detail(), e.fix))
    if found:
        return found
    gold = next((t for s in ("test", "val", "pool") for t in sample(splits[s]) if t.get("solution")), None)
    return _gold_problems(gold, sandbox, built.get(gold["id"])) if gold else []


def _multi_container(t: dict) -> Problem:
    compose = t["compose"]
    return Problem(
        f"task {t['id']}",
        f"its {compose['file']} declares the services {', '.join(compose['services'])}: a multi-container "
        "task (this project runs each episode in one container, with no network between containers)",
        "remove the task from task.path, or run it with Harbor / Terminal-Bench themselves",
    )


def _gold_problems(t: dict, sandbox, image: tuple[str, str] | None) -> list[Problem]:
    """The gold solution resolves its task and doing nothing does not, graded as a bench grades."""
    scratch = Path(tempfile.mkdtemp(prefix="vtb-preflight-"))
    try:
        gold, gold_log = _play(t, sandbox, scratch / "gold", image, [t["solution"]])
        nothing, _ = _play(t, sandbox, scratch / "nothing", image, [])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    where = f"item {t['id']} (gold check)"
    found = []
    if not gold:
        found.append(
            Problem(
                where,
                "its gold solution does not pass its own tests here, so no system could score on it; "
                f"the test log ends: {_last_lines(gold_log)}",
                "make the task's tests run offline in its environment (a run-tests.sh / test.sh that "
                "installs pytest with curl or uv needs it in the image already), or remove the task",
            )
        )
    if nothing:
        found.append(
            Problem(where, "doing nothing passes its tests", "fix the task's tests: they check nothing")
        )
    return found


def _last_lines(log: str) -> str:
    lines = [x.strip()[:200] for x in log.splitlines() if x.strip() and x.strip() != "--- stderr ---"]
    return " | ".join(lines[-LOG_LINES:])


def _play(t: dict, sandbox, scratch: Path, image, commands: list[str]) -> tuple[bool, str]:
    """Play `commands` as one episode of task `t`, then grade it: (resolved, test log)."""
    ep = TerminalEpisode(t, 0, sandbox, scratch, max_steps=len(commands) + 1, image=image)
    for command in commands:
        ep.step({"type": "shell", "command": command})
    ep.step({"type": "answer"})
    statuses, log = ep.grade()
    return ep.reward() == 1.0, log
