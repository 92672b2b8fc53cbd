"""Card-format SWE-bench records completed from a swebench task repo.

Why: the data set card's schema (instance_id, repo, base_commit, patch, test_patch, FAIL_TO_PASS,
... and no eval_script) says what an instance is, not how to grade it. swebench 5 keeps that in a
task repo, its own source of truth for a data set (swebench.task.repo: tasks/<instance_id>/
task.yaml with image, log_parser and eval_type, eval.sh, Dockerfile), and its make_test_spec
reads eval_script, image, log_parser and eval_type from the instance. So a card record gets
those four from its task: read with swebench's own reader, never re-made here.

The task must describe the same instance: repo, base_commit, version and test_patch are checked
equal, because a task repo of another revision would grade other tests than the record names.
A task repo is a local folder here (clone it where there is network); swebench's harness also
clones one by its GitHub name (scripts/swe_images.py build).
"""

from __future__ import annotations

from pathlib import Path

from vtb.domains.swe.official import SpecError

FILLED = ("eval_script", "image", "log_parser", "eval_type", "image_assets")
SAME = ("repo", "base_commit", "version", "test_patch")


def task_folder(task_repo: str, iid: str) -> Path:
    """tasks/<iid> of a local task repo, or a ValueError naming what is missing and the fix."""
    from swebench.task.repo import TASK_FILE, TASKS_SUBDIR

    root = Path(task_repo).expanduser()
    if not (root / TASKS_SUBDIR).is_dir():
        raise SpecError(
            iid,
            f"task repo {task_repo} is not a local swebench task repo (no {TASKS_SUBDIR}/ folder)",
            "clone it first (git clone <its GitHub URL>) and pass the folder as task.task_repo",
        )
    folder = root / TASKS_SUBDIR / iid
    if not (folder / TASK_FILE).is_file():
        raise SpecError(
            iid,
            f"not in the task repo {task_repo} (no {TASKS_SUBDIR}/{iid}/{TASK_FILE}): swebench knows "
            "no eval script for it",
            "use the task repo that publishes this data set",
        )
    return folder


def complete(instance: dict, task_repo: str) -> dict:
    """The record with eval_script, image, log_parser and eval_type from its task in `task_repo`."""
    from swebench.task.repo import load_task

    iid = instance["instance_id"]
    task = load_task(task_folder(task_repo, iid))
    for field in SAME:
        mine, theirs = instance.get(field), task.get(field)
        if mine in (None, "") or theirs is None:
            continue
        if str(mine).rstrip("\n") != str(theirs).rstrip("\n"):
            raise SpecError(
                iid,
                f"the task repo {task_repo} has {field} {_short(theirs)}, the record {_short(mine)}: "
                "another revision of the instance",
                "use the task repo of this data set's revision",
            )
    return {**instance, **{k: task[k] for k in FILLED if task.get(k)}}


def _short(value: object) -> str:
    text = str(value)
    return repr(text[:60]) + ("..." if len(text) > 60 else "")
