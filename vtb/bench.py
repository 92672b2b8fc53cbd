"""The bench loop as plain Python: provision → iterations (turn → train → validate) → select → grade.

`Bench` holds one run's state and is handed its five steps as callables (`Steps`): flows/bench.py
passes Prefect tasks (steps/), tests pass plain functions. Each step is called with its request
(vtb/step_requests.py, which names its result's key) and returns a typed result (vtb/results.py)
and whether it came from a cache.
Every charge goes to the ledger once per key: a result reused within a run (a harness-only
edit reuses its checkpoint) costs once, and a resumed run rebuilds its ledger from the charges
inside its cached results. Nothing here imports Prefect.
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vtb import analysis, contamination, noise, pipeline, progress, provenance, record, repro
from vtb.agents import Feedback, best_of
from vtb.bench_result import BenchResult, Errored
from vtb.blind import null_model, secret_of
from vtb.build import check_data, floor_of, flops_floor_calibration, reference_model_config
from vtb.build import run_id as run_id_of
from vtb.config import BenchConfig, ModelConfig
from vtb.domains.registry import get_domain, hooks
from vtb.ledger import Ledger, LedgerSummary, StepLimits, check_budget
from vtb.result_parts import Fingerprint
from vtb.results import (
    AgentUse,
    Candidate,
    DataResult,
    Grade,
    ModelResult,
    PlayResult,
    RunOutcome,
    System,
    Trained,
    TurnOutcome,
    Validated,
)
from vtb.step_requests import UNLIMITED, DataRequest, ModelRequest, PlayRequest, TrainRequest, TurnRequest
from vtb.workspace import part_hashes, restore

Ran = tuple[Any, bool]  # a step's typed result, and whether it came from the cache


class RunError(RuntimeError):
    """The run cannot do what it was asked (a budget below the initial system's cost, the research
    agent's endpoint failing): it ends errored, with the reason and no score (issue 39)."""


@dataclass
class Steps:
    """The bench's steps; each is called as `step(run_name, request)` and returns `Ran`.

    The request (vtb/step_requests.py) is the step's whole input and names its key; `run_name`
    says what the call is (`train-it2`, `val-it2`, `grade-submitted`): the Prefect steps name
    their task runs with it, so a user can tell validation from grading."""

    data: Callable[[str, DataRequest], Ran]
    model: Callable[[str, ModelRequest], Ran]
    train: Callable[[str, TrainRequest], Ran]
    play: Callable[[str, PlayRequest], Ran]
    turn: Callable[[str, TurnRequest], Ran]


def plain_steps() -> Steps:
    """The pipeline functions themselves, never cached: a bench without Prefect (tests, scripts)."""

    def uncached(fn: Callable[[Any], Any]) -> Callable[[str, Any], Ran]:
        return lambda run_name, request: (fn(request), False)

    return Steps(
        data=uncached(pipeline.provision_data),
        model=uncached(pipeline.provision_model),
        train=uncached(pipeline.train),
        play=uncached(pipeline.play),
        turn=uncached(pipeline.agent_turn),
    )


@dataclass
class Watch:
    """What a running bench tells its caller besides log lines; the flow layer shows these in the
    Prefect UI while the bench runs (the core stays free of Prefect). Defaults do nothing."""

    budget: Callable[[LedgerSummary], None] = lambda summary: None  # after each booked charge
    iteration: Callable[[list[Candidate]], None] = lambda history: None  # after each recorded iteration


def select(history: list[Candidate]) -> Candidate:
    """The best validated candidate, the earliest on a tie (agents read the same rule through
    `Feedback.best`); the initial system when nothing validated."""
    return best_of(history, lambda c: c.val_score, lambda c: c.iteration) or history[0]


class Bench:
    """State of one bench run; the methods are its stages, `run` chains them."""

    def __init__(
        self,
        cfg: BenchConfig,
        steps: Steps,
        log: Callable[[str], None] | None = None,
        watch: Watch | None = None,
    ):
        check_budget(cfg.budget.unit, cfg.sandbox.gpus)  # also for flows that skip preflight (sweeps)
        self.cfg, self.steps = cfg, steps
        self.runs, self.cache = cfg.paths()
        self.run_id = run_id_of(cfg)
        self.rec = record.RunRecord(self.runs / self.run_id)
        self.store = self.cache / "snapshots"
        self.store.mkdir(parents=True, exist_ok=True)
        # The FLOPs floor is set at provision time: its rates are calibrated on the base model.
        self.ledger = Ledger(cfg.budget.unit, cfg.budget.limit, cfg.budget.cpu_seconds)
        self.history: list[Candidate] = []
        self.timings: list[dict] = []  # per step call: wall in the orchestrator, wall in the sandbox, cached
        self.charged: set[str] = set()  # step keys already charged in this run
        self._grading: dict[str, Future] = {}  # grading plays by key: one play per key, however often asked
        self._grading_lock = threading.Lock()  # the background and the main thread both start plays
        self._reference: Future | None = None  # the reference system trained in the background (run)
        self._validated = threading.Event()  # iteration 0 is validated: grading's shard size is known
        # Each key is trained once per run (the others wait for it and share its result): a step
        # run again (plain steps; a cache miss) would rewrite the checkpoint under a play reading it.
        self._trained: dict[str, Future] = {}
        self._trained_lock = threading.Lock()
        self.own_systems: set[str] = set()  # snapshot ids of the initial and reference systems (provision)
        self.t0 = time.monotonic()
        self.watch = watch or Watch()
        self._log = log or (lambda msg: progress.say(f"[bench {time.monotonic() - self.t0:6.1f}s] {msg}"))

    def run(self) -> BenchResult | Errored:
        """The whole bench: its result (result.json's figures), or why it errored (error.json).

        The reference and initial systems do not depend on the research, so on CPUs the
        reference trains, and both are graded, in background threads at a lower priority
        (BACKGROUND_NICE) as soon as they can be: they use the cycles the research leaves idle
        (interpreter starts, agent turns) rather than waiting for the end. With GPUs that all
        happens at the end, as it would share the GPU.
        """
        self.rec.start(self.cfg)
        try:
            self.provision()
            if self.cfg.reference and not self.cfg.sandbox.gpus:
                self._reference = in_background(self._reference_graded)
            self.iterate()
        except RunError as e:
            self._log(f"errored: {e}")
            self.rec.write_timings(time.monotonic() - self.t0, self.timings)
            return self.rec.errored(self.cfg, self.run_id, str(e), self.ledger)
        return self.finish()

    def _call(self, name: str, run_name: str, request: Any) -> Any:
        start = time.monotonic()
        out, cached = getattr(self.steps, name)(run_name, request)
        self._timed(name, run_name, request, start, cached, getattr(out, "charge", None))
        return out

    def _timed(self, name: str, run_name: str, request: Any, start: float, cached: bool, charge: Any) -> None:
        inside = 0.0 if cached or charge is None else round(charge.wall_seconds, 3)
        self.timings.append(
            {
                "step": name,
                "name": run_name,
                "started_s": round(start - self.t0, 3),  # into the run, as the log's clock
                "split": getattr(request, "split", None),
                "cached": cached,
                "wall_seconds": round(time.monotonic() - start, 3),
                "sandbox_wall_seconds": inside,
                "cpu_seconds": 0.0 if cached or charge is None else round(charge.cpu_seconds, 3),
            }
        )

    def _charge(self, step: str, iteration: int, key: str, charge: Any, budgeted: bool = True) -> None:
        """Book a step's charge once per key: the ledger checks every figure and applies the floor."""
        if key in self.charged:
            return
        self.charged.add(key)
        if budgeted:
            self.ledger.charge(step, iteration, charge)
            self.watch.budget(self.ledger.summary())

    def _limits(self, budgeted: bool, kind: str) -> StepLimits:
        """What the budget leaves the next step of `kind`; nothing for unbudgeted steps (grading, reference)."""
        if not budgeted:
            return UNLIMITED
        return self.ledger.step_limits(self.cfg.sandbox.step_cpu_s, kind)

    # provision -----------------------------------------------------------------------------
    def provision(self, calibrate: Callable | None = None) -> None:
        cfg = self.cfg
        self._log(f"run {self.run_id}: provisioning data and the {cfg.model.name} base model")
        probe = repro.start_fingerprint(cfg.sandbox)  # a few seconds in a sandbox, beside the next steps
        self.data: DataResult = self._call("data", "provision-data", DataRequest(cfg.task, self.cache))
        self.data_dir = Path(self.data.data_dir)
        self.initial = self._preflight()
        # the benchmark's own systems: graded uncapped, so whenever their grading runs (grading_allowance)
        reference = (
            pipeline.build_system("reference", cfg, self.data_dir, self.store) if cfg.reference else None
        )
        self.own_systems = {self.initial, *([reference] if reference else [])}
        self.model = self._provision_model(cfg.model, "provision-model")
        self.base_dir = Path(self.model.base_dir)
        self.reproducibility = Fingerprint.from_json(
            probe.result()
        )  # before the calibration, which must run alone
        self._log(f"reproducibility fingerprint {record.fingerprint_line(self.reproducibility)}")
        self._log(f"data {self.data.counts}, base model {self.model.n_params} params")
        self._log(
            "FLOPs floor: this machine's engine rates for this model shape (measured once, then cached)"
        )
        calibration = (calibrate or flops_floor_calibration)(
            cfg, self.cache, self.base_dir, self.store / self.initial
        )
        self.ledger.floor = floor_of(cfg, calibration)
        self.rec.write_artifact("calibration.json", calibration)  # the FLOPs floor's rates and machine

    def _preflight(self) -> str:
        """vtb/preflight.py before the base model or any budget; returns the initial system's
        snapshot id, written on the way. Its summary goes into the run record."""
        initial, summary = check_data(self.cfg, self.data, self.store)
        self.rec.write_artifact("preflight.json", summary)
        self._log(f"preflight passed: {', '.join(summary['checked'])}")
        return initial

    def _provision_model(self, model: ModelConfig, run_name: str) -> ModelResult:
        request = ModelRequest(
            model, self.cfg.task, self.data_dir, self.data.hashes, self.cache, self.cfg.sandbox
        )
        return self._call("model", run_name, request)

    # train + play ------------------------------------------------------------------------------
    def train(
        self, sid: str, iteration: int, budgeted: bool = True, run_name: str | None = None
    ) -> tuple[str, Any]:
        request = self.train_request(sid, self._limits(budgeted, "train"))
        key = request.key()
        name = run_name or (f"train-it{iteration}" if iteration >= 0 else "train-reference")
        with self._trained_lock:
            ours = key not in self._trained
            if ours:
                self._trained[key] = Future()
            future = self._trained[key]  # held here: a failed owner drops the entry
        if ours:
            try:
                future.set_result(self._call("train", name, request))
            except BaseException as e:  # for whoever waits on it; a later call trains again
                with self._trained_lock:
                    self._trained.pop(key, None)
                future.set_exception(e)
                raise
        start = time.monotonic()
        out = future.result()
        if not ours:
            self._timed("train", name, request, start, True, None)
            self._log(f"{name}: the same data, trainer and base model as weights this run trained: reused")
        self._charge("train", iteration, key, out.charge, budgeted)
        return key, out

    def train_request(self, sid: str, limits: StepLimits = UNLIMITED) -> TrainRequest:
        """Training snapshot `sid` from the base model (its key is the same whatever the limits)."""
        return TrainRequest(
            snapshot_dir=self.store / sid,
            parts=part_hashes(self.store / sid),
            base_dir=self.base_dir,
            base_hash=self.model.hash,
            seed=self.cfg.seed,
            cache=self.cache,
            sandbox=self.cfg.sandbox,
            limits=limits,
        )

    def play(
        self,
        system: System,
        split: str,
        iteration: int,
        *,
        budgeted: bool = True,
        weights: Path | None = None,
        mode: str = "model",
    ) -> PlayResult:
        """Play `system` on `split`; `weights` swaps in other weights (mode null or base) behind the same endpoint."""
        request = self._play_request(system, split, budgeted, weights, mode)
        out = self._call("play", f"{split}-it{iteration}", request)
        self._charge(f"play-{split}", iteration, request.key(), out.charge, budgeted)
        return out

    def _play_request(
        self, system: System, split: str, budgeted: bool, weights: Path | None, mode: str
    ) -> PlayRequest:
        return PlayRequest(
            harness_dir=self.store / system.snapshot / "harness",
            harness_hash=part_hashes(self.store / system.snapshot)["harness"],
            model_dir=Path(weights or system.weights),
            weights_key=system.weights_key,
            split=split,
            split_hash=self.data.hashes[split],
            data_dir=self.data_dir,
            task=self.cfg.task,
            sandbox=self.cfg.sandbox,
            engine=self.cfg.engine,
            limits=self._limits(budgeted, "infer"),
            mode=mode,
        )

    def _grading_play(
        self, pool: ThreadPoolExecutor | None, system: System, weights: Path | None, mode: str, label: str
    ) -> Future:
        """A grading play (unbudgeted, test split) started in `pool`, or in a background thread
        (None); the same key twice is one play.

        Its run name says the system and the check: `grade-submitted`, `grade-submitted-null-check`,
        `grade-initial-base-model`, `grade-submitted-regrade`."""
        request = self._grading_request(system, weights, mode)
        key = request.key()
        with self._grading_lock:
            if key not in self._grading:
                self._charge("play-test", -1, key, None, budgeted=False)  # marks the key; no ledger entry
                name = (
                    f"grade-{label}"
                    + {
                        "model": "",
                        "null": "-null-check",
                        "base": "-base-model",
                        "regrade": "-regrade",
                        "audit": "-provenance-audit",
                    }[mode]
                )
                if pool is None:
                    self._grading[key] = in_background(lambda: self._call("play", name, request))
                else:
                    run = contextvars.copy_context().run  # the flow's context (Prefect's run) in the worker
                    self._grading[key] = pool.submit(run, self._call, "play", name, request)
            return self._grading[key]

    def _grading_request(self, system: System, weights: Path | None, mode: str) -> PlayRequest:
        """A grading play: unbudgeted, test split, capped per episode, in val-shaped shards (a
        harness cannot tell grading by its episode count)."""
        return replace(
            self._play_request(system, "test", False, weights, mode),
            flops_per_episode=self.grading_allowance(system),
            shard=self.val_size(),
        )

    def val_size(self) -> int | None:
        """How many episodes a validation play has (grading plays in shards of that size)."""
        sizes = [c.val.n for c in self.history if c.val]
        return max(sizes) if sizes and max(sizes) > 0 else None

    def grading_allowance(self, system: System) -> float | None:
        """The model FLOPs per episode grading allows a harness: GRADING_SLACK x the most its
        validation plays spent per episode (None for a harness never validated).

        Grading is not charged to the budget, so without a cap a harness that can tell grading
        from validation could spend there what it never paid for (issue 37: 4e4 x its val spend).
        The benchmark's own systems (initial, reference: our harnesses, nothing an agent wrote)
        are graded uncapped, so their grading does not depend on the research's history and can
        start before the research ends (`run`).
        """
        if system.snapshot in self.own_systems:
            return None
        harness = part_hashes(self.store / system.snapshot)["harness"]
        spent = [
            c.val.charge.flops / max(1, c.val.n)
            for c in self.history
            if c.val and c.parts.get("harness") == harness
        ]
        return GRADING_SLACK * max(spent) if spent else None

    def evaluate(self, sid: str, iteration: int, turn: TurnOutcome | None) -> Candidate:
        used_before = self.ledger.used()
        train_key, trained = self.train(sid, iteration)
        val = self.play(System(sid, train_key, trained.checkpoint), "val", iteration) if trained.ok else None
        entry = self._candidate(
            iteration,
            sid,
            turn,
            train_key=train_key,
            checkpoint=trained.checkpoint,
            val_score=val.score if val else None,
            used_before=used_before,
            train=Trained.of(trained),
            val=Validated.of(val) if val else None,
        )
        self.watch.iteration(self.history)
        score = "failed" if val is None else f"{val.score:.3f}"
        self._log(
            f"iteration {iteration}: val {score}; budget {self.ledger.used():.3g} of "
            f"{record.amount(self.ledger.limit, self.ledger.unit)}"
        )
        return entry

    def _candidate(
        self, iteration: int, sid: str, turn: TurnOutcome | None, used_before: float, **fields: Any
    ) -> Candidate:
        """Record one iteration (trained, or rejected untrained when `fields` says so)."""
        c = Candidate(
            iteration=iteration,
            snapshot=sid,
            parts=part_hashes(self.store / sid),
            edits=turn.edits if turn else {},  # a rejected turn changed nothing
            notes=turn.notes if turn else "initial system",
            agent=_agent_use(turn),
            rejected=turn.rejected if turn else None,
            charge={self.ledger.unit: self.ledger.used() - used_before},
            budget_after=self.ledger.summary(),
            **fields,
        )
        self.history.append(c)
        self.rec.write_iteration(c.to_json(), turn.trajectory if turn else [], turn.egress if turn else [])
        return c

    # research iterations -----------------------------------------------------------------------
    def iterate(self) -> None:
        cfg = self.cfg
        self._log("iteration 0: training and validating the initial system")
        why = initial_failure(self.evaluate(self.initial, 0, None), self.ledger)
        if not why and cfg.agent.max_iterations > 0 and self.ledger.exhausted():
            why = (
                f"the initial system alone spent the budget ({self.ledger.used():.3g} of "
                f"budget.limit={self.ledger.limit:g} {self.ledger.unit}): nothing is left for the research "
                "agent; raise budget.limit"
            )
        if why:
            raise RunError(why)
        self._validated.set()  # grading plays can be shaped now (val_size)
        initial = self.history[0].system
        if not cfg.sandbox.gpus and initial.weights is not None:  # graded in the background (run)
            self._grading_play(None, initial, None, "model", "initial")
        ws = self.rec.dir / "workspace"
        before = self.initial
        for it in range(1, cfg.agent.max_iterations + 1):
            if self.ledger.exhausted():
                self._log("budget exhausted: stopping the research iterations")
                break
            feedback = Feedback(
                task=cfg.task.name,
                iteration=it,
                max_iterations=cfg.agent.max_iterations,
                seed=cfg.seed,
                history=[public_view(h) for h in self.history],
                budget=self.ledger.summary(),
            )
            request = TurnRequest(
                agent=cfg.agent,
                feedback=feedback,
                before=before,
                store=self.store,
                workspace=ws,
                data_dir=self.data_dir,
                base_dir=self.base_dir,
                sandbox=cfg.sandbox,
                limits=StepLimits(None, self.ledger.cpu_left(), self.ledger.gpu_left()),
            )
            self._log(f"iteration {it}: {cfg.agent.name} agent turn")
            turn: TurnOutcome = self._call("turn", f"turn-it{it}", request)
            self._charge("agent", it, request.key(), turn.charge)
            self._log(f"iteration {it}: {turn.notes} (edits: {sorted(turn.edits)})")
            if turn.error:  # the agent's endpoint failed: what follows would look like agent=noop
                self._candidate(it, before, turn, self.ledger.used(), train=None, train_key=None,
                                checkpoint=None, val_score=None, val=None)  # fmt: skip
                raise RunError(f"iteration {it}: the research agent failed: {turn.error}")
            if turn.rejected:  # over the caps: nothing to train; the agent reads why next turn
                self._candidate(
                    it,
                    before,
                    turn,
                    self.ledger.used(),
                    train=None,
                    train_key=None,
                    checkpoint=None,
                    val_score=None,
                    val=None,
                )
                self.watch.iteration(self.history)
                self._log(f"iteration {it}: {turn.rejected}")
            elif not (turn.done and turn.after == before):
                self.evaluate(turn.after, it, turn)
                before = turn.after
            if turn.done:
                break
        restore(self.store, before, ws)

    # select, grade, report ---------------------------------------------------------------------
    def grade(self, system: System, label: str) -> Grade:
        """Grade `system` now (its plays at once, `grading_workers` at a time)."""
        with ThreadPoolExecutor(self.grading_workers(), thread_name_prefix="vtb-grade") as pool:
            return self.start_grade(pool, system, label)()

    def start_grade(self, pool: ThreadPoolExecutor, system: System, label: str) -> Callable[[], Grade]:
        """Start grading `system` in `pool` (its test, null-model and base-model plays at once); the
        returned call waits for them and writes the grade.

        The checks (null model, base model, provenance audit) play for the submission only: the
        initial and reference systems are the benchmark's own, and the report reads the checks of
        the submission alone (two test plays fewer per run)."""
        if system.weights is None:
            return lambda: Grade(test_score=0.0, note="no checkpoint (training failed)")
        self._log(f"grading the {label} system on the hidden test split")
        test = self._grading_play(pool, system, None, "model", label)
        null = base = audit = None
        checked = label == "submitted"
        if checked and self.cfg.provenance_check and self.auditable():
            audit = self._grading_play(pool, system, None, "audit", label)
        if checked and self.cfg.null_model_check:
            # The same harness, episodes (ids, order), mounts, paths and environment; only the
            # weights differ: the checkpoint's own folder with every tensor shuffled (vtb/blind.py).
            null_dir = null_model(Path(system.weights), self.cache, secret_of(self.cfg.task))
            null = self._grading_play(pool, system, null_dir, "null", label)
        if checked and self.cfg.base_model_check:
            # Information, not a flag: how much of the score the trained weights carry.
            base = self._grading_play(pool, system, self.base_dir, "base", label)

        def finish() -> Grade:
            played: PlayResult = test.result()
            for name, content in played.artifacts.items():  # e.g. SWE-bench report.json files
                self.rec.write_private(f"grading/{label}/{name}", content)  # test ids, logs: private
            cap = played.killed and "flops" in played.killed
            grade = Grade(
                test_score=played.score,
                capped=bool(cap),  # its harness spent more per episode than validation allowed
                n=played.n,
                answered=played.answered,
                crashes=played.crashes,
                denials=played.denials,
                samples=played.samples,
                metrics=played.metrics,
                inference_flops=played.charge.flops,
                engine=played.engine,
                rewards=dict(played.rewards),
            )
            if null is not None:
                score = null.result().score
                grade.null_model_score, grade.flagged = score, score > self.cfg.null_model_threshold
            if base is not None:
                grade.base_model_score = base.result().score
            if audit is not None:
                grade.provenance = provenance.verdict(audit.result().audit or [], grade.rewards)
                self.rec.write_private(f"grading/{label}/provenance_audit.json", audit.result().audit or [])
            elif checked and self.cfg.provenance_check and played.written is not None:
                # the written check, from the grading play's own transcript (no play of its own)
                grade.provenance = provenance.written_verdict(played.written, grade.rewards)
                self.rec.write_private(f"grading/{label}/written_check.json", played.written)
            return grade

        return finish

    def contamination_scan(self, chosen: Candidate) -> dict | None:
        """The submission's data/, trainer/ and harness/ against the full test and val splits.

        Orchestrator-side and deterministic; it reads the hidden split and the run's canaries
        (vtb/contamination.py). A flagged submission is still graded and scored, and marked.
        """
        if not self.cfg.contamination_check:
            return None
        result = contamination.scan_run(self.data_dir, self.store / chosen.snapshot, self.cfg.task)
        self._log(f"contamination scan of the submission: {contamination.summary(result)}")
        return result

    def start_analysis(self, pool: ThreadPoolExecutor, chosen: Candidate) -> analysis.Analysis | None:
        """The co-design grid and the path's test scores (vtb/analysis.py), started in the grading pool.

        Unbudgeted like grading: its trainings and plays go through the same train step and
        grading play as the submission's (the same sandboxes and keys), never through the ledger."""
        opts = self.cfg.analysis
        if not (opts.grid or opts.path):
            return None

        def train(sid: str, run_name: str) -> tuple[System, Any, str | None]:
            key = self.train_request(sid).key()
            for c in self.history:  # weights the research already made: reused, not trained again
                if c.train_key == key and c.train is not None:
                    return System(sid, key, c.checkpoint), None, f"iteration {c.iteration}"
            self._log(f"analysis: training {run_name.removeprefix('train-')} (not charged to the agent)")
            key, out = self.train(sid, -1, budgeted=False, run_name=run_name)
            return System(sid, key, out.checkpoint if out.ok else None), out.charge, None

        def grade(system: System, label: str) -> tuple[Future, bool]:
            new = self._grading_request(system, None, "model").key() not in self._grading
            return self._grading_play(pool, system, None, "model", label), new

        run = analysis.Analysis(
            self.store,
            self.history,
            chosen,
            analysis.Hooks(train, grade, self._log),
            grid=opts.grid,
            path=opts.path,
            tolerance=opts.tolerance,
        )
        run.start()
        return run

    def auditable(self) -> bool:
        """Whether the domain has a single task text to swap in a provenance audit (math, terminal)."""
        return hooks(get_domain(self.cfg.task.name)).audit_text is not None

    def grading_workers(self) -> int:
        """How many grading plays run at once: one on a GPU (a model server each would share it)."""
        return 1 if self.cfg.sandbox.gpus else max(1, self.cfg.grading_workers)

    def _reference_graded(self) -> tuple[System, dict]:
        """The reference system (`reference_system`), its grading play started in the background
        once iteration 0 has been validated (the play's shards are validation's size)."""
        system, reference = self.reference_system()
        self._validated.wait()  # never set when iteration 0 fails: the run errors, this daemon thread ends with it
        if system.weights is not None:
            self._grading_play(None, system, None, "model", "reference")
        return system, reference

    def reference_system(self) -> tuple[System, dict]:
        """The domain's reference system: its recipe trained here (not charged), or a released model."""
        sid = pipeline.build_system("reference", self.cfg, self.data_dir, self.store)
        hub_id = self.cfg.model.reference_hub_id
        if hub_id:
            self._log(f"fetching the reference model {hub_id} (not trained)")
            ref = self._provision_model(reference_model_config(self.cfg.model), "provision-reference-model")
            system = System(sid, ref.hash, ref.base_dir)
        else:
            self._log("training the reference system (not charged to the agent)")
            key, trained = self.train(sid, -1, budgeted=False)
            system = System(sid, key, trained.checkpoint)
        return system, {
            "snapshot": sid,
            "train_key": system.weights_key,
            "checkpoint": system.weights,
            "model": hub_id,
        }

    def finish(self) -> BenchResult:
        chosen = select(self.history)
        self._log(f"selected iteration {chosen.iteration} (val {chosen.val_score})")
        # Grading's plays are unbudgeted and independent: they run `grading_workers` at a time,
        # while the reference system trains (here, or still in the background: see run).
        with ThreadPoolExecutor(self.grading_workers(), thread_name_prefix="vtb-grade") as pool:
            pending = {
                "initial": self.start_grade(pool, self.history[0].system, "initial"),
                "submitted": self.start_grade(pool, chosen.system, "submitted"),
            }
            reference = None
            if self.cfg.reference:
                system, reference = self._reference.result() if self._reference else self.reference_system()
                pending["reference"] = self.start_grade(pool, system, "reference")
            regrade = None
            if self.cfg.regrade_check and chosen.system.weights is not None:
                # the same play under another key (so not served from the first one's cache)
                regrade = self._grading_play(pool, chosen.system, None, "regrade", "submitted")
            scan = self.contamination_scan(chosen)  # here, while the grading plays run in sandboxes
            extra = self.start_analysis(pool, chosen)  # its trainings here, its plays in the pool
            grades = {label: wait() for label, wait in pending.items()}
            studied = extra.finish() if extra else None
            if studied and studied.grid:
                self._log(f"co-design grid: {studied.grid.verdict_line}")
            determinism = None
            if regrade is not None:
                again: PlayResult = regrade.result()
                sub = grades["submitted"]
                determinism = noise.regrade_diff(sub.rewards, again.rewards, sub.test_score, again.score)
                self._log(f"grading determinism: {determinism['note']}")
        outcome = RunOutcome(
            self.run_id,
            self.data,
            self.model,
            self.history,
            chosen,
            grades,
            reference,
            scan,
            determinism,
            studied,
            self.reproducibility,
        )
        result = self.rec.finish(self.cfg, outcome, self.ledger, self.store)
        self.rec.write_timings(time.monotonic() - self.t0, self.timings)
        progress.say(record.summary_table(result))
        return result


def _agent_use(turn: TurnOutcome | None) -> AgentUse:
    """What the research agent's turn spent itself (its LLM tokens and cost) and why it ended."""
    if not turn:
        return AgentUse()
    return AgentUse(
        tokens=turn.charge.agent_tokens,
        cost_usd=round(turn.charge.agent_cost_usd, 6),
        stopped=turn.stopped,
        egress_requests=len(turn.egress),
        usage=turn.usage,
    )


def initial_failure(first: Candidate, ledger: Ledger) -> str | None:
    """Why the initial system (iteration 0) makes the run meaningless, or None: it is every
    score's baseline, and the budget must cover at least it."""
    train, val = first.train, first.val
    summary = train.summary if train else {}
    budget = f"budget.limit={ledger.limit:g} {ledger.unit}"
    spent = f"{ledger.used():.3g} {ledger.unit}"
    if (train and train.killed == "flops") or summary.get("stopped_early") == "budget":
        return (
            f"the budget does not cover the initial system: its training was stopped by {budget} "
            f"({spent} spent); raise budget.limit"
        )
    if not (train and train.ok):
        killed = train.killed if train else None
        hint = f" ({budget} or sandbox.step_*_s may be too small)" if killed in ("cpu", "gpu", "wall") else ""
        cause = f"killed: {killed}" if killed else f"exit {train.returncode if train else None}"
        return f"the initial system's training failed ({cause}){hint}: see iterations/00.json"
    if val and "flops" in str(val.killed or ""):
        return (
            f"the budget does not cover the initial system: its validation play was stopped by {budget} "
            f"({spent} spent); raise budget.limit"
        )
    return None


def public_view(entry: Candidate) -> dict:
    """What the research agent may see of a past iteration."""
    out = {k: getattr(entry, k) for k in ("iteration", "snapshot", "edits", "notes", "val_score", "charge")}
    rejected = entry.rejected or (entry.train.summary.get("rejected") if entry.train else None)
    if rejected:  # the workspace over its caps, or a checkpoint refused by the host
        out["rejected"] = str(rejected)[:500]
    return out


GRADING_SLACK = 4.0  # grading may spend this many times validation's model FLOPs per episode
BACKGROUND_NICE = 5  # the background's priority: about a third of a core's share when the research wants both


def in_background(fn: Callable[[], Any]) -> Future:
    """`fn()` in a daemon thread at BACKGROUND_NICE, in the caller's context (Prefect's flow run).

    A daemon thread, so a run that fails or is interrupted meanwhile does not wait for it: at
    exit the thread dies, and with it its sandbox (bwrap's parent-death signal follows the thread).
    """
    future: Future = Future()
    context = contextvars.copy_context()

    def work() -> None:
        lower_priority()
        future.set_running_or_notify_cancel()
        try:
            future.set_result(context.run(fn))
        except BaseException as e:  # handed to whoever waits for the result
            future.set_exception(e)

    threading.Thread(target=work, name="vtb-background", daemon=True).start()
    return future


def lower_priority() -> None:
    """Run this thread, and every process it starts, at BACKGROUND_NICE (Linux nice is per thread)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
    except OSError:  # not permitted here: the background then runs at the normal priority
        pass
