"""The GPU check's CPU side (issue 41): the bundle builds within what a command can bring to the GPU
machine, and scripts/gpu_check.py runs its steps in --cpu mode, recording each one's pass/fail.

The whole check in --cpu mode, installed from the bundle into a fresh image-like environment, is
`scripts/gpu_bundle.sh --self-test` (about 3 minutes with the environment's downloads): run by hand.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import needs_bwrap

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


@pytest.mark.slow
def test_the_bundle_carries_a_wheel_for_every_requirement_on_both_pythons(tmp_path) -> None:
    out = tmp_path / "bundle"
    done = subprocess.run(
        ["bash", "scripts/gpu_bundle.sh", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    assert size <= 60 << 20, size  # the device tool carries 64 MiB per command, the checkout included
    wheels = [p.name for p in (out / "wheels").glob("*.whl")]
    for line in (out / "requirements.txt").read_text().split():
        name, version = line.split("==")
        stem = re.sub(r"[-_.]+", "_", name).lower()
        found = [w for w in wheels if w.lower().startswith(f"{stem}-{version}-")]
        tags = {w.split("-")[2] for w in found}
        assert found and ({"py3", "py2.py3"} & tags or {"cp311", "cp312"} <= tags), (line, found)
    assert not any(
        w.startswith(("torch-", "transformers-", "vibetraining")) for w in wheels
    )  # the image's own
    bwrap = out / "bwrap" / "bwrap"
    version = subprocess.run(
        [str(bwrap), "--version"],
        env={"LD_LIBRARY_PATH": str(out / "bwrap" / "lib")},
        capture_output=True,
        text=True,
    )
    assert version.returncode == 0 and version.stdout.startswith("bubblewrap"), version


@needs_bwrap()
def test_the_check_runs_its_steps_on_the_cpu_and_reports_each(tmp_path) -> None:
    """The sandbox, SFT and play steps for real (--cpu); the DeepSpeed and bench steps run in
    tests/test_engine_deepspeed.py and the bench tests, and in the self-test."""
    done = subprocess.run(
        [
            sys.executable,
            "scripts/gpu_check.py",
            "--out",
            str(tmp_path),
            "--cpu",
            "--only",
            "sandbox_cuda,sft,play,vllm",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    steps = {s["step"]: s for s in report["steps"]}
    assert [s["step"] for s in report["steps"]] == ["sandbox_cuda", "sft", "play", "vllm"]
    assert report["mode"] == "cpu" and report["passed"] is True and report["versions"]["torch"]
    assert steps["sandbox_cuda"]["ok"] and steps["sandbox_cuda"]["figures"]["cuda"] is False
    assert (
        steps["sft"]["ok"]
        and steps["sft"]["figures"]["device"] == "cpu"
        and steps["sft"]["figures"]["steps"] > 0
    )
    assert steps["play"]["figures"]["answered"] == steps["play"]["figures"]["episodes"] == 40
    assert (
        steps["vllm"]["ok"] is None and "not carried" in steps["vllm"]["skipped"]
    )  # vLLM is not installed here
    assert all(s["seconds"] >= 0 and (tmp_path / f"{s['step']}.log").is_file() for s in report["steps"])


def test_a_failing_step_is_recorded_and_the_next_one_still_runs(tmp_path, monkeypatch) -> None:
    import gpu_check

    def broken(c):
        raise RuntimeError("no CUDA driver")

    monkeypatch.setattr(gpu_check, "STEPS", {"first": broken, "second": lambda c: {"fine": 1}})
    monkeypatch.setattr(gpu_check, "_versions", lambda: {"torch": "x"})
    assert gpu_check.main(["--out", str(tmp_path), "--cpu"]) == 1
    report = json.loads((tmp_path / "report.json").read_text())
    first, second = report["steps"]
    assert first["ok"] is False and "no CUDA driver" in first["error"]
    assert "Traceback" in (tmp_path / "first.log").read_text()
    assert second["ok"] is True and second["figures"] == {"fine": 1} and report["passed"] is False
