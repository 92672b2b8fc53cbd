"""swe's preflight (vtb/preflight.py): what must hold before a SWE-bench run spends any budget.

Why: an instance with no usable eval script or no image used to fail at grading, after the
whole budget was spent on training. Here, in seconds, before the base model exists:

- every played instance (val and test; the pool is never played) gets its eval script from
  swebench (official.official_spec: the record's own, a task repo's, or swebench 4's tables),
  and its image is present (or pulled, with task.pull=true); each failure names the instance and
  the command that builds or pulls its image;
- the grader runs once on a gold item: the first test instance that passed the above is graded
  with its gold patch, on its image, with the official eval script, and must resolve (the image
  and the eval script describe the instance). Embedded instances: the same, on the run's backend.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from vtb.config import SandboxConfig, TaskConfig
from vtb.preflight import Problem, capped

PLAYED = ("test", "val")  # test first: the gold item is a test instance when one is ready
MAX_NAMED = 10  # instances named one by one; past that, one problem lists the rest (preflight.capped)
_FIX = "check the record (or its task in task.task_repo) against the data set's published form"


def real_problems(instances: list[dict], task: TaskConfig, api) -> list[Problem]:
    """Spec and image of every real instance, then one gold grading; every problem found."""
    from vtb.domains.swe import official, real

    problems: list[Problem] = []
    ready: list[tuple[dict, str]] = []
    task_repo = getattr(task, "task_repo", None)
    for inst in instances:
        iid = inst["instance_id"]
        try:
            image = real.resolve(inst, api, task)[1]
        except official.ImageUnavailable as e:
            problems.append(Problem(f"instance {iid}", _first_clause(str(e)), _after_clause(str(e))))
        except official.SpecError as e:
            problems.append(
                Problem(f"instance {iid}", f"swebench cannot make its eval script: {e.what}", e.fix)
            )
        except official.SwebenchMissing as e:
            return [Problem("swebench", str(e), official.INSTALL_HINT)]
        except ValueError as e:
            what = str(e).removeprefix(f"{iid}: ")
            problems.append(Problem(f"instance {iid}", f"swebench cannot make its eval script: {what}", _FIX))
        else:
            ready.append((inst, image))
    problems = capped(problems, MAX_NAMED)
    if ready and not problems:
        inst, image = ready[0]
        gold = {
            "instance_id": inst["instance_id"],
            "model_name_or_path": "gold",
            "model_patch": inst["patch"],
        }
        with tempfile.TemporaryDirectory(prefix="vtb-swe-preflight-") as tmp:
            try:
                report = official.grade_official(
                    inst, gold, api, Path(tmp), real.grade_limits(task), image=image, task_repo=task_repo
                )[inst["instance_id"]]
            except Exception as e:  # noqa: BLE001 (any failure here is the refusal's reason)
                report = {"resolved": False, official.ERROR_KEY: f"{type(e).__name__}: {e}"}
        if not report.get("resolved"):
            problems.append(_gold_problem(inst, image, report, task_repo))
    return problems


def embedded_problems(instances: list[dict], sandbox: SandboxConfig) -> list[Problem]:
    """The grader runs once on a gold item of the embedded miniature, on the run's backend."""
    from vtb.domains.swe import grading
    from vtb.runner import sandbox_for
    from vtb.sandbox.base import Limits

    if not instances:
        return []
    inst = instances[0]
    box = sandbox_for(replace(sandbox, gpus=None))  # no GPU to grade one gold patch
    limits = Limits(wall_seconds=120, cpu_seconds=120, memory_mb=2048, max_processes=256)
    with tempfile.TemporaryDirectory(prefix="vtb-swe-preflight-") as tmp:
        report, log = grading.grade(inst, inst["patch"], box, limits, Path(tmp))
    if report[inst["instance_id"]]["resolved"]:
        return []
    return [
        Problem(
            f"instance {inst['instance_id']}",
            f"its gold patch does not resolve on sandbox={sandbox.backend} (test log tail: {log[-300:]!r})",
            f"sandbox={sandbox.backend} cannot run the miniature's tests (python3 with pytest, git): "
            "see the log tail; scripts/build_images.sh rebuilds the docker images",
        )
    ]


def _gold_problem(inst: dict, image: str, report: dict, task_repo: str | None) -> Problem:
    from vtb.domains.swe import official

    why = report.get(official.ERROR_KEY)
    if why is None:
        status = report.get("tests_status") or {}
        failing = [t for part in status.values() for t in part.get("failure", [])]
        why = f"tests still failing: {', '.join(failing[:5]) or 'none reported'}"
    iid = inst["instance_id"]
    return Problem(
        f"instance {iid}",
        f"its gold patch does not resolve on image {image} ({why})",
        "the image or the eval script does not describe this instance: rebuild its image "
        f"(`python scripts/swe_images.py build --task-repo {task_repo or '<swebench task repo>'} -i {iid}`, "
        "offline a stand-in from a checkout at its base_commit: `python scripts/swe_images.py stand-in`), "
        "or use the task repo / data set revision that matches the record",
    )


def _first_clause(message: str) -> str:
    return message.split("; ", 1)[0]


def _after_clause(message: str) -> str:
    return message.split("; ", 1)[1] if "; " in message else message
