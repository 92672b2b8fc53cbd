"""Every math system's training targets, played back as completions, are credited by the metric.

Issue 36: the initial system's rows for MATH-500 / AIME ended in a bare answer or `#### N`
while the metric wants `\\boxed{}`, so a perfect imitation of the training data scored 0. Here
each source's hand-written file in its public layout (tests/fixtures/math) is provisioned, the
initial (without its deliberate noise), reference and greedy `from-pool` rows are written as
the bench writes them, and each completion is scored by the episode reward against its item.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vtb.config import TrainerConfig
from vtb.domains.math.domain import MathConfig, MathDomain
from vtb.domains.math.kit.datatools import to_sft_row

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "math"
SOURCES = {
    "gsm8k": "gsm8k_main_test.jsonl",
    "math500": "math500_test.jsonl",
    "aime": "aimo_validation_aime.jsonl",
    "aime-yearly": "aime_2024.jsonl",
    "aime-opencompass": "aime_2025_opencompass.jsonl",
}


def provision(tmp_path: Path, name: str, **fields: object) -> tuple[MathDomain, MathConfig, Path]:
    source = name.split("-")[0]
    n = sum(1 for _ in (FIXTURES / SOURCES[name]).open())
    task = MathConfig(
        source=source, path=str(FIXTURES / SOURCES[name]), n_val=1, n_test=max(1, n // 3), **fields
    )
    domain, data = MathDomain(), tmp_path / "data"
    domain.provision(task, data)
    return domain, task, data


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def played_back(domain: MathDomain, task: MathConfig, data: Path, rows: list[dict]) -> dict[str, float]:
    """Each row's completion as the answer to the pool item its prompt came from."""
    items = {r["id"]: r for r in domain.split(data, "pool")}
    by_prompt = {to_sft_row(item)["prompt"]: item for item in items.values()}
    out = {}
    for row in rows:
        item = by_prompt[row["prompt"]]
        (episode,) = [e for e in domain.episodes(data, "pool", task) if e.problem["id"] == item["id"]]
        episode.action = {"type": "answer", "content": row["completion"].strip()}
        out[item["id"]] = episode.reward()
    return out


@pytest.mark.parametrize("name", list(SOURCES))
def test_every_systems_targets_score_one(tmp_path: Path, name: str) -> None:
    domain, task, data = provision(tmp_path, name, initial_noise=0.0)
    domain.write_initial_system(tmp_path / "initial", task, TrainerConfig(), data)
    domain.write_reference_system(tmp_path / "reference", task, data)
    subprocess.run(  # greedy's clean-data proposal, as the research sandbox runs it
        [
            sys.executable,
            "-m",
            "vtb.domains.math.kit.datatools",
            "from-pool",
            str(data / "research" / "pool.jsonl"),
            str(tmp_path / "greedy.jsonl"),
            "--n",
            "50",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    n_pool = len(domain.split(data, "pool"))
    for label, path in [
        ("initial", tmp_path / "initial" / "data" / "train.jsonl"),
        ("reference", tmp_path / "reference" / "data" / "train.jsonl"),
        ("greedy from-pool", tmp_path / "greedy.jsonl"),
    ]:
        scores = played_back(domain, task, data, read_rows(path))
        assert len(scores) == n_pool, label
        assert set(scores.values()) == {1.0}, (label, scores)


@pytest.mark.parametrize("name", ["math500", "aime"])
def test_noisy_initial_rows_stay_in_the_metrics_format(tmp_path: Path, name: str) -> None:
    """The deliberately wrong rows are wrong answers the metric can read, not unreadable ones."""
    domain, task, data = provision(tmp_path, name, initial_noise=1.0)
    domain.write_initial_system(tmp_path / "initial", task, TrainerConfig(), data)
    rows = read_rows(tmp_path / "initial" / "data" / "train.jsonl")
    assert rows and all("\\boxed{" in r["completion"] for r in rows)
    assert set(played_back(domain, task, data, rows).values()) == {0.0}


def test_clean_keeps_boxed_rows_and_drops_unanswered_ones(tmp_path: Path) -> None:
    """`datatools clean` kept only `#### N` rows, so it emptied a MATH-500 training set."""
    domain, task, data = provision(tmp_path, "math500")
    rows = [to_sft_row(p) for p in domain.split(data, "pool")]
    rows.append({"prompt": rows[0]["prompt"], "completion": " 23"})  # a bare answer: no metric credits it
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "vtb.domains.math.kit.datatools",
            "clean",
            str(src),
            str(tmp_path / "kept.jsonl"),
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert f"kept: {len(rows) - 1}" in out and "dropped: 1" in out


def test_the_shipped_harnesses_ask_and_answer_in_the_observations_format() -> None:
    """The calculator harness wrote `#### N` for every source; boxed sources need `\\boxed{N}`."""
    import importlib.util

    harnesses = ROOT / "vtb" / "domains" / "math" / "kit" / "harnesses"
    loaded = {}
    for name in ("initial", "calculator"):
        spec = importlib.util.spec_from_file_location(f"math_{name}_harness", harnesses / name / "harness.py")
        loaded[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded[name])
    item = {"question": "What is $2+3$?", "answer": "5", "answer_format": "boxed"}
    for harness in loaded.values():  # the prompt of the training rows, for either format
        assert (
            harness.prompt_of({"question": item["question"], "format": "boxed"}) == to_sft_row(item)["prompt"]
        )
        gsm = {**item, "answer": "2 + 3 = 5\n#### 5", "answer_format": "gsm8k"}
        assert (
            harness.prompt_of({"question": item["question"], "format": "gsm8k"}) == to_sft_row(gsm)["prompt"]
        )
    calc = loaded["calculator"]
    work = "$2 + 3 = 5$, so the answer is $\\boxed{5}$."
    assert calc.final_answer(work) == "5" and calc.final_answer("2 + 3 = <<2+3=5>>5\n#### 5") == "5"
    domain = MathDomain()
    for fmt, metric in (("boxed", "boxed"), ("gsm8k", "strict")):
        answer = calc.written(work, calc.final_answer(work), fmt)
        assert (
            domain.env.reward({**item, "answer": "5"}, {"type": "answer", "content": answer}, metric) == 1.0
        )
