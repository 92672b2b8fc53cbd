"""The leaderboard over a runs_dir: per (task, agent), seeds pooled, with 95% bootstrap CIs.

Reads every `<runs_dir>/*/result.json`. Per (task, agent): the mean submitted test score and
its 95% percentile-bootstrap CI over seeds, the mean initial and reference scores, the
normalised gain (s - initial) / (reference - initial) (mean over seeds, with its CI), and the
budget used. Per agent, an aggregate across tasks weighted by 1 / (reference - initial) of
each task, as PostTrainBench weights its benchmarks: a point gained where the reference gains
little counts more. Writes leaderboard.md, leaderboard.csv and leaderboard.png.

The noise floor (vtb/noise.py): per (task, agent) the seed standard deviation and the minimum
difference detectable at 95% between two agents given the seeds run; per task, every pair of
agents as a paired bootstrap CI of A - B over the seeds both ran and the test items (from
each run's per-episode rewards, item_rewards.json; seeds only where a run lacks them), in
leaderboard.md and leaderboard_pairs.csv.

The co-design grid (vtb/analysis.py, vtb/codesign.py): per (task, agent), the mean over seeds of
each part's main effect on the test score and of the interaction (together minus the sum of the
parts alone), each with a paired bootstrap CI over seeds and test items (the grid's 8 systems are
graded on the same items, so every effect is a contrast of per-item rewards), and the count of
each verdict; in leaderboard.md and leaderboard_grid.csv.

Test splits are never pooled: a run on the public test split (the published default salt, which
anyone can rebuild with its answers; vtb/salt.py) is ranked apart as "<task> [public
split]", and runs drawn with different hidden salts apart from each other ("<task> [split
<sha256 prefix>]"); a task whose runs share one hidden salt keeps its plain name.

Flagged runs (the contamination scan of vtb/contamination.py, or the null-model check) are
counted per row and kept by default, scored and marked; `exclude_flagged` (CLI
`--exclude-flagged`, sweep `exclude_flagged=true`) leaves them out of every figure.
"""

from __future__ import annotations

import csv
import itertools
import random
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from vtb import codesign, noise, result_files, result_parts, safefs
from vtb.bench_result import BadResult, BenchResult, Errored
from vtb.markdown import md_text
from vtb.result_parts import Fingerprint

BOOTSTRAP_SAMPLES = 10_000
BOOTSTRAP_SEED = 0  # fixed: the same runs give the same CIs


def bootstrap_ci(
    values: list[float], level: float = 0.95, samples: int = BOOTSTRAP_SAMPLES
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean (resampling values with replacement, fixed seed)."""
    if not values:
        raise ValueError("no values")
    if len(values) == 1:
        return values[0], values[0]
    rng = random.Random(BOOTSTRAP_SEED)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(samples))
    lo = means[int((1 - level) / 2 * samples)]
    hi = means[min(samples - 1, int((1 + level) / 2 * samples))]
    return lo, hi


def normalised_gain(score: float, initial: float, reference: float | None) -> float | None:
    """(s - initial) / (reference - initial): 0 = no better than the initial system, 1 = reference."""
    if reference is None or reference <= initial:
        return None
    return (score - initial) / (reference - initial)


# A run's result as the leaderboard pools it: a view of a BenchResult (vtb/bench_result.py, the one
# reader of result.json, strict on every figure used here). What an absent test split or
# fingerprint means, which rewards pair items, when a run is flagged: decided here once; a result
# the reader refuses is refused with its reason (BadResult, naming the field), never half read.


@dataclass(frozen=True)
class Corner:
    """One system of the co-design grid: its test score and, where it has them, its per-item rewards."""

    code: str  # "000" (initial) ... "111" (submitted): data, trainer, harness
    test_score: float
    item_rewards: dict[str, float] | None


@dataclass(frozen=True)
class Grid:
    corners: dict[str, Corner]
    verdict: str  # one of vtb.codesign.VERDICTS

    @property
    def per_item(self) -> bool:
        """Whether every corner has per-item rewards (a contrast is then paired per item)."""
        return all(c.item_rewards is not None for c in self.corners.values())


@dataclass(frozen=True)
class RunResult:
    run_id: str
    task: str
    agent: str
    seed: int
    initial: float  # test scores
    submitted: float
    reference: float | None  # None: the run built no reference system
    budget_used: float
    budget_unit: str
    flagged: bool  # by the contamination scan, the null-model check, the grading cap or the audit
    split: tuple[str, str]  # (kind, salt sha256) of its test split; ("", "") before it was kept
    fingerprint: str  # its reproducibility id, "<mode> <id>" where kernels were not pinned; "" unrecorded
    item_rewards: dict[str, float] | None  # the submission's, per test item
    grid: Grid | None  # the co-design grid, where the analysis ran and found effects

    @classmethod
    def from_json(cls, r: object) -> RunResult:
        """result.json's content (rewards joined, as result_files.load_result reads it)."""
        return cls.of(BenchResult.from_json(r))

    @classmethod
    def of(cls, r: BenchResult) -> RunResult:
        return cls(
            run_id=r.run_id,
            task=r.task,
            agent=r.agent,
            seed=r.seed,
            initial=r.initial.test_score,
            submitted=r.submitted.score.test_score,
            reference=r.reference.test_score if r.reference else None,
            budget_used=r.budget.used,
            budget_unit=r.budget.unit,
            flagged=r.flagged,
            split=(r.test_split.kind, r.test_split.salt_sha256) if r.test_split else ("", ""),
            fingerprint=_fingerprint(r.reproducibility),
            item_rewards=r.submitted.item_rewards or None,  # none graded: compared over seeds only
            grid=_grid(r.analysis.grid if r.analysis else None),
        )


def _fingerprint(fp: Fingerprint | None) -> str:
    """The run's reproducibility fingerprint id (vtb/repro.py), prefixed with its mode ("native",
    "gpu") where its kernels were not pinned; "" for a record from before it was kept."""
    if not fp:
        return ""
    fid = fp.id[:20]
    return fid if fp.mode == "reproducible" else f"{fp.mode or 'native'} {fid}"


def _grid(grid: result_parts.Grid | None) -> Grid | None:
    """The grid as BenchResult.from_json checked it (check_grid: 8 corners, each scored, a known
    verdict); None where the analysis did not run or found no effects."""
    if not grid or not grid.effects:
        return None
    corners = {c.corner: Corner(c.corner, c.test_score, _floats(c.item_rewards)) for c in grid.corners}
    return Grid(corners, grid.verdict)


def _floats(rewards: dict | None) -> dict[str, float] | None:
    return {k: float(v) for k, v in rewards.items()} if rewards else None


@dataclass
class Row:
    task: str
    agent: str
    seeds: int
    score: float  # mean submitted test score
    ci_low: float
    ci_high: float
    initial: float
    reference: float | None
    gain: float | None  # mean normalised gain over seeds
    gain_ci_low: float | None
    gain_ci_high: float | None
    budget_used: float  # mean, in budget_unit
    budget_unit: str
    seed_sd: float | None = None  # sample SD of the submitted test score over seeds
    mdd95: float | None = None  # minimum difference to another agent detectable at 95% (vtb/noise.py)
    flagged: int = 0  # runs flagged by the contamination scan or the null-model check
    errored: int = 0  # runs of this task and agent that ended errored: no score, not in the mean


@dataclass
class Pair:
    """Agent a minus agent b on one task: paired bootstrap over seeds and test items."""

    task: str
    a: str
    b: str
    diff: float
    ci_low: float
    ci_high: float
    seeds: int
    items: int  # 0: seeds only (a run without per-item rewards)
    verdict: str


def read_results(runs_dir: Path) -> list[RunResult]:
    """Every run's result.json under runs_dir, its per-item rewards (item_rewards.json) joined in."""
    out = []
    for p in sorted(Path(runs_dir).glob("*/result.json")):
        try:
            out.append(RunResult.from_json(result_files.load_result(p)))
        except BadResult as e:
            raise BadResult(f"{p}: {e}") from None
    return out


def typed(results: list[dict] | list[RunResult]) -> list[RunResult]:
    """Results as the leaderboard reads them (result.json's content, or already read)."""
    return [r if isinstance(r, RunResult) else RunResult.from_json(r) for r in results]


def read_errored(runs_dir: Path) -> list[Errored]:
    """The errored runs' records (error.json: no score, vtb/bench.py RunError), for listing apart:
    an agent's errored seeds are out of its mean, so they are counted beside it. Read bounded, no
    link followed; a record that does not read as an errored run's is left out."""
    out = []
    for p in sorted(Path(runs_dir).glob("*/error.json")):
        try:
            out.append(Errored.from_json(safefs.read_json(p, 1 << 20)))
        except (OSError, BadResult):  # safefs.Rejected is an OSError
            continue
    return out


def is_flagged(result: dict | RunResult) -> bool:
    """Flagged by the contamination scan, the null-model check, the grading cap or the provenance
    audit (scored, but marked)."""
    return typed([result])[0].flagged


def task_labels(results: list[RunResult]) -> list[str]:
    """Each run's task as ranked: its own split's and its own fingerprint's, so that no figure
    pools two test splits, or runs whose numbers cannot match bit for bit (issue 38). Where a
    task's runs all share one fingerprint, the label is the task's alone."""
    hidden: dict[str, set[str]] = {}
    for r in results:
        kind, sha = r.split
        if kind == "hidden":
            hidden.setdefault(r.task, set()).add(sha)
    labels = []
    for r in results:
        kind, sha = r.split
        if kind == "public":
            labels.append(f"{r.task} [public split]")
        elif kind == "hidden" and len(hidden[r.task]) > 1:
            labels.append(f"{r.task} [split {sha[:8]}]")
        else:
            labels.append(r.task)
    machines: dict[str, set[str]] = {}
    for r, label in zip(results, labels, strict=True):
        machines.setdefault(label, set()).add(r.fingerprint)
    return [
        f"{label} [cpu {r.fingerprint or 'unrecorded'}]" if len(machines[label]) > 1 else label
        for r, label in zip(results, labels, strict=True)
    ]


def _groups(results: list[RunResult], exclude_flagged: bool) -> dict[tuple[str, str], list[RunResult]]:
    groups: dict[tuple[str, str], list[RunResult]] = {}
    for r, task in zip(results, task_labels(results), strict=True):
        if not (exclude_flagged and r.flagged):
            groups.setdefault((task, r.agent), []).append(r)
    return groups


def _by_seed(runs: list[RunResult], per_item: bool) -> dict[int, dict[str, float]]:
    """{seed: per-item rewards}, or {seed: {"": test score}} to compare over seeds only."""
    return {r.seed: r.item_rewards if per_item else {"": r.submitted} for r in runs}  # type: ignore[misc]


def pairs(results: list[dict] | list[RunResult], exclude_flagged: bool = False) -> list[Pair]:
    """Every pair of agents on each task, A - B as a paired bootstrap CI (vtb.noise.paired_bootstrap)."""
    groups = _groups(typed(results), exclude_flagged)
    out = []
    for task in sorted({t for t, _ in groups}):
        agents = sorted(a for t, a in groups if t == task)
        for a, b in itertools.combinations(agents, 2):
            runs = groups[(task, a)] + groups[(task, b)]
            per_item = all(r.item_rewards is not None for r in runs)
            p = noise.paired_bootstrap(
                _by_seed(groups[(task, a)], per_item), _by_seed(groups[(task, b)], per_item)
            )
            if p is not None:
                verdict = {"A better": f"{a} better", "B better": f"{b} better"}.get(p.verdict, p.verdict)
                out.append(Pair(task, a, b, p.diff, p.ci_low, p.ci_high, p.seeds, p.items, verdict))
    return out


GRID_EFFECTS = (*codesign.PARTS, "interaction")


@dataclass
class GridRow:
    """One (task, agent)'s co-design grid over seeds: an effect's mean and paired bootstrap CI."""

    task: str
    agent: str
    effect: str  # a part's main effect, or "interaction" (together - sum of the parts alone)
    mean: float
    ci_low: float
    ci_high: float
    seeds: int
    items: int  # 0: seeds only (a run without per-item rewards)
    verdicts: str  # how many runs got each verdict ("additive 2, single 1")


def _contrast_sides(grid: Grid, weights: dict[str, float], per_item: bool) -> tuple[dict, dict]:
    """The positive and negative sides of a contrast, per test item (or {"": score})."""
    if per_item:
        values = {code: c.item_rewards or {} for code, c in grid.corners.items()}
    else:
        values = {code: {"": c.test_score} for code, c in grid.corners.items()}
    items = set.intersection(*(set(v) for v in values.values()))
    pos = {i: sum(w * values[c][i] for c, w in weights.items() if w > 0) for i in items}
    neg = {i: sum(-w * values[c][i] for c, w in weights.items() if w < 0) for i in items}
    return pos, neg


def grid_rows(results: list[dict] | list[RunResult], exclude_flagged: bool = False) -> list[GridRow]:
    """Per (task, agent) with a co-design grid: each effect's mean over seeds, paired over test items."""
    out = []
    for (task, agent), runs in sorted(_groups(typed(results), exclude_flagged).items()):
        grids = {r.seed: r.grid for r in runs if r.grid is not None}
        if not grids:
            continue
        per_item = all(g.per_item for g in grids.values())
        kinds: dict[str, int] = {}
        for g in grids.values():
            kinds[g.verdict] = kinds.get(g.verdict, 0) + 1
        verdicts = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        for effect in GRID_EFFECTS:
            weights = codesign.contrast(effect)
            sides = {seed: _contrast_sides(g, weights, per_item) for seed, g in grids.items()}
            p = noise.paired_bootstrap(
                {s: a for s, (a, _) in sides.items()}, {s: b for s, (_, b) in sides.items()}
            )
            if p is not None:
                out.append(
                    GridRow(task, agent, effect, p.diff, p.ci_low, p.ci_high, p.seeds, p.items, verdicts)
                )
    return out


def rows(results: list[dict] | list[RunResult], exclude_flagged: bool = False) -> list[Row]:
    groups = _groups(typed(results), exclude_flagged)
    out = []
    for (task, agent), runs in sorted(groups.items()):
        scores = [r.submitted for r in runs]
        refs = [r.reference for r in runs if r.reference is not None]
        gains = [g for r in runs if (g := normalised_gain(r.submitted, r.initial, r.reference)) is not None]
        lo, hi = bootstrap_ci(scores)
        glo, ghi = bootstrap_ci(gains) if gains else (None, None)
        sd = noise.seed_sd(scores)
        out.append(
            Row(
                task,
                agent,
                len(runs),
                statistics.fmean(scores),
                lo,
                hi,
                statistics.fmean(r.initial for r in runs),
                statistics.fmean(refs) if refs else None,
                statistics.fmean(gains) if gains else None,
                glo,
                ghi,
                statistics.fmean(r.budget_used for r in runs),
                runs[0].budget_unit,
                seed_sd=sd,
                mdd95=noise.min_detectable_difference(sd, len(runs)),
                flagged=sum(r.flagged for r in runs),
            )
        )
    return out


def aggregate(table: list[Row]) -> dict[str, dict]:
    """Per agent: task scores weighted by 1 / (reference - initial); tasks without a gap are left out,
    and so are public-split rows where the agent has hidden-split ones (never one figure of both)."""
    out: dict[str, dict] = {}
    for agent in sorted({r.agent for r in table}):
        mine = [r for r in table if r.agent == agent and r.reference is not None and r.reference > r.initial]
        if any(not r.task.endswith("[public split]") for r in mine):
            mine = [r for r in mine if not r.task.endswith("[public split]")]
        weights = [1.0 / (r.reference - r.initial) for r in mine]
        total = sum(weights)
        out[agent] = {
            "score": sum(w * r.score for w, r in zip(weights, mine, strict=True)) / total if total else None,
            "tasks": [r.task for r in mine],
            "weights": {r.task: round(w / total, 4) for w, r in zip(weights, mine, strict=True)}
            if total
            else {},
        }
    return out


def _fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


PLOT_LINE = "![leaderboard](leaderboard.png)"  # beside leaderboard.md; leaderboard.svg too


def _cell(text: str) -> str:
    """Text as one inert markdown table cell (no pipe, line break, markup or link)."""
    return md_text(text, 300)


def for_ui(markdown: str, out_dir: Path) -> str:
    """leaderboard.md for Prefect's UI, which cannot load a relative image: the line names the
    files instead (the tables above hold the plotted figures)."""
    where = f"{Path(out_dir) / 'leaderboard.png'} (and .svg)"
    return markdown.replace(PLOT_LINE, f"Plot (the tables above hold its figures): {where}", 1)


def write(
    runs_dir: Path, out_dir: Path | None = None, exclude_flagged: bool = False
) -> tuple[list[Row], dict]:
    """Write leaderboard.md / .csv / .png and leaderboard_pairs.csv for the runs under runs_dir.

    Returns (rows, aggregate). With exclude_flagged, flagged runs are left out of every figure.
    """
    out_dir = Path(out_dir or runs_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = read_results(runs_dir)
    errored = read_errored(runs_dir)
    table = rows(results, exclude_flagged)
    for r in table:
        r.errored = sum(1 for e in errored if (e.task, e.agent) == (r.task, r.agent))
    compared = pairs(results, exclude_flagged)
    grid = grid_rows(results, exclude_flagged)
    agg = aggregate(table)
    for name, cls, records in (
        ("leaderboard.csv", Row, table),
        ("leaderboard_pairs.csv", Pair, compared),
        ("leaderboard_grid.csv", GridRow, grid),
    ):
        with open(out_dir / name, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(cls.__dataclass_fields__))
            writer.writeheader()
            for r in records:
                writer.writerow(asdict(r))
    n_flagged = sum(is_flagged(r) for r in results)
    flagged_note = (
        f"{n_flagged} flagged runs left out (--exclude-flagged)."
        if exclude_flagged
        else "flagged: runs flagged by the contamination scan or the null-model check, scored and counted here."
    )
    lines = [
        "# Leaderboard",
        "",
        f"Submitted test score: mean over seeds [95% bootstrap CI, {BOOTSTRAP_SAMPLES} resamples]. "
        "Normalised gain = (submitted - initial) / (reference - initial). Seed SD: sample standard "
        "deviation over seeds; MDD 95%: the smallest difference to another agent run on as many seeds "
        "that a two-sided test at 95% tells from that seed noise, t(0.975, 2(n-1)) x SD x sqrt(2/n). "
        + flagged_note,
        "",
        "| task | agent | seeds | submitted [95% CI] | seed SD | MDD 95% | initial | reference "
        "| normalised gain [95% CI] | budget used | flagged | errored |",
        "|---|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in table:
        gain = "-" if r.gain is None else f"{r.gain:.3f} [{r.gain_ci_low:.3f}, {r.gain_ci_high:.3f}]"
        lines.append(
            f"| {r.task} | {r.agent} | {r.seeds} | {r.score:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}] | "
            f"{_fmt(r.seed_sd)} | {_fmt(r.mdd95)} | {r.initial:.3f} | {_fmt(r.reference)} | {gain} | "
            f"{r.budget_used:.3g} {r.budget_unit} | {r.flagged} | {r.errored} |"
        )
    if errored:
        lines += [
            "",
            "## Errored runs (no score, in no mean above)",
            "",
            "| task | agent | seed | reason |",
            "|---|---|---:|---|",
            *(
                f"| {_cell(e.task)} | {_cell(e.agent)} | {_cell('-' if e.seed is None else str(e.seed))} | {_cell(e.error)} |"
                for e in errored
            ),
        ]
    lines += [
        "",
        "## Paired comparisons (A - B, same seeds and test items)",
        "",
        f"Mean of A - B over the seeds both ran and the test items every run graded, with a 95% "
        f"bootstrap CI resampling seeds and items ({noise.PAIRED_SAMPLES} resamples, seed "
        f"{noise.PAIRED_SEED}); items 0 = seeds only (a run without per-item rewards).",
        "",
        "| task | A | B | A - B [95% CI] | seeds | items | verdict |",
        "|---|---|---|---|---:|---:|---|",
    ]
    for p in compared:
        lines.append(
            f"| {p.task} | {p.a} | {p.b} | {p.diff:+.3f} [{p.ci_low:+.3f}, {p.ci_high:+.3f}] | "
            f"{p.seeds} | {p.items} | {p.verdict} |"
        )
    lines += grid_lines(grid)
    lines += [
        "",
        "## Aggregate across tasks (weights 1 / (reference - initial))",
        "",
        "| agent | score | weights |",
        "|---|---:|---|",
    ]
    for agent, a in agg.items():
        weights = ", ".join(f"{t} {w:.2f}" for t, w in a["weights"].items()) or "-"
        lines.append(f"| {agent} | {_fmt(a['score'])} | {weights} |")
    lines += ["", PLOT_LINE]
    (out_dir / "leaderboard.md").write_text("\n".join(lines) + "\n")
    _plot(table, out_dir / "leaderboard.png")
    return table, agg


def grid_lines(grid: list[GridRow]) -> list[str]:
    """leaderboard.md's co-design grid section: one row per (task, agent), one column per effect."""
    if not grid:
        return []
    lines = [
        "",
        "## Co-design grid (effects on the test score, mean over seeds [95% CI])",
        "",
        "Main effect of a part: mean test score of the grid's systems with the submitted part minus "
        "with the initial one (2^3 factorial). Interaction: all parts together minus the sum of each "
        "part alone (0: they add up). CIs: paired bootstrap over seeds and test items "
        f"({noise.PAIRED_SAMPLES} resamples); items 0 = seeds only.",
        "",
        "| task | agent | seeds | items | " + " | ".join(GRID_EFFECTS) + " | verdicts |",
        "|---|---|---:|---:|" + "---|" * len(GRID_EFFECTS) + "---|",
    ]
    for task, agent in dict.fromkeys((g.task, g.agent) for g in grid):
        mine = {g.effect: g for g in grid if (g.task, g.agent) == (task, agent)}
        first = next(iter(mine.values()))
        cells = " | ".join(
            f"{mine[e].mean:+.3f} [{mine[e].ci_low:+.3f}, {mine[e].ci_high:+.3f}]" if e in mine else "-"
            for e in GRID_EFFECTS
        )
        lines.append(f"| {task} | {agent} | {first.seeds} | {first.items} | {cells} | {first.verdicts} |")
    return lines


def _plot(table: list[Row], path: Path) -> None:
    from vtb import plots

    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(table)), 3.6))
    labels = [f"{r.task}\n{r.agent}" for r in table]
    xs = range(len(table))
    err = [[r.score - r.ci_low for r in table], [r.ci_high - r.score for r in table]]
    bars = ax.bar(xs, [r.score for r in table], yerr=err, capsize=4, color="#2a7", label="submitted (95% CI)")
    plots.label_bars(ax, bars)
    ax.scatter(xs, [r.initial for r in table], color="#999", zorder=3, label="initial")
    ax.scatter(
        xs,
        [r.reference if r.reference is not None else float("nan") for r in table],
        color="#36c",
        marker="_",
        s=300,
        zorder=3,
        label="reference",
    )
    ax.set_xticks(list(xs), labels)
    ax.set(ylabel="test score", ylim=(0, 1.08), title="Submitted test score by task and agent")
    ax.legend(fontsize=8)
    plots.save(fig, path)


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Write leaderboard.md/.csv/.png for a runs_dir.")
    parser.add_argument("runs_dir", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="default: the runs_dir")
    parser.add_argument("--exclude-flagged", action="store_true", help="leave flagged runs out")
    args = parser.parse_args(argv)
    table, _ = write(args.runs_dir, args.out, args.exclude_flagged)
    print((Path(args.out or args.runs_dir) / "leaderboard.md").read_text())
    if not table:
        raise SystemExit(f"no result.json under {args.runs_dir}/*/: nothing to rank")


if __name__ == "__main__":
    main()
