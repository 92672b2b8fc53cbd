"""Grade existing SWE-bench predictions and write SWE-bench's own result files.

    python -m vtb.domains.swe.evaluate --predictions P --dataset D [--instance-ids ...]
        [--max-workers N] [--run-id R] [--output-dir O] [--sandbox bwrap|docker] [--pull]
        [--task-repo T]

Why a CLI of our own next to swebench's: the same predictions can then be graded on the
official images (official.py: swebench's specs, eval scripts and log parsers, run in this
project's sandbox, with a forgery guard on the log markers) and on the embedded offline
miniature (instances that carry their repository in "files", graded by grading.py on bwrap or
docker), with one output layout: <O>/logs/run_evaluation/<R>/<model>/<instance>/{report.json,
test_output.txt, patch.diff} and the run report <O>/<model>.<R>.json (grading.run_summary).
An instance that fails to grade is that instance's error; the run goes on, and ends with exit
code 1 (a run with an errored instance is no score); 2 for a run that could not start (bad
predictions or dataset, no swebench package); 0 when every instance was graded.

Records in the data set card's schema (no eval_script) take theirs from a swebench task repo
(--task-repo, taskrepo.py); without one, each is that instance's error, by name.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path

from vtb import safefs
from vtb.domains.swe import grading, loaders, official
from vtb.sandbox.base import Limits

MINIATURE_LIMITS = Limits(wall_seconds=120.0, cpu_seconds=120.0, memory_mb=2048, max_processes=256)
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=@-]*$")


def load_predictions(path: Path) -> list[dict]:
    """Predictions from .jsonl, a .json list, or a .json {instance_id: prediction} map (SWE-agent)."""
    path = Path(path)
    if path.suffix not in (".json", ".jsonl"):
        raise ValueError(f"{path}: predictions must be a .json or .jsonl file")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data = json.loads(text)
        records = list(data.values()) if isinstance(data, dict) else data
        if not isinstance(records, list):
            raise ValueError(f"{path}: expected a JSON list of predictions")
    else:
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
    seen = set()
    for i, pred in enumerate(records):
        where = f"{path}: prediction {i}"
        if not isinstance(pred, dict) or not isinstance(pred.get("instance_id"), str):
            raise ValueError(f"{where} is not an object with a string instance_id")
        if not isinstance(pred.get("model_patch"), str | None):
            raise ValueError(f"{where} ({pred['instance_id']}): model_patch must be a string or null")
        pred.setdefault("model_name_or_path", "None")
        if not isinstance(pred["model_name_or_path"], str):
            raise ValueError(f"{where}: model_name_or_path must be a string")
        if pred["instance_id"] in seen:
            raise ValueError(f"{path}: instance_id {pred['instance_id']!r} has more than one prediction")
        seen.add(pred["instance_id"])
    return records


def model_dir_name(model: str) -> str:
    """The model's folder name as swebench writes it ('/' -> '__'), refused when not a plain name."""
    name = model.replace("/", "__")
    if not _SAFE_NAME.match(name):
        raise ValueError(f"model_name_or_path {model!r} does not make a safe folder name")
    return name


def select(
    predictions: list[dict], instances: list[dict], instance_ids: list[str] | None
) -> tuple[list[dict], list[str]]:
    """(instances to grade, ids the run report covers); unknown ids are refused with their names."""
    by_id = {i["instance_id"]: i for i in instances}
    unknown = sorted({p["instance_id"] for p in predictions} - by_id.keys())
    if unknown:
        raise ValueError(
            f"{len(unknown)} prediction(s) name instances that are not in the dataset: {' '.join(unknown)}"
        )
    if instance_ids:
        missing = sorted(set(instance_ids) - by_id.keys())
        if missing:
            raise ValueError(f"--instance-ids not in the dataset: {' '.join(missing)}")
        covered = [i for i in by_id if i in set(instance_ids)]
    else:
        covered = list(by_id)
    for iid in covered:
        if not _SAFE_NAME.match(iid):
            raise ValueError(f"instance_id {iid!r} does not make a safe folder name")
    predicted = {p["instance_id"] for p in predictions}
    return [by_id[i] for i in covered if i in predicted], covered


class Grader:
    """Grades one prediction: the embedded path for instances with "files", else the official one."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.limits = Limits(
            wall_seconds=float(args.timeout),
            cpu_seconds=float(args.cpu_seconds or 4 * args.timeout),
            memory_mb=args.memory_mb,
            max_processes=args.max_processes,
        )
        self._lock = threading.Lock()
        self._sandboxes: dict = {}

    def sandbox(self, kind: str):
        """Made on first use: "docker-native" (a Docker API client for the official images) or a backend."""
        with self._lock:
            if kind not in self._sandboxes:
                self._sandboxes[kind] = self._make(kind)
            return self._sandboxes[kind]

    def _make(self, kind: str):
        if kind == "docker-native":
            return official.docker_api()
        from vtb.sandbox import make_sandbox

        return make_sandbox(kind)

    def grade(self, instance: dict, prediction: dict, log_dir: Path) -> dict:
        iid = instance["instance_id"]
        try:
            if "files" in instance:
                return self._miniature(instance, prediction, log_dir)
            return official.grade_official(
                instance,
                prediction,
                self.sandbox("docker-native"),
                log_dir,
                self.limits,
                pull=self.args.pull,
                namespace=self.args.namespace,
                image=self.args.image,
                disk_mb=self.args.disk_mb,
                task_repo=self.args.task_repo,
            )
        except official.SwebenchMissing:
            raise
        except official.SpecError as e:  # already names the instance: said once
            return official.error_report(iid, f"{e.what}; {e.fix}")
        except Exception as e:  # noqa: BLE001 (this instance's failure, never the run's)
            return official.error_report(iid, f"{type(e).__name__}: {e}")

    def _miniature(self, instance: dict, prediction: dict, log_dir: Path) -> dict:
        patch = prediction.get("model_patch")
        log_dir.mkdir(parents=True, exist_ok=True)
        safefs.write_in(log_dir, "patch.diff", (patch or "").encode())
        limits = replace(
            MINIATURE_LIMITS, wall_seconds=min(MINIATURE_LIMITS.wall_seconds, self.limits.wall_seconds)
        )
        with tempfile.TemporaryDirectory(prefix="vtb-swe-eval-") as work:
            report, text = grading.grade(instance, patch, self.sandbox(self.args.sandbox), limits, Path(work))
        safefs.write_in(log_dir, "test_output.txt", official.cut(text).encode("utf-8", errors="replace"))
        return report


def run(args: argparse.Namespace, out=None) -> dict[str, dict]:
    """Grade, write every file, print progress and a summary; the run report per model."""
    out = out or sys.stdout
    predictions = load_predictions(Path(args.predictions))
    instances = loaders.load_instances(args.dataset, split=args.split)
    todo, covered = select(predictions, instances, args.instance_ids)
    preds = {p["instance_id"]: p for p in predictions}
    models = {p["model_name_or_path"] for p in predictions if p["instance_id"] in covered}
    names = {m: model_dir_name(m) for m in models}
    root = Path(args.output_dir)
    logs = root / "logs" / "run_evaluation" / args.run_id
    grader = Grader(args)
    reports: dict[str, dict] = {}
    print(f"grading {len(todo)} of {len(covered)} instances (run {args.run_id})", file=out, flush=True)

    def one(instance: dict) -> tuple[str, dict, float]:
        started = time.monotonic()
        pred = preds[instance["instance_id"]]
        log_dir = logs / names[pred["model_name_or_path"]] / instance["instance_id"]
        report = grader.grade(instance, pred, log_dir)
        safefs.write_in(log_dir, "report.json", (json.dumps(report, indent=4) + "\n").encode())
        return instance["instance_id"], report, time.monotonic() - started

    with ThreadPoolExecutor(max_workers=max(1, args.max_workers)) as pool:
        futures = [pool.submit(one, i) for i in todo]
        for n, future in enumerate(as_completed(futures), 1):
            iid, report, took = future.result()
            reports[iid] = report[iid]
            print(f"[{n}/{len(todo)}] {iid}: {_outcome(report[iid])} ({took:.1f} s)", file=out, flush=True)
    summaries = {}
    for model in sorted(models):
        ids = [i for i in covered if preds.get(i, {}).get("model_name_or_path", model) == model]
        mine = {i: r for i, r in reports.items() if preds[i]["model_name_or_path"] == model}
        summary = grading.run_summary(mine, ids)
        path = root / f"{names[model]}.{args.run_id}.json"
        root.mkdir(parents=True, exist_ok=True)
        safefs.write_in(root, path.name, (json.dumps(summary, indent=4) + "\n").encode())
        summaries[model] = summary
        print(_summary_text(model, summary, path), file=out, flush=True)
    return summaries


def _outcome(report: dict) -> str:
    if official.ERROR_KEY in report:
        return f"error: {report[official.ERROR_KEY]}"
    if not report["patch_exists"]:
        return "empty patch"
    if not report["patch_successfully_applied"]:
        return "error: the patch did not apply or the test log could not be graded"
    return "resolved" if report["resolved"] else "not resolved"


def _summary_text(model: str, s: dict, path: Path) -> str:
    keys = ("total", "submitted", "completed", "resolved", "unresolved", "empty_patch", "error", "incomplete")
    counts = ", ".join(f"{k} {s[f'{k}_instances']}" for k in keys)
    return f"{model}: {counts}\nrun report: {path}"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m vtb.domains.swe.evaluate", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--predictions", required=True, help=".jsonl or .json (instance_id, model_name_or_path, model_patch)"
    )
    p.add_argument(
        "--dataset", required=True, help="local .json/.jsonl/.parquet in the SWE-bench schema, or a HF name"
    )
    p.add_argument("--split", default="test")
    p.add_argument("--instance-ids", nargs="+", help="grade only these")
    p.add_argument("--max-workers", type=int, default=4)
    p.add_argument("--run-id", default=None, help="default: vtb-<time>")
    p.add_argument("--output-dir", default=".")
    p.add_argument(
        "--sandbox", choices=("bwrap", "docker"), default="bwrap", help="backend for embedded instances"
    )
    p.add_argument("--pull", action="store_true", help="docker pull a missing official image")
    p.add_argument("--namespace", default=None, help="image namespace (swebench); 'none' = local names only")
    p.add_argument("--image", default=None, help="image name for every instance ({instance_id} filled in)")
    p.add_argument(
        "--task-repo",
        default=None,
        help="swebench task repo (local folder) for records without eval_script (the data set card's schema)",
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="wall seconds per instance")
    p.add_argument("--cpu-seconds", type=float, default=None, help="CPU-seconds per instance (4 x timeout)")
    p.add_argument("--memory-mb", type=int, default=official.DEFAULT_LIMITS.memory_mb)
    p.add_argument("--max-processes", type=int, default=official.DEFAULT_LIMITS.max_processes)
    p.add_argument("--disk-mb", type=int, default=4096, help="cap on a container's writable layer")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.run_id = args.run_id or time.strftime("vtb-%Y%m%d-%H%M%SZ", time.gmtime())  # UTC, labelled
    if not _SAFE_NAME.match(args.run_id):
        print(f"error: --run-id {args.run_id!r} is not a plain name", file=sys.stderr)
        return 2
    try:
        summaries = run(args)
    except (ValueError, OSError, official.SwebenchMissing) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    errored = sorted(i for s in summaries.values() for i in s["error_ids"])
    if errored:
        print(
            f"error: {len(errored)} instance(s) could not be graded ({', '.join(errored)}): "
            "no score; each one's reason is in its report.json and above",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
