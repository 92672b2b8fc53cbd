"""The math domain's preflight (vtb/preflight.py): what its metric credits, checked before any FLOP.

Two failure classes scored every system 0 without a word (issue 36): gold answers the metric
cannot read (a GSM8K record without `#### N`, an empty MATH answer), and training targets in
another format than the metric's (MATH-500 rows ending in a bare answer, never `\\boxed{}`).
Scoring a few thousand strings takes milliseconds, so every item and every row is checked, not
a sample; the problems are capped per place so a wholly wrong file still reads as one message.
"""

from __future__ import annotations

from pathlib import Path

from vtb.domains.kit.jsonl import read_jsonl
from vtb.domains.math import grading
from vtb.domains.math.kit import datatools
from vtb.preflight import Problem, Systems, capped

MAX_NAMED = 5  # problems named per split or system; the rest are counted
FIX_DATA = (
    "correct or drop the record in task.path, or point task.path at the data set in its published layout"
)
FIX_METRIC = "drop task.metric to grade with the source's own metric"


def gold_response(item: dict, metric: str) -> str:
    """The item's own answer written as the metric reads it: `\\boxed{a}`, or the `#### N` solution."""
    fmt = "boxed" if metric == "boxed" else "gsm8k"
    return datatools.to_sft_row({**item, "answer_format": fmt}, direct=True)["completion"].strip()


def _item_problem(item: dict, metric: str) -> str | None:
    """What is wrong with one item's gold answer under `metric`, or None."""
    answer = str(item.get("answer", ""))
    if not datatools.final_answer(item):
        return f"its gold answer {answer!r} is empty"
    solution = len(answer.split()) > 1  # a GSM8K solution, not a short MATH/AIME value
    if metric in ("strict", "flexible") and solution and grading.strict_extract(answer) == grading.INVALID:
        return f"its gold answer has no final `#### N` line the {metric} metric can parse ({answer[-60:]!r})"
    if grading.score(gold_response(item, metric), item, metric) != 1.0:
        return f"the {metric} metric does not credit its own gold answer {datatools.final_answer(item)!r}"
    if grading.score("", item, metric) != 0.0:
        return f"the {metric} metric credits an empty answer"
    return None


def bad_items(splits: dict[str, list[dict]], metric: str) -> dict[str, list[tuple[dict, str]]]:
    """Per split, the items whose gold answer the metric does not score 1 (or credits empty), and why."""
    return {
        name: [(i, what) for i in items if (what := _item_problem(i, metric))]
        for name, items in splits.items()
    }


def gold(bad: dict[str, list[tuple[dict, str]]], own_metric: bool = True) -> list[Problem]:
    """Every item of every split: its gold answer scores 1 and an empty answer 0 (`bad_items`).
    `own_metric`: the metric reads the source's own answer format (else the fix is the metric)."""
    fix = FIX_DATA if own_metric else f"{FIX_METRIC} (task.metric reads another answer format)"
    problems: list[Problem] = []
    for name, found in bad.items():
        split = [Problem(f"item {item.get('id')} (split {name})", what, fix) for item, what in found]
        problems += capped(split, MAX_NAMED)
    return problems


def _played_back(rows: list[dict], pool: dict[str, dict], metric: str) -> list[tuple[int, str, float]]:
    """(row index, item id, score) of each row whose prompt is a pool problem's."""
    out = []
    for i, row in enumerate(rows):
        item = pool.get(row.get("prompt"))
        if item is not None and isinstance(row.get("completion"), str):
            out.append((i, str(item.get("id")), grading.score(row["completion"].strip(), item, metric)))
    return out


def _rows(workspace: Path) -> list[dict]:
    path = workspace / "data" / "train.jsonl"
    return read_jsonl(path) if path.is_file() else []


def _readable(text: str, metric: str) -> bool:
    if metric == "boxed":
        return grading.last_boxed(text) is not None
    extract = grading.strict_extract if metric == "strict" else grading.flexible_extract
    return extract(text) != grading.INVALID


def targets(
    pool: list[dict], metric: str, systems: Systems, clean_initial: list[dict], skip: set[str] = frozenset()
) -> list[Problem]:
    """The systems' training targets, played back as completions, are what the metric credits.

    The reference's rows and the initial system's rows without their deliberate noise must all
    score 1; every row the initial system trains on (noisy ones too) must at least be readable.
    Rows of the items in `skip` (gold answers already refused by `gold`) are not checked again.
    """
    by_prompt = {datatools.to_sft_row(i)["prompt"]: i for i in pool if str(i.get("id")) not in skip}
    fix = (
        "the system's rows must end the way the metric reads answers (`\\boxed{...}` for boxed, "
        f"`#### N` for strict): {FIX_METRIC}, or fix datatools.to_sft_row"
    )
    checked = [("initial (clean rows)", clean_initial)]
    if systems.reference is not None:
        checked.append(("reference", _rows(systems.reference)))
    problems = []
    for label, rows in checked:
        scores = _played_back(rows, by_prompt, metric)
        missed = [(i, item_id) for i, item_id, score in scores if score != 1.0]
        if not scores and rows:
            problems.append(Problem(f"system {label}", "no training row is a pool problem's prompt", fix))
        elif missed:
            named = ", ".join(f"row {i} ({item_id})" for i, item_id in missed[:MAX_NAMED])
            what = (
                f"{len(missed)} of {len(scores)} training targets score 0 under the {metric} metric: {named}"
            )
            problems.append(Problem(f"system {label}", what, fix))
    unreadable = [
        i
        for i, row in enumerate(_rows(systems.initial))
        if row.get("prompt") in by_prompt and not _readable(str(row.get("completion")), metric)
    ]
    if unreadable:
        what = (
            f"{len(unreadable)} training row(s) with no answer the {metric} metric can read: "
            f"rows {unreadable[:MAX_NAMED]}"
        )
        problems.append(Problem("system initial", what, fix))
    return problems
