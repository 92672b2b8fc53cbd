"""The bench loop (vtb/bench.py) with fake steps: no Prefect, no sandbox, a second or so per run.

The fakes behave like the real steps where the loop depends on it: results are cached by the
key the loop passes in (as Prefect's key-based cache does), each agent turn snapshots a real
workspace, a system's val score is written into its harness and its test score follows it.
What they check: each step is charged once, a cached step still carries its charge, the budget
stops the iterations, selection ties go to the earliest, a failed train is never submitted, a
rejected turn is an iteration the agent is told about, and a run killed at any step boundary
resumes to the same result.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from vtb import result_files
from vtb.bench import Bench, Steps
from vtb.bench_result import BenchResult
from vtb.compose import compose_config
from vtb.config import BenchConfig
from vtb.ledger import Charge
from vtb.results import DataResult, ModelResult, PlayResult, TrainResult, TurnOutcome
from vtb.workspace import changed_files, restore, snapshot

TRAIN_FLOPS, PLAY_FLOPS, TURN_TOKENS = 1e9, 1e7, 100


class Killed(Exception):
    """A kill between two steps (the process dies; what finished is in the cache)."""


def fields_of(request) -> dict:
    """A step request's fields by name: the fakes take the ones they use as keywords."""
    return {f.name: getattr(request, f.name) for f in dataclasses.fields(request)}


class FakeSteps:
    """The five steps as fakes over one shared cache; `plan` is what the agent does each turn:
    {"score": val score of the new system, "fail": its training fails, "reject": a reason,
    "harness_only": only the harness changes, "done": the agent stops}."""

    def __init__(self, root: Path, plan: list[dict]):
        self.root, self.plan = root, plan
        self.cache: dict[str, object] = {}
        self.runs: list[str] = []  # the step keys actually executed (not served from the cache)
        self.kill_at: int | None = None  # kill before the n-th step call of the next run
        self.calls = 0
        self.names: list[str] = []  # the run name of every step call, cached or not

    def steps(self) -> Steps:
        return Steps(
            **{n: self._cached(n, getattr(self, n)) for n in ("data", "model", "train", "play", "turn")}
        )

    def _cached(self, name, fn):
        def call(run_name: str, request):
            key = request.key()
            self.calls += 1
            self.names.append(run_name)
            if self.kill_at is not None and self.calls == self.kill_at:
                raise Killed(f"killed before {name}")
            if key in self.cache:
                return self.cache[key], True
            self.runs.append(f"{name}:{key[:8]}")
            self.cache[key] = fn(key, **fields_of(request))
            return self.cache[key], False

        return call

    def data(self, key, task, cache) -> DataResult:
        from vtb import pipeline
        from vtb.step_requests import DataRequest

        return pipeline.provision_data(DataRequest(task, cache))  # the real one: the initial system reads it

    def model(self, key, **_) -> ModelResult:
        return ModelResult(base_dir=str(self.root / "base"), n_params=1, hash="base-model")

    def train(self, key, snapshot_dir, **_) -> TrainResult:
        config = json.loads((Path(snapshot_dir) / "trainer" / "config.json").read_text())
        charge = Charge(flops=TRAIN_FLOPS, cpu_seconds=1.0, wall_seconds=1.0)
        if config.get("fail"):
            return TrainResult(ok=False, checkpoint=None, log="", charge=charge, returncode=1)
        ckpt = self.root / "checkpoints" / key[:12]
        ckpt.mkdir(parents=True, exist_ok=True)
        (ckpt / "weights.txt").write_text(key)
        return TrainResult(ok=True, checkpoint=str(ckpt), log="", charge=charge, returncode=0)

    def play(self, key, harness_dir, model_dir, split, **_) -> PlayResult:
        text = (Path(harness_dir) / "harness.py").read_text()
        score = float(text.split("SCORE = ")[1].split()[0]) if "SCORE = " in text else 0.01
        score = min(1.0, score + 0.05) if split == "test" else score
        return PlayResult(split=split, score=score, n=10, answered=10, charge=Charge(flops=PLAY_FLOPS))

    def turn(self, key, feedback, before, store, workspace, **_) -> TurnOutcome:
        store, ws = Path(store), Path(workspace)
        step = self.plan[feedback.iteration - 1]
        restore(store, before, ws)
        if not step.get("harness_only"):
            (ws / "trainer" / "config.json").write_text(
                json.dumps({"fail": step.get("fail", False), "it": key})
            )
        (ws / "harness" / "harness.py").write_text(
            f"SCORE = {step.get('score', 0.0)}\n# turn {feedback.iteration}\n"
        )
        after = before if step.get("reject") else snapshot(ws, store)
        return TurnOutcome(
            after=after,
            done=step.get("done", False),
            notes=f"turn {feedback.iteration}",
            charge=Charge(agent_tokens=TURN_TOKENS),
            edits=changed_files(store, before, after),
            rejected=step.get("reject"),
        )


def config(tmp_path: Path, iterations: int, *extra: str) -> BenchConfig:
    return compose_config(
        [
            "agent=noop",
            f"agent.max_iterations={iterations}",
            "task.n_pool=300",
            "task.n_val=10",
            "task.n_test=10",
            "task.initial_data_size=50",
            "+budget.flops_per_cpu_second=1e9",
            "null_model_check=false",
            f"runs_dir={tmp_path / 'runs'}",
            f"cache_dir={tmp_path / 'cache'}",
            *extra,
        ]
    )


def run(cfg: BenchConfig, fake: FakeSteps) -> tuple[Bench, dict]:
    bench = Bench(cfg, fake.steps(), log=lambda msg: None)
    return bench, bench.run().to_json()


PLAN = [{"score": 0.4}, {"score": 0.4, "harness_only": True}, {"score": 0.2, "fail": True}, {"score": 0.3}]


def test_each_step_is_charged_once_and_ties_go_to_the_earliest(tmp_path) -> None:
    fake = FakeSteps(tmp_path, PLAN)
    bench, result = run(config(tmp_path, 4), fake)
    vals = [c.val_score for c in bench.history]
    assert vals == [0.01, 0.4, 0.4, None, 0.3]
    assert result["submitted"]["iteration"] == 1  # the tie with iteration 2 goes to the earliest
    assert result["submitted"]["test_score"] == pytest.approx(0.45)
    # iteration 2 changed the harness only: its checkpoint is iteration 1's, charged once
    steps = [e.step for e in bench.ledger.entries]
    assert steps.count("train") == 4 and steps.count("play-val") == 4 and steps.count("agent") == 4
    assert bench.ledger.used() == pytest.approx(4 * TRAIN_FLOPS + 4 * PLAY_FLOPS)
    assert result["budget"]["agent_tokens"] == 4 * TURN_TOKENS
    # grading and the reference are not charged
    assert "play-test" not in steps and result["reference"]["test_score"] == pytest.approx(0.06)


def test_step_calls_are_named_and_budget_and_iterations_are_watched(tmp_path) -> None:
    """The run names the Prefect task runs get (what each call is), and the Watch hooks the UI's
    live artifacts hang on: the budget after each charge, the history after each iteration."""
    from vtb.bench import Watch

    fake = FakeSteps(tmp_path, PLAN[:2])
    budgets, lengths = [], []
    cfg = config(tmp_path, 2, "base_model_check=true")
    bench = Bench(
        cfg, fake.steps(), log=lambda msg: None, watch=Watch(budgets.append, lambda h: lengths.append(len(h)))
    )
    result = bench.run().to_json()
    # iteration 2 changed the harness only: its weights are iteration 1's, not trained again (a
    # step run twice would rewrite a checkpoint that a background play may be reading)
    research = ["turn-it1", "train-it1", "val-it1", "turn-it2", "train-it2", "val-it2"]
    in_order = [n for n in fake.names if n != "train-reference"]  # the reference trains in the background
    assert in_order[:4] == ["provision-data", "provision-model", "train-it0", "val-it0"]
    assert [n for n in fake.names if n in research] == [n for n in research if n != "train-it2"]
    assert [t["cached"] for t in bench.timings if t["name"] == "train-it2"] == [True]
    grading = {n for n in fake.names if n.startswith("grade-")}
    assert {"grade-initial", "grade-submitted", "grade-reference", "grade-submitted-base-model"} <= grading
    assert "train-reference" in fake.names
    assert lengths == [1, 2, 3]  # after each validated iteration
    assert [b.used for b in budgets] == sorted(b.used for b in budgets) and len(budgets) == len(
        bench.ledger.entries
    )
    assert budgets[-1].used == result["budget"]["used"] and budgets[-1].limit == cfg.budget.limit


def test_a_failed_train_is_recorded_and_never_submitted(tmp_path) -> None:
    fake = FakeSteps(tmp_path, [{"score": 0.9, "fail": True}])
    bench, result = run(config(tmp_path, 1), fake)
    failed = bench.history[1]
    assert failed.val_score is None and failed.train.ok is False and failed.checkpoint is None
    assert result["submitted"]["iteration"] == 0
    record = json.loads((Path(result["record"]) / "iterations" / "01.json").read_text())
    assert record["train"]["ok"] is False and "rejected" not in record


def test_the_budget_stops_the_iterations(tmp_path) -> None:
    plan = [{"score": 0.1 * i} for i in range(1, 6)]
    fake = FakeSteps(tmp_path, plan)
    bench, result = run(config(tmp_path, 5, f"budget.limit={2.5 * (TRAIN_FLOPS + PLAY_FLOPS)}"), fake)
    assert [c.iteration for c in bench.history] == [0, 1, 2]  # exhausted after iteration 2
    assert bench.ledger.exhausted() and result["iterations"] == 2


def test_a_cached_step_still_carries_its_charge(tmp_path) -> None:
    fake = FakeSteps(tmp_path, PLAN)
    _, first = run(config(tmp_path, 4), fake)
    executed = len(fake.runs)
    bench, again = run(config(tmp_path, 4), fake)  # every step served from the cache
    assert len(fake.runs) == executed and all(t["cached"] for t in bench.timings)
    assert again["budget"] == first["budget"] and again["submitted"] == first["submitted"]


def test_a_rejected_turn_is_an_iteration_the_agent_sees_and_the_run_goes_on(tmp_path) -> None:
    reason = "workspace rejected, edits discarded: data/ is over 256 MB"
    fake = FakeSteps(tmp_path, [{"score": 0.5, "reject": reason}, {"score": 0.3, "done": True}])
    seen = []
    turn = fake.turn
    fake.turn = lambda key, feedback, **p: seen.append(feedback) or turn(key, feedback, **p)
    bench, result = run(config(tmp_path, 3), fake)
    assert [c.val_score for c in bench.history] == [0.01, None, 0.3]
    assert bench.history[1].rejected == reason and bench.history[1].train is None
    assert len(seen) == 2 and seen[1].history[1]["rejected"] == reason
    assert json.loads((Path(result["record"]) / "iterations" / "01.json").read_text())["rejected"] == reason


def test_a_run_killed_at_any_step_boundary_resumes_to_the_same_result(tmp_path) -> None:
    whole = FakeSteps(tmp_path / "whole", PLAN)
    _, expected = run(config(tmp_path / "whole", 4), whole)
    boundaries = whole.calls
    assert boundaries >= 12
    for k in range(1, boundaries + 1):
        root = tmp_path / f"kill-{k}"
        fake = FakeSteps(root, PLAN)
        fake.kill_at = k
        with pytest.raises(Killed):
            run(config(root, 4), fake)
        done_before = list(fake.runs)
        fake.kill_at = None
        _, resumed = run(config(root, 4), fake)
        assert fake.runs[: len(done_before)] == done_before
        assert len(fake.runs) == len(whole.runs), f"killed at call {k}: a finished step ran again"
        same = ("submitted", "initial", "reference", "budget", "iterations", "gains_by_part")
        assert {key: resumed[key] for key in same} == {key: expected[key] for key in same}, k


def test_an_agent_that_changes_nothing_submits_the_initial_system(tmp_path) -> None:
    fake = FakeSteps(tmp_path, [])
    fake.turn = lambda key, feedback, before, **_: TurnOutcome(
        after=before, done=True, notes="noop", charge=Charge()
    )
    bench, result = run(config(tmp_path, 3), fake)
    assert [c.iteration for c in bench.history] == [0] and result["iterations"] == 0
    assert result["submitted"] == {
        **result["submitted"],
        "iteration": 0,
        "test_score": result["initial"]["test_score"],
    }
    assert result["gains_by_part"] == {}
    scan = result["contamination"]  # the initial system's data, written from the pool: clean
    assert scan["flagged"] is False and scan["splits"]["test"]["canary_checked"]
    assert result["grading_determinism"] is None  # regrade_check is an option, off by default
    # what ran it and when (issue 39): the layout's version, the checkout's commit, start and end
    assert result["schema_version"] == 3 and re.fullmatch(r"[0-9a-f]{40}", result["git"]["commit"])
    assert result["git"]["dirty"] in (True, False) and result["started_at"] <= result["ended_at"]


def test_an_agent_whose_endpoint_fails_ends_the_run_errored(tmp_path) -> None:
    """A turn the agent could not take (its endpoint failed) ends the run errored, with its
    reason; it used to submit the initial system with exit 0, like agent=noop (issue 39)."""
    fake = FakeSteps(tmp_path, [{"score": 0.3}, {"score": 0.4}])
    plain = fake.turn

    def turn(key, feedback, **params) -> TurnOutcome:
        out = plain(key, feedback, **params)
        if feedback.iteration == 2:
            out.error = "llm: the endpoint failed: HTTP 503 Service Unavailable"
        return out

    fake.turn = turn
    _, result = run(config(tmp_path, 3), fake)
    assert result["state"] == "errored" and result["error"] == (
        "iteration 2: the research agent failed: llm: the endpoint failed: HTTP 503 Service Unavailable"
    )
    iterations = sorted(p.name for p in (Path(result["record"]) / "iterations").iterdir())
    assert (
        iterations == ["00.json", "01.json", "02.json"]
        and not (Path(result["record"]) / "result.json").exists()
    )


def test_a_budget_the_initial_system_spends_or_cannot_cover_is_an_errored_run(tmp_path) -> None:
    """No score from a run whose budget the initial system alone spends (nothing left for the
    agent) or that stops the initial system's training: error.json and report.md say why, no
    result.json, no grading play. It used to grade the initial system as the submission, a row
    that looked like agent=noop's (issue 39)."""
    fake = FakeSteps(tmp_path / "a", [{"score": 0.9}])
    bench, result = run(config(tmp_path / "a", 3, "budget.limit=1e6"), fake)
    assert result["state"] == "errored" and "the initial system alone spent the budget" in result["error"]
    assert "raise budget.limit" in result["error"]
    assert [e.step for e in bench.ledger.entries] == ["train", "play-val"]
    assert not [r for r in fake.runs if r.startswith("turn:")] and not [n for n in fake.names if "grade" in n]
    record = Path(result["record"])
    assert not (record / "result.json").exists()
    assert json.loads((record / "error.json").read_text())["error"] == result["error"]
    assert "errored" in (record / "report.md").read_text() and (record / "iterations" / "00.json").exists()

    class Stopped(FakeSteps):  # the trainer stopped by the step's FLOPs, as the real one is
        def train(self, key, snapshot_dir, **params) -> TrainResult:
            out = super().train(key, snapshot_dir, **params)
            out.summary = {"stopped_early": "budget"}
            return out

    _, result = run(config(tmp_path / "b", 3, "budget.limit=1e15"), Stopped(tmp_path / "b", []))
    assert (
        result["state"] == "errored" and "its training was stopped by budget.limit=1e+15" in result["error"]
    )
    _, fine = run(config(tmp_path / "b", 0, "budget.limit=1e15"), FakeSteps(tmp_path / "b", []))
    assert (
        "state" not in fine and not (Path(fine["record"]) / "error.json").exists()
    )  # fixed: the record is whole


def test_grading_plays_run_at_once_and_a_play_asked_twice_runs_once(tmp_path) -> None:
    """Grading's plays (test, base-model; initial, submitted, reference) overlap, `grading_workers`
    at a time in the grading pool (the initial's and reference's tests start in the background,
    earlier); the initial system submitted again (the agent changed nothing) is one play per key."""
    import threading
    import time

    class Overlapping(FakeSteps):
        def __init__(self, *args):
            super().__init__(*args)
            self.lock, self.now, self.most = threading.Lock(), 0, 0

        def play(self, key, split, **params) -> PlayResult:
            pooled = threading.current_thread().name.startswith("vtb-grade")  # not the background's
            with self.lock:
                self.now += pooled
                self.most = max(self.most, self.now)
            time.sleep(0.2 if split == "test" else 0)
            with self.lock:
                self.now -= pooled
            return super().play(key, split=split, **params)

    fake = Overlapping(tmp_path, [])
    cfg = config(tmp_path, 0, "base_model_check=true", "regrade_check=true", "grading_workers=3")
    _, result = run(cfg, fake)
    assert fake.most == 3  # the pool's base-model, audit and regrade plays (the tests: background)
    tests = [r for r in fake.runs if r.startswith("play:")]
    # val; initial = submitted: test, base; reference: test (the checks play for the submission
    # only); the submission's provenance audit and regrade
    assert len(tests) == len(set(tests)) == 1 + 2 + 1 + 1 + 1
    assert result["submitted"]["test_score"] == result["initial"]["test_score"]


def test_the_reference_trains_in_the_background_during_the_research(tmp_path) -> None:
    """On CPUs the reference's training does not wait for the end: it overlaps the agent's turns,
    in a thread at the background's lower priority; its grade is the same as trained at the end."""
    import os
    import threading

    from vtb.bench import BACKGROUND_NICE

    class Watching(FakeSteps):
        def __init__(self, *args):
            super().__init__(*args)
            self.reference_trained = threading.Event()
            self.seen_by_turn: list[bool] = []
            self.nice: list[int] = []

        def train(self, key, snapshot_dir, **params) -> TrainResult:
            if threading.current_thread().name.startswith("vtb-background"):
                self.nice.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
                self.reference_trained.set()
            return super().train(key, snapshot_dir, **params)

        def turn(self, key, feedback, **params) -> TurnOutcome:
            self.seen_by_turn.append(self.reference_trained.wait(timeout=20))
            return super().turn(key, feedback, **params)

    fake = Watching(tmp_path / "a", [{"score": 0.3}, {"score": 0.4}])
    _, result = run(config(tmp_path / "a", 2), fake)
    assert fake.seen_by_turn == [True, True] and fake.nice == [BACKGROUND_NICE]
    at_end = FakeSteps(tmp_path / "b", [{"score": 0.3}, {"score": 0.4}])
    _, expected = run(config(tmp_path / "b", 2, "sandbox.gpus=all"), at_end)  # GPUs: trained at the end
    assert result["reference"]["test_score"] == expected["reference"]["test_score"] > 0


def test_a_run_trains_each_key_once_though_its_steps_have_no_cache(tmp_path) -> None:
    """Steps without a cache (plain_steps: tests, scripts) run every call. Was: a harness-only edit
    trained its weights again, rewriting the checkpoint folder while the initial system's
    background grading play had it mounted ("mount source ... does not exist")."""
    from collections import Counter

    fake = FakeSteps(tmp_path, PLAN[:2])  # iteration 2 changes the harness only
    trained, train = Counter(), fake.train

    def counting_train(key, snapshot_dir, **params):
        trained[key] += 1
        return train(key, snapshot_dir, **params)

    steps = fake.steps()
    steps.train = lambda run_name, request: (counting_train(request.key(), **fields_of(request)), False)
    bench = Bench(config(tmp_path, 2), steps, log=lambda msg: None)
    bench.run()
    assert trained and set(trained.values()) == {1}, trained
    first, second = bench.history[1], bench.history[2]
    assert second.train_key == first.train_key and second.checkpoint == first.checkpoint


def test_the_initial_and_reference_systems_are_graded_in_the_background_during_the_research(tmp_path) -> None:
    """The benchmark's own systems do not depend on the research: on CPUs their test plays start
    as soon as they can (the initial's after iteration 0, the reference's once it is trained),
    in background threads at the lower priority, uncapped (no grading allowance: nothing an agent
    wrote), and grade the same as played at the end."""
    import os
    import threading

    from vtb.bench import BACKGROUND_NICE

    class Watching(FakeSteps):
        def __init__(self, *args):
            super().__init__(*args)
            self.graded: dict[str, tuple[int, object]] = {}  # snapshot: (nice, cap) of its test play
            self.both = threading.Event()
            self.seen_by_last_turn = False

        def play(self, key, harness_dir, model_dir, split, flops_per_episode=None, **params) -> PlayResult:
            if split == "test" and threading.current_thread().name.startswith("vtb-background"):
                nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
                self.graded[Path(harness_dir).parent.name] = (nice, flops_per_episode)
                if len(self.graded) == 2:
                    self.both.set()
            return super().play(key, harness_dir, model_dir, split, **params)

        def turn(self, key, feedback, **params) -> TurnOutcome:
            if feedback.iteration == 2:
                self.seen_by_last_turn = self.both.wait(timeout=20)
            return super().turn(key, feedback, **params)

    fake = Watching(tmp_path / "a", [{"score": 0.3}, {"score": 0.4}])
    bench, result = run(config(tmp_path / "a", 2), fake)
    assert fake.seen_by_last_turn
    assert set(fake.graded) == bench.own_systems and len(bench.own_systems) == 2
    assert set(fake.graded.values()) == {(BACKGROUND_NICE, None)}
    at_end = FakeSteps(tmp_path / "b", [{"score": 0.3}, {"score": 0.4}])
    _, expected = run(config(tmp_path / "b", 2, "sandbox.gpus=all"), at_end)  # GPUs: graded at the end
    for label in ("initial", "reference"):
        assert result[label]["test_score"] == expected[label]["test_score"] > 0


def test_a_flagged_submission_is_scored_and_marked_and_a_regrade_is_compared(tmp_path) -> None:
    """A submission carrying the test canary is graded as usual and marked in result and report;
    with regrade_check the submission is played a second time and the per-item rewards compared."""
    import threading
    from collections import Counter
    from dataclasses import replace

    from vtb import salt

    cfg = config(tmp_path, 1, "regrade_check=true")
    fake = FakeSteps(tmp_path, [])

    def turn(key, feedback, before, store, workspace, **_):
        store, ws = Path(store), Path(workspace)
        restore(store, before, ws)
        (ws / "harness" / "harness.py").write_text("SCORE = 0.4\n")
        (ws / "data" / "seen.txt").write_text(f"id: {salt.canary_of(cfg.task, 'test')}\n")
        after = snapshot(ws, store)
        edits = changed_files(store, before, after)
        return TurnOutcome(after=after, done=True, notes="copied", charge=Charge(), edits=edits)

    plays, lock, play = Counter(), threading.Lock(), fake.play

    def nondeterministic_play(key, harness_dir, model_dir, split, **kw):
        out = play(key, harness_dir, model_dir, split, **kw)
        if kw["mode"] not in ("model", "regrade"):  # the provenance audit's play answers other texts
            return out
        with lock:
            plays[(harness_dir, model_dir, split)] += 1
            first = plays[(harness_dir, model_dir, split)] == 1
        return replace(out, rewards={"test-0": float(first), "test-1": 1.0})  # test-0 moves on a replay

    fake.turn, fake.play = turn, nondeterministic_play
    _, result = run(cfg, fake)
    assert result["submitted"]["iteration"] == 1 and result["submitted"]["test_score"] == pytest.approx(0.45)
    assert result["contamination"]["flagged"] and result["contamination"]["reasons"] == ["test: canary found"]
    report = (Path(result["record"]) / "report.md").read_text()
    assert "**FLAGGED**: test: canary found" in report and "data/seen.txt" in report
    assert re.search(r"^contamination scan +FLAGGED \(items copied: test 0/10 canary", report, re.M)
    determinism = result["grading_determinism"]
    assert not determinism["identical"] and determinism["differing_items"] == ["test-0"]
    assert result["submitted"]["item_rewards"].keys() == {"test-0", "test-1"}
    # on disk the rewards are beside result.json, and read back joined as the bench returned them
    record_dir = Path(result["record"])
    on_disk = json.loads((record_dir / "result.json").read_text())
    assert "item_rewards" not in on_disk["submitted"] and on_disk["item_rewards_file"] == "item_rewards.json"
    rewards = json.loads((record_dir / "item_rewards.json").read_text())
    assert rewards["run_id"] == result["run_id"] and set(rewards["systems"]) >= {"initial", "submitted"}
    assert rewards["systems"]["submitted"] == result["submitted"]["item_rewards"]
    assert result_files.load_result(record_dir / "result.json") == json.loads(json.dumps(result))
    read_back = BenchResult.from_json(result_files.load_result(record_dir / "result.json"))
    assert read_back.to_json() == json.loads(json.dumps(result)) and read_back.flagged  # the one reader
    table = (record_dir / "item_rewards.csv").read_text().splitlines()
    assert table[0].startswith("item,initial,submitted") and [r.split(",")[0] for r in table[1:]] == [
        "test-0",
        "test-1",
    ]
    assert [float(x) for x in table[2].split(",")[1:]] == [1.0] * (len(table[0].split(",")) - 1)


def _edit_turn(plan: list[dict]):
    """A fake turn that edits the parts its plan step names: {"data": text, "trainer": text, "score": s}."""

    def turn(key, feedback, before, store, workspace, **_) -> TurnOutcome:
        store, ws = Path(store), Path(workspace)
        step = plan[feedback.iteration - 1]
        restore(store, before, ws)
        if "data" in step:
            (ws / "data" / "extra.jsonl").write_text(step["data"])
        if "trainer" in step:
            (ws / "trainer" / "config.json").write_text(json.dumps({"lr": step["trainer"]}))
        if "score" in step:
            (ws / "harness" / "harness.py").write_text(f"SCORE = {step['score']}\n")
        after = snapshot(ws, store)
        edits = changed_files(store, before, after)
        return TurnOutcome(after=after, done=False, notes="edit", charge=Charge(), edits=edits)

    return turn


def test_the_path_names_its_steps_corners_by_what_they_changed(tmp_path) -> None:
    """A path step is the grid corner of the parts it changed: the initial system is 000 even when
    it is the submission (every corner is then the same system; 101 was reported), and a
    harness-only submission is 001."""
    from vtb.analysis import corner_of

    _, result = run(config(tmp_path / "same", 0), FakeSteps(tmp_path / "same", []))
    assert [(s["iteration"], s["corner"]) for s in result["analysis"]["path"]] == [(0, "000")]
    record = Path(result["record"])
    report = (record / "report.md").read_text()
    assert [line for line in report.splitlines() if line.endswith("| yes |")][0].startswith("| 000 ")
    # the plots: PNG at print resolution (10 x 3.6 in at 200 dpi) and SVG, every bar with its value
    png = (record / "scores.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") == 2000
    svg = (record / "scores.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and (record / "analysis.svg").is_file()
    plan = [{"score": 0.3}]
    fake = FakeSteps(tmp_path / "harness", plan)
    fake.turn = _edit_turn(plan)
    _, result = run(config(tmp_path / "harness", 1), fake)
    assert [(s["iteration"], s["corner"]) for s in result["analysis"]["path"]] == [(0, "000"), (1, "001")]
    initial = {"data": "a", "trainer": "b", "harness": "c"}
    assert corner_of({**initial, "harness": "x"}, initial, {**initial, "harness": "y"}) is None


def test_the_grid_and_the_path_are_graded_unbudgeted_and_reported(tmp_path) -> None:
    """Three parts changed over three kept iterations: the grid's 8 corners are graded (one new
    training: the trainer-only edit of iteration 2 already made initial data + submitted trainer), the path's test scores recorded, the ledger is
    the same as without the analysis, and result.json and report.md show both."""
    plan = [{"score": 0.3}, {"trainer": 0.003, "score": 0.35}, {"data": "{}\n", "score": 0.5}]
    fake = FakeSteps(tmp_path / "on", plan)
    fake.turn = _edit_turn(plan)
    bench, result = run(config(tmp_path / "on", 3), fake)
    grid = result["analysis"]["grid"]
    scores = {c["corner"]: c["test_score"] for c in grid["corners"]}
    # the fake's test score follows the harness only: 0.5 + 0.05 submitted, 0.01 + 0.05 initial
    assert scores == pytest.approx({c: 0.55 if c[2] == "1" else 0.06 for c in scores})
    assert grid["changed"] == ["data", "trainer", "harness"] and grid["distinct_systems"] == 8
    eff = grid["effects"]
    assert eff["main"] == pytest.approx({"data": 0.0, "trainer": 0.0, "harness": 0.49})
    assert eff["interaction"] == pytest.approx(0.0) and grid["verdict"] == "additive"
    reused = sorted(str(t["reused"]) for t in grid["trainings"])
    assert reused == ["None", "iteration 0", "iteration 2", "iteration 3"]
    assert [n for n in fake.names if n.startswith("train-grid")] == ["train-grid-data"]
    path = result["analysis"]["path"]
    assert [(s["iteration"], s["corner"]) for s in path] == [(0, "000"), (1, None), (2, None), (3, "111")]
    assert [s["test_score"] for s in path] == pytest.approx([0.06, 0.35, 0.40, 0.55])
    spend = result["analysis"]["spend"]
    assert spend["budgeted"] is False and spend["trainings"] == 1 and spend["flops"] > 0
    assert spend["plays"] == 6 + 2  # the grid's 6 new systems and the path's 2 middle candidates
    report = (Path(result["record"]) / "report.md").read_text()
    assert "## Co-design grid and path" in report and "harness alone +0.490" in report
    assert "| 3 | data, harness | 0.500 | 0.550 | +0.150 |" in report
    assert (Path(result["record"]) / "analysis.png").is_file()

    off = FakeSteps(tmp_path / "off", plan)
    off.turn = _edit_turn(plan)
    _, without = run(config(tmp_path / "off", 3, "analysis.grid=false", "analysis.path=false"), off)
    assert without["budget"] == result["budget"]  # the analysis is never charged to the agent
    assert (
        without["analysis"] is None
        and "Co-design grid" not in (Path(without["record"]) / "report.md").read_text()
    )


def test_a_part_the_agent_never_changed_is_not_trained_or_graded_again(tmp_path) -> None:
    """Only the harness changed: the grid's 8 corners are 2 systems, nothing is trained anew."""
    plan = [{"score": 0.4}]
    fake = FakeSteps(tmp_path, plan)
    fake.turn = _edit_turn(plan)
    _, result = run(config(tmp_path, 1), fake)
    grid = result["analysis"]["grid"]
    assert grid["changed"] == ["harness"] and grid["distinct_systems"] == 2
    assert result["analysis"]["spend"]["trainings"] == 0 and result["analysis"]["spend"]["plays"] == 0
    assert not [n for n in fake.names if n.startswith("train-grid")]
    assert grid["verdict"] == "single" and grid["effects"]["main"]["harness"] == pytest.approx(0.39)


def test_the_publishable_record_holds_no_test_input(tmp_path) -> None:
    """Was: grading.json kept five graded episodes in the clear, so a harness that echoed its
    inputs after its answers published test questions with their rewards (and one that printed them
    in a "No such file or directory" line, in grading.json's denials). Now those samples, denials
    and the graders' reports live in private/ only, which the record says is never to be published."""
    question = "What is the secret test question number 4242?"
    fake = FakeSteps(tmp_path, PLAN[:1])
    play = fake.play

    def echoing_play(key, harness_dir, model_dir, split, **kw):
        out = play(key, harness_dir, model_dir, split, **kw)
        sample = {
            "id": "test-0",
            "reward": 1.0,
            "action": {"type": "answer", "content": f"#### 7\n{question}"},
        }
        if split != "test":
            return out
        # and a stderr line the sandbox's denial filter keeps (any text with a marker in it)
        return dataclasses.replace(
            out, samples=[sample], denials=[f"cat: {question}: No such file or directory"]
        )

    fake.play = echoing_play
    _, result = run(config(tmp_path, 1), fake)
    record = Path(result["record"])
    private = record / "private"
    assert (
        question in (private / "samples.json").read_text()
        and "do not publish" in (private / "README.md").read_text()
    )
    published = [p for p in record.rglob("*") if p.is_file() and not p.is_relative_to(private)]
    assert published and not [p for p in published if question.encode() in p.read_bytes()]


def test_grading_may_spend_what_validation_did_per_episode_and_a_harness_past_it_is_flagged(tmp_path) -> None:
    """Was: grading was unbudgeted and uncapped, so a harness that told grading from validation
    spent 4e4 x its validation FLOPs there, charged nowhere and not flagged."""
    from vtb.bench import GRADING_SLACK

    fake = FakeSteps(tmp_path, PLAN[:1])
    play, caps = fake.play, {}

    def spending_play(key, harness_dir, model_dir, split, flops_per_episode=None, **kw):
        out = play(key, harness_dir, model_dir, split, **kw)
        if split != "test":
            return out
        caps[harness_dir] = flops_per_episode
        return dataclasses.replace(out, killed=["flops"])  # it tried to spend more: refused

    fake.play = spending_play
    bench, result = run(config(tmp_path, 1), fake)
    validated = {v for v in caps.values() if v is not None}
    assert validated == {GRADING_SLACK * PLAY_FLOPS / 10}  # val: PLAY_FLOPS over 10 episodes
    # the initial and reference systems are ours (nothing an agent wrote): graded uncapped, so
    # their grading can run before the research ends; the submission (iteration 1) is capped
    uncapped = {Path(h).parent.name for h, cap in caps.items() if cap is None}
    assert len(uncapped) == 2 and uncapped == bench.own_systems
    assert result["submitted"]["iteration"] == 1
    assert result["submitted"]["flagged_by_grading_cap"] is True
    from vtb.leaderboard import is_flagged

    assert is_flagged(result)
    assert (
        "spent more per episode in grading than validation allowed"
        in (Path(result["record"]) / "report.md").read_text()
    )


def test_grading_plays_in_shards_of_the_validation_size(tmp_path) -> None:
    """Was: a grading play was one play of the whole test split, so its first batch (the test size
    or the batch cap) told it from validation (tests/test_grading_blind.py plays both)."""
    fake = FakeSteps(tmp_path, PLAN[:1])
    play, shards = fake.play, []

    def recording_play(key, harness_dir, model_dir, split, shard=None, **kw):
        if split == "test":
            shards.append(shard)
        return play(key, harness_dir, model_dir, split, **kw)

    fake.play = recording_play
    run(config(tmp_path, 1), fake)
    assert shards and set(shards) == {10}  # the val plays' n


def test_a_default_run_is_recorded_on_the_public_test_split(tmp_path, monkeypatch) -> None:
    """The default salt is in the public source, so anyone can rebuild that test split with its
    answers: a default run's result.json and report say "public" (the leaderboard ranks it apart)."""
    from vtb import salt

    monkeypatch.delenv(salt.ENV_VAR, raising=False)
    _, result = run(config(tmp_path, 1), FakeSteps(tmp_path, PLAN[:1]))
    assert result["test_split"] == {"kind": "public", "salt_sha256": salt.PUBLIC_SHA256}
    report = (Path(result["record"]) / "report.md").read_text()
    assert "test split" in report and "public (the published default salt: anyone can rebuild it" in report
