"""The swe domain as the pipeline sees it: SWE-bench-format instances, systems, episodes, reports.

Embedded instances are small generated Python repositories (real git repos, reproducible
commits) with one seeded bug each. The research sandbox gets the train instances in full
(research/pool.jsonl: problem statement, files, gold patch, test_patch, test ids) and only the
ids and bug templates of the val instances; val and test instances live in hidden/, and their
tests only ever enter a grading sandbox, after the model's patch.
"""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path

from vtb.config import TaskConfig
from vtb.domains import common
from vtb.domains.registry import register_domain
from vtb.domains.swe import generator, grading
from vtb.domains.swe.env import SweEpisode
from vtb.domains.swe.kit import datatools, prompting

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


@register_domain("swe")
class SweDomain(common.RowSystems):
    name, harnesses, readme, make_rows = "swe", HARNESSES, WORKSPACE_README, staticmethod(datatools.make_rows)
    reference_rows, reference_trainer, reference_harness = REFERENCE_ROWS, REFERENCE_TRAINER, "fuzzy"

    # --- provisioning -----------------------------------------------------------------------
    def provision(self, task: TaskConfig, out: Path) -> dict:
        test, val, pool = common.splits_of(task, generator.make_instances, _real_splits)
        return common.write_splits(out, pool, val, test, public=("instance_id", "bug"))

    # --- the tiny base model ----------------------------------------------------------------
    def tokenizer_spec(self, task: TaskConfig, data_dir: Path) -> dict:
        """Every piece of code and issue text the generator produces, kept exact (spaces)."""
        corpus = [_text(i) for i in self.split(data_dir, "pool")]
        for name in ("val", "test"):  # their issues and code (what a harness shows), never the fixes
            corpus += [
                i["problem_statement"] + "\n" + "\n".join(i["files"].values())
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
        return [SweEpisode(i, sandbox, scratch) for i in self.split(data_dir, split)]

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


def _text(instance: dict) -> str:
    return (
        instance["problem_statement"]
        + "\n"
        + "\n".join(instance["files"].values())
        + "\n"
        + instance["patch"]
    )


def _real_splits(task: TaskConfig) -> tuple[list[dict], list[dict], list[dict]]:
    """Real SWE-bench instances are read and checked, but not run here (see the error)."""
    from vtb.domains.swe import loaders

    if not task.path:
        raise ValueError(
            "task.source=swe_bench needs task.path=<local .json/.jsonl/.parquet or HF dataset name>"
        )
    instances = loaders.load_instances(task.path)
    raise ValueError(
        f"task.source=swe_bench: read {len(instances)} instances from {task.path}, but the bench cannot "
        "play real instances yet (their episodes need the official images' repositories, on any backend). "
        "To grade existing predictions on the official images: python -m vtb.domains.swe.evaluate "
        f"--predictions <predictions.jsonl> --dataset {task.path} (README, 'Real benchmarks'); "
        "task.source=embedded runs the bench on the generated instances"
    )
