"""The swe domain as the pipeline sees it: SWE-bench-format instances, systems, episodes, reports.

Embedded instances are small generated Python repositories (real git repos, reproducible
commits) with one seeded bug each. The research sandbox gets the train instances in full
(research/pool.jsonl: problem statement, files, gold patch, test_patch, test ids) and only the
ids and bug templates of the val instances; val and test instances live in hidden/, and their
tests only ever enter a grading sandbox, after the model's patch.
"""

from __future__ import annotations

import difflib
import json
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

from vtb.config import SandboxConfig, TaskConfig, TrainerConfig
from vtb.domains import common
from vtb.domains.registry import register_domain
from vtb.domains.swe import checks, generator, grading, real
from vtb.domains.swe.env import SweEpisode
from vtb.domains.swe.kit import datatools, prompting
from vtb.preflight import Problem, Systems
from vtb.serve import transcript

HARNESSES = Path(__file__).parent / "kit" / "harnesses"
REFERENCE_TRAINER = {"method": "full", "lr": 3e-3, "epochs": 6, "batch_size": 16, "lr_schedule": "cosine"}
REFERENCE_ROWS = 500

WORKSPACE_README = """# Workspace of the agent system (swe: fix a bug in a small Python repository)

- data/train.jsonl  SFT rows {"prompt": "issue: ...\\nfile: <path>\\n<function lines>\\nfix: ",
  "completion": "<old line> => <new line>\\n"} (vtb/domains/swe/kit/prompting.py).
- trainer/config.json  settings of vtb.engine.sft (see the math README for the fields).
- harness/harness.py  the agent: speaks the JSON-lines protocol (vtb/protocol.py). The start
  message carries the problem statement and the repository's files; it answers
  {"type": "patch", "patch": "<unified diff>"}. The model: an OpenAI-compatible server
  at $OPENAI_BASE_URL (key $OPENAI_API_KEY; vtb/serve/client.py or any OpenAI client).
- /data/pool.jsonl  train instances in the SWE-bench schema (with patch, test_patch, FAIL_TO_PASS,
  PASS_TO_PASS, files, fix); /data/val.jsonl  val instance ids and bug templates only.
- Data tools: python -m vtb.domains.swe.kit.datatools {from-pool,check,clean} --help
"""


@dataclass
class SweConfig(TaskConfig):
    """The swe task's own settings; all but the first two matter only for task.source=swe_bench."""

    # Real SWE-bench: task.path is the TEST split (e.g. SWE-bench Verified). pool_path / val_path:
    # other splits in the same schema (SWE-bench's dev split, SWE-Gym); without them the splits
    # are cut from task.path (real.py), and they are always checked disjoint.
    pool_path: str | None = None
    val_path: str | None = None
    max_steps_per_episode: int = 30  # shell commands per real episode
    agent_seconds: float = 600.0  # an episode's time in its shell
    grade_seconds: float = 1800.0  # wall time of one official grading run
    image_namespace: str | None = None  # official.official_spec: None = every known name
    image: str | None = None  # an explicit image name ("{instance_id}" filled in)
    pull: bool = False  # pull a missing image (needs network on the engine)
    # A swebench task repo (local folder: tasks/<instance_id>/eval.sh, task.yaml): completes records
    # in the data set card's schema (no eval_script) with their eval script, image and log parser.
    task_repo: str | None = None


@register_domain("swe")
class SweDomain:
    config = SweConfig
    name = "swe"
    rows = common.RowSystems(datatools.make_rows, WORKSPACE_README, REFERENCE_ROWS, REFERENCE_TRAINER)

    # --- the initial and reference systems --------------------------------------------------
    def harness_for(self, task: TaskConfig, system: str) -> Path:
        """The shipped harness folder of the "initial" or "reference" system; real instances get
        the shell harness for both (their start message has no files to edit)."""
        if task.source != "embedded":
            return HARNESSES / "shell"
        return HARNESSES / ("plain" if system == "initial" else "fuzzy")

    def write_initial_system(
        self, ws: Path, task: TaskConfig, trainer: TrainerConfig, data_dir: Path
    ) -> None:
        self.rows.write_initial(ws, task, trainer, data_dir, self.harness_for(task, "initial"))

    def write_reference_system(self, ws: Path, task: TaskConfig, data_dir: Path) -> None:
        self.rows.write_reference(ws, task, data_dir, self.harness_for(task, "reference"))

    def split(self, data_dir: Path, name: str) -> list[dict]:
        return common.read_split(data_dir, name)

    # --- provisioning -----------------------------------------------------------------------
    def provision(self, task: TaskConfig, out: Path) -> dict:
        test, val, pool = common.splits_of(task, generator.make_instances, real.splits)
        return common.write_splits(out, pool, val, test, public=("instance_id", "bug"))

    # --- the tiny base model ----------------------------------------------------------------
    def tokenizer_spec(self, task: TaskConfig, data_dir: Path) -> dict:
        """Every piece of code and issue text the generator produces, kept exact (spaces).

        Real instances carry no files: their vocabulary is the pool's issues and gold patches and
        the val/test issues (what a harness is shown), never a val/test fix.
        """
        corpus = [_text(i) for i in self.split(data_dir, "pool")]
        for name in ("val", "test"):  # their issues and code (what a harness shows), never the fixes
            corpus += [
                i["problem_statement"] + "\n" + "\n".join(i.get("files", {}).values())
                for i in self.split(data_dir, name)
            ]
        return {"words": corpus, "number_max": 99, "mode": "exact"}

    def pretraining_texts(self, task: TaskConfig, data_dir: Path, n: int, seed: int) -> list[str]:
        """Code text a base model could have read: functions, and issues followed by their fix.

        Train instances and other generated repos (like the code and commit history a real base
        model has read), in plain text: an issue, the function, and the fix as `-`/`+` lines;
        never the prompt format, never a val/test issue. (In the terminal domain, pre-training
        on task texts apart from their solutions left the 1M model unable to copy values.)
        Single functions rather than whole files: whole files made each step ~3x dearer.
        """
        held_out = {i["problem_statement"] for name in ("val", "test") for i in self.split(data_dir, name)}
        if task.source != "embedded":  # real instances: an issue, then its gold patch (pool only)
            texts = [
                f"{i['problem_statement']}\n{i['patch']}"
                for i in self.split(data_dir, "pool")
                if i["problem_statement"] not in held_out
            ]
            if not texts:
                raise ValueError("swe_bench: the pool has no instance to pre-train on (task.pool_path?)")
            rng = random.Random(seed)
            return [rng.choice(texts) for _ in range(n)]
        extra = generator.make_instances(seed + 104729, 400, "pretrain", set())
        pairs, functions = [], []
        for inst in self.split(data_dir, "pool") + extra:
            found = datatools.view(inst)
            if inst["problem_statement"] in held_out or found is None:
                continue
            old, new = datatools.gold_edit(inst)
            pairs.append(
                f"{prompting.title(inst['problem_statement'])}\n"
                + "\n".join(found[1])
                + f"\n- {old}\n+ {new}"
            )
            functions += _functions(inst["files"])
        rng = random.Random(seed)
        return [rng.choice(pairs if rng.random() < 0.5 else functions) for _ in range(n)]

    # --- episodes and scores ----------------------------------------------------------------
    def episodes(self, data_dir: Path, split: str, task: TaskConfig, sandbox=None) -> list[SweEpisode]:
        if sandbox is None:
            raise ValueError("swe episodes apply patches and run tests: they need a sandbox")
        scratch = Path(tempfile.mkdtemp(prefix=f"vtb-swe-{split}-"))
        instances = self.split(data_dir, split)
        if all("files" in i for i in instances):
            return [SweEpisode(i, sandbox, scratch) for i in instances]
        return [shell_episode(i, sandbox, scratch, task) for i in instances]

    def preflight(
        self, task: TaskConfig, data_dir: Path, systems: Systems, sandbox: SandboxConfig
    ) -> list[Problem]:
        """vtb/preflight.py: the backend runs every task's environment, every played instance has
        its eval script and image, and the grader resolves a gold item (checks.py)."""
        try:
            self.check_sandbox(data_dir, sandbox.backend)
        except ValueError as e:
            return [Problem(f"sandbox={sandbox.backend}", str(e), "use sandbox=docker")]
        played = [i for name in checks.PLAYED for i in self.split(data_dir, name)]
        embedded = [i for i in played if "files" in i]
        problems = checks.embedded_problems(embedded, sandbox)
        reals = [i for i in played if "files" not in i]
        if reals:
            from vtb.domains.swe import official

            try:
                api = official.docker_api()
            except RuntimeError as e:
                return [*problems, Problem("sandbox=docker", str(e), "start the Docker Engine")]
            problems += checks.real_problems(reals, task, api)
        return problems

    def check_sandbox(self, data_dir: Path, backend: str) -> None:
        """Refuse, at provisioning, real instances on a backend that cannot run their images."""
        if backend == "docker":
            return
        real_ids = [
            i["instance_id"]
            for n in ("pool", "val", "test")
            for i in self.split(data_dir, n)
            if "files" not in i
        ]
        if real_ids:
            shown = ", ".join(real_ids[:3]) + (f" and {len(real_ids) - 3} more" if len(real_ids) > 3 else "")
            raise ValueError(
                f"swe_bench instances ({shown}) run in their official SWE-bench images: use sandbox=docker "
                f"(not sandbox={backend}); to grade existing predictions: python -m vtb.domains.swe.evaluate"
            )

    # The written check (vtb/provenance.py): the lines a scored patch adds must be the model's writing.
    def written_lines(self, episode) -> list[tuple[str, list[str]]]:
        return new_text(episode.prediction()["model_patch"])

    def metrics(self, episodes: list[SweEpisode], task: TaskConfig) -> dict:
        reports = {ep.id: ep.grade()[0][ep.id] for ep in episodes}
        by_bug: dict[str, list[float]] = {}
        for ep in episodes:
            by_bug.setdefault(ep.instance.get("bug", "?"), []).append(ep.reward())
        return {
            "resolved": sum(r["resolved"] for r in reports.values()),
            "patch_applied": sum(r["patch_successfully_applied"] for r in reports.values()),
            "empty_patches": sum(not r["patch_exists"] for r in reports.values()),
            "by_bug": {k: round(sum(v) / len(v), 3) for k, v in sorted(by_bug.items())},
        }

    def artifacts(self, episodes: list[SweEpisode]) -> dict:
        """SWE-bench's files: per-instance report.json, the predictions and the run report."""
        out: dict = {f"logs/{ep.id}/report.json": ep.grade()[0] for ep in episodes}
        out["predictions.jsonl"] = "".join(json.dumps(ep.prediction()) + "\n" for ep in episodes)
        reports = {ep.id: ep.grade()[0][ep.id] for ep in episodes}
        out["report.json"] = grading.run_summary(reports, [ep.id for ep in episodes])
        return out


def _functions(files: dict[str, str]) -> list[str]:
    """The top-level functions of a repository's source files, one text each."""
    out = []
    for path, text in files.items():
        if path.endswith(".py") and not path.startswith("tests/"):
            out += ["def " + part.strip() for part in ("\n" + text).split("\ndef ")[1:]]
    return out


def shell_episode(instance: dict, sandbox, scratch: Path, task: TaskConfig) -> real.SweShellEpisode:
    """A real instance's episode: shell commands in its official image (real.py)."""
    return real.SweShellEpisode(
        instance,
        sandbox,
        scratch,
        real.image_of(instance, sandbox, task),
        max_steps=getattr(task, "max_steps_per_episode", 30),
        agent_seconds=getattr(task, "agent_seconds", 600.0),
        grade_limits=real.grade_limits(task),
        task_repo=getattr(task, "task_repo", None),
    )


def _text(instance: dict) -> str:
    return (
        instance["problem_statement"]
        + "\n"
        + "\n".join(instance.get("files", {}).values())
        + "\n"
        + instance["patch"]
    )


EDITED = 0.5  # an added line this similar to a removed one of its change edits it


def new_text(patch: str) -> list[tuple[str, list[str]]]:
    """What a patch writes that was not there before: each added line with the pieces an edit put
    into it ([the line] itself when it edits no removed line of its change).

    The written check (vtb/provenance.py) asks whether the model wrote these. A model that fixes
    `return total / len(xs)` with `sed -i 's|len(xs)$|len(xs) if xs else 0.0|'` never writes the
    whole new line; it writes the piece that changed, widened to words until it says something
    (`transcript.piece`), which is then what is checked. A deletion inside a line counts as a
    change at that place."""
    out: list[tuple[str, list[str]]] = []
    removed: list[str] = []
    added: list[str] = []

    def flush() -> None:
        for new in added:  # against the removed line it edits, if it edits one
            scored = [(difflib.SequenceMatcher(None, old, new, autojunk=False), old) for old in removed]
            best = max(scored, key=lambda m: m[0].ratio(), default=None)
            if best is None or best[0].ratio() < EDITED:
                out.append((new, [new]))
            else:
                ops = best[0].get_opcodes()
                spans = [(b1, b2) for tag, _, _, b1, b2 in ops if tag in ("insert", "replace", "delete")]
                out.append((new, sorted({transcript.piece(new, b1, b2) for b1, b2 in spans} - {""})))
        removed.clear()
        added.clear()

    for line in patch.splitlines():
        if line.startswith(("+++", "---")):
            continue
        if line.startswith("+"):
            added.append(line[1:])
        elif line.startswith("-"):
            if added:  # a new block of removals after additions: a new change
                flush()
            removed.append(line[1:])
        else:
            flush()
    flush()
    return out
