"""The embedded math generator: determinism, correct arithmetic, coverage, disjoint splits."""

from __future__ import annotations

import random
import re
import string
from collections import Counter

import pytest

from vtb.domains.math import generator
from vtb.domains.math.generator import (
    NUMBER_MAX,
    TOKEN_RE,
    WORDS,
    corrupt,
    generate_problems,
    make_splits,
    pretraining_texts,
    strip_annotations,
)
from vtb.domains.math.kit.datatools import safe_eval, verify

ANN = re.compile(r"<<([^<>=]+)=([^<>]+)>>(\d+)")
SYMBOLS = {"<<", ">>", "####", *string.punctuation}


@pytest.fixture(scope="module")
def problems() -> list[dict]:
    return generate_problems(7, 2000)


def test_same_seed_same_output_and_different_seed_differs() -> None:
    a, b = generate_problems(3, 200), generate_problems(3, 200)
    assert a == b
    assert generate_problems(4, 200) != a
    random.seed(0)  # global state must not matter
    assert generate_problems(3, 200) == a


def test_record_shape(problems: list[dict]) -> None:
    for p in problems[:50]:
        assert set(p) == {"id", "question", "answer", "steps", "final"}
        assert isinstance(p["final"], int) and p["answer"].endswith(f"#### {p['final']}")


def test_every_annotation_right_and_in_range(problems: list[dict]) -> None:
    for p in problems:
        lines = p["answer"].split("\n")
        anns = ANN.findall(p["answer"])
        assert len(anns) == p["steps"] == len(lines) - 1
        for expr, value, shown in anns:
            assert " " not in expr and value == shown
            assert safe_eval(expr) == int(value)
            for number in re.findall(r"\d+", expr) + [value]:
                assert 0 <= int(number) <= NUMBER_MAX
            assert re.fullmatch(r"\d+[-+*/]\d+", expr)
        assert int(anns[-1][1]) == p["final"]
        assert lines[-1] == f"#### {p['final']}"
        assert verify(p["answer"]) == "ok"
        for number in re.findall(r"\d+", p["question"]):
            assert 0 <= int(number) <= NUMBER_MAX


def test_all_step_counts_and_operators_present(problems: list[dict]) -> None:
    counts = Counter(p["steps"] for p in problems)
    assert set(counts) == {1, 2, 3, 4}
    assert max(counts.values()) - min(counts.values()) <= 1
    ops = Counter(
        op for p in problems for expr, _, _ in ANN.findall(p["answer"]) for op in re.findall(r"[-+*/]", expr)
    )
    assert all(ops[op] > 50 for op in "+-*/")
    assert generate_problems(1, 30, min_steps=2, max_steps=2)[0]["steps"] == 2


def test_no_duplicate_questions(problems: list[dict]) -> None:
    keys = [generator.normalize_question(p["question"]) for p in problems]
    assert len(set(keys)) == len(keys)


def test_text_tokenizes_into_vocabulary(problems: list[dict]) -> None:
    words = set(WORDS)
    texts = [p["question"] + "\n" + p["answer"] for p in problems]
    texts += pretraining_texts(5, 300, set())
    for text in texts:
        for token in TOKEN_RE.findall(text):
            if token.isdigit():
                assert str(int(token)) == token and int(token) <= NUMBER_MAX
            elif token.isalpha():
                assert token in words, token
            else:
                assert token in SYMBOLS, token
        assert "".join(TOKEN_RE.findall(text)) == re.sub(r"\s", "", text)  # nothing dropped


def test_splits_disjoint_balanced_and_stable() -> None:
    splits = make_splits(11, 300, 40, 60)
    assert [len(splits[k]) for k in ("pool", "val", "test")] == [300, 40, 60]
    keys = {k: {generator.normalize_question(p["question"]) for p in v} for k, v in splits.items()}
    assert (
        not keys["pool"] & keys["val"] and not keys["pool"] & keys["test"] and not keys["val"] & keys["test"]
    )
    assert splits["pool"][12]["id"] == "pool-00012" and splits["val"][3]["id"] == "val-0003"
    assert splits["test"][3]["id"] == "test-0003"
    for name in ("val", "test"):
        counts = Counter(p["steps"] for p in splits[name])
        assert set(counts) == {1, 2, 3, 4} and max(counts.values()) - min(counts.values()) <= 1
    # val/test do not move when the pool grows
    bigger = make_splits(11, 500, 40, 60)
    assert bigger["test"] == splits["test"] and bigger["val"] == splits["val"]


def test_make_splits_raises_on_forced_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    real = generator.generate_problems

    def leaky(seed: int, n: int, min_steps: int = 1, max_steps: int = 4) -> list[dict]:
        rows = real(seed, n, min_steps, max_steps)
        rows[-1] = {**rows[-1], "question": rows[0]["question"].upper()}  # a test question in the pool
        rows[-2] = {**rows[-2], "question": "  " + rows[1]["question"]}
        return rows

    monkeypatch.setattr(generator, "generate_problems", leaky)
    with pytest.raises(ValueError, match="2 questions"):
        make_splits(1, 20, 5, 5)


def test_tiny_space_raises_instead_of_duplicating(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generator, "_one_problem", lambda rng, steps: ("Q?", "1 + 1 = <<1+1=2>>2\n#### 2", 2))
    with pytest.raises(ValueError, match="could not find a new"):
        generate_problems(0, 2)


def test_pretraining_texts_exclude_held_out() -> None:
    held = make_splits(2, 0, 30, 30)
    exclude = {p["question"] for p in held["val"] + held["test"]}
    texts = pretraining_texts(0, 500, exclude)
    assert len(texts) == 500 and texts == pretraining_texts(0, 500, exclude)
    assert not any(e in t for t in texts for e in exclude)
    assert not any("<<" in t or "####" in t for t in texts)
    # an excluded text that the generator does produce is really skipped
    unfiltered = pretraining_texts(0, 50, set())
    filtered = pretraining_texts(0, 50, {unfiltered[0], unfiltered[10]})
    assert unfiltered[0] not in filtered and unfiltered[10] not in filtered and unfiltered[1] in filtered


def test_strip_annotations() -> None:
    answer = "He has 12 + 5 = <<12+5=17>>17 apples.\nThen he has 17 - 3 = <<17-3=14>>14 apples left.\n#### 14"
    assert (
        strip_annotations(answer)
        == "He has 12 + 5 = 17 apples.\nThen he has 17 - 3 = 14 apples left.\n#### 14"
    )


def test_corrupt_is_wrong_but_consistent(problems: list[dict]) -> None:
    rng = random.Random(0)
    for p in problems[:300]:
        bad = corrupt(p["answer"], rng)
        final = int(bad.rsplit("#### ", 1)[1])
        assert final != p["final"] and 0 <= final <= NUMBER_MAX
        anns = ANN.findall(bad)
        assert int(anns[-1][1]) == int(anns[-1][2]) == final  # looks real ...
        assert verify(bad) == "bad_equation"  # ... but the arithmetic is wrong
        assert bad.split("\n")[:-2] == p["answer"].split("\n")[:-2]  # earlier steps untouched
        direct = corrupt(strip_annotations(p["answer"]), rng)
        assert verify(direct) == "bad_equation"
