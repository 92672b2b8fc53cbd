"""Loaders for the real math data sets: GSM8K, MATH-500 and AIME.

Each returns normalised records {"id", "question", "answer", "source"} whose "answer" is what
grading.score expects for that source: the full GSM8K solution (strict/flexible metrics read
its `#### N`), or the short final answer of MATH-500/AIME (boxed metric), with the data set's
worked "solution" when it has one (the reference system trains on it); metric_of picks that
metric unless task.metric says otherwise. A source is a local file (.jsonl, .json or .parquet,
in the data set's own Hugging Face schema) or an HF dataset name; schema errors name the file, the column and the expected schema, because a silently
empty column would quietly score every system zero.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from vtb.domains import common
from vtb.domains.math import grading

if TYPE_CHECKING:
    from vtb.config import TaskConfig

log = logging.getLogger(__name__)

LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")
SCHEMAS = {
    "gsm8k": "GSM8K (openai/gsm8k, config 'main'): question, answer ('... #### N')",
    "math500": "MATH-500 (HuggingFaceH4/MATH-500): problem, solution, answer, subject, level, unique_id",
    "aime": "AIME (AI-MO/aimo-validation-aime: id, problem, solution, answer, url; or a yearly set: "
    "ID, Problem, Solution, Answer; or problem|question, answer)",
}


# Each source's own metric (grading.score): its references are GSM8K solutions ending in `#### N`
# (the embedded miniature is GSM8K-format) or short MATH answers compared with \boxed{}.
SOURCE_METRICS = {"embedded": "strict", "gsm8k": "strict", "math500": "boxed", "aime": "boxed"}
# Metrics that read the same answer format as a source's own, so choosing one is no contradiction.
SAME_FORMAT = {"strict": ("strict", "flexible"), "boxed": ("boxed",)}
_warned: set[tuple[str, str]] = set()  # (source, metric) contradictions already warned about


def check_metric(metric: str | None) -> None:
    """Reject an unknown task.metric when the config is built, not after a whole run's training."""
    if metric is not None and metric not in grading.METRICS:
        raise ValueError(
            f"task.metric={metric!r} is not one of {', '.join(grading.METRICS)} "
            "(or null: the source's own metric)"
        )


def metric_of(task: TaskConfig) -> str:
    """The metric a math task is graded with: task.metric if set, else its source's own.

    A default of "strict" silently scored every correct MATH-500/AIME answer 0, so the default
    follows the source. An explicit metric that reads another answer format still wins (someone
    may mean it) but is warned about once per process, as it likely scores every system ~0.
    """
    check_metric(task.metric)
    own = SOURCE_METRICS.get(task.source)
    if own is None:
        raise ValueError(f"unknown math source {task.source!r}; expected one of {', '.join(SOURCE_METRICS)}")
    if task.metric is None:
        return own
    if task.metric not in SAME_FORMAT[own] and (task.source, task.metric) not in _warned:
        _warned.add((task.source, task.metric))
        log.warning(
            "task.source=%s is graded with its own metric %r, but task.metric=%s was set and is used: "
            "it reads another answer format, so correct answers may score 0. "
            "Drop task.metric to use the source's own metric (and silence this warning).",
            task.source,
            own,
            task.metric,
        )
    return task.metric


def _is_local(source: str) -> bool:
    """A path (it exists, has a data file's suffix, or is written as a path: /x, ./x, ~/x), not a
    Hugging Face data set name (org/name)."""
    return Path(source).exists() or source.endswith(LOCAL_SUFFIXES) or source.startswith(("/", ".", "~"))


def _read_local(path: str, kind: str) -> list[dict]:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{kind} file not found: {path} (expected {SCHEMAS[kind]})")
    if p.suffix not in (".jsonl", ".json", ".parquet"):
        raise ValueError(f"{path}: unsupported file type {p.suffix!r}; use .jsonl, .json or .parquet")
    return common.read_records(p, f"{kind} rows")


def _read_hf(name: str, config: str | None, split: str) -> list[dict]:
    """The split asked for, or a data set's only split (AIME sets publish `train` or `test`)."""
    import datasets

    try:
        splits = datasets.load_dataset(name, config) if config else datasets.load_dataset(name)
    except (OSError, ValueError, ConnectionError) as e:  # not found, offline, no such config
        raise ValueError(
            f"{name}: cannot load it as a Hugging Face data set ({type(e).__name__}: {str(e)[:200]}); "
            "give task.path a local .jsonl/.json/.parquet file, or a data set name with the hub reachable"
        ) from None
    if split not in splits and len(splits) == 1:
        split = next(iter(splits))
    if split not in splits:
        raise ValueError(f"{name}: no split {split!r} (it has {', '.join(splits)})")
    return [dict(row) for row in splits[split]]


def _rows(source: str, kind: str, hf_config: str | None, split: str) -> list[dict]:
    rows = _read_local(source, kind) if _is_local(source) else _read_hf(source, hf_config, split)
    if not rows:
        raise ValueError(f"{source}: no rows (expected {SCHEMAS[kind]})")
    return [{str(k).lower(): v for k, v in row.items()} for row in rows]  # AIME sets vary in case


def _column(row: dict, names: tuple[str, ...], source: str, kind: str, index: int) -> object:
    for name in names:
        if row.get(name) is not None:
            return row[name]
    raise ValueError(f"{source}: row {index} has no column {names[0]!r} (expected {SCHEMAS[kind]})")


def _with_solution(record: dict, row: dict) -> dict:
    solution = row.get("solution")
    return {**record, "solution": solution} if isinstance(solution, str) and solution.strip() else record


def load_gsm8k(source: str, split: str = "test") -> list[dict]:
    """GSM8K rows; "answer" is the full solution ending in `#### N`."""
    out = []
    for i, row in enumerate(_rows(source, "gsm8k", "main", split)):
        question = _column(row, ("question",), source, "gsm8k", i)
        answer = _column(row, ("answer",), source, "gsm8k", i)
        out.append(
            {
                "id": f"gsm8k-{split}-{i:05d}",
                "question": str(question),
                "answer": str(answer),
                "source": "gsm8k",
            }
        )
    return out


def load_math500(source: str, split: str = "test") -> list[dict]:
    """MATH-500 rows; "answer" is the short final answer (compare with grading.boxed_score)."""
    out = []
    for i, row in enumerate(_rows(source, "math500", None, split)):
        problem = _column(row, ("problem",), source, "math500", i)
        answer = _column(row, ("answer",), source, "math500", i)
        rid = row.get("unique_id") or f"math500-{i:04d}"
        record = {
            "id": str(rid),
            "question": str(problem),
            "answer": str(answer).strip(),
            "source": "math500",
        }
        out.append(_with_solution(record, row))
    return out


def load_aime(source: str, split: str = "train") -> list[dict]:
    """AIME rows; "answer" is the integer answer as a string (leading zeros are the grader's job)."""
    out = []
    for i, row in enumerate(_rows(source, "aime", None, split)):
        problem = _column(row, ("problem", "question"), source, "aime", i)
        answer = _column(row, ("answer",), source, "aime", i)
        rid = row.get("id") if row.get("id") is not None else row.get("problem_idx", f"{i:04d}")
        record = {
            "id": f"aime-{rid}",
            "question": str(problem),
            "answer": str(answer).strip(),
            "source": "aime",
        }
        out.append(_with_solution(record, row))
    return out


def load(kind: str, source: str, split: str = "test") -> list[dict]:
    """Dispatch on kind. `split` selects the GSM8K split; MATH-500 (test) and AIME (train)
    each have a single Hugging Face split, which is always used."""
    if kind == "gsm8k":
        return load_gsm8k(source, split)
    if kind == "math500":
        return load_math500(source)
    if kind == "aime":
        return load_aime(source)
    raise ValueError(f"unknown math data set {kind!r}; expected one of gsm8k, math500, aime")
