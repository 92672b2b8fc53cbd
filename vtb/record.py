"""The run record under runs_dir/<run-id>/: everything needed to read and to regrade a run.

config.json        resolved config          manifest.json   every component hash
iterations/NN.json one per iteration        trajectories/   agent actions per turn
egress.jsonl       a CLI agent's network requests (allowed or refused)
submission/        selected parts + model   grading.json    test results (+ null-model check)
ledger.jsonl       every charge             result.json     the headline numbers
report.md          human report with plots (val per iteration; test scores)
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path

from vtb import plots, result_files, safefs, salt
from vtb.bench_result import BenchResult, Budget, Errored, Score, Submitted
from vtb.config import BenchConfig
from vtb.hashing import code_version
from vtb.ledger import Ledger
from vtb.markdown import md_text
from vtb.result_parts import AnalysisResult, ContaminationScan, Fingerprint, Provenance, TestSplit
from vtb.results import Candidate, Grade, RunOutcome


def _dump(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def _link_tree(src: Path, dst: Path) -> None:
    """Hard-link (or copy across file systems) a checkpoint's regular files into the record.

    An lstat walk (safefs): links and special files are left out, never followed, so a link
    loop or a link to a host file in a checkpoint adds nothing to the record.
    """
    safefs.remove(dst)
    safefs.copy_tree(src, dst, link=True)


SCHEMA_VERSION = result_files.RESULT_SCHEMA_VERSION


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def git_state() -> dict | None:
    """The project checkout's commit and whether tracked files differ from it; None outside git
    (a `pip install`) or without git."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return {
        "commit": head.stdout.strip()[:64],
        "dirty": bool(dirty.stdout.strip()) if dirty.returncode == 0 else None,
    }


class RunRecord:
    def __init__(self, run_dir: Path):
        self.dir = run_dir

    def start(self, cfg: BenchConfig) -> None:
        self.started_at = _now()
        self.dir.mkdir(parents=True, exist_ok=True)
        for stale in ("iterations", "trajectories"):
            shutil.rmtree(self.dir / stale, ignore_errors=True)  # a resumed run rewrites them all
        (self.dir / "egress.jsonl").unlink(missing_ok=True)
        (self.dir / "error.json").unlink(missing_ok=True)  # an earlier try's, now being fixed
        _dump(self.dir / "config.json", asdict(cfg))

    def write_artifact(self, relpath: str, content: object) -> None:
        """A file under the run dir: JSON for dicts/lists, text otherwise."""
        if isinstance(content, dict | list):
            _dump(self.dir / relpath, content)
        else:
            (self.dir / relpath).parent.mkdir(parents=True, exist_ok=True)
            (self.dir / relpath).write_text(str(content))

    def write_private(self, relpath: str, content: object) -> None:
        """A file under private/: test inputs and the outputs graded on them, never to be published."""
        if not (self.dir / PRIVATE / "README.md").exists():
            self.write_artifact(f"{PRIVATE}/README.md", PRIVATE_README)
        self.write_artifact(f"{PRIVATE}/{relpath}", content)

    def _scan(self, scan: dict | None) -> ContaminationScan | None:
        """The contamination scan as published: a hidden split's matched n-gram texts (fragments of
        test items) only in private/contamination.json, by item id in the rest of the record."""
        if not scan:
            return None
        self.write_private("contamination.json", scan)
        public = json.loads(json.dumps(scan))
        for split in (public.get("splits") or {}).values():
            if split.get("hidden"):
                for f in split.get("files", []):
                    for ex in f.get("examples", []):
                        ex["text"] = "(private/contamination.json)"
        return ContaminationScan.from_json(public)

    def write_iteration(self, entry: dict, trajectory: list[dict], egress: list[dict] = ()) -> None:
        _dump(self.dir / "iterations" / f"{entry['iteration']:02d}.json", entry)
        if trajectory:
            _dump(self.dir / "trajectories" / f"{entry['iteration']:02d}.json", trajectory)
        with open(self.dir / "egress.jsonl", "a") as f:
            for request in egress:
                f.write(json.dumps({"iteration": entry["iteration"], **request}) + "\n")

    def errored(self, cfg: BenchConfig, run_id: str, reason: str, ledger: Ledger) -> Errored:
        """An errored run's record: error.json (never a result.json, so no leaderboard or sweep
        reads a score from it) and a report.md that says why. Returns what the bench returns."""
        (self.dir / "result.json").unlink(missing_ok=True)  # a stale one from an earlier try
        out = Errored(
            run_id=run_id,
            error=reason,
            task=cfg.task.name,
            agent=cfg.agent.name,
            seed=cfg.seed,
            budget=Budget.from_json(ledger.summary().to_json()),
            record=str(self.dir),
        )
        _dump(self.dir / "error.json", out.to_json())
        (self.dir / "report.md").write_text(
            f"# {md_text(run_id)}: errored\n\nThe run could not do what it was asked, so it has no "
            f"score:\n\n{md_text(reason, 2000)}\n\nWhat it did is in iterations/ and ledger.jsonl; its steps are "
            "cached, so a rerun after the fix resumes from them.\n"
        )
        return out

    def write_timings(self, wall_seconds: float, steps: list[dict]) -> None:
        """Per step call (by run name): when it started, its wall time in the orchestrator and in
        its sandboxes, its metered CPU-seconds, whether the cache served it; and how much of the
        run was spent in sandboxed compute.

        Grading's plays overlap (vtb/bench.py), so their sandbox seconds can add up to more than
        the wall time they took: the outside share is then a lower bound, never below 0.
        """
        inside = sum(t["sandbox_wall_seconds"] for t in steps)
        _dump(
            self.dir / "timings.json",
            {
                "wall_seconds": round(wall_seconds, 2),
                "sandbox_wall_seconds": round(inside, 2),
                "outside_share": round(max(0.0, 1 - inside / wall_seconds), 4) if wall_seconds else None,
                "steps": steps,
            },
        )

    def finish(self, cfg: BenchConfig, run: RunOutcome, ledger: Ledger, store: Path) -> BenchResult:
        """Write the submission, manifest, grading, ledger, result and report; returns the result
        (its `to_json()` is result.json with the per-item rewards joined in, as
        `result_files.load_result` reads it back)."""
        grades = {label: g.to_json() for label, g in run.grades.items()}
        run_id = run.run_id
        sub = self.dir / "submission"
        safefs.remove(sub)
        safefs.copy_tree(store / run.chosen.snapshot, sub)
        if run.chosen.checkpoint:
            _link_tree(Path(run.chosen.checkpoint), sub / "model")
        _dump(
            self.dir / "manifest.json",
            {
                "run_id": run_id,
                "code_version": code_version(),
                "data": asdict(run.data),
                "base_model": asdict(run.model),
                "candidates": [_made_of(c) for c in run.history],
                "submitted": _made_of(run.chosen),
                "reference": run.reference,
            },
        )
        # what the graded episodes did (questions, conversations, answers a harness may have
        # filled with its inputs) and the harness's own stderr lines (a denial line is whatever
        # it printed with "No such file" in it) stay in private/: the publishable record holds
        # no test input, only ids, rewards and counts
        samples = {label: g.pop("samples", []) for label, g in grades.items()}
        self.write_private("samples.json", samples)
        denials = {label: g.get("denials") or [] for label, g in grades.items()}
        self.write_private("denials.json", denials)
        for label, g in grades.items():
            g["denials"] = len(denials[label])
        _dump(self.dir / "grading.json", grades)
        ledger.write(self.dir / "ledger.jsonl")
        result = self._result(cfg, run, ledger, attribute_gains(run.history, run.chosen))
        systems = {label: g.get("rewards") for label, g in grades.items()}  # initial, submitted, reference
        grid = run.analysis.grid.to_json() if run.analysis and run.analysis.grid else None
        rewards = result_files.document(run_id, systems, grid)
        _dump(self.dir / result_files.FILE, rewards)
        _dump(self.dir / "result.json", result_files.strip(result.to_json()))  # the scores; rewards beside it
        write_item_rewards(self.dir / "item_rewards.csv", run.grades)
        write_report(self.dir, result, run.history, run.grades)
        return result

    def _result(
        self, cfg: BenchConfig, run: RunOutcome, ledger: Ledger, gains: dict[str, float]
    ) -> BenchResult:
        """result.json's figures, from the run's typed outcome."""
        grades, chosen = run.grades, run.chosen
        sub = grades["submitted"]
        provenance = Provenance.from_json(sub.provenance)
        # the ledger's figures, checked as any reader does
        budget = Budget.from_json(ledger.summary().to_json())
        return BenchResult(
            schema_version=SCHEMA_VERSION,
            run_id=run.run_id,
            git=git_state(),  # the checkout that ran it: commit, and whether it had local changes
            started_at=getattr(self, "started_at", None),
            ended_at=_now(),
            task=cfg.task.name,
            source=cfg.task.source,
            metric=cfg.task.metric,  # the reward actually used (math resolves the source's own)
            # public: the published default salt, so anyone can rebuild this test split (and its
            # answers); hidden: a salt no published code holds. Never ranked together.
            test_split=TestSplit(salt.split_kind(run.data.test_salt_sha256), run.data.test_salt_sha256),
            # which runs' figures this one's can match bit for bit
            reproducibility=run.reproducibility,
            agent=cfg.agent.name,
            model=cfg.model.name,
            seed=cfg.seed,
            initial=_score(grades["initial"]),
            initial_val_score=run.history[0].val_score,
            submitted=Submitted(
                score=_score(sub),
                val_score=chosen.val_score,
                iteration=chosen.iteration,
                flagged_by_null_model=sub.flagged if sub.null_model_score is not None else None,
                flagged_by_grading_cap=sub.capped,
                # None: not audited (the check off, or a domain without one task text)
                flagged_by_provenance=provenance.flagged if provenance else None,
                provenance=provenance,
                base_model_test_score=sub.base_model_score,
                # per test episode (paired comparisons); None for a system never played (`note`)
                item_rewards=None if sub.note else sub.rewards,
            ),
            reference=_score(grades["reference"]) if "reference" in grades else None,
            budget=replace(budget, agent_cost_usd=round(budget.agent_cost_usd, 6)),
            iterations=len(run.history) - 1,
            gains_by_part=gains,
            contamination=self._scan(run.contamination),
            grading_determinism=run.determinism,
            analysis=run.analysis,
            item_rewards_file=result_files.FILE,  # per test item: each graded system and grid corner
            record=str(self.dir),
        )


def write_item_rewards(path: Path, grades: dict[str, Grade]) -> None:
    """Each test item's reward for every graded system, one row per item (by id, never its
    input): the table a paired comparison or a per-item plot starts from."""
    labels = [label for label in ("initial", "submitted", "reference") if label in grades]
    rewards = {label: grades[label].rewards for label in labels}
    with path.open("w", newline="") as f:
        table = csv.writer(f, lineterminator="\n")
        table.writerow(["item", *labels])
        for item in sorted({i for r in rewards.values() for i in r}):
            table.writerow(
                [item, *("" if item not in rewards[x] else repr(float(rewards[x][item])) for x in labels)]
            )


PRIVATE = "private"  # the one folder of a run record that holds test inputs; never published
PRIVATE_README = """# private/: do not publish

The graded episodes of this run (private/samples.json: test questions, conversations and the
answers the harness gave, which may echo its inputs), the harness's blocked-access lines at
grading (private/denials.json: its own stderr, which may echo them too) and the graders' own
reports (private/grading/). The rest of the run record holds test items by id only, so it can be shared;
this folder would publish the hidden test split.
"""


def _fence(text: str) -> str:
    """A code fence longer than any backtick run in text, so the text cannot close it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def edits_text(edits: dict[str, list[str]] | None) -> str:
    """Edits per part as one line ("data: train.jsonl; harness: harness.py"), "-" for none."""
    return "; ".join(f"{p}: {', '.join(f)}" for p, f in (edits or {}).items()) or "-"


def _score(grade: Grade) -> Score:
    """A graded system's test score with its pass^k (tau) or pass@k (terminal) figures, if any."""
    metrics = grade.metrics
    extra = {k: v for k, v in metrics.items() if k.startswith(("pass^", "pass@"))}
    if metrics.get("not_judged"):  # tau2: episodes with a reward component this run could not evaluate
        extra["not_judged"] = metrics["not_judged"]
    return Score(grade.test_score, extra)


def _made_of(c: Candidate) -> dict:
    """A system in the manifest: its iteration, snapshot, part hashes and training key."""
    return {"iteration": c.iteration, "snapshot": c.snapshot, "parts": c.parts, "train_key": c.train_key}


def attribute_gains(history: list[Candidate], chosen: Candidate) -> dict[str, float]:
    """Val-score gain of each kept edit on the path to the submission, credited to the parts it touched.

    The path is rebuilt from which candidates were kept: a candidate counts when it became
    the best so far; its gain over the previous best is split evenly over the parts edited.
    """
    gains: dict[str, float] = {}
    best = None
    for h in history:
        if h.val_score is None or h.iteration > chosen.iteration:
            continue
        if best is None:
            best = h
            continue
        if h.val_score > best.val_score:
            parts = sorted(h.edits) or ["none"]
            for part in parts:
                gains[part] = gains.get(part, 0.0) + (h.val_score - best.val_score) / len(parts)
            best = h
    return {k: round(v, 4) for k, v in gains.items()}


def contamination_line(scan: ContaminationScan | None) -> str:
    """The scan in one line of the summary table: flagged or not, items hit per split, canaries."""
    if not scan:
        return "not run"
    splits = ", ".join(
        f"{name} {v.hit_items}/{v.decidable}" + (" canary" if v.canary_found else "")
        for name, v in scan.splits.items()
    )
    head = "FLAGGED" if scan.flagged else "not flagged"
    return f"{head} (items copied: {splits or 'no split'})"


def contamination_lines(scan: ContaminationScan | None) -> list[str]:
    """report.md's section on the scan: verdict, per split, per file with examples (all inert text)."""
    if not scan:
        return []
    t = scan.thresholds
    verdict = "**FLAGGED**: " + "; ".join(map(md_text, scan.reasons)) if scan.flagged else "not flagged"
    lines = [
        "",
        "## Contamination scan",
        "",
        f"Submission {verdict} (scored as graded, and marked). {t.get('ngram')}-grams ({t.get('short_ngram')}-grams "
        f"for short fields) of normalised text, public n-grams left out; an item is copied at "
        f"{t.get('item_coverage', 0):.0%} of a field's n-grams; a split is flagged at {t.get('flag_min_items')} "
        f"items and {t.get('flag_fraction', 0):.0%}, or on its canary. Scanned {scan.files} files, {scan.bytes} bytes.",
        "",
    ]
    for name, v in scan.splits.items():
        where = "hidden" if v.hidden else "public (reported, not flagged)"
        lines.append(
            f"- {md_text(name)} ({where}): {v.hit_items} of {v.decidable} items copied "
            f"({v.hit_fraction:.1%}), canary {'FOUND' if v.canary_found else 'not found'}"
            f"{', flagged' if v.flagged else ''}."
        )
        for f in v.files[:10]:
            examples = "; ".join(f"{md_text(e.item)}: {md_text(e.text, 80)}" for e in f.examples)
            canary = ", canary" if f.canary else ""
            lines.append(
                f"  - {md_text(f.path, 200)}: {f.ngrams} n-grams of {f.items} items{canary}. {examples}"
            )
    skipped = [f"{s.path} ({s.kind})" if s.kind else s.path for s in scan.skipped]
    for label, paths in (
        ("links and special files not read", skipped),
        ("read in part (cap)", scan.truncated),
    ):
        if paths:
            lines.append(f"- {label}: " + ", ".join(md_text(x, 120) for x in paths[:10]))
    return lines


UNIT_LABELS = {"flops": "FLOPs", "cpu_seconds": "CPU-seconds", "gpu_seconds": "GPU-seconds"}


def amount(value: float, unit: str) -> str:
    """A budget figure as people read it: `1.83e+10 FLOPs`, not `18298590720`."""
    return f"{value:.3g} {UNIT_LABELS.get(unit, unit)}".rstrip()


def utc_now() -> str:
    """Now, with its zone written out: every time the project prints is UTC and says so."""
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


PLOT_LINE = "![scores](scores.png)"  # report.md's plot; agent text cannot make this line (md_text escapes it)
ANALYSIS_PLOT_LINE = "![analysis](analysis.png)"  # the grid and path plot, when the analysis ran


def report_for_ui(run_dir: Path) -> str:
    """report.md for Prefect's UI, which cannot load a relative image: the plot's line names the file.

    The figures the plot shows are in the report as tables, so nothing is lost."""
    text = (run_dir / "report.md").read_text()
    for line, name in ((PLOT_LINE, "scores.png"), (ANALYSIS_PLOT_LINE, "analysis.png")):
        path = md_text(str(run_dir / name))
        text = text.replace(line, f"Plot (the tables below hold its figures): {path}", 1)
    return text


def split_line(split: TestSplit | None) -> str:
    if not split:
        return "-"
    if split.kind == "public":
        return "public (the published default salt: anyone can rebuild it; not for comparison)"
    return f"hidden (salt sha256 {split.salt_sha256[:12]})"


def summary_table(result: BenchResult) -> str:
    b = result.budget

    def score(entry: Score | None, sub: Submitted | None = None) -> str:
        if entry is None:
            return "-"
        passes = {k: v for k, v in entry.extra.items() if k.startswith(("pass^", "pass@")) and k[5:] != "1"}
        extra = "".join(f"  {k} {v:.3f}" for k, v in passes.items())
        if entry.extra.get("not_judged"):
            extra += (
                f"  ({entry.extra['not_judged']:g} episodes not judged: scored on their other components)"
            )
        if sub and sub.flagged_by_grading_cap:
            extra += "  (FLAGGED: its harness spent more per episode in grading than validation allowed)"
        if sub and sub.flagged_by_provenance:
            extra += (
                "  (FLAGGED: its answers came from its harness, not its model: see result.json provenance)"
            )
        return f"{entry.test_score:.3f}{extra}"

    gpu_row = []  # a CPU run holds no GPU: no row
    if b.gpu_seconds or b.unit == "gpu_seconds":
        gpu_row = [("metered GPU-seconds", f"{b.gpu_seconds:.0f}")]
    rows = [
        ("initial system (test)", score(result.initial)),
        (f"submitted by {result.agent} (test)", score(result.submitted.score, result.submitted)),
        ("reference system (test)", score(result.reference)),
        ("budget used", f"{b.used:.3g} of {amount(b.limit, b.unit)}"),
        ("metered CPU-seconds", f"{b.cpu_seconds:.0f}"),
        *gpu_row,
        ("research agent's LLM", f"{b.agent_tokens} tokens, ${b.agent_cost_usd:.4f}"),
        ("gain by part (val)", ", ".join(f"{k} {v:+.3f}" for k, v in result.gains_by_part.items()) or "-"),
        ("test split", split_line(result.test_split)),
        ("reproducibility", fingerprint_line(result.reproducibility)),
        ("contamination scan", contamination_line(result.contamination)),
        *_analysis_rows(result.analysis),
        ("run record", result.record),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    bar = "=" * max(len(line) for line in lines)
    head = f"VibeTraining-Bench  task={result.task}  agent={result.agent}  seed={result.seed}"
    return "\n".join([bar, head, bar, *lines, bar])


USAGE_LEGEND = (
    "Agent tokens: *metered* = read by the orchestrator from the endpoint's answers (agent=llm); "
    "*self-reported* = the CLI's own figures from its output, *rounded* where it prints them so (aider); "
    "*estimated* = the egress proxy's bytes / 4, where the CLI reported nothing usable. Cost: the CLI's "
    "own figure where it gives one, else the tokens at agent.prices."
)


def write_report(
    run_dir: Path, result: BenchResult, history: list[Candidate], grades: dict[str, Grade]
) -> None:
    plt = plots.pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    its = [h.iteration for h in history]
    vals = [h.val_score if h.val_score is not None else 0.0 for h in history]
    ax1.plot(its, vals, marker="o")
    ax1.set_xticks(its)  # iterations are whole numbers
    ax1.axvline(result.submitted.iteration, color="grey", ls="--", lw=1, label="submitted")
    ax1.set(xlabel="iteration", ylabel="val score", title="Validation score per iteration", ylim=(0, 1.08))
    ax1.legend()
    labels = [k for k in ("initial", "submitted", "reference") if k in grades]
    bars = ax2.bar(
        labels, [grades[k].test_score for k in labels], color=["#999", "#2a7", "#36c"][: len(labels)]
    )
    plots.label_bars(ax2, bars)
    kind = "Public" if result.test_split and result.test_split.kind == "public" else "Hidden"
    ax2.set(ylabel="test score", title=f"{kind} test split", ylim=(0, 1.08))
    plots.save(fig, run_dir / "scores.png")

    table = summary_table(result)
    lines = [
        f"# {md_text(result.run_id)}",
        "",
        _fence(table),
        table,
        _fence(table),
        "",
        f"Finished {utc_now()}.",
        "",
        PLOT_LINE,
        "",
        "## Test scores (the plot's right panel)",
        "",
        "| system | test score |",
        "|---|---:|",
        *[f"| {k} | {grades[k].test_score:.3f} |" for k in labels],
        "",
        "## Iterations (the plot's left panel: val per iteration)",
        "",
        "| it | val | edits | budget used after | agent tokens | agent cost | notes |",
        "|---:|---:|---|---:|---:|---:|---|",
    ]
    for h in history:
        edits = md_text(edits_text(h.edits))  # file names are the agent's: escaped like its notes
        val = "failed" if h.val_score is None else f"{h.val_score:.3f}"
        notes = md_text(h.notes)  # one table cell, inert
        source = f" ({md_text(h.agent.usage)})" if h.agent.usage else ""
        lines.append(
            f"| {h.iteration} | {val} | {edits} | {amount(h.budget_after.used, h.budget_after.unit)} | "
            f"{h.agent.tokens}{source} | ${h.agent.cost_usd:.4f} | {notes} |"
        )
    if any(h.agent.usage for h in history):
        lines += ["", USAGE_LEGEND]
    sub = grades["submitted"]
    played = (
        f"{sub.answered}/{sub.n} answered, {sub.crashes} harness failures"
        if not sub.note
        else md_text(sub.note)
    )
    lines += [
        "",
        "## Grading",
        "",
        f"- Submitted: iteration {result.submitted.iteration}, test {sub.test_score:.3f} ({played}).",
    ]
    for label in ("initial", "submitted", "reference"):
        metrics = grades[label].metrics if label in grades else {}
        if metrics:
            shown = {k: v for k, v in metrics.items() if not k.startswith("by_")}
            lines.append(f"- {label}: " + ", ".join(f"{md_text(k)} {md_text(v)}" for k, v in shown.items()))
            for key in ("by_template", "by_bug"):  # tau/terminal templates, swe bug templates
                if metrics.get(key):
                    lines.append(
                        f"  {key.replace('_', ' ')}: "
                        + ", ".join(f"{md_text(k)} {v:.2f}" for k, v in metrics[key].items())
                    )
    if sub.null_model_score is not None:
        flag = "FLAGGED: the harness scores without the model" if sub.flagged else "not flagged"
        lines.append(
            f"- Null-model check: test {sub.null_model_score:.3f} with the submitted model's weights shuffled ({flag})."
        )
    if sub.base_model_score is not None:
        lines.append(
            f"- Base-model check: test {sub.base_model_score:.3f} with the same harness served the untrained "
            f"base model (vs {sub.test_score:.3f} trained): the part of the score the training carries is the gap."
        )
    audit = result.submitted.provenance
    if audit:
        found = f"**FLAGGED**: {md_text(audit.reason or '')}" if audit.flagged else "not flagged"
        f = audit.figure
    if audit and audit.check == "written":
        lines.append(
            f"- Written check (what a scored answer adds, a patch's lines or tau's write calls and messages, must be written by the model, not shown to it): "
            f"{f('not_model'):g} of {f('scored'):g} scored answers mostly not the model's writing, "
            f"{f('checked_lines'):g} lines checked ({found})."
        )
    elif audit:
        lines.append(
            f"- Provenance audit (each question swapped for another's at the model server): "
            f"{f('served_hits'):g} of {f('informative'):g} right on the questions the model saw "
            f"(grading: {f('graded_hits_same_questions'):g}), {f('own_hits'):g} answering the "
            f"question only the harness saw (coincidence {f('chance_hits'):g}), "
            f"{f('unswapped'):g} of {audit.n} not sent verbatim ({found})."
        )
    if sub.denials:
        lines.append(
            f"- Blocked access attempts seen at grading: {len(sub.denials)} (see private/denials.json)."
        )
    if result.grading_determinism:
        lines.append(
            f"- Grading determinism (the submission graded twice): {md_text(result.grading_determinism['note'])}."
        )
    lines += contamination_lines(result.contamination)
    lines += analysis_lines(run_dir, result.analysis)
    (run_dir / "report.md").write_text("\n".join(lines) + "\n")


def _analysis_rows(studied: AnalysisResult | None) -> list[tuple[str, str]]:
    """The summary table's lines on the analysis: the grid's verdict and the path's test scores."""
    if not studied:
        return []
    rows = []
    if studied.grid:
        rows.append(("co-design grid (test)", studied.grid.verdict_line))
    if studied.path:
        rows.append(("path (test)", " -> ".join(f"it{s.iteration} {s.test_score:.3f}" for s in studied.path)))
    return rows


def analysis_lines(run_dir: Path, studied: AnalysisResult | None) -> list[str]:
    """report.md's sections on the co-design grid and the path, and their plot (analysis.png)."""
    if not studied or not (studied.grid or studied.path):
        return []
    plot_analysis(run_dir / "analysis.png", studied)
    lines = [
        "",
        "## Co-design grid and path (test split, after the run; not charged to the agent)",
        "",
        ANALYSIS_PLOT_LINE,
    ]
    grid = studied.grid
    if grid:
        changed = ", ".join(grid.changed) or "none"
        lines += [
            "",
            f"Every mix of initial and submitted data, trainer and harness, graded on the hidden test split "
            f"(parts the submission changed: {changed}; {grid.distinct_systems} distinct systems, a mix "
            "equal to another system is that system and is graded once).",
            "",
            f"**Verdict: {md_text(grid.verdict_line)}.** Additive: together within the tolerance of the sum "
            "of the parts alone; synergistic: above it; redundant: below it but not below the best part alone; "
            "interfering: below the best part alone.",
            "",
            "| corner | data | trainer | harness | test | on path |",
            "|---|---|---|---|---:|---|",
        ]
        on_path = {s.corner for s in studied.path or []}
        for c in grid.corners:
            note = f" ({md_text(c.note, 80)})" if c.note else ""
            parts = " | ".join(c.parts.get(p, "") for p in ("data", "trainer", "harness"))
            lines.append(
                f"| {c.corner} {c.name} | {parts} | {c.test_score:.3f}{note} | "
                f"{'yes' if c.corner in on_path else ''} |"
            )
        eff = grid.effects
        if eff:
            lines += ["", "| effect (2^3 factorial) | test |", "|---|---:|"]
            lines += [f"| {k} (main) | {v:+.3f} |" for k, v in eff.main.items()]
            lines += [f"| {k} | {v:+.3f} |" for k, v in eff.interactions.items()]
            lines += [f"| {k} alone | {v:+.3f} |" for k, v in eff.alone.items()]
            lines += [
                f"| all together | {eff.together:+.3f} |",
                f"| together - sum alone | {eff.interaction:+.3f} |",
            ]
    if studied.path:
        lines += [
            "",
            "Cumulative gain along the path: each kept candidate (best on validation so far), graded on "
            "the test split after the run (never shown to the agent).",
            "",
            "| it | parts edited | val | test | test change |",
            "|---:|---|---:|---:|---:|",
        ]
        prev = None
        for step in studied.path:
            val = "-" if step.val_score is None else f"{step.val_score:.3f}"
            delta = "" if prev is None else f"{step.test_score - prev:+.3f}"
            edited = md_text(", ".join(step.parts_edited) or "-")
            lines.append(f"| {step.iteration} | {edited} | {val} | {step.test_score:.3f} | {delta} |")
            prev = step.test_score
    spend = studied.spend
    if spend:
        lines += [
            "",
            f"Analysis spend (unbudgeted, not in the ledger): {spend.trainings} trainings, {spend.plays} "
            f"test plays, {spend.cpu_seconds:.0f} metered CPU-seconds, {spend.flops:.3g} reported FLOPs.",
        ]
    return lines


def plot_analysis(path: Path, studied: AnalysisResult) -> None:
    """Left: the grid's 8 test scores, the corners on the path highlighted; right: val and test along the path."""
    plt = plots.pyplot()
    grid, steps = studied.grid, studied.path or []
    both = bool(grid and steps)
    fig, axes = plt.subplots(1, 2 if both else 1, figsize=(10 if both else 5, 3.6), squeeze=False)
    axes = list(axes[0])
    if grid:
        ax = axes[0]
        on_path = {s.corner for s in steps}
        corners = grid.corners
        colors = ["#2a7" if c.corner in on_path else "#bbb" for c in corners]
        plots.label_bars(ax, ax.bar(range(len(corners)), [c.test_score for c in corners], color=colors))
        short = [
            "".join(
                p[0].upper()
                for p, bit in zip(("data", "trainer", "harness"), c.corner, strict=False)
                if bit == "1"
            )
            or "none"
            for c in corners
        ]
        ax.set_xticks(range(len(corners)), short)
        ax.set(
            xlabel="parts taken from the submission (D data, T trainer, H harness)",
            ylabel="test score",
            ylim=(0, 1.08),
            title="Co-design grid (green: on the path)",
        )
    if steps:
        ax = axes[-1]
        its = list(range(len(steps)))
        ax.plot(
            its,
            [s.val_score if s.val_score is not None else float("nan") for s in steps],
            marker="o",
            label="val",
        )
        ax.plot(its, [s.test_score for s in steps], marker="s", label="test")
        ax.set_xticks(its, [f"it{s.iteration}" for s in steps])
        ax.set(ylabel="score", ylim=(0, 1), title="Kept candidates along the path")
        ax.legend()
    plots.save(fig, path)


def fingerprint_line(fp: Fingerprint | None) -> str:
    """One line for the report: the reproducibility fingerprint's id and what it pins (vtb/repro.py)."""
    if not fp:
        return "not recorded"
    mode = {
        "reproducible": "pinned CPU code paths",
        "gpu": "GPU kernels are not pinned (not comparable bit for bit)",
    }.get(fp.mode, "native CPU code paths (not comparable)")
    # model servers' threads: kept since issue 38's server_threads; older records lack them
    servers = f" ({fp.server_threads} per model server)" if fp.server_threads else ""
    return (
        f"{fp.id} ({mode}; kernels {fp.cpu_capability}, "
        f"{fp.threads} thread{'' if fp.threads == 1 else 's'}{servers}, "
        f"torch {fp.torch}, transformers {fp.transformers})"
    )
