"""Real SWE-bench instances in the bench: their splits, and shell episodes in their official images.

Splits. SWE-bench (Verified) is a test set, so `task.path` is the test split. With
`task.pool_path` (e.g. SWE-gym, or SWE-bench's dev split) the whole of task.path is graded, the
pool is that file (its first n_pool), and val is `task.val_path`'s first n_val or, without it, the
first n_val of the pool's public data_seed shuffle (val_path without pool_path is refused: the
pool is never cut from the test file). With neither, the three are a fixed cut of task.path
(salt.cut_records: val = the first n_val of the data_seed shuffle, test = n_test of the rest by
the salted seed, the pool what is left). The three are checked disjoint by instance_id AND by
(repo, base_commit): two ids on one commit of one repository would let a pool instance's gold
patch describe a test instance's repository; the error names the overlapping ids.

Episodes. As mini-swe-agent plays SWE-bench: the harness gets the repository name and the problem
statement only (an allow-list; never patch, test_patch, FAIL_TO_PASS or PASS_TO_PASS), and acts
with {"type": "shell", "command": ...} in a persistent bash in a container from the instance's
image (workdir /testbed, no network), until {"type": "answer"} or {"type": "patch", "patch": ...}.
The prediction is then the diff of /testbed against base_commit, taken in a fresh container from
the final state (untrusted output: bounded, git's hooks, external diff and textconv off), or the
explicit patch. Grading is official.py's, on a fresh container from the ORIGINAL image: the test
patch exists only there, never in the container the agent acted in.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from vtb import salt
from vtb.config import TaskConfig
from vtb.domains import common
from vtb.domains.shell import ImageState, ShellTurns
from vtb.domains.swe import official
from vtb.sandbox.base import Limits

MAX_PATCH_CHARS = 1 << 20  # a prediction longer than this is cut off (and will not apply)
DIFF_LIMITS = Limits(wall_seconds=60, cpu_seconds=60, memory_mb=1024, max_processes=64)
GRADE_LIMITS = Limits(wall_seconds=600, cpu_seconds=1200, memory_mb=4096, max_processes=1024)
SHELL_MEMORY_MB = 4096
COMMAND_SECONDS = 120.0  # one command's wall time: past it the shell restarts (the files stay)
SHELL_PROCESSES = 512
# git in the agent's final state: no config but the repository's, and none of its programs run.
GIT = (
    "env GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 GIT_PAGER=cat GIT_EXTERNAL_DIFF= LC_ALL=C "
    "git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c diff.external= -c core.pager=cat"
)
START_FIELDS = ("repo", "problem_statement")  # all the harness ever sees of an instance


# --- splits ---------------------------------------------------------------------------------
def splits(task: TaskConfig) -> tuple[list[dict], list[dict], list[dict]]:
    """(test, val, pool) of real instances: task.path is test, pool/val from their own files or cut."""
    from vtb.domains.swe import loaders

    if not task.path:
        raise ValueError(
            "task.source=swe_bench needs task.path=<local .json/.jsonl/.parquet or HF dataset name> "
            "(the test instances; task.pool_path / task.val_path: optional other splits)"
        )
    records = loaders.load_instances(task.path)
    pool_path, val_path = getattr(task, "pool_path", None), getattr(task, "val_path", None)
    if pool_path is None and val_path is None:
        test, val, pool = salt.cut_records(records, task)
    elif pool_path is None:
        raise ValueError("task.val_path needs task.pool_path too (the pool is never cut from the test split)")
    else:  # task.path is the test split, whole: every one of its instances is graded
        test = records
        pool = loaders.load_instances(pool_path, split="train")
        if val_path:
            val = loaders.load_instances(val_path, split="dev")[: task.n_val]
        else:  # val = the first n_val of the pool's public data_seed shuffle
            pool = list(pool)
            random.Random(task.data_seed).shuffle(pool)
            val, pool = pool[: task.n_val], pool[task.n_val :]
        pool = pool[: task.n_pool]
    check_disjoint({"pool": pool, "val": val, "test": test})
    return test, val, pool


def check_disjoint(named: dict[str, list[dict]]) -> None:
    """Raise naming every instance two splits share, by instance_id or by (repo, base_commit)."""
    problems = []
    names = list(named)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            ids_b = {r["instance_id"] for r in named[b]}
            same_id = sorted(r["instance_id"] for r in named[a] if r["instance_id"] in ids_b)
            commits_b = {(r["repo"], r["base_commit"]): r["instance_id"] for r in named[b]}
            same_commit = sorted(
                f"{r['instance_id']} ~ {commits_b[key]}"
                for r in named[a]
                if (key := (r["repo"], r["base_commit"])) in commits_b and r["instance_id"] not in ids_b
            )
            if same_id:
                problems.append(f"{a} and {b} share instance_id {', '.join(same_id)}")
            if same_commit:
                problems.append(f"{a} and {b} share (repo, base_commit): {', '.join(same_commit)}")
    if problems:
        raise ValueError("SWE-bench splits overlap: " + "; ".join(problems))


# --- episodes -------------------------------------------------------------------------------
class SweShellEpisode:
    """One real instance played with shell commands in its image; graded on a fresh original image."""

    def __init__(
        self,
        instance: dict,
        sandbox,
        scratch: Path,
        image: str,
        max_steps: int = 30,
        agent_seconds: float = 600.0,
        grade_limits: Limits = GRADE_LIMITS,
        model_name: str = "vtb-system",
        task_repo: str | None = None,
    ) -> None:
        self.instance, self.sandbox, self.image, self.max_steps = instance, sandbox, image, max_steps
        self.id = instance["instance_id"]
        self.scratch, self.agent_seconds, self.grade_limits = scratch, agent_seconds, grade_limits
        self.model_name, self.task_repo = model_name, task_repo
        self.state = ImageState(sandbox, image, official.WORKDIR)
        self.explicit_patch: str | None = None
        self.model_patch = ""
        self._graded = common.BackgroundGrade(self._grade)
        self.turns = ShellTurns(
            sandbox,
            None,
            self.state,
            max_steps=max_steps,
            seconds=agent_seconds,
            memory_mb=SHELL_MEMORY_MB,
            max_processes=SHELL_PROCESSES,
            on_over=self._graded.start,
            ends=("answer", "message", "patch"),
            not_run="a shell command, a patch or an answer",
            command_seconds=COMMAND_SECONDS,
        )

    history = property(lambda self: self.turns.history)
    finished = property(lambda self: self.turns.finished)
    timeout = property(lambda self: self.turns.timeout)
    failure = property(lambda self: self.turns.failure)
    over = property(lambda self: self.turns.over)

    def message(self, fresh: bool) -> dict:
        from vtb.runner import protocol_message

        observation = {k: self.instance[k] for k in START_FIELDS}
        observation |= {"history": self.history, "max_steps": self.max_steps}
        return protocol_message(self.id, "swe", observation, fresh)

    def step(self, action: dict) -> bool:
        if isinstance(action, dict) and action.get("type") == "patch":  # read before the grade starts
            patch = action.get("patch")
            self.explicit_patch = patch[:MAX_PATCH_CHARS] if isinstance(patch, str) else ""
        return self.turns.step(action)

    def fail(self, reason: str) -> None:
        self.turns.fail(reason)

    # --- the prediction and its grade -------------------------------------------------------
    def final_diff(self) -> str:
        """`git diff` of /testbed against base_commit in the final state (new files included)."""
        if self.state.current == self.image:
            return ""  # no shell ever ran: nothing changed
        base = self.instance["base_commit"]
        script = (
            f"cd {official.WORKDIR} && {GIT} add -A >/dev/null 2>&1; "
            f"{GIT} diff --cached --no-color --no-ext-diff --no-textconv --binary {base} --"
        )
        view = self.sandbox.with_image(self.state.current)
        done = view.run(
            ["/bin/bash", "--noprofile", "--norc", "-c", script],
            mounts=[],
            limits=DIFF_LIMITS,
            cwd="/",
            env={"PS1": "", "TERM": "dumb"},
        )
        if done.returncode != 0 or done.killed:
            return ""
        return done.stdout[:MAX_PATCH_CHARS]

    def prediction(self) -> dict:
        """The SWE-bench prediction of this episode (its diff is taken once the episode is over)."""
        self.grade()
        return self._prediction()

    def _prediction(self) -> dict:
        return {
            "instance_id": self.id,
            "model_name_or_path": self.model_name,
            "model_patch": self.model_patch,
        }

    def _grade(self) -> tuple[dict, str]:
        work = self.scratch / self.id
        try:
            self.model_patch = self.explicit_patch if self.explicit_patch is not None else self.final_diff()
            report = official.grade_official(
                self.instance,
                self._prediction(),
                self.sandbox.api,
                work,
                self.grade_limits,
                image=self.image,
                task_repo=self.task_repo,
            )
            log = work / "test_output.txt"
            text = log.read_text(errors="replace")[-20000:] if log.is_file() else ""
            return report, text
        except Exception as e:  # noqa: BLE001 (an instance that cannot be graded costs only itself)
            return official.error_report(self.id, f"{type(e).__name__}: {e}"), ""
        finally:
            self.state.release()
            shutil.rmtree(work, ignore_errors=True)

    def grade(self) -> tuple[dict, str]:
        """SWE-bench's report.json content ({iid: {...}}) and the graded test log (once)."""
        self.turns.close()
        return self._graded.result()

    def reward(self) -> float:
        return 1.0 if self.grade()[0][self.id]["resolved"] else 0.0

    def record(self) -> dict:
        report, log = self.grade()
        return {
            "id": self.id,
            "reward": self.reward(),
            "finished": self.finished,
            "timeout": self.timeout,
            "failure": self.failure,
            "history": self.history,
            "prediction": self.prediction(),
            "report": report[self.id],
            "test_log_tail": log[-2000:],
        }


def grade_limits(task: TaskConfig) -> Limits:
    """One official grading's limits: task.grade_seconds of wall time, four times that of CPU."""
    seconds = float(getattr(task, "grade_seconds", 1800.0))
    return Limits(
        wall_seconds=seconds,
        cpu_seconds=4 * seconds,
        memory_mb=GRADE_LIMITS.memory_mb,
        max_processes=GRADE_LIMITS.max_processes,
    )


def image_of(instance: dict, sandbox, task: TaskConfig) -> str:
    """The instance's image, as official.py resolves it (the spec's name, local, namespaced)."""
    if not hasattr(sandbox, "with_image"):
        raise ValueError(
            f"{instance['instance_id']}: a real SWE-bench instance runs in its official image; "
            f"sandbox={getattr(sandbox, 'name', '?')} cannot, use sandbox=docker"
        )
    return resolve(instance, sandbox.api, task)[1]


def resolve(instance: dict, api, task: TaskConfig) -> tuple[official.Official, str]:
    """(swebench's spec, the image present here) of a real instance, as the bench's config asks."""
    task_repo = getattr(task, "task_repo", None)
    spec = official.official_spec(
        instance, getattr(task, "image_namespace", None), getattr(task, "image", None), task_repo
    )
    pull = bool(getattr(task, "pull", False))
    return spec, official.resolve_image(api, spec.images, pull, instance["instance_id"], task_repo)
