"""Typed results: what each step returns, what an iteration records, what grading found.

Steps return these (Prefect persists them as they are), the bench core reads their fields, and
the run record writes them as JSON (`as_json`). Their field names are the record's keys, so
iterations/NN.json, grading.json and result.json keep one vocabulary with the code.
Charges come from sandboxed code: they are `Charge`s built by `Charge.of` (every figure checked)
and the ledger checks them again when it books them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from vtb.ledger import Charge, LedgerSummary
from vtb.result_parts import AnalysisResult, Fingerprint


def as_json(obj: Any, drop_none: tuple[str, ...] = ()) -> Any:
    """A result as the record's JSON: dataclasses as dicts; the `drop_none` keys left out when None."""
    out = asdict(obj)
    for key in drop_none:
        if out.get(key) is None:
            out.pop(key, None)
    return out


@dataclass
class DataResult:
    data_dir: str  # research/ (pool, val) and hidden/ (test)
    counts: dict[str, int]
    hashes: dict[str, str]  # per split: the sha256 of its file
    test_salt_sha256: str


@dataclass
class ModelResult:
    base_dir: str
    n_params: int | None
    hash: str  # of the model folder: what trained weights descend from
    charge: Charge | None = None  # building the tiny model in a sandbox; None when not built here


@dataclass
class TrainResult:
    ok: bool
    checkpoint: str | None  # the trained weights' folder; None when training failed
    log: str
    charge: Charge
    killed: str | None = None
    returncode: int | None = None
    summary: dict = field(default_factory=dict)  # the trainer's summary.json (untrusted, bounded)


@dataclass
class PlayResult:
    split: str
    score: float
    n: int
    answered: int
    charge: Charge
    rewards: dict[str, float] = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)  # the domain's extra figures (pass^k, resolved, ...)
    samples: list[dict] = field(default_factory=list)
    rounds: int = 0
    crashes: int = 0
    failed: dict = field(default_factory=dict)
    killed: str | None = None
    garbage: list[str] = field(default_factory=list)
    denials: list = field(default_factory=list)
    stderr_tail: str = ""
    engine: str = ""
    server_threads: int | None = None  # the model server's CPU threads (sandbox.server_threads)
    artifacts: dict = field(default_factory=dict)  # files the domain's own tooling reads (SWE-bench)
    audit: list[dict] | None = None  # a provenance audit's episodes scored both ways (vtb/provenance.py)
    written: dict[str, dict] | None = None  # the written check: each episode's answer lines traced


@dataclass
class TurnOutcome:
    """A research agent's turn, as the host saw it (links dropped, caps checked, keys redacted)."""

    after: str  # the workspace's snapshot after the turn (= before when rejected)
    done: bool
    notes: str
    charge: Charge
    edits: dict[str, list[str]] = field(default_factory=dict)
    rejected: str | None = None  # why the edits were discarded (over the caps)
    dropped: list[str] = field(default_factory=list)
    stopped: str | None = None  # the per-turn limit that ended the turn
    usage: str | None = None  # where its token figures came from
    error: str | None = None
    trajectory: list[dict] = field(default_factory=list)
    egress: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class System:
    """A system ready to play: its workspace snapshot (harness) and the weights it runs.

    `weights_key` names what made the weights (a train step's key, or a provisioned model's
    hash for a released reference model); it keys the play step and the model's staging folder.
    """

    snapshot: str
    weights_key: str | None
    weights: str | None  # the checkpoint folder; None when training failed


@dataclass(frozen=True)
class AgentUse:
    """What the research agent's turn spent itself (its LLM tokens and cost) and why it ended."""

    tokens: int = 0
    cost_usd: float = 0.0
    stopped: str | None = None
    egress_requests: int = 0
    usage: str | None = None  # where the tokens came from: metered, self-reported, estimated


@dataclass(frozen=True)
class Trained:
    """What an iteration's record keeps of its training (the weights' folder is the Candidate's)."""

    ok: bool
    killed: str | None
    returncode: int | None
    summary: dict  # the trainer's summary.json (untrusted, bounded)
    charge: Charge

    @classmethod
    def of(cls, t: TrainResult) -> Trained:
        return cls(t.ok, t.killed, t.returncode, t.summary, t.charge)


@dataclass(frozen=True)
class Validated:
    """What an iteration's record keeps of its validation play (the score is the Candidate's)."""

    n: int
    answered: int
    crashes: int
    killed: str | None
    garbage: list[str]
    charge: Charge
    engine: str

    @classmethod
    def of(cls, p: PlayResult) -> Validated:
        return cls(p.n, p.answered, p.crashes, p.killed, p.garbage, p.charge, p.engine)


@dataclass
class Candidate:
    """One iteration of the run: a system that was trained and validated (or rejected untrained)."""

    iteration: int
    snapshot: str
    parts: dict[str, str]
    edits: dict[str, list[str]]
    notes: str
    agent: AgentUse
    train: Trained | None  # None when rejected untrained
    train_key: str | None
    checkpoint: str | None
    val_score: float | None
    val: Validated | None  # None when not validated (rejected, or its training failed)
    charge: dict[str, float]  # what training + validating cost, in the budget's unit
    budget_after: LedgerSummary
    rejected: str | None = None

    @property
    def system(self) -> System:
        return System(self.snapshot, self.train_key, self.checkpoint)

    def to_json(self) -> dict:
        return as_json(self, drop_none=("rejected",))


@dataclass
class Grade:
    """A system graded on the hidden test split (and, for the submission, the null-model check)."""

    test_score: float
    note: str | None = None  # why it was not played (no checkpoint)
    n: int = 0
    answered: int = 0
    crashes: int = 0
    denials: list = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)
    inference_flops: float = 0.0
    engine: str = ""
    null_model_score: float | None = None
    flagged: bool | None = None
    base_model_score: float | None = None  # the same harness served the untrained base model
    rewards: dict[str, float] = field(default_factory=dict)  # per test episode (paired comparisons)
    # the model refused the harness past its grading allowance (vtb/bench.py grading_allowance):
    # it spent more per episode than in validation; flagged, and the refused episodes scored 0
    capped: bool = False
    # the provenance audit's finding (vtb/provenance.py verdict), for the submission where it ran
    provenance: dict | None = None

    def to_json(self) -> dict:
        if self.note:  # an ungraded system records only its score and why
            return {"test_score": self.test_score, "note": self.note}
        out = as_json(self)
        del out["note"]
        if self.null_model_score is None:  # no null-model check was run
            del out["null_model_score"], out["flagged"]
        if self.base_model_score is None:
            del out["base_model_score"]
        if self.provenance is None:
            del out["provenance"]
        return out


@dataclass
class RunOutcome:
    """Everything one bench produced, for the run record to write (vtb/record.py `finish`)."""

    run_id: str
    data: DataResult
    model: ModelResult
    history: list[Candidate]
    chosen: Candidate
    grades: dict[str, Grade]  # initial, submitted and (when built) reference
    reference: dict | None  # its snapshot, weights and, for a released model, the hub id
    contamination: dict | None = None  # the submission's contamination scan (vtb/contamination.py)
    determinism: dict | None = None  # the submission graded twice (bench option regrade_check)
    analysis: AnalysisResult | None = None  # the co-design grid and the path's test scores (vtb/analysis.py)
    reproducibility: Fingerprint | None = None  # the machine's fingerprint (vtb/repro.py)
