"""The benchmark flow: provision → iterations (agent turn → train → validate) → select → grade → report.

Launch:  python -m flows.bench                      (task=math agent=greedy model=tiny sandbox=bwrap)
         python -m flows.bench agent=noop seed=1 runs_dir=/some/dir
         python -m flows.bench -m agent=noop,greedy seed=0,1
`@hydra.main` only converts the config into typed dataclasses and calls `run_bench`, which
tests call directly. Each bench is one Prefect flow run.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf
from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from steps import agent_turn_step, bind, play_step, provision_data_step, provision_model_step, train_step
from steps.blind import null_model as build_null_model
from steps.blind import secret_of, stage_path
from vtb import pipeline, record
from vtb.agents import Feedback, make_agent
from vtb.agents.prompt import template_digest
from vtb.config import BenchConfig, ModelConfig
from vtb.engine.select import engine_env
from vtb.hashing import code_version, hash_json
from vtb.ledger import Charge, FlopsFloor, Ledger, StepLimits, check_budget
from vtb.workspace import part_hashes, restore

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")


def default_run_id(cfg: BenchConfig) -> str:
    """Same config → same run id, so a killed run started again resumes into the same record."""
    tag = hash_json({k: v for k, v in asdict(cfg).items() if k not in ("runs_dir", "cache_dir", "run_id")})[
        :8
    ]
    return f"{cfg.task.name}-{cfg.agent.name}-s{cfg.seed}-{tag}"


def say(msg: str, t0: float) -> None:
    print(f"[bench {time.monotonic() - t0:6.1f}s] {msg}", flush=True)


class Bench:
    """State of one bench run; the methods are the flow's stages."""

    def __init__(self, cfg: BenchConfig):
        check_budget(cfg.budget.unit, cfg.sandbox.gpus)  # also for flows that skip run_bench (sweeps)
        self.cfg = cfg
        self.runs, self.cache = cfg.paths()
        self.cache.mkdir(parents=True, exist_ok=True)
        self.run_id = cfg.run_id or default_run_id(cfg)
        self.rec = record.RunRecord(self.runs / self.run_id)
        self.store = self.cache / "snapshots"
        self.store.mkdir(parents=True, exist_ok=True)
        # The FLOPs floor is set at provision time: its rates are calibrated on the base model.
        self.ledger = Ledger(cfg.budget.unit, cfg.budget.limit, cfg.budget.cpu_seconds)
        self.calibration: dict = {}
        self.history: list[dict] = []
        self.timings: list[dict] = []  # per step call: wall in the orchestrator, wall in the sandbox, cached
        self.charged: set[str] = set()  # step keys already charged in this run
        self.t0 = time.monotonic()
        self.steps = {
            name: bind(t, self.cache)
            for name, t in {
                "data": provision_data_step,
                "model": provision_model_step,
                "train": train_step,
                "play": play_step,
                "turn": agent_turn_step,
            }.items()
        }

    def _call(self, name: str, **params) -> dict:
        start = time.monotonic()
        state = self.steps[name](**params, return_state=True)
        out = state.result()  # raises the step's error if it failed
        cached = state.name == "Cached"
        self.timings.append({
            "step": name, "split": params.get("split"), "wall_seconds": round(time.monotonic() - start, 3),
            "sandbox_wall_seconds": 0.0 if cached else round(out.get("charge", {}).get("wall_seconds", 0.0), 3),
            "cached": cached,
        })  # fmt: skip
        return out

    # provision -----------------------------------------------------------------------------
    def provision(self) -> None:
        cfg = self.cfg
        say(f"run {self.run_id}: provisioning data and the {cfg.model.name} base model", self.t0)
        self.data = self._call(
            "data", key=pipeline.data_key(cfg.task), task_cfg=cfg.task, cache=str(self.cache)
        )
        model_key = hash_json(
            ["model", asdict(cfg.model), self.data["hashes"], code_version(*pipeline.MODEL_CODE)]
        )
        self.model = self._call("model", key=model_key, model_cfg=cfg.model, task_cfg=cfg.task,
                                         data_dir=self.data["data_dir"], cache=str(self.cache),
                                sandbox_cfg=cfg.sandbox)  # fmt: skip
        self.data_dir, self.base_dir = Path(self.data["data_dir"]), Path(self.model["base_dir"])
        self.initial = pipeline.build_system("initial", cfg, self.data_dir, self.store)
        say(f"data {self.data['counts']}, base model {self.model['n_params']} params", self.t0)
        say(
            "FLOPs floor: this machine's engine rates for this model shape (measured once, then cached)",
            self.t0,
        )
        self.calibration = flops_floor_calibration(cfg, self.cache, self.base_dir, self.store / self.initial)
        self.ledger.floor = floor_of(cfg, self.calibration)
        self.rec.write_artifact("calibration.json", self.calibration)  # the FLOPs floor's rates and machine

    # train + validate one candidate ----------------------------------------------------------
    def _charge(self, step: str, iteration: int, key: str, charge: dict, budgeted: bool = True) -> None:
        """Book a step's charge: the ledger checks every figure and applies the FLOPs floor (vtb/ledger.py)."""
        if key in self.charged:
            return  # the same result reused within this run (e.g. a harness-only edit) costs once
        self.charged.add(key)
        if budgeted:
            known = {k: v for k, v in charge.items() if k in Charge.__dataclass_fields__}
            self.ledger.charge(step, iteration, Charge(**known))

    def _step_limits(self, budgeted: bool, kind: str) -> StepLimits:
        """What the budget leaves the next step of `kind`; nothing for unbudgeted steps (grading, reference)."""
        if not budgeted:
            return StepLimits(None, None, None)
        return self.ledger.step_limits(self.cfg.sandbox.step_cpu_s, kind)

    def train(self, sid: str, iteration: int, budgeted: bool = True) -> tuple[str, dict]:
        hashes = part_hashes(self.store / sid)
        key = hash_json(["train", self.model["hash"], hashes["data"], hashes["trainer"], self.cfg.seed,
                         code_version(*pipeline.TRAIN_CODE)])  # fmt: skip
        lim = self._step_limits(budgeted, "train")
        out = self._call("train", key=key, snapshot_dir=str(self.store / sid), base_dir=str(self.base_dir),
                                  cache=str(self.cache), seed=self.cfg.seed, sandbox_cfg=self.cfg.sandbox,
                                  max_flops=lim.max_flops, cpu_seconds=lim.cpu_seconds,
                                  gpu_seconds=lim.gpu_seconds)  # fmt: skip
        self._charge("train", iteration, key, out["charge"], budgeted)
        return key, out

    def play(self, sid: str, train_key: str, checkpoint: str, split: str, iteration: int, *,
             budgeted: bool = True, null_model: bool = False) -> dict:  # fmt: skip
        hashes = part_hashes(self.store / sid)
        key = hash_json(["play", train_key, hashes["harness"], split, self.data["hashes"][split], null_model,
                         asdict(self.cfg.task), asdict(self.cfg.engine),
                         code_version(*pipeline.PLAY_CODE)])  # fmt: skip
        lim = self._step_limits(budgeted, "infer")
        # One staging path per (run, trained model): validation, grading and the null check all
        # mount /model from it, so the mount table names the same host path in every mode.
        stage = stage_path(self.cache, secret_of(self.cfg.task), self.run_id, train_key)
        out = self._call("play", key=key, harness_dir=str(self.store / sid / "harness"), model_dir=checkpoint,
                                 split=split, data_dir=str(self.data_dir), task_cfg=self.cfg.task,
                                 sandbox_cfg=self.cfg.sandbox, max_flops=lim.max_flops,
                                 cpu_seconds=lim.cpu_seconds, gpu_seconds=lim.gpu_seconds,
                                 engine_cfg=self.cfg.engine, stage_dir=str(stage))  # fmt: skip
        self._charge(f"play-{split}", iteration, key, out["charge"], budgeted)
        return out

    def evaluate(self, sid: str, iteration: int, turn: dict | None) -> dict:
        used_before = self.ledger.used()
        train_key, trained = self.train(sid, iteration)
        val = None
        if trained["ok"]:
            val = self.play(sid, train_key, trained["checkpoint"], "val", iteration)
        entry = {
            "iteration": iteration,
            "snapshot": sid,
            "parts": part_hashes(self.store / sid),
            "edits": (turn or {}).get("edits", {}),
            "notes": (turn or {}).get("notes", "initial system"),
            "agent": _agent_use(turn),
            "train": {k: trained[k] for k in ("ok", "killed", "returncode", "summary", "charge")},
            "train_key": train_key,
            "checkpoint": trained["checkpoint"],
            "val_score": val["score"] if val else None,
            "val": {
                k: val.get(k) for k in ("n", "answered", "crashes", "killed", "garbage", "charge", "engine")
            }
            if val
            else None,
            "charge": {self.ledger.unit: self.ledger.used() - used_before},
            "budget_after": self.ledger.summary(),
        }
        self.history.append(entry)
        self.rec.write_iteration(entry, (turn or {}).get("trajectory", []), (turn or {}).get("egress", []))
        score = "failed" if val is None else f"{val['score']:.3f}"
        say(f"iteration {iteration}: val {score}; budget {self.ledger.used():.3g}/{self.ledger.limit:.3g} "
            f"{self.ledger.unit}", self.t0)  # fmt: skip
        return entry

    # research iterations -----------------------------------------------------------------------
    def iterate(self) -> None:
        cfg = self.cfg
        say("iteration 0: training and validating the initial system", self.t0)
        self.evaluate(self.initial, 0, None)
        ws = self.rec.dir / "workspace"
        before = self.initial
        for it in range(1, cfg.agent.max_iterations + 1):
            if self.ledger.exhausted():
                say("budget exhausted: stopping the research iterations", self.t0)
                break
            feedback = Feedback(task=cfg.task.name, iteration=it, max_iterations=cfg.agent.max_iterations,
                                seed=cfg.seed, history=[_public(h) for h in self.history],
                                budget=self.ledger.summary())  # fmt: skip
            key = hash_json(["turn", asdict(cfg.agent), template_digest(cfg.agent, cfg.task.name), cfg.seed,
                             before, asdict(feedback), code_version("agents")])  # fmt: skip
            say(f"iteration {it}: {cfg.agent.name} agent turn", self.t0)
            turn = self._call("turn", key=key, agent_cfg=cfg.agent, feedback=asdict(feedback), before=before,
                                      store=str(self.store), workspace=str(ws), data_dir=str(self.data_dir),
                                      base_dir=str(self.base_dir), sandbox_cfg=cfg.sandbox,
                                      cpu_seconds=self.ledger.cpu_left(),
                                      gpu_seconds=self.ledger.gpu_left())  # fmt: skip
            self._charge("agent", it, key, turn["charge"])
            say(f"iteration {it}: {turn['notes']} (edits: {sorted(turn['edits'])})", self.t0)
            if turn.get("rejected"):  # over the caps: nothing to train; the agent reads why next turn
                self._rejected(it, turn, before)
                if turn["done"]:
                    break
                continue
            if turn["done"] and turn["after"] == before:
                break
            self.evaluate(turn["after"], it, turn)
            before = turn["after"]
            if turn["done"]:
                break
        restore(self.store, before, ws)

    def _rejected(self, iteration: int, turn: dict, before: str) -> None:
        """An iteration whose workspace was refused (caps): recorded with its reason, not trained."""
        entry = {"iteration": iteration, "snapshot": before, "parts": part_hashes(self.store / before),
                 "edits": {}, "notes": turn["notes"], "rejected": turn["rejected"], "agent": _agent_use(turn),
                 "train": None, "train_key": None, "checkpoint": None, "val_score": None, "val": None,
                 "charge": {self.ledger.unit: 0.0},  # train + validate: none (the turn is charged apart)
                 "budget_after": self.ledger.summary()}  # fmt: skip
        self.history.append(entry)
        self.rec.write_iteration(entry, turn.get("trajectory", []), turn.get("egress", []))
        say(f"iteration {iteration}: {turn['rejected']}", self.t0)

    # select, grade, report ---------------------------------------------------------------------
    def select(self) -> dict:
        best = Feedback(task="", iteration=0, max_iterations=0, seed=0, history=self.history).best()
        return best or self.history[0]

    def grade(self, sid: str, train_key: str, checkpoint: str | None, label: str) -> dict:
        if checkpoint is None:
            return {"test_score": 0.0, "note": "no checkpoint (training failed)"}
        say(f"grading the {label} system on the hidden test split", self.t0)
        test = self.play(sid, train_key, checkpoint, "test", -1, budgeted=False)
        out = {"test_score": test["score"], "n": test["n"], "answered": test["answered"], "crashes": test["crashes"],
               "denials": test["denials"], "samples": test["samples"], "metrics": test.get("metrics", {}), "inference_flops": test["charge"]["flops"],
               "engine": test.get("engine", "")}  # fmt: skip
        for name, content in test.get("artifacts", {}).items():  # e.g. SWE-bench report.json files
            self.rec.write_artifact(f"grading/{label}/{name}", content)
        if self.cfg.null_model_check:
            # The same harness, episodes (ids, order), mounts, paths and environment; only the
            # weights differ: the checkpoint's own folder with every tensor shuffled (steps/blind.py).
            null_dir = build_null_model(Path(checkpoint), self.cache, secret_of(self.cfg.task))
            null = self.play(sid, train_key, str(null_dir), "test", -1, budgeted=False, null_model=True)
            out["null_model_score"] = null["score"]
            out["flagged"] = null["score"] > self.cfg.null_model_threshold
        return out

    def _reference_model(self) -> dict:
        """The preset's released instruct model, provisioned like a base model (its harness: the domain's reference)."""
        cfg = self.cfg
        model = reference_model_config(cfg.model)
        key = hash_json(["model", asdict(model), self.data["hashes"], code_version(*pipeline.MODEL_CODE)])
        return self._call("model", key=key, model_cfg=model, task_cfg=cfg.task, data_dir=self.data["data_dir"],
                          cache=str(self.cache), sandbox_cfg=cfg.sandbox)  # fmt: skip

    def finish(self) -> dict:
        chosen = self.select()
        say(f"selected iteration {chosen['iteration']} (val {chosen['val_score']})", self.t0)
        initial = self.history[0]
        grades = {
            "initial": self.grade(initial["snapshot"], initial["train_key"], initial["checkpoint"], "initial")
        }
        grades["submitted"] = self.grade(
            chosen["snapshot"], chosen["train_key"], chosen["checkpoint"], "submitted"
        )
        reference = None
        if self.cfg.reference:
            ref_sid = pipeline.build_system("reference", self.cfg, self.data_dir, self.store)
            if self.cfg.model.reference_hub_id:
                say(f"fetching the reference model {self.cfg.model.reference_hub_id} (not trained)", self.t0)
                ref = self._reference_model()
                ref_key, checkpoint = ref["hash"], ref["base_dir"]
            else:
                say("training the reference system (not charged to the agent)", self.t0)
                ref_key, trained = self.train(ref_sid, -1, budgeted=False)
                checkpoint = trained["checkpoint"]
            grades["reference"] = self.grade(ref_sid, ref_key, checkpoint, "reference")
            reference = {"snapshot": ref_sid, "train_key": ref_key, "checkpoint": checkpoint,
                         "model": self.cfg.model.reference_hub_id}  # fmt: skip
        result = self.rec.finish(self.cfg, self.run_id, self.data, self.model, self.history, chosen, grades,
                                 reference, self.ledger, self.store)  # fmt: skip
        self.rec.write_timings(time.monotonic() - self.t0, self.timings)
        print(record.summary_table(result), flush=True)
        return result


def flops_floor_calibration(cfg: BenchConfig, cache: Path, base_dir: Path, system_dir: Path) -> dict:
    """The floor's rates: budget.flops_per_cpu_second for every kind, or calibrated on this base model.

    Keyed by the model's architecture (its config.json) and the trainer config, not the weights:
    rates depend on shapes, so benches on one model shape share a calibration. The rates are
    FLOPs per CPU-second of CPU work, so they are measured in a sandbox without GPUs; a model
    other than the tiny kind is too big for that and is stood in for by the tiny shape
    (`calibrate.proxy_parts`: a looser floor, recorded as `proxy` in calibration.json).
    """
    if cfg.budget.flops_per_cpu_second is not None:
        return {"cpu_rate": float(cfg.budget.flops_per_cpu_second), "startup_cpu_seconds": 0.0,
                "machine": {"key": "config"}}  # fmt: skip
    from vtb import calibrate

    backend = f"{cfg.sandbox.backend} threads={cfg.sandbox.threads}"
    sandbox = pipeline.sandbox_for(replace(cfg.sandbox, gpus=None))
    if cfg.model.kind != "tiny":
        with tempfile.TemporaryDirectory(prefix="vtb-calibrate-proxy-") as tmp:
            base, system = calibrate.proxy_parts(Path(tmp))
            found = calibrate.load_or_calibrate(sandbox, cache, backend, base, system, "proxy-tiny", "proxy")
        return {**found, "proxy": f"the tiny model shape stands in for model.kind={cfg.model.kind}"}
    model = hashlib.sha256((base_dir / "config.json").read_bytes()).hexdigest()[:16]
    trainer = hashlib.sha256((system_dir / "trainer" / "config.json").read_bytes()).hexdigest()[:16]
    return calibrate.load_or_calibrate(sandbox, cache, backend, base_dir, system_dir, model, trainer)


def floor_of(cfg: BenchConfig, calibration: dict) -> FlopsFloor:
    return FlopsFloor(cpu_rate=calibration["cpu_rate"], fraction=cfg.budget.floor_fraction,
                      gpu_rate=cfg.budget.flops_per_gpu_second,
                      startup_cpu_seconds=calibration.get("startup_cpu_seconds", 0.0),
                      slack_cpu_seconds=cfg.budget.floor_slack_cpu_seconds,
                      machine=calibration["machine"]["key"], train_rate=calibration.get("train_rate"),
                      infer_rate=calibration.get("infer_rate"))  # fmt: skip


def _agent_use(turn: dict | None) -> dict:
    """What the research agent's turn spent itself (its LLM tokens and cost) and why it ended."""
    if not turn:
        return {"tokens": 0, "cost_usd": 0.0, "stopped": None, "egress_requests": 0, "usage": None}
    charge = turn["charge"]
    return {"tokens": charge.get("agent_tokens", 0), "cost_usd": round(charge.get("agent_cost_usd", 0.0), 6),
            "stopped": turn.get("stopped"), "egress_requests": len(turn.get("egress", [])),
            "usage": turn.get("usage")}  # fmt: skip


def _public(entry: dict) -> dict:
    """What the research agent may see of a past iteration."""
    keys = ("iteration", "snapshot", "edits", "notes", "val_score", "charge")
    out = {k: entry[k] for k in keys}
    rejected = entry.get("rejected") or ((entry.get("train") or {}).get("summary") or {}).get("rejected")
    if rejected:  # the workspace over its caps, or a checkpoint refused by the host
        out["rejected"] = str(rejected)[:500]
    return out


def reference_model_config(model: ModelConfig) -> ModelConfig:
    """The model config that provisions a preset's reference instruct model (from the hub, or a local dir)."""
    return replace(model, name=f"{model.name}-reference", kind="hub", hub_id=model.reference_hub_id,
                   reference_hub_id=None)  # fmt: skip


def preflight(cfg: BenchConfig) -> None:
    """Everything that can be checked before any work; a ValueError names the setting and the fix."""
    check_budget(cfg.budget.unit, cfg.sandbox.gpus)  # a budget that cannot be metered
    check_gpu_settings(cfg)  # GPU presets without a GPU
    make_agent(cfg.agent)  # a misconfigured agent (no endpoint, CLI not installed)


def check_gpu_settings(cfg: BenchConfig) -> None:
    """GPU presets without a GPU given to the sandboxes fail here, before any work, naming the fix."""
    engine_env(cfg.engine.name, cfg.engine.options, cfg.engine.fallback)  # checks the engine name
    if cfg.sandbox.gpus:
        return
    if cfg.model.needs_gpu:
        raise ValueError(f"model={cfg.model.name} needs a GPU (and a model hub): set sandbox.gpus=0 (or all), "
                         "or use model=tiny / model=smollm2 on a CPU")  # fmt: skip
    ds = cfg.trainer.deepspeed
    if ds is not None and not ds.cpu:
        raise ValueError(f"trainer={cfg.trainer.name} launches DeepSpeed on GPUs: set sandbox.gpus=0 (or all), "
                         "or trainer.deepspeed.cpu=true for slow CPU ranks, or trainer=sft")  # fmt: skip


def run_bench(cfg: BenchConfig) -> dict:
    """Run one bench as a Prefect flow run; returns result.json's content."""
    name = default_run_id(cfg) if cfg.run_id is None else cfg.run_id
    preflight(cfg)
    return bench_flow.with_options(flow_run_name=name)(cfg)


@flow(name="vibetraining-bench", validate_parameters=False)
def bench_flow(cfg: BenchConfig) -> dict:
    bench = Bench(cfg)
    bench.rec.start(cfg)
    bench.provision()
    bench.iterate()
    result = bench.finish()
    publish_artifacts(bench.run_id, Path(result["record"]), bench.history)
    return result


def publish_artifacts(run_id: str, run_dir: Path, history: list[dict]) -> None:
    """The run's report and its iterations as Prefect artifacts, for the UI.

    Agent-written text (notes, file names) goes through record.md_text in both: report.md is
    escaped when written, the table's cells here, so neither renders markup or links.
    """
    key = "".join(c if c.isalnum() else "-" for c in run_id.lower())  # artifact keys: a-z, 0-9, -
    create_markdown_artifact(markdown=(run_dir / "report.md").read_text(), key=f"report-{key}",
                             description=f"VibeTraining-Bench report of {run_id}")  # fmt: skip
    rows = [{"iteration": h["iteration"], "val_score": h["val_score"],
             "edits": record.md_text(record.edits_text(h["edits"])),
             "budget_used": h["budget_after"]["used"], "agent_tokens": (h.get("agent") or {}).get("tokens", 0),
             "notes": record.md_text(h["notes"], 200)} for h in history]  # fmt: skip
    create_table_artifact(table=rows, key=f"iterations-{key}", description=f"Iterations of {run_id}")


def to_config(cfg: DictConfig) -> BenchConfig:
    """The one place a DictConfig becomes typed dataclasses (validated against BenchConfig)."""
    merged = OmegaConf.merge(OmegaConf.structured(BenchConfig), cfg)
    return OmegaConf.to_object(merged)


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="bench")
def main(cfg: DictConfig) -> None:
    run_bench(to_config(cfg))


if __name__ == "__main__":
    main()
