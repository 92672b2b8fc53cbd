"""The pipeline's steps as plain functions: provision, build a system, train, play, turn.

Each step takes its request (vtb/step_requests.py: typed configs, paths, and the `key()` of its
result) and returns a typed result (vtb/results.py) small enough to persist, so a resumed run
rebuilds its ledger from the charges inside the cached results. steps/ makes each of these very
functions a Prefect task keyed by `request.key()`; tests call them directly.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vtb import progress, provenance, runner, safefs, salt
from vtb.agents.turn import take_turn
from vtb.blind import blind, real_ids, secret_of
from vtb.config import BenchConfig, ModelConfig, SandboxConfig, TaskConfig
from vtb.domains.registry import get_domain, hooks
from vtb.engine.select import engine_env
from vtb.hashing import hash_dir, hash_file, hash_json
from vtb.ledger import Charge, StepLimits
from vtb.registry import Registry
from vtb.results import DataResult, ModelResult, PlayResult, TrainResult, TurnOutcome
from vtb.sandbox import runtime_mounts
from vtb.sandbox.base import Limits, Mount
from vtb.sandbox.runtime import thread_env
from vtb.service import ModelHost, ModelService, ServiceError, engine_cache_for
from vtb.step_requests import DataRequest, ModelRequest, PlayRequest, TrainRequest, TurnRequest
from vtb.workspace import snapshot


def provision_data(request: DataRequest) -> DataResult:
    """Write the task's splits once per task config and salt: research/ (pool, val) and hidden/ (test).

    Every item of the full test and val splits carries the split's canary (salt.plant_canaries).

    The key and the result carry the salt's sha256 (`test_salt_sha256`, vtb/salt.py),
    never the salt: a salt from a file or the environment changes the key as an inline one does.
    """
    task, cache = request.task, request.cache
    domain = get_domain(task.name)
    data_dir = cache / "data" / f"{task.name}-{request.key()[:16]}"
    if not (data_dir / "DONE").exists():
        tmp = Path(tempfile.mkdtemp(dir=cache, prefix=".data-"))
        counts = domain.provision(task, tmp)
        salt.plant_canaries(tmp, task)  # the contamination scan's certain flag (vtb/contamination.py)
        (tmp / "counts.json").write_text(json.dumps(counts))
        (tmp / "DONE").write_text("")
        shutil.rmtree(data_dir, ignore_errors=True)
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(data_dir)
    return DataResult(
        data_dir=str(data_dir),
        counts=json.loads((data_dir / "counts.json").read_text()),
        hashes={
            "pool": hash_file(data_dir / "research" / "pool.jsonl"),
            "val": hash_file(data_dir / "research" / "val.jsonl"),
            "test": hash_file(data_dir / "hidden" / "test.jsonl"),
        },
        test_salt_sha256=salt.salt_sha256(task),
    )


def provision_model(request: ModelRequest) -> ModelResult:
    """Make (tiny, in a sandbox), convert (smollm2) or fetch (hub) the base model into `request.out()`.

    A made or converted model is also kept machine-wide (`machine_model_dir`, by the step's key,
    which holds the tiny model's thread count and pins, and the sandbox backend), so a fresh cache_dir on this machine (a test, a sweep,
    a new run folder) copies it instead of pre-training or converting again (~50 s for the
    default tiny model). It is a deterministic function of that key: the same bits either way."""
    model, sandbox_cfg, out = request.model, request.sandbox, request.out()
    echo = lambda line: progress.say(f"  [base] {line}")  # noqa: E731
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    kept = machine_model_dir() / f"{out.name}-{sandbox_cfg.backend}"
    kind = model_kind(model.kind)
    if kind.deterministic and (kept / KEPT_MARK).is_file():
        echo(f"the {model.name} base model made earlier on this machine: {kept}")
        safefs.copy_tree(kept, tmp)
        (tmp / KEPT_MARK).unlink(missing_ok=True)
        return _finish_model(tmp, out, None)
    charge = kind.make(model, request.task, request.data_dir, tmp, sandbox_cfg, echo)
    result = _finish_model(tmp, out, charge)
    if kind.deterministic:
        _keep(out, kept)
    return result


@dataclass(frozen=True)
class ModelKind:
    """How a `model.kind` is provisioned: `make(model, task, data_dir, dest, sandbox_cfg, echo)`
    writes a Hugging Face model folder to dest and returns its charge (None when it ran no
    sandboxed step); `deterministic` ones (a function of the step's key) are kept machine-wide."""

    make: Callable[..., Charge | None]
    deterministic: bool


# model.kind names, found like every other named kind (vtb/registry.py): the three below, or an
# installed package's `vtb.models` entry point naming a module that registers its ModelKind
# (`MODEL_KINDS.register("name")(ModelKind(make, deterministic=...))`)
MODEL_KINDS: Registry[ModelKind] = Registry(
    "model kind", "vtb.models", builtin=lambda name: None, known=("tiny", "smollm2", "hub")
)


def model_kind(name: str) -> ModelKind:
    try:
        kind = MODEL_KINDS.get(name)
    except ValueError as e:
        raise ValueError(f"model.kind={name!r}: {e}") from None
    if not isinstance(kind, ModelKind):
        raise ValueError(f"model.kind={name!r}: its entry point gives {type(kind).__name__}, not a ModelKind")
    return kind


def _convert_smollm2(model, task, data_dir, dest: Path, sandbox_cfg, echo) -> None:
    from vtb.models.smollm2 import convert_to_hf

    convert_to_hf(dest)


def _fetch_hub(model: ModelConfig, task, data_dir, dest: Path, sandbox_cfg, echo) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vtb.models.meta import count_params, write_model_info

    if not model.hub_id:
        raise ValueError("model.kind=hub needs model.hub_id=<org/name> (and a model hub or a local HF dir)")
    AutoTokenizer.from_pretrained(model.hub_id).save_pretrained(dest)
    hub_model = AutoModelForCausalLM.from_pretrained(model.hub_id)
    hub_model.save_pretrained(dest)
    write_model_info(dest, kind="hub", hub_id=model.hub_id, n_params=count_params(hub_model))


KEPT_MARK = ".vtb-complete"  # written last: a machine-wide copy without it is partial, never used


def machine_model_dir() -> Path:
    """Where made and converted base models are kept for every run on this machine
    ($VTB_MODEL_CACHE_DIR, default ~/.cache/vtb/models): orchestrator-only, never mounted."""
    return Path(os.environ.get("VTB_MODEL_CACHE_DIR") or Path.home() / ".cache" / "vtb" / "models")


def _finish_model(tmp: Path, out: Path, charge: Charge | None) -> ModelResult:
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(out)
    return ModelResult(base_dir=str(out), n_params=model_params(out), hash=hash_dir(out), charge=charge)


def model_params(model_dir: Path) -> int | None:
    """The parameter count a model folder's vtb_model.json states, if it states a sound one.

    The file was written in a sandbox: read bounded (no link followed), and a count that is not a
    positive integer is no count (the figure is only logged and kept in the manifest)."""
    try:
        info = safefs.read_json(model_dir / "vtb_model.json", 64 << 10)
    except (OSError, safefs.Rejected):
        return None
    n = info.get("n_params") if isinstance(info, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and 0 < n < 10**13 else None


def _keep(out: Path, kept: Path) -> None:
    """Copy a made model to the machine-wide folder (best effort: a read-only home keeps nothing)."""
    part = kept.with_name(f"{kept.name}.part{os.getpid()}")
    try:
        shutil.rmtree(part, ignore_errors=True)
        safefs.copy_tree(out, part)
        (part / KEPT_MARK).write_text("")
        if kept.exists() and not (kept / KEPT_MARK).is_file():  # a copy cut short: replaced
            shutil.rmtree(kept, ignore_errors=True)
        if not kept.exists():
            part.rename(kept)
    except OSError:
        pass
    finally:
        shutil.rmtree(part, ignore_errors=True)


def _build_tiny(
    model: ModelConfig,
    task: TaskConfig,
    data_dir: Path,
    dest: Path,
    sandbox_cfg: SandboxConfig,
    echo: Callable,
) -> Charge:
    from vtb.runner import charge_of, stream_lines

    domain = get_domain(task.name)
    tokens = domain.tokenizer_spec(task, data_dir)
    spec = {
        "words": tokens["words"],
        "number_max": tokens["number_max"],
        "tokenizer": tokens.get("mode", "words"),
        "texts": domain.pretraining_texts(task, data_dir, model.pretrain_texts, model.seed),
        "model": {
            "n_layer": model.n_layer,
            "n_embd": model.n_embd,
            "n_head": model.n_head,
            # a domain whose conversations are long raises the window (tau: 512)
            "n_positions": max(model.n_positions, tokens.get("min_positions", 0)),
            "steps": model.pretrain_steps,
            "seed": model.seed,
        },
    }
    with tempfile.TemporaryDirectory(prefix="vtb-base-") as tmp:
        work = Path(tmp)
        (work / "spec.json").write_text(json.dumps(spec))
        (work / "out").mkdir()
        mounts = runtime_mounts() + [Mount(work, "/build", writable=True)]
        argv = [sys.executable, "-m", "vtb.models.build", "/build/spec.json", "/build/out/model"]
        limits = Limits(
            wall_seconds=sandbox_cfg.step_wall_s,
            cpu_seconds=sandbox_cfg.step_cpu_s,
            memory_mb=sandbox_cfg.memory_mb,
        )
        # its own thread count (model.pretrain_threads): it runs alone, and every sandbox.threads
        # of a config then stands on the same base model
        builder = runner.sandbox_for(dataclasses.replace(sandbox_cfg, threads=model.pretrain_threads))
        proc = builder.start(argv, mounts=mounts, limits=limits, cwd="/build")
        proc.stdin.close()
        stream_lines(proc, echo)
        result = proc.wait()
        if result.returncode != 0 or not (work / "out" / "model" / "config.json").exists():
            raise RuntimeError(
                f"building the tiny base model failed (rc={result.returncode}, killed="
                f"{result.killed}): {result.stderr[-2000:]}"
            )
        shutil.move(str(work / "out" / "model"), dest)
    return charge_of(result)


# tiny: pre-trained here, in a sandbox; smollm2: converted from its bundled weights; hub: fetched as released
MODEL_KINDS.register("tiny")(ModelKind(_build_tiny, deterministic=True))
MODEL_KINDS.register("smollm2")(ModelKind(_convert_smollm2, deterministic=True))
MODEL_KINDS.register("hub")(ModelKind(_fetch_hub, deterministic=False))


_BUILT: dict[str, str] = {}  # snapshot ids of the systems built in this process, by what made them


def build_system(kind: str, cfg: BenchConfig, data_dir: Path, store: Path) -> str:
    """Write the domain's initial or reference system and snapshot it; returns the snapshot id.

    A system is a function of its kind, the task and trainer settings and the data, so one built
    once in a process is not built again: the CLI's preflight, the flow's and the background
    reference would otherwise each write it (for tau that replays every demonstration).
    """
    made_by = hash_json(
        [kind, str(data_dir), str(store), dataclasses.asdict(cfg.task), dataclasses.asdict(cfg.trainer)]
    )
    if made_by in _BUILT and (store / _BUILT[made_by]).is_dir():
        return _BUILT[made_by]
    domain = get_domain(cfg.task.name)
    with tempfile.TemporaryDirectory(prefix=f"vtb-{kind}-") as tmp:
        ws = Path(tmp)
        if kind == "initial":
            domain.write_initial_system(ws, cfg.task, cfg.trainer, data_dir)
        elif kind == "reference":
            domain.write_reference_system(ws, cfg.task, data_dir)
        else:
            raise ValueError(kind)
        _BUILT[made_by] = snapshot(ws, store)
    return _BUILT[made_by]


def step_limits(cfg: SandboxConfig, left: StepLimits) -> Limits:
    """A step's limits: the sandbox config's per-step caps, tightened by what the budget has left."""
    cpu = cfg.step_cpu_s if left.cpu_seconds is None else min(cfg.step_cpu_s, left.cpu_seconds)
    return Limits(
        wall_seconds=cfg.step_wall_s,
        cpu_seconds=cpu,
        memory_mb=cfg.memory_mb,
        max_flops=left.max_flops,
        gpu_seconds=left.gpu_seconds,
    )


CHECKPOINT_FACTOR = 4  # a checkpoint may hold this many times the base model's weights...
CHECKPOINT_SLACK_MB = 256  # ...plus this much (tokenizer, configs, a LoRA adapter's overhead)


def checkpoint_caps(sandbox_cfg: SandboxConfig, base_dir: Path) -> safefs.Caps:
    """What a trained checkpoint may weigh: CHECKPOINT_FACTOR x the base model's weights (fp32 of a
    bf16 base, or a few adapters) + CHECKPOINT_SLACK_MB, and never over sandbox.max_checkpoint_mb.

    Everything the orchestrator then does with it (the copy into the cache, the null model's
    shuffled copy, the record's hard links) is bounded by a small multiple of the model's own
    size, whatever the trainer wrote (vtb/runner.py keeps model files only).
    """
    caps = sandbox_cfg.checkpoint_caps()
    weights = sum(
        e.size for e in safefs.walk(base_dir) if e.kind == "file" and e.name.endswith(".safetensors")
    )
    own = CHECKPOINT_FACTOR * weights + CHECKPOINT_SLACK_MB * safefs.MB
    return safefs.Caps(min(own, caps.max_bytes) if caps.max_bytes is not None else own, caps.max_files)


def train(request: TrainRequest) -> TrainResult:
    """Run the candidate's trainer in the research sandbox into checkpoints/<key>."""
    out_dir = request.out()
    outcome = runner.train(
        runner.sandbox_for(request.sandbox),
        request.snapshot_dir,
        request.base_dir,
        out_dir,
        seed=request.seed,
        limits=step_limits(request.sandbox, request.limits),
        echo=lambda line: progress.say(f"  [train] {line}"),
        checkpoint_caps=checkpoint_caps(request.sandbox, request.base_dir),
    )
    return TrainResult(
        ok=outcome.ok,
        checkpoint=str(out_dir / "checkpoint") if outcome.ok else None,
        log=str(out_dir / "train.log"),
        charge=outcome.charge,
        killed=outcome.killed,
        returncode=outcome.returncode,
        summary=outcome.summary,
    )


def play(request: PlayRequest) -> PlayResult:
    """Play a split's episodes against a harness, with model_dir served by a model server, and score them here.

    The harness sandbox gets only episode inputs and observations, under opaque ids in a keyed
    order (vtb/blind.py), and an endpoint (vtb/service.py): nothing tells it the split, the
    mode or which weights answer. Answers, environments and the scorer stay in this process.
    The step's FLOPs limit is the server's; its CPU-seconds cap holds for each sandbox.
    `flops_per_episode` caps the model's FLOPs at that many per episode (grading: what
    validation spent per episode, so a harness cannot buy in grading what it never paid for).

    `shard` (grading: the validation split's size) plays the episodes in val-shaped plays: each
    shard of exactly `shard` episodes gets its own model server and harness process, the last one
    filled up with decoys (more episodes of the same split under other opaque ids, their rewards
    discarded), so a harness sees in grading what it sees in a validation play: the same episode
    count, batch sizes, a fresh server and process (issue 37: a harness spent only when its first
    batch had the test split's size).

    `mode=audit` makes it a provenance audit (vtb/provenance.py): the model server swaps each
    episode's task text for its shard neighbour's, and the result carries each episode scored both ways.
    """
    r = request
    split, task_cfg, sandbox_cfg, data_dir, shard = r.split, r.task, r.sandbox, r.data_dir, r.shard
    domain = get_domain(task_cfg.name)
    sandbox = runner.sandbox_for(sandbox_cfg)
    episodes = domain.episodes(data_dir, split, task_cfg, sandbox=sandbox)
    secret = secret_of(task_cfg)
    blinded = blind(episodes, secret, split)
    shards = [blinded]
    if shard is not None and shard > 0:
        shards = [blinded[i : i + shard] for i in range(0, len(blinded), shard)]
        short = shard - len(shards[-1])
        if short > 0:  # decoys: fresh episodes of this split, never scored
            spare = domain.episodes(data_dir, split, task_cfg, sandbox=sandbox)
            # those not already in the shard first: a validation play never repeats an episode
            # (a repeat would tell grading apart, and blur the provenance audit's pairs)
            taken = {b.inner.id for b in shards[-1]}
            decoys = sorted(blind(spare, secret, f"{split}\0decoy"), key=lambda b: b.inner.id in taken)
            shards[-1] = sorted(shards[-1] + decoys[:short], key=lambda b: b.id)
    # the model server's threads (sandbox.server_threads), set over the sandbox's own
    env = {
        **engine_env(r.engine.name, r.engine.options, r.engine.fallback),
        **thread_env(sandbox_cfg.model_server_threads),
    }
    cache = engine_cache_for(r.engine.name)
    outcome = runner.EpisodeOutcome({}, Charge(), [], 0, [], [])
    hook = hooks(domain)
    text_of = hook.audit_text if r.audit else None
    # the written check (vtb/provenance.py): test plays of a domain whose answers it traces
    traced = split == "test" and not r.audit
    trace = provenance.tracer(hook.written_lines, hook.written_scopes) if traced else None
    audited: list[tuple[list, set[int]]] = []
    max_flops = r.limits.max_flops
    hosted = r.engine.name == "transformers" and not sandbox_cfg.gpus  # fork-safe: no CUDA, no vLLM
    host = _start_host(sandbox, sandbox_cfg, r, env, len(shards)) if hosted else None
    try:
        for part in shards:
            part_flops = None if max_flops is None else max(0.0, max_flops - outcome.charge.flops)
            if r.flops_per_episode is not None:
                cap = r.flops_per_episode * len(part)
                part_flops = cap if part_flops is None else min(part_flops, cap)
            limits = step_limits(sandbox_cfg, r.limits._replace(max_flops=part_flops))
            swap = provenance.rotation(part, text_of) if text_of else None
            got = _play_shard(
                sandbox,
                r.harness_dir,
                r.model_dir,
                part,
                limits,
                env,
                cache,
                task_cfg,
                split,
                swap,
                trace,
                host,
            )
            if swap is not None:
                audited.append((part, got.swapped))
            outcome = _merge(outcome, got)
    finally:  # a play that raises still stops its host
        if isinstance(host, ModelHost):
            host.close()
    if isinstance(host, ModelHost):
        outcome.charge = outcome.charge + host.charge
    scored = {b.id for b in blinded}
    pairs = None
    if text_of is not None:
        pairs = [
            p.to_json()
            for part, swapped in audited
            for p in provenance.audit_pairs(part, swapped, text_of, hook.reward_as, scored)
        ]
    # by real id, like the rewards; decoys (other opaque ids of the same episodes) left out
    written = (
        {b.inner.id: outcome.written[b.id] for b in blinded if b.id in outcome.written} if trace else None
    )
    outcome.actions = {k: v for k, v in outcome.actions.items() if k in scored}
    outcome.failed = {k: v for k, v in outcome.failed.items() if k in scored}
    rewards = {ep.id: ep.reward() for ep in episodes}
    return PlayResult(
        split=split,
        score=sum(rewards.values()) / max(1, len(rewards)),
        n=len(episodes),
        answered=len(outcome.actions),
        charge=outcome.charge,
        rewards=rewards,
        metrics=domain.metrics(episodes, task_cfg),
        samples=[ep.record() for ep in episodes[:5]],
        rounds=outcome.rounds,
        crashes=outcome.crashes,
        failed=dict(list(real_ids(blinded, outcome.failed).items())[:50]),
        killed=outcome.killed,
        garbage=outcome.garbage,
        denials=outcome.denials[:50],
        stderr_tail=outcome.stderr_tail,
        engine=outcome.engine,
        server_threads=outcome.server_threads,
        artifacts=hook.artifacts(episodes) if hook.artifacts else {},
        audit=pairs,
        written=written,
    )


def _start_host(sandbox, sandbox_cfg: SandboxConfig, r: PlayRequest, env: dict, shards: int):
    """The play's model host (`vtb.service.ModelHost`), or the ServiceError that says why it did not start.

    Only for the transformers engine on the CPU (the caller checks),
    where a fork of an imported interpreter is safe; the host sandbox may spend what every
    shard's server could, and as much again for the host's own start (one more server's CPU
    cap and wall limit): a last server is then stopped at its own cap, not by the host's."""
    one = step_limits(sandbox_cfg, r.limits._replace(max_flops=None))
    limits = dataclasses.replace(
        one, cpu_seconds=one.cpu_seconds * (shards + 1), wall_seconds=one.wall_seconds * (shards + 1)
    )
    host = ModelHost(sandbox, r.model_dir, limits, env=env)
    try:
        return host.start()
    except ServiceError as e:
        return e


def _play_shard(
    sandbox,
    harness_dir: Path,
    model_dir: Path,
    blinded: list,
    limits: Limits,
    env: dict,
    cache,
    task_cfg,
    split,
    swap: list[tuple[str, str]] | None = None,
    trace=None,
    host: ModelHost | ServiceError | None = None,
) -> runner.EpisodeOutcome:
    """One play: a fresh model server and harness process for these (blinded) episodes.

    The server is a fork of the play's `host` where it has one (its charge then holds FLOPs
    only: the host's seconds are booked once, at its close), else a process of its own.
    `trace` (`provenance.tracer`): the server keeps a transcript, and each episode's answer
    lines are traced in it, by opaque episode id."""
    record = trace is not None
    service = ModelService(
        sandbox, model_dir, limits, env=env, cache_dir=cache, swap=swap, record_transcript=record
    )
    try:
        if isinstance(host, ServiceError):  # the host did not start: no shard has a server
            raise host
        if host is not None:
            service = host.server(limits, swap=swap, record_transcript=record)
        with service:
            outcome = runner.play(
                sandbox,
                harness_dir,
                service,
                blinded,
                limits=dataclasses.replace(limits, max_flops=None),
                round_timeout_s=task_cfg.round_timeout_s,
                per_episode_timeout_s=task_cfg.per_episode_timeout_s,
                progress=progress.every(lambda over, n: f"  [play {split}] {over}/{n} episodes over"),
            )
    except ServiceError as e:  # e.g. a checkpoint in a pickle format: every episode fails, the run goes on
        outcome = runner.EpisodeOutcome({}, Charge(), [], 0, [], [])
        for ep in blinded:
            ep.fail(f"model server: {str(e)[:300]}")
            outcome.failed[ep.id] = "the model server did not start"
        outcome.stderr_tail = str(e)[-4000:]
    outcome.charge = outcome.charge + service.charge
    outcome.engine = service.engine
    outcome.server_threads = service.threads
    outcome.swapped = set(service.swapped)
    if trace is not None:
        counts = trace([b.inner for b in blinded], service.transcript, service.transcript_complete)
        outcome.written = {b.id: c for b, c in zip(blinded, counts, strict=True)}
    if service.exhausted and "flops" not in outcome.killed:  # refused past the cap, though it answered
        outcome.killed.append("flops")
    return outcome


def _first_garbage(lines: list[str], keep: int = 20) -> list[str]:
    """The first `keep` garbage lines of the shards, and every shard's `[vtb: ...]` tally of the rest."""
    tallies = [g for g in lines if g.startswith("[vtb:")]
    return [g for g in lines if not g.startswith("[vtb:")][:keep] + tallies[:keep]


def _merge(a: runner.EpisodeOutcome, b: runner.EpisodeOutcome) -> runner.EpisodeOutcome:
    """Two shards' outcomes as one play's."""
    return runner.EpisodeOutcome(
        actions={**a.actions, **b.actions},
        charge=a.charge + b.charge,
        garbage=_first_garbage(a.garbage + b.garbage),
        crashes=a.crashes + b.crashes,
        killed=a.killed + [k for k in b.killed if k not in a.killed],
        denials=(a.denials + b.denials)[:50],
        stderr_tail=b.stderr_tail or a.stderr_tail,
        rounds=a.rounds + b.rounds,
        engine=b.engine or a.engine,
        server_threads=b.server_threads or a.server_threads,
        failed={**a.failed, **b.failed},
        output=b.output or a.output,
        written={**a.written, **b.written},
    )


def agent_turn(request: TurnRequest) -> TurnOutcome:
    """The research agent's turn in the research sandbox (vtb/agents/turn.py)."""
    r = request
    return take_turn(
        r.agent,
        r.feedback,
        r.before,
        r.store,
        r.workspace,
        runner.sandbox_for(r.sandbox),
        runner.research_mounts(r.workspace, r.data_dir, r.base_dir),
        step_limits(r.sandbox, r.limits._replace(max_flops=None)),
        r.sandbox.part_caps(),
    )
