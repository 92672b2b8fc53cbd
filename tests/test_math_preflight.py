"""The math domain's preflight (vtb/domains/math/checks.py), on files in the public layouts.

Each failure class that scored every system 0 without a word is refused here, before a model
exists: a gold answer the metric cannot parse (named by item), an empty answer, and systems whose
training targets the metric does not credit (the MATH-500 / AIME rows of issue 36).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_math_targets import FIXTURES, SOURCES, provision
from vtb.config import SandboxConfig, TrainerConfig
from vtb.domains.math import checks
from vtb.domains.math.domain import MathConfig, MathDomain
from vtb.preflight import Systems


def systems(tmp_path: Path, domain: MathDomain, task: MathConfig, data: Path) -> Systems:
    domain.write_initial_system(tmp_path / "initial", task, TrainerConfig(), data)
    domain.write_reference_system(tmp_path / "reference", task, data)
    return Systems(tmp_path / "initial", tmp_path / "reference")


def refusal(tmp_path: Path, domain: MathDomain, task: MathConfig, data: Path) -> str:
    problems = domain.preflight(task, data, systems(tmp_path, domain, task, data), SandboxConfig())
    return "\n".join(map(str, problems))


@pytest.mark.parametrize("name", list(SOURCES))
def test_every_public_layout_passes(tmp_path: Path, name: str) -> None:
    domain, task, data = provision(tmp_path, name)
    assert refusal(tmp_path, domain, task, data) == ""


def test_the_embedded_miniature_passes(tmp_path: Path) -> None:
    domain, task = MathDomain(), MathConfig(n_pool=300, n_val=20, n_test=20)
    domain.provision(task, tmp_path / "data")
    assert refusal(tmp_path, domain, task, tmp_path / "data") == ""


def test_a_gsm8k_answer_without_its_final_line_is_named(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in (FIXTURES / SOURCES["gsm8k"]).read_text().splitlines()]
    rows[4]["answer"] = rows[4]["answer"].split("\n####")[0]  # the `#### N` line lost
    path = tmp_path / "gsm8k.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = MathConfig(source="gsm8k", path=str(path), n_val=2, n_test=4)
    domain, data = MathDomain(), tmp_path / "data"
    domain.provision(task, data)
    message = refusal(tmp_path, domain, task, data)
    assert "item gsm8k-test-00004" in message
    assert (
        "no final `#### N` line the strict metric can parse" in message and "Fix: correct or drop" in message
    )
    assert message.count("\n") == 0  # one problem: its training rows are not blamed on the systems


def test_an_empty_math500_answer_is_named(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in (FIXTURES / SOURCES["math500"]).read_text().splitlines()]
    rows[0]["answer"] = " "
    path = tmp_path / "math500.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    domain, task, data = (
        MathDomain(),
        MathConfig(source="math500", path=str(path), n_val=2, n_test=4),
        tmp_path / "d",
    )
    domain.provision(task, data)
    message = refusal(tmp_path, domain, task, data)
    assert "item test/prealgebra/1001.json" in message and "is empty" in message


def test_targets_the_metric_cannot_credit_are_refused(tmp_path: Path) -> None:
    """The rows of issue 36 (a bare answer after a GSM8K prompt) for a MATH-500 task."""
    domain, task, data = provision(tmp_path, "math500")
    pool = domain.split(data, "pool")
    bare = [{"prompt": f"Question: {p['question']}\nAnswer:", "completion": " " + p["answer"]} for p in pool]
    found = checks.targets(pool, task.metric, systems(tmp_path, domain, task, data), bare)
    assert [p.where for p in found] == ["system initial (clean rows)"]
    assert "no training row is a pool problem's prompt" in found[0].what  # the prompt is not the boxed one
    same_prompt = [
        {**b, "prompt": checks.datatools.to_sft_row(p)["prompt"]} for b, p in zip(bare, pool, strict=True)
    ]
    (p,) = checks.targets(pool, task.metric, systems(tmp_path, domain, task, data), same_prompt)
    assert f"{len(pool)} of {len(pool)} training targets score 0 under the boxed metric" in p.what
    (tmp_path / "reference" / "data" / "train.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in same_prompt)
    )
    (tmp_path / "initial" / "data" / "train.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in same_prompt)
    )
    found = domain.preflight(
        task, data, Systems(tmp_path / "initial", tmp_path / "reference"), SandboxConfig()
    )
    assert [p.where for p in found] == ["system reference", "system initial"]
    assert "with no answer the boxed metric can read" in found[1].what


def test_a_metric_that_cannot_read_the_sources_answers_is_refused_with_the_metric_as_the_fix(
    tmp_path: Path,
) -> None:
    """task.metric=strict on MATH-500: fractions cannot be written as `#### N` (warned, then refused)."""
    domain, task, data = provision(tmp_path, "math500", metric="strict")
    message = refusal(tmp_path, domain, task, data)
    assert "the strict metric does not credit its own gold answer '\\\\frac{3}{4}'" in message
    assert "Fix: drop task.metric to grade with the source's own metric" in message
    domain, task, data = provision(
        tmp_path / "aime", "aime", metric="strict"
    )  # integers: `#### N` reads them
    assert refusal(tmp_path / "aime", domain, task, data) == ""
