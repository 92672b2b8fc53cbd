"""The math grader (lm-eval GSM8K rules, MATH/AIME boxed answers) and the episode env."""

from __future__ import annotations

import json

import pytest

from vtb.domains.math.env import MathEnv
from vtb.domains.math.generator import generate_problems
from vtb.domains.math.grading import (
    flexible_extract,
    gsm8k_score,
    last_boxed,
    math_equiv,
    normalize,
    score,
    strict_extract,
    strip_math,
)

REF = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips.\n#### 72"
BIG_REF = "She earns 1,000 + 234 = <<1000+234=1234>>1,234 dollars.\n#### 1,234"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so #### 72", "72"),
        ("#### 1,234", "1,234"),
        ("#### -5", "-5"),
        ("#### 5.", "5."),
        ("#### 3\n#### 4", "3"),  # first match
        ("####72", "[invalid]"),  # the space is part of the rule
        ("#### $5", "[invalid]"),
        ("the answer is 72", "[invalid]"),
        ("", "[invalid]"),
    ],
)
def test_strict_extract(text: str, expected: str) -> None:
    assert strict_extract(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3 apples and 12 pears", "12"),  # last match
        ("It costs $5.", "$5."),
        ("total: 1,234 dollars", "1,234"),
        ("x is -7", "-7"),
        ("so 4", "4"),  # one digit: second alternative
        ("no digits here", "[invalid]"),
        ("He has 12 + 5 = <<12+5=17>>17 apples.\n#### 17", "17"),
    ],
)
def test_flexible_extract(text: str, expected: str) -> None:
    assert flexible_extract(text) == expected


def test_normalize_applies_ignore_regexes_and_case() -> None:
    assert normalize(REF) == "72"
    assert normalize(BIG_REF) == "1234"
    assert normalize("$5.") == "5"
    assert normalize("1,234") == "1234"
    assert normalize("5.5") == "5.5"  # only a trailing dot goes
    assert normalize("[INVALID]") == "[invalid]"


@pytest.mark.parametrize(
    ("response", "reference", "mode", "expected"),
    [
        ("blah\n#### 72", REF, "strict", 1.0),
        ("#### 72.", REF, "strict", 1.0),
        ("#### 73", REF, "strict", 0.0),
        ("the answer is 72", REF, "strict", 0.0),
        ("the answer is 72", REF, "flexible", 1.0),
        ("the answer is $72.", REF, "flexible", 1.0),
        ("72 then 73", REF, "flexible", 0.0),
        ("#### 1234", BIG_REF, "strict", 1.0),
        ("#### 1,234", BIG_REF, "strict", 1.0),
        ("#### -3", "#### -3", "strict", 1.0),
        ("#### 3", "#### -3", "strict", 0.0),
        ("#### 72.0", REF, "strict", 0.0),  # lm-eval does not equate 72.0 and 72
        ("", REF, "flexible", 0.0),
    ],
)
def test_gsm8k_score(response: str, reference: str, mode: str, expected: float) -> None:
    assert gsm8k_score(response, reference, mode) == expected


def test_gsm8k_score_rejects_unknown_mode() -> None:
    with pytest.raises(ValueError):
        gsm8k_score("#### 1", "#### 1", "fuzzy")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{5}", "5"),
        ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{x^{2}+1}", "x^{2}+1"),
        ("$\\boxed 7$", "7"),
        ("\\fbox{12}", "12"),
        ("\\boxed{unbalanced", None),
        ("no box", None),
    ],
)
def test_last_boxed(text: str, expected: str | None) -> None:
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("\\dfrac{1}{2}", "\\frac12"),
        ("\\tfrac{3}{4}", "3/4"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
        ("90^\\circ", "90"),
        ("\\$18.90", "18.90"),
        ("50\\%", "50"),
        ("10 \\text{ cm}", "10"),
        ("\\text{(B)}", "(B)"),
        (".5", "0.5"),
        ("0.5", "\\frac{1}{2}"),
        ("5.0", "5"),
        ("x = 3", "3"),
        ("042", "42"),
        ("1,000", "1000"),
        ("\\sqrt2", "\\sqrt{2}"),
    ],
)
def test_math_equiv_true(a: str, b: str) -> None:
    assert math_equiv(a, b)


@pytest.mark.parametrize(
    ("a", "b"), [("1", "2"), ("\\frac{1}{2}", "\\frac{1}{3}"), ("(1,2)", "(2,1)"), (None, "1")]
)
def test_math_equiv_false(a: str | None, b: str) -> None:
    assert not math_equiv(a, b)


def test_strip_math_examples() -> None:
    assert strip_math("\\frac12") == "\\frac{1}{2}"
    assert strip_math(" 2.50 ") == "2.5"


def test_score_dispatch() -> None:
    gsm = {"answer": REF}
    assert score("#### 72", gsm, "strict") == 1.0
    assert score("it is 72", gsm, "flexible") == 1.0
    assert score("\\boxed{72}", gsm, "boxed") == 1.0  # a GSM8K reference reduces to its #### N
    aime = {"answer": 42}
    assert score("The answer is \\boxed{042}.", aime, "boxed") == 1.0
    assert score("The answer is \\boxed{43}.", aime, "boxed") == 0.0
    assert score("42", aime, "boxed") == 0.0  # no box, no credit
    assert score("\\boxed{\\dfrac{\\sqrt{3}}{2}}", {"answer": "\\frac{\\sqrt{3}}{2}"}, "boxed") == 1.0
    with pytest.raises(ValueError):
        score("#### 1", gsm, "nope")


def test_start_message_leaks_no_answer() -> None:
    env = MathEnv()
    for problem in generate_problems(0, 40):
        msg = env.start_message(problem)
        assert msg == {
            "type": "start",
            "episode": problem["id"],
            "domain": "math",
            "observation": {"question": problem["question"], "format": "gsm8k"},
        }
        blob = json.dumps(msg)
        assert problem["answer"] not in blob and "####" not in blob and "<<" not in blob
        assert "final" not in blob and "answer" not in blob


def test_reward() -> None:
    env = MathEnv()
    problem = generate_problems(0, 1)[0]
    good = {"type": "answer", "content": problem["answer"]}
    assert env.reward(problem, good, "strict") == 1.0
    assert env.reward(problem, {"type": "answer", "content": f"#### {problem['final'] + 1}"}, "strict") == 0.0
    assert env.reward(problem, None, "strict") == 0.0
    assert env.reward(problem, {"type": "message", "content": problem["answer"]}, "strict") == 0.0
    assert env.reward(problem, {"type": "answer", "content": None}, "strict") == 0.0
    assert env.reward(problem, "#### 1", "strict") == 0.0  # type: ignore[arg-type]
