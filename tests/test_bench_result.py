"""result.json as a typed value (vtb/bench_result.py). Reads what `check_result` reads, refuses what it
refuses (but the sweep's own `location`), and writes a schema-3 result back key for key."""

from __future__ import annotations

import json
import re

import pytest
from test_result_check import GOOD, _with, test_a_malformed_result_is_refused_with_its_reason

from vtb.bench_result import BadResult, BenchResult
from vtb.codesign import CORNERS

FULL = {
    "schema_version": 3,
    "run_id": GOOD["run_id"],
    "git": {"commit": "0123456", "dirty": False},
    "started_at": "2026-12-06T10:00:00+00:00",
    "ended_at": "2026-12-06T10:07:00+00:00",
    "task": "math",
    "source": "embedded",
    "metric": "strict",
    "test_split": {"kind": "public", "salt_sha256": "a" * 64},
    "reproducibility": {
        "mode": "reproducible",
        "pins": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
        "probe": "9d5b038da944aa",
        "cpu_capability": "AVX2",
        "threads": 1,
        "torch": "2.9.1+cpu",
        "server_threads": 1,
        "transformers": "4.57.1",
        "id": "9d5b038da944",
    },
    "agent": "noop",
    "model": "tiny",
    "seed": 0,
    "initial": {"test_score": 0.1, "val_score": 0.2, "pass^2": 0.05},
    "submitted": {
        "test_score": 0.3,
        "pass^2": 0.5,
        "val_score": 0.25,
        "iteration": 2,
        "flagged_by_null_model": False,
        "flagged_by_grading_cap": False,
        "flagged_by_provenance": None,
        "provenance": None,
        "base_model_test_score": 0.0,
        "item_rewards": {"test-0000": 1.0, "test-0001": 0.0},
    },
    "reference": {"test_score": 0.6},
    "budget": GOOD["budget"],
    "iterations": 3,
    "gains_by_part": {"data": 0.01, "harness": 0.1},
    "contamination": {
        "flagged": True,
        "reasons": ["test: 12 of 200 items copied"],
        "splits": {
            "test": {
                "items": 200,
                "decidable": 198,
                "hit_items": 12,
                "hit_fraction": 0.0606,
                "hit_examples": ["test-0003"],
                "canary_checked": True,
                "canary_found": False,
                "hidden": True,
                "flagged": True,
                "files": [
                    {
                        "path": "data/train.jsonl",
                        "ngrams": 40,
                        "items": 12,
                        "canary": False,
                        "examples": [{"item": "test-0003", "text": "(private/contamination.json)"}],
                    }
                ],
            }
        },
        "scanned": {
            "files": 3,
            "bytes": 1024,
            "skipped": [{"path": "data/link", "kind": "symlink"}],
            "truncated": [],
        },
        "thresholds": {"ngram": 13, "short_ngram": 8, "item_coverage": 0.5, "flag_fraction": 0.02},
    },
    "grading_determinism": None,
    "analysis": {
        "grid": {
            "corners": [
                {
                    "corner": c,
                    "name": "initial" if c == "000" else c,
                    "parts": {"data": "initial", "trainer": "initial", "harness": "initial"},
                    "snapshot": f"snap-{c}",
                    "test_score": 0.1,
                    **({"note": "no checkpoint (training failed)"} if c == "010" else {"n": 2}),
                    "item_rewards": None if c == "010" else {"test-0000": 1.0, "test-0001": 0.0},
                }
                for c in CORNERS
            ],
            "changed": ["harness"],
            "distinct_systems": 2,
            "trainings": [
                {
                    "data": "initial",
                    "trainer": "submitted",
                    "train_key": "k1",
                    "reused": None,
                    "ok": False,
                    "charge": {"flops": 1e9, "cpu_seconds": 1.5, "wall_seconds": 1.0},
                }
            ],
            "effects": {
                "main": {"data": 0.0, "trainer": 0.0, "harness": 0.2},
                "interactions": {"data×trainer": 0.0},
                "alone": {"data": 0.0, "trainer": 0.0, "harness": 0.2},
                "together": 0.2,
                "interaction": 0.0,
            },
            "verdict": "single",
            "verdict_line": "single part changed (harness): +0.200",
            "tolerance": 0.05,
        },
        "path": [
            {
                "iteration": 0,
                "parts_edited": [],
                "val_score": 0.2,
                "test_score": 0.1,
                "n": 2,
                "corner": "000",
            },
            {
                "iteration": 2,
                "parts_edited": ["harness"],
                "val_score": 0.25,
                "test_score": 0.3,
                "n": 2,
                "corner": "001",
            },
        ],
        "spend": {
            "budgeted": False,
            "trainings": 1,
            "plays": 3,
            "flops": 2e9,
            "cpu_seconds": 20.5,
            "sandbox_wall_seconds": 19.0,
        },
    },
    "item_rewards_file": "item_rewards.json",
    "record": "/runs/x",
}


def test_a_whole_result_reads_into_types_and_writes_back_key_for_key() -> None:
    typed = BenchResult.from_json(json.loads(json.dumps(FULL)))
    assert typed.submitted.score.extra == {"pass^2": 0.5} and typed.budget.agent_tokens == 0
    assert typed.flagged and typed.reference.test_score == 0.6  # by the scan
    assert typed.contamination.splits["test"].files[0].examples[0].item == "test-0003"
    assert typed.reproducibility.server_threads == 1 and typed.test_split.kind == "public"
    assert typed.analysis.grid.effects.alone["harness"] == 0.2 and typed.analysis.path[1].corner == "001"
    assert json.dumps(typed.to_json()) == json.dumps(FULL)


def _cases():
    (mark,) = [
        m for m in test_a_malformed_result_is_refused_with_its_reason.pytestmark if m.name == "parametrize"
    ]
    return [c for c in mark.args[1] if not c[0].startswith("location")]  # location: the sweep's own


@pytest.mark.parametrize(("path", "value", "reason"), _cases())
def test_what_the_sweeps_check_refuses_the_reader_refuses(path, value, reason) -> None:
    with pytest.raises(BadResult, match=re.escape(reason)):
        BenchResult.from_json(_with(path, value))


def test_an_errored_runs_record_reads_typed_and_bounded() -> None:
    """error.json, or a deployed bench's errored return from shared storage: every field bounded,
    a seed that is no integer or a budget that does not check is dropped, never an error; a record
    that says another state is no errored run's."""
    from vtb.bench_result import Errored, is_errored, outcome_from_json

    sound = {
        "run_id": "math-greedy-s2-abc",
        "state": "errored",
        "error": "iteration 2: the research agent failed",
        "task": "math",
        "agent": "greedy",
        "seed": 2,
        "budget": {"used": 1e9, "limit": 1e12, "unit": "flops", "flops": 1e9},
        "record": "/runs/math-greedy-s2-abc",
    }
    e = Errored.from_json(sound)
    assert (e.seed, e.budget.used, e.error) == (2, 1e9, sound["error"])
    assert Errored.from_json(e.to_json()) == e and is_errored(e.to_json())
    assert isinstance(outcome_from_json(sound), Errored)
    assert isinstance(outcome_from_json(GOOD), BenchResult)
    hostile = Errored.from_json(
        {**sound, "error": "x" * 10**6, "seed": "2; rm", "budget": {"unit": "coins"}, "task": ["math"]}
    )
    assert len(hostile.error) <= 4096 and hostile.seed is None and hostile.budget is None
    assert hostile.task == "?"
    with pytest.raises(BadResult, match="not 'errored'"):
        Errored.from_json({**sound, "state": "completed"})
    with pytest.raises(BadResult):
        Errored.from_json(["errored"])


def test_nested_parts_from_storage_read_leniently_where_nothing_ranks_by_them() -> None:
    """A result from shared storage with junk in the scan's and the fingerprint's report figures
    still reads (zeros, empty lists, bounded strings) and its report lines render; what a
    leaderboard flags or ranks by (contamination.flagged, the test split) is refused instead."""
    from vtb.record import contamination_line, contamination_lines, fingerprint_line

    junk = {
        **FULL,
        "reproducibility": {"id": ["x"], "threads": "2", "pins": {"A": {"b": 1}}, "server_threads": -1},
        "contamination": {
            "flagged": False,
            "reasons": "not a list",
            "splits": {
                "test": {"hit_items": "12", "files": [{"path": 7, "examples": ["x"]}, "junk"]},
                "x": 3,
            },
            "scanned": {
                "skipped": ["old/string/form", {"path": "a", "kind": None}, 5],
                "truncated": [1, "b"],
            },
            "thresholds": {"ngram": "13", "flag_fraction": float("nan")},
        },
    }
    typed = BenchResult.from_json(junk)
    test = typed.contamination.splits["test"]
    assert (test.hit_items, test.files[0].path, test.files[0].examples) == (0, "", [])
    assert [s.path for s in typed.contamination.skipped] == ["old/string/form", "a"]
    assert typed.contamination.truncated == ["b"] and typed.contamination.thresholds == {}
    assert typed.reproducibility.threads == 0 and typed.reproducibility.server_threads == 0
    assert "not flagged" in contamination_line(typed.contamination)
    assert any("old/string/form" in line for line in contamination_lines(typed.contamination))
    assert fingerprint_line(typed.reproducibility).startswith(" (native CPU code paths")
    for bad, why in (
        ({**FULL, "contamination": {**FULL["contamination"], "flagged": "no"}}, "contamination.flagged"),
        ({**FULL, "test_split": {"kind": "secret", "salt_sha256": "a" * 64}}, "test_split.kind"),
        ({**FULL, "contamination": ["flagged"]}, "contamination is list"),
    ):
        with pytest.raises(BadResult, match=why):
            BenchResult.from_json(bad)
