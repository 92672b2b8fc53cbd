"""The leaderboard's statistics on fixed inputs: bootstrap CIs, normalised gains, the weighted aggregate."""

from __future__ import annotations

import csv
import json
import re

import pytest

from vtb import leaderboard
from vtb.bench_result import BadResult
from vtb.leaderboard import aggregate, bootstrap_ci, is_flagged, main, normalised_gain, pairs, rows, write


def _result(
    task: str, agent: str, seed: int, submitted: float, initial: float, reference: float | None
) -> dict:
    return {
        "run_id": f"{task}-{agent}-s{seed}",
        "task": task,
        "agent": agent,
        "model": "tiny",
        "seed": seed,
        "submitted": {"test_score": submitted, "iteration": 1},
        "initial": {"test_score": initial},
        "reference": None if reference is None else {"test_score": reference},
        "budget": {"used": 1e12 * (seed + 1), "unit": "flops"},
    }


def test_bootstrap_ci_known_cases() -> None:
    assert bootstrap_ci([0.4]) == (0.4, 0.4)
    assert bootstrap_ci([0.3, 0.3, 0.3]) == (0.3, 0.3)
    # two seeds 0 and 1: resampled means are 0, 0.5, 1 with probability 1/4, 1/2, 1/4
    assert bootstrap_ci([0.0, 1.0]) == (0.0, 1.0)
    # 10 zeros and 10 ones: the resampled mean is Binomial(20, 1/2) / 20, whose central 95% is [0.3, 0.7]
    lo, hi = bootstrap_ci([0.0] * 10 + [1.0] * 10)
    assert lo == pytest.approx(0.3) and hi == pytest.approx(0.7)
    assert bootstrap_ci([0.1, 0.5, 0.9]) == bootstrap_ci([0.1, 0.5, 0.9])  # fixed seed: reproducible
    with pytest.raises(ValueError):
        bootstrap_ci([])


def test_normalised_gain() -> None:
    assert normalised_gain(0.6, 0.2, 0.8) == pytest.approx(2 / 3)
    assert normalised_gain(0.2, 0.2, 0.8) == 0.0 and normalised_gain(0.8, 0.2, 0.8) == 1.0
    assert normalised_gain(0.1, 0.2, 0.8) == pytest.approx(-1 / 6)  # worse than the initial system
    assert normalised_gain(0.5, 0.3, 0.3) is None and normalised_gain(0.5, 0.3, None) is None


def test_rows_pool_seeds_per_task_and_agent() -> None:
    results = [_result("math", "greedy", s, sub, 0.0, 0.8) for s, sub in enumerate((0.4, 0.6, 0.8))]
    results += [_result("math", "noop", s, 0.0, 0.0, 0.8) for s in range(3)]
    table = {(r.task, r.agent): r for r in rows(results)}
    greedy = table[("math", "greedy")]
    assert greedy.seeds == 3 and greedy.score == pytest.approx(0.6) and greedy.initial == 0.0
    # all three resamples alike has probability 1/27 > 2.5%: the CI runs from the lowest to the highest seed
    assert greedy.ci_low == pytest.approx(0.4) and greedy.ci_high == pytest.approx(0.8)
    assert greedy.gain == pytest.approx(0.75) and greedy.gain_ci_low <= 0.75 <= greedy.gain_ci_high
    assert greedy.budget_used == pytest.approx(2e12)
    noop = table[("math", "noop")]
    assert (noop.score, noop.ci_low, noop.ci_high, noop.gain) == (0.0, 0.0, 0.0, 0.0)


def test_aggregate_weights_tasks_by_the_inverse_reference_gap() -> None:
    results = [
        _result("math", "a", 0, 0.5, 0.0, 0.5),  # gap 0.5: weight 2
        _result("tau", "a", 0, 0.2, 0.1, 0.35),  # gap 0.25: weight 4
        _result("swe", "a", 0, 0.9, 0.4, 0.4),  # no gap: left out
    ]
    agg = aggregate(rows(results))["a"]
    assert agg["tasks"] == ["math", "tau"]
    assert agg["weights"] == {"math": pytest.approx(1 / 3, abs=1e-4), "tau": pytest.approx(2 / 3, abs=1e-4)}
    assert agg["score"] == pytest.approx((2 * 0.5 + 4 * 0.2) / 6)


def test_errored_runs_are_counted_beside_their_agent_and_listed_with_the_reason(tmp_path) -> None:
    """An errored run (error.json, no score) is in no mean, so it cannot quietly lift its agent's:
    each row counts them, and a section lists each with its reason as inert text (issue 39)."""
    for s, sub in enumerate((0.4, 0.6)):
        run = tmp_path / f"math-greedy-s{s}"
        run.mkdir()
        (run / "result.json").write_text(json.dumps(_result("math", "greedy", s, sub, 0.0, 0.8)))
    bad = tmp_path / "math-greedy-s2"
    bad.mkdir()
    reason = "iteration 2: the research agent failed: llm: <b>HTTP 503</b> | [x](http://e.vil)"
    (bad / "error.json").write_text(
        json.dumps(
            {"run_id": "math-greedy-s2", "task": "math", "agent": "greedy", "seed": 2, "error": reason}
        )
    )
    # error.json as a link (to another run's record) or far too large is read as no record
    linked = tmp_path / "math-greedy-s3"
    linked.mkdir()
    (linked / "error.json").symlink_to(bad / "error.json")
    huge = tmp_path / "math-greedy-s4"
    huge.mkdir()
    (huge / "error.json").write_text(
        json.dumps({"task": "math", "agent": "greedy", "error": "x" * (2 << 20)})
    )
    table, _ = write(tmp_path)
    [row] = table
    assert (row.seeds, row.errored) == (2, 1) and row.score == pytest.approx(0.5)  # not in the mean
    md = (tmp_path / "leaderboard.md").read_text()
    assert "## Errored runs (no score, in no mean above)" in md
    [line] = [x for x in md.splitlines() if x.startswith("| math | greedy | 2 | iteration 2")]
    assert "<b>" not in line and "](" not in line and line.count(" | ") == 3, line  # one inert cell


def test_write_files(tmp_path) -> None:
    for s, sub in enumerate((0.4, 0.6)):
        run = tmp_path / f"math-greedy-s{s}"
        run.mkdir()
        (run / "result.json").write_text(json.dumps(_result("math", "greedy", s, sub, 0.0, 0.8)))
    table, agg = write(tmp_path)
    md = (tmp_path / "leaderboard.md").read_text()
    # seed SD of (0.4, 0.6) = 0.1414; MDD 95% = t(0.975, 2) * 0.1414 * sqrt(2/2) = 0.608
    assert (
        "| math | greedy | 2 | 0.500 [0.400, 0.600] | 0.141 | 0.608 | 0.000 | 0.800 | 0.625 [0.500, 0.750] |"
        in md
    )
    (row,) = list(csv.DictReader(open(tmp_path / "leaderboard.csv")))
    assert row["agent"] == "greedy" and float(row["score"]) == pytest.approx(0.5)
    assert (tmp_path / "leaderboard.png").stat().st_size > 1000 and agg["greedy"]["score"] == pytest.approx(
        0.5
    )
    assert (tmp_path / "leaderboard.svg").is_file() and leaderboard.PLOT_LINE in md
    ui = leaderboard.for_ui(md, tmp_path)  # Prefect's UI cannot load a relative image: the file is named
    assert "![" not in ui and str(tmp_path / "leaderboard.png") in ui


def _with_items(result: dict, won: int, n: int = 20, flagged: bool = False) -> dict:
    """A result whose submission won the first `won` of n test items (and was flagged or not)."""
    result["submitted"]["item_rewards"] = {f"test-{i:02d}": float(i < won) for i in range(n)}
    result["submitted"]["test_score"] = won / n
    result["contamination"] = {"flagged": flagged}
    return result


def test_noise_columns_and_paired_comparison_of_greedy_and_noop() -> None:
    results = [
        _with_items(_result("math", "greedy", s, 0, 0.0, 0.8), won) for s, won in enumerate((8, 10, 12))
    ]
    results += [_with_items(_result("math", "noop", s, 0, 0.0, 0.8), 0) for s in range(3)]
    table = {r.agent: r for r in rows(results)}
    # greedy 0.4, 0.5, 0.6 over seeds: SD 0.1, MDD t(0.975, 4) * 0.1 * sqrt(2/3)
    assert table["greedy"].seed_sd == pytest.approx(0.1) and table["greedy"].mdd95 == pytest.approx(
        0.22670, abs=1e-5
    )
    assert table["noop"].seed_sd == 0.0 and table["noop"].flagged == 0
    (pair,) = pairs(results)
    assert (pair.a, pair.b, pair.seeds, pair.items) == ("greedy", "noop", 3, 20)
    assert pair.diff == pytest.approx(0.5) and 0 < pair.ci_low < 0.5 < pair.ci_high < 1
    assert pair.verdict == "greedy better"
    # one run without per-item rewards: that pair falls back to seeds only
    del results[0]["submitted"]["item_rewards"]
    (pair,) = pairs(results)
    assert pair.items == 0 and pair.diff == pytest.approx(0.5)
    # a reward that is not a finite number in [0, 1] is never used as one: the result is refused
    results[1]["submitted"]["item_rewards"]["test-00"] = float("inf")
    with pytest.raises(BadResult, match=re.escape("submitted.item_rewards['test-00'] = inf is not a finite")):
        pairs(results)


def test_runs_read_back_with_their_item_rewards_file_and_old_records_too(tmp_path) -> None:
    """result.json holds the scores, item_rewards.json beside it the per-item rewards (schema 3):
    the leaderboard reads them joined, so its paired comparison is over items as before; a record
    of schema 2 (rewards inline) reads as it is; a newer schema, or a rewards file of another run
    or behind a link, is refused with the file and the reason."""
    from vtb.result_files import BadRecord, files_of, load_result

    results = [_with_items(_result("math", "greedy", s, 0, 0.0, 0.8), won) for s, won in enumerate((8, 12))]
    results += [_with_items(_result("math", "noop", s, 0, 0.0, 0.8), 0) for s in range(2)]
    for r in results:
        r["schema_version"] = 3
    results[3]["schema_version"] = 2  # an old record: its rewards inline, no rewards file
    for r in results:
        run = tmp_path / r["run_id"]
        run.mkdir()
        for name, content in files_of(r).items():
            (run / name).write_text(json.dumps(content))
    assert (
        "item_rewards"
        not in json.loads((tmp_path / "math-greedy-s0" / "result.json").read_text())["submitted"]
    )
    assert not (tmp_path / "math-noop-s1" / "item_rewards.json").exists()
    read = leaderboard.read_results(tmp_path)
    assert read == leaderboard.typed(sorted(results, key=lambda r: r["run_id"]))  # joined back: the same
    assert [load_result(tmp_path / r["run_id"] / "result.json") for r in results] == results
    (pair,) = pairs(read)
    assert (pair.seeds, pair.items) == (2, 20) and pair.diff == pytest.approx(0.5)

    newer = tmp_path / "math-greedy-s0" / "result.json"
    newer.write_text(json.dumps({**results[0], "schema_version": 4, "item_rewards": None}))
    with pytest.raises(BadRecord, match=r"schema_version 4 is newer than this code reads \(3\)"):
        load_result(newer)
    newer.write_text(json.dumps(files_of(results[0])["result.json"]))
    other = tmp_path / "math-greedy-s1" / "item_rewards.json"
    (tmp_path / "math-greedy-s0" / "item_rewards.json").write_text(other.read_text())
    with pytest.raises(BadRecord, match="math-greedy-s1"):
        load_result(newer)  # another run's rewards
    (tmp_path / "math-greedy-s0" / "item_rewards.json").unlink()
    (tmp_path / "math-greedy-s0" / "item_rewards.json").symlink_to(other)
    with pytest.raises(BadRecord, match="not a regular file"):
        load_result(newer)


def test_flagged_runs_are_marked_and_can_be_left_out(tmp_path) -> None:
    results = [
        _with_items(_result("math", "greedy", s, 0, 0.0, 0.8), 10 + 5 * s, flagged=s == 2) for s in range(3)
    ]
    null = _with_items(_result("math", "noop", 0, 0, 0.0, 0.8), 0)
    null["submitted"]["flagged_by_null_model"] = True
    results.append(null)
    assert [is_flagged(r) for r in results] == [False, False, True, True]
    kept = {r.agent: r for r in rows(results)}
    assert kept["greedy"].seeds == 3 and kept["greedy"].flagged == 1 and kept["noop"].flagged == 1
    left = {r.agent: r for r in rows(results, exclude_flagged=True)}
    assert (
        set(left) == {"greedy"} and left["greedy"].seeds == 2 and left["greedy"].score == pytest.approx(0.625)
    )
    for r in results:
        (tmp_path / r["run_id"]).mkdir()
        (tmp_path / r["run_id"] / "result.json").write_text(json.dumps(r))
    main([str(tmp_path), "--exclude-flagged"])
    md = (tmp_path / "leaderboard.md").read_text()
    assert "2 flagged runs left out" in md and "| math | noop |" not in md
    write(tmp_path)
    md = (tmp_path / "leaderboard.md").read_text()
    assert "| math | noop |" in md and "| math | greedy | noop |" in md  # the paired comparison row
    (pair,) = list(csv.DictReader(open(tmp_path / "leaderboard_pairs.csv")))
    assert pair["verdict"] == "greedy better" and int(pair["seeds"]) == 1  # noop ran seed 0 only


def _grid_result(seed: int, harness_rewards: dict[str, float], per_item: bool = True) -> dict:
    """A greedy run whose grid gains only where the harness is the submitted one."""
    from vtb import codesign

    corners = []
    for code in codesign.CORNERS:
        rewards = harness_rewards if code[2] == "1" else {k: 0.0 for k in harness_rewards}
        corners.append(
            {
                "corner": code,
                "test_score": sum(rewards.values()) / len(rewards),
                "item_rewards": rewards if per_item else None,
            }
        )
    eff = codesign.effects({c["corner"]: c["test_score"] for c in corners})
    out = _result("math", "greedy", seed, corners[-1]["test_score"], 0.0, 0.8)
    out["analysis"] = {"grid": {"corners": corners, "effects": eff.to_json(), "verdict": "single"}}
    return out


def test_grid_effects_pool_seeds_with_a_paired_ci_over_items(tmp_path) -> None:
    from vtb.leaderboard import grid_rows

    # seed 0: the harness gains 1 on both items; seed 1: 1 on item a, 0 on item b
    results = [_grid_result(0, {"a": 1.0, "b": 1.0}), _grid_result(1, {"a": 1.0, "b": 0.0})]
    results.append(_result("math", "noop", 0, 0.0, 0.0, 0.8))  # no grid: no grid row
    got = {g.effect: g for g in grid_rows(results)}
    assert set(got) == {"data", "trainer", "harness", "interaction"}
    harness = got["harness"]
    assert harness.mean == pytest.approx(0.75) and (harness.seeds, harness.items) == (2, 2)
    # resampled means of d = [[1, 1], [1, 0]] run from 0 (seed 1, item b only) to 1: both ends inside 95%
    assert 0.0 <= harness.ci_low < 0.75 < harness.ci_high == pytest.approx(1.0)
    assert (got["data"].mean, got["data"].ci_low, got["data"].ci_high) == (0.0, 0.0, 0.0)
    assert got["interaction"].mean == pytest.approx(0.0) and harness.verdicts == "single 2"
    # without per-item rewards: seeds only (the mean is the same)
    seeds_only = [_grid_result(0, {"a": 1.0, "b": 1.0}, False), _grid_result(1, {"a": 1.0, "b": 0.0}, False)]
    harness = {g.effect: g for g in grid_rows(seeds_only)}["harness"]
    assert harness.mean == pytest.approx(0.75) and harness.items == 0
    for r in results:
        (tmp_path / r["run_id"]).mkdir()
        (tmp_path / r["run_id"] / "result.json").write_text(json.dumps(r))
    write(tmp_path)
    md = (tmp_path / "leaderboard.md").read_text()
    assert "## Co-design grid" in md and "| math | greedy | 2 | 2 | +0.000 [+0.000, +0.000]" in md
    assert (tmp_path / "leaderboard_grid.csv").read_text().count("\n") == 5


def test_test_splits_are_never_pooled() -> None:
    """Was: every run of a (task, agent) was pooled, whatever split it was graded on: a run on the
    public split (anyone can rebuild it) ranked beside hidden-split runs, two salts averaged."""
    from vtb import salt

    def on(split: str, sha: str, *args) -> dict:
        return _result(*args) | {"test_split": {"kind": split, "salt_sha256": sha}}

    mine, theirs = "a" * 64, "b" * 64
    results = [on("hidden", mine, "math", "greedy", s, 0.5, 0.0, 0.8) for s in range(2)]
    results += [on("public", salt.PUBLIC_SHA256, "math", "greedy", 0, 0.9, 0.0, 0.8)]
    results += [on("hidden", mine, "tau", "greedy", 0, 0.4, 0.0, 0.8)]
    table = {(r.task, r.agent): r for r in rows(results)}
    assert table[("math", "greedy")].seeds == 2 and table[("math", "greedy")].score == pytest.approx(0.5)
    assert table[("math [public split]", "greedy")].score == pytest.approx(0.9)
    assert aggregate(list(table.values()))["greedy"]["tasks"] == ["math", "tau"]  # the public row left out
    results += [on("hidden", theirs, "math", "greedy", 5, 0.1, 0.0, 0.8)]
    labels = {r.task for r in rows(results)}
    assert {"math [split aaaaaaaa]", "math [split bbbbbbbb]", "math [public split]", "tau"} == labels
    assert not [p for p in pairs(results) if "split" in p.task and p.a == p.b]


def test_runs_whose_figures_cannot_match_bit_for_bit_are_never_pooled() -> None:
    """Issue 38: a sweep over a mixed work pool pooled machines whose CPU code paths differ (the
    same config and seed gave 0.510 on one, 0.170 on another). Runs are pooled only where their
    reproducibility fingerprints (vtb/repro.py) agree; the others are listed apart."""

    def on(fp: str | None, mode: str, *args) -> dict:
        return _result(*args) | ({"reproducibility": {"id": fp, "mode": mode}} if fp else {})

    same = [on("aaaa", "reproducible", "math", "greedy", s, 0.5, 0.0, 0.8) for s in range(2)]
    table = {(r.task, r.agent): r for r in rows(same)}
    assert table[("math", "greedy")].seeds == 2  # one fingerprint: the task's plain label
    mixed = same + [on("bbbb", "reproducible", "math", "greedy", 2, 0.1, 0.0, 0.8)]
    mixed += [
        on("cccc", "native", "math", "greedy", 3, 0.9, 0.0, 0.8),
        on(None, "", "math", "greedy", 4, 0.2, 0.0, 0.8),
    ]
    table = {(r.task, r.agent): r for r in rows(mixed)}
    assert set(table) == {
        ("math [cpu aaaa]", "greedy"),
        ("math [cpu bbbb]", "greedy"),
        ("math [cpu native cccc]", "greedy"),
        ("math [cpu unrecorded]", "greedy"),
    }
    assert table[("math [cpu aaaa]", "greedy")].seeds == 2
    assert table[("math [cpu aaaa]", "greedy")].score == pytest.approx(0.5)


def test_a_result_is_read_once_into_a_typed_value_and_a_bad_one_is_refused_by_name(tmp_path) -> None:
    """The leaderboard reads each result.json once, through the one reader (BenchResult.from_json)
    into the view it pools (RunResult): the rules on absent or odd fields live there, and
    a result with a figure missing or unsound is refused naming file and field."""
    from vtb.bench_result import BadResult
    from vtb.leaderboard import RunResult

    r = _with_items(_result("math", "greedy", 0, 0.5, 0.1, None), 3, n=4)
    r["submitted"]["flagged_by_grading_cap"] = True
    r["reproducibility"] = {"mode": "native", "id": "abc"}
    r["test_split"] = {"kind": "hidden", "salt_sha256": "f" * 64}
    typed = RunResult.from_json(r)
    assert (typed.flagged, typed.fingerprint, typed.split, typed.reference) == (
        True,
        "native abc",
        ("hidden", "f" * 64),
        None,
    )
    assert typed.item_rewards == {"test-00": 1.0, "test-01": 1.0, "test-02": 1.0, "test-03": 0.0}
    assert (
        RunResult.from_json({**r, "submitted": {**r["submitted"], "item_rewards": {}}}).item_rewards is None
    )
    run = tmp_path / "math-greedy-s0"
    run.mkdir()
    bad = {
        "initial": ({"test_score": "high"}, "initial.test_score is str, not a number"),
        "budget": (None, "budget is NoneType, not an object"),
        "submitted": (
            {**r["submitted"], "item_rewards": {**r["submitted"]["item_rewards"], "test-00": float("nan")}},
            "submitted.item_rewards['test-00'] = nan is not a finite number in [0.0, 1.0]",
        ),
    }
    for key, (value, reason) in bad.items():
        (run / "result.json").write_text(json.dumps({**r, key: value}))
        with pytest.raises(BadResult, match=re.escape(f"math-greedy-s0/result.json: {reason}")):
            leaderboard.read_results(tmp_path)
