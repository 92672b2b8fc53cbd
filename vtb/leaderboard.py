"""The leaderboard over a runs_dir: per (task, agent), seeds pooled, with 95% bootstrap CIs.

Reads every `<runs_dir>/*/result.json`. Per (task, agent): the mean submitted test score and
its 95% percentile-bootstrap CI over seeds, the mean initial and reference scores, the
normalised gain (s - initial) / (reference - initial) (mean over seeds, with its CI), and the
budget used. Per agent, an aggregate across tasks weighted by 1 / (reference - initial) of
each task, as PostTrainBench weights its benchmarks: a point gained where the reference gains
little counts more. Writes leaderboard.md, leaderboard.csv and leaderboard.png.
"""

from __future__ import annotations

import csv
import json
import random
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

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


def read_results(runs_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(Path(runs_dir).glob("*/result.json"))]


def rows(results: list[dict]) -> list[Row]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in results:
        groups.setdefault((r["task"], r["agent"]), []).append(r)
    out = []
    for (task, agent), runs in sorted(groups.items()):
        scores = [r["submitted"]["test_score"] for r in runs]
        initial = statistics.fmean(r["initial"]["test_score"] for r in runs)
        refs = [r["reference"]["test_score"] for r in runs if r.get("reference")]
        reference = statistics.fmean(refs) if refs else None
        gains = [
            g
            for r in runs
            if (
                g := normalised_gain(
                    r["submitted"]["test_score"],
                    r["initial"]["test_score"],
                    (r.get("reference") or {}).get("test_score"),
                )
            )
            is not None
        ]
        lo, hi = bootstrap_ci(scores)
        glo, ghi = bootstrap_ci(gains) if gains else (None, None)
        out.append(
            Row(
                task,
                agent,
                len(runs),
                statistics.fmean(scores),
                lo,
                hi,
                initial,
                reference,
                statistics.fmean(gains) if gains else None,
                glo,
                ghi,
                statistics.fmean(r["budget"]["used"] for r in runs),
                runs[0]["budget"]["unit"],
            )
        )
    return out


def aggregate(table: list[Row]) -> dict[str, dict]:
    """Per agent: task scores weighted by 1 / (reference - initial); tasks without a gap are left out."""
    out: dict[str, dict] = {}
    for agent in sorted({r.agent for r in table}):
        mine = [r for r in table if r.agent == agent and r.reference is not None and r.reference > r.initial]
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


def write(runs_dir: Path, out_dir: Path | None = None) -> tuple[list[Row], dict]:
    """Write leaderboard.md / .csv / .png for the runs under runs_dir; returns (rows, aggregate)."""
    out_dir = Path(out_dir or runs_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = rows(read_results(runs_dir))
    agg = aggregate(table)
    with open(out_dir / "leaderboard.csv", "w", newline="") as f:
        fields = list(Row.__dataclass_fields__)
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for r in table:
            writer.writerow(asdict(r))
    lines = [
        "# Leaderboard",
        "",
        f"Submitted test score: mean over seeds [95% bootstrap CI, {BOOTSTRAP_SAMPLES} resamples]. "
        "Normalised gain = (submitted - initial) / (reference - initial).",
        "",
        "| task | agent | seeds | submitted [95% CI] | initial | reference | normalised gain [95% CI] | budget used |",
        "|---|---|---:|---|---:|---:|---|---:|",
    ]
    for r in table:
        gain = "-" if r.gain is None else f"{r.gain:.3f} [{r.gain_ci_low:.3f}, {r.gain_ci_high:.3f}]"
        lines.append(
            f"| {r.task} | {r.agent} | {r.seeds} | {r.score:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}] | "
            f"{r.initial:.3f} | {_fmt(r.reference)} | {gain} | {r.budget_used:.3g} {r.budget_unit} |"
        )
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
    lines += ["", "![leaderboard](leaderboard.png)"]
    (out_dir / "leaderboard.md").write_text("\n".join(lines) + "\n")
    _plot(table, out_dir / "leaderboard.png")
    return table, agg


def _plot(table: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(table)), 3.6))
    labels = [f"{r.task}\n{r.agent}" for r in table]
    xs = range(len(table))
    err = [[r.score - r.ci_low for r in table], [r.ci_high - r.score for r in table]]
    ax.bar(xs, [r.score for r in table], yerr=err, capsize=4, color="#2a7", label="submitted (95% CI)")
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
    ax.set(ylabel="test score", ylim=(0, 1), title="Submitted test score by task and agent")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Write leaderboard.md/.csv/.png for a runs_dir.")
    parser.add_argument("runs_dir", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="default: the runs_dir")
    args = parser.parse_args(argv)
    table, _ = write(args.runs_dir, args.out)
    print((Path(args.out or args.runs_dir) / "leaderboard.md").read_text())
    if not table:
        raise SystemExit(f"no result.json under {args.runs_dir}/*/: nothing to rank")


if __name__ == "__main__":
    main()
