"""Real-data loaders on small local files written in the data sets' own schemas."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vtb.domains.math import loaders
from vtb.domains.math.grading import score

GSM8K = [
    {
        "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
        "How many clips did Natalia sell altogether in April and May?",
        "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
        "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
    },
    {"question": "What is 2 + 2?", "answer": "2 + 2 = <<2+2=4>>4\n#### 4"},
]
MATH500 = [
    {
        "problem": "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.",
        "solution": "... so the answer is $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.$",
        "answer": "\\left( 3, \\frac{\\pi}{2} \\right)",
        "subject": "Precalculus",
        "level": 2,
        "unique_id": "test/precalculus/807.json",
    }
]
AIME = [
    {
        "id": 60,
        "problem": "Find the remainder ...",
        "solution": "... $\\boxed{42}$",
        "answer": 42,
        "url": "u",
    },
    {"id": 61, "problem": "Find m+n ...", "solution": "...", "answer": "7", "url": "u", "year": 2024},
]


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def write_parquet(path: Path, rows: list[dict]) -> str:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


@pytest.mark.parametrize("writer", [write_jsonl, write_parquet])
def test_gsm8k(tmp_path: Path, writer) -> None:
    path = writer(tmp_path / ("gsm8k.jsonl" if writer is write_jsonl else "gsm8k.parquet"), GSM8K)
    rows = loaders.load("gsm8k", path, "test")
    assert [set(r) for r in rows] == [{"id", "question", "answer", "source"}] * 2
    assert rows[0]["answer"] == GSM8K[0]["answer"] and rows[0]["source"] == "gsm8k"
    assert len({r["id"] for r in rows}) == 2
    assert score("so #### 72", rows[0], "strict") == 1.0


def test_gsm8k_json_array(tmp_path: Path) -> None:
    path = tmp_path / "gsm8k.json"
    path.write_text(json.dumps(GSM8K))
    assert [r["question"] for r in loaders.load_gsm8k(str(path))] == [g["question"] for g in GSM8K]


@pytest.mark.parametrize("writer", [write_jsonl, write_parquet])
def test_math500(tmp_path: Path, writer) -> None:
    path = writer(tmp_path / ("m.jsonl" if writer is write_jsonl else "m.parquet"), MATH500)
    (row,) = loaders.load("math500", path, "test")
    assert row["id"] == "test/precalculus/807.json" and row["source"] == "math500"
    assert row["question"] == MATH500[0]["problem"] and row["answer"] == MATH500[0]["answer"]
    assert score(MATH500[0]["solution"], row, "boxed") == 1.0
    assert score("\\boxed{(3,\\frac{\\pi}{3})}", row, "boxed") == 0.0


@pytest.mark.parametrize("writer", [write_jsonl, write_parquet])
def test_aime_int_and_str_answers(tmp_path: Path, writer) -> None:
    rows_in = (
        AIME if writer is write_jsonl else [{**r, "answer": str(r["answer"]), "year": 2024} for r in AIME]
    )
    path = writer(tmp_path / ("a.jsonl" if writer is write_jsonl else "a.parquet"), rows_in)
    rows = loaders.load("aime", path, "test")
    assert [r["answer"] for r in rows] == ["42", "7"]
    assert [r["id"] for r in rows] == ["aime-60", "aime-61"]
    assert score("\\boxed{042}", rows[0], "boxed") == 1.0


def test_aime_capitalised_schema(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "a.jsonl", [{"ID": "2024-I-1", "Problem": "p", "Solution": "s", "Answer": 204}]
    )
    assert loaders.load_aime(path) == [
        {"id": "aime-2024-I-1", "question": "p", "answer": "204", "source": "aime", "solution": "s"}
    ]


def test_missing_file_names_file_and_schema(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match="nope.jsonl.*question, answer"):
        loaders.load("gsm8k", missing, "test")


@pytest.mark.parametrize(
    ("kind", "rows", "column"),
    [
        ("gsm8k", [{"question": "q"}], "answer"),
        ("gsm8k", [{"problem": "q", "answer": "#### 1"}], "question"),
        ("math500", [{"problem": "q", "solution": "s"}], "answer"),
        ("aime", [{"id": 1, "answer": 3}], "problem"),
    ],
)
def test_missing_column_names_column_and_schema(
    tmp_path: Path, kind: str, rows: list[dict], column: str
) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(ValueError, match=rf"bad\.jsonl.*'{column}'.*expected"):
        loaders.load(kind, path, "test")


def test_unknown_kind_and_empty_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown"):
        loaders.load("mmlu", "x.jsonl", "test")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="no rows"):
        loaders.load("gsm8k", str(empty), "test")


def test_hf_name_goes_to_datasets(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name that is not a local file is an HF dataset id (stubbed: nothing is fetched)."""
    calls = []
    published = {"openai/gsm8k": {"train": GSM8K, "test": GSM8K}, "opencompass/AIME2025": {"test": AIME}}

    def fake_load_dataset(name: str, *args) -> dict[str, list[dict]]:
        calls.append((name, args))
        return published[name]

    import datasets

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    rows = loaders.load("gsm8k", "openai/gsm8k", "train")
    assert calls == [("openai/gsm8k", ("main",))] and rows[1]["id"] == "gsm8k-train-00001"
    # AIME sets publish one split, `train` (AI-MO) or `test` (opencompass, math-ai): the only one is read
    assert len(loaders.load("aime", "opencompass/AIME2025")) == len(AIME)
    assert calls[-1] == ("opencompass/AIME2025", ())
    with pytest.raises(ValueError, match="no split 'dev'"):
        loaders.load("gsm8k", "openai/gsm8k", "dev")


def test_a_missing_path_or_an_unloadable_data_set_name_is_one_clear_refusal(monkeypatch) -> None:
    """`task.path=/nonexistent` (no suffix) was taken for a Hugging Face name and died in
    `datasets` with a traceback (issue 39); a path is a path, and a name that cannot load says so."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(ValueError, match=r"math500 file not found: /nonexistent \(expected MATH-500"):
        loaders.load("math500", "/nonexistent", "test")
    with pytest.raises(ValueError, match=r"no/such-set: cannot load it as a Hugging Face data set"):
        loaders.load("math500", "no/such-set", "test")
