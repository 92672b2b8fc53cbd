"""The research agent's data tools, run as the agent runs them: a subprocess CLI."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from vtb.domains.math.generator import corrupt, generate_problems, strip_annotations
from vtb.domains.math.kit.datatools import PROMPT_TEMPLATE, safe_eval, to_sft_row, verify

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "vtb.domains.math.kit.datatools", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def counts(stdout: str) -> dict[str, int]:
    return {k.strip(): int(v) for k, v in (line.split(":") for line in stdout.splitlines() if ":" in line)}


def test_sft_row_format() -> None:
    problem = {
        "question": "Tom has 3 apples. How many?",
        "answer": "He has 1 + 2 = <<1+2=3>>3 apples.\n#### 3",
    }
    assert to_sft_row(problem) == {
        "prompt": "Question: Tom has 3 apples. How many?\nAnswer:",
        "completion": " He has 1 + 2 = <<1+2=3>>3 apples.\n#### 3",
    }
    assert to_sft_row(problem, direct=True)["completion"] == " He has 1 + 2 = 3 apples.\n#### 3"
    assert PROMPT_TEMPLATE.format(question="q") == "Question: q\nAnswer:"


def test_safe_eval_only_arithmetic() -> None:
    assert safe_eval("12+5") == 17 and safe_eval("48/2") == 24 and safe_eval("-3*2") == -6
    assert safe_eval("1,000+1") == 1001
    for bad in ["__import__('os')", "2**10", "a+1", "1/0", "(1).real", "[1]", "True+1"]:
        with pytest.raises(ValueError):
            safe_eval(bad)


@pytest.mark.parametrize(
    ("answer", "verdict"),
    [
        ("He has 12 + 5 = <<12+5=17>>17 apples.\n#### 17", "ok"),
        ("He has 12 + 5 = <<12+5=18>>18 apples.\n#### 18", "bad_equation"),
        ("He has 12 + 5 = <<12+5=17>>17 apples.\n#### 18", "final_mismatch"),
        ("He has 12 + 5 = 17 apples.\n#### 17", "ok"),
        ("He has 12 + 5 = 18 apples.\n#### 18", "bad_equation"),
        ("He has 17 apples.\n#### 17", "unverifiable"),
        ("He has 12 + 5 = <<12+5=17>>17 apples.", "no_final"),
        ("She pays 10/3 = <<10/3=3.33>>3.33 each.\n#### 3.33", "ok"),
        ("She earns 1,000 + 234 = <<1000+234=1234>>1,234 dollars.\n#### 1,234", "ok"),
        ("So 5 - 8 = <<5-8=-3>>-3.\n#### -3", "ok"),
    ],
)
def test_verify(answer: str, verdict: str) -> None:
    assert verify(answer) == verdict


def test_clean_drops_corrupted_rows_and_keeps_good_ones(tmp_path: Path) -> None:
    problems = generate_problems(9, 60)
    rng = random.Random(1)
    bad_ids = set(range(0, 60, 3))
    rows = []
    for i, p in enumerate(problems):
        row = to_sft_row(p, direct=i % 2 == 1)
        if i in bad_ids:
            row["completion"] = corrupt(row["completion"], rng)
        rows.append(row)
    src = write(tmp_path / "train.jsonl", rows)
    out = tmp_path / "clean.jsonl"

    report = counts(run_cli("check", str(src)))
    assert report["rows"] == 60 and report["inconsistent"] == len(bad_ids)

    report = counts(run_cli("clean", str(src), str(out)))
    assert report == {"kept": 60 - len(bad_ids), "dropped": len(bad_ids)}
    assert read(out) == [r for i, r in enumerate(rows) if i not in bad_ids]
    assert counts(run_cli("check", str(out)))["inconsistent"] == 0


def test_from_pool_and_merge(tmp_path: Path) -> None:
    pool = write(tmp_path / "pool.jsonl", generate_problems(3, 50))
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    run_cli("from-pool", str(pool), str(a), "--n", "10", "--seed", "4")
    run_cli("from-pool", str(pool), str(b), "--n", "10", "--seed", "4", "--direct")
    rows_a, rows_b = read(a), read(b)
    assert len(rows_a) == 10 and all(r["prompt"].startswith("Question: ") for r in rows_a)
    assert all("<<" in r["completion"] for r in rows_a) and not any("<<" in r["completion"] for r in rows_b)
    assert [strip_annotations(r["completion"]) for r in rows_a] == [
        r["completion"] for r in rows_b
    ]  # same sample
    again = tmp_path / "again.jsonl"
    run_cli("from-pool", str(pool), str(again), "--n", "10", "--seed", "4")
    assert read(again) == rows_a

    merged = tmp_path / "merged.jsonl"
    out = run_cli("merge", str(a), str(b), str(again), str(merged))
    assert "wrote: 20" in out and read(merged) == rows_a + rows_b
