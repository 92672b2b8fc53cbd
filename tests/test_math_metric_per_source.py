"""The metric follows the math source (issue 18): boxed for MATH-500/AIME, strict for GSM8K.

Rows in each data set's own schema go through the real loader and provisioning, and the
episodes the domain builds are scored, so a default that silently scores 0 shows up here.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from vtb.compose import compose_config
from vtb.domains.math import loaders
from vtb.domains.math.domain import MathConfig, MathDomain

N = 12  # rows per file: 4 test, 2 val, 6 pool


def math500_rows(fractions: bool = True) -> list[dict]:
    """MATH-500 schema; answers like `\\frac{3}{2}` (only boxed can grade them), or integers."""
    return [
        {
            "problem": f"Simplify $\\frac{{{2 * i}}}{{4}}$ (problem {i}).",
            "solution": "...",
            "answer": f"\\frac{{{i}}}{{2}}" if fractions else str(i),
            "subject": "Algebra",
            "level": 1,
            "unique_id": f"test/algebra/{i}.json",
        }
        for i in range(1, N + 1)
    ]


def aime_rows() -> list[dict]:
    return [
        {"id": i, "problem": f"Find the remainder {i}.", "solution": "...", "answer": 100 + i, "url": "u"}
        for i in range(N)
    ]


def gsm8k_rows() -> list[dict]:
    return [
        {"question": f"Tom has {i} apples. How many?", "answer": f"He has {i}.\n#### {i}"} for i in range(N)
    ]


ROWS = {"math500": math500_rows, "aime": aime_rows, "gsm8k": gsm8k_rows}


def correct(source: str, row: dict) -> str:
    """A right answer in the source's own format."""
    if source == "gsm8k":
        return "He has some.\n#### " + row["answer"].rsplit("#### ", 1)[1]
    return f"So the answer is $\\boxed{{{row['answer']}}}$."


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loaders, "_warned", set())


def provisioned(
    tmp_path: Path, source: str, rows: list[dict] | None = None, **fields: object
) -> tuple[MathDomain, MathConfig, Path]:
    src = tmp_path / f"{source}.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in (rows or ROWS[source]())))
    task = MathConfig(source=source, path=str(src), n_test=4, n_val=2, **fields)
    domain, data = MathDomain(), tmp_path / "data"
    domain.provision(task, data)
    return domain, task, data


def rewards(domain: MathDomain, task: MathConfig, data: Path, answer) -> list[float]:
    """Each test episode's reward for the response answer(row) gives."""
    episodes = domain.episodes(data, "test", task)
    for ep in episodes:
        ep.action = {"type": "answer", "content": answer(ep.problem)}
    return [ep.reward() for ep in episodes]


@pytest.mark.parametrize("source", ["math500", "aime"])
def test_boxed_sources_score_boxed_by_default(tmp_path: Path, source: str, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger=loaders.__name__):
        domain, task, data = provisioned(tmp_path, source)
        assert task.metric == "boxed" == loaders.metric_of(task)  # resolved once, recorded in config.json
        assert rewards(domain, task, data, lambda row: correct(source, row)) == [1.0] * 4
        dfrac = rewards(
            domain, task, data, lambda row: f"\\boxed{{{row['answer'].replace('frac', 'dfrac')}}}"
        )
        assert dfrac == [1.0] * 4  # the MATH normalisation applies
        assert rewards(domain, task, data, lambda row: "\\boxed{999999}") == [0.0] * 4
    assert not caplog.records


def test_aime_leading_zeros_and_compose_default(tmp_path: Path) -> None:
    domain, task, data = provisioned(tmp_path, "aime")
    assert rewards(domain, task, data, lambda row: f"\\boxed{{0{row['answer']}}}") == [1.0] * 4
    assert compose_config(["task.source=aime"]).task.metric == "boxed"
    assert compose_config(["task.source=gsm8k"]).task.metric == "strict"


def test_gsm8k_still_defaults_to_strict(tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger=loaders.__name__):
        domain, task, data = provisioned(tmp_path, "gsm8k")
        assert loaders.metric_of(task) == "strict"
        assert rewards(domain, task, data, lambda row: correct("gsm8k", row)) == [1.0] * 4
        # strict wants `#### N`: a bare final number is flexible's credit, not strict's
        assert (
            rewards(domain, task, data, lambda row: "It is " + row["answer"].rsplit(" ", 1)[1]) == [0.0] * 4
        )
        assert loaders.metric_of(MathConfig(source="embedded")) == "strict"
    assert not caplog.records


@pytest.mark.parametrize(
    ("source", "metric"),
    [("gsm8k", "flexible"), ("gsm8k", "strict"), ("math500", "boxed"), ("embedded", "flexible")],
)
def test_consistent_explicit_metric_is_silent(source: str, metric: str, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger=loaders.__name__):
        assert loaders.metric_of(MathConfig(source=source, metric=metric)) == metric
    assert not caplog.records


def test_contradicting_metric_wins_and_warns_once(tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger=loaders.__name__):
        # provision resolves the metric once already; two more calls below, still one warning
        rows = math500_rows(fractions=False)
        domain, task, data = provisioned(tmp_path, "math500", rows, metric="strict")
        assert loaders.metric_of(task) == "strict"
        boxed = rewards(domain, task, data, lambda row: correct("math500", row))
        hashed = rewards(domain, task, data, lambda row: "#### " + row["answer"])
    assert boxed == [0.0] * 4 and hashed == [1.0] * 4  # the explicit strict metric is what scores
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1
    message = warned[0].getMessage()
    for part in ("task.source=math500", "'boxed'", "task.metric=strict", "Drop task.metric"):
        assert part in message


def test_boxed_on_gsm8k_warns_once(caplog) -> None:
    task = MathConfig(source="gsm8k", metric="boxed")
    with caplog.at_level(logging.WARNING, logger=loaders.__name__):
        assert [loaders.metric_of(task), loaders.metric_of(task)] == ["boxed", "boxed"]
    assert len(caplog.records) == 1 and "task.source=gsm8k" in caplog.records[0].getMessage()


def test_unknown_metric_is_rejected_naming_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="strict, flexible, boxed"):
        MathConfig(source="math500", metric="exact")
    with pytest.raises(ValueError, match="strict, flexible, boxed"):
        compose_config(["task.metric=exact"])
