"""A wheel of the project holds everything the code reads, not only its .py files.

setuptools packs .py files by default; the kits' harness configs and proposals, the domains'
prompts and Hydra's conf/ folder are data. Without them a non-editable install (the docker images'
`pip install /opt/vtb`) imports fine and fails at its first bench."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_every_tracked_file_the_code_reads(tmp_path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            ".",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(
        ["git", "ls-files", "vtb", "flows", "steps", "conf"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    data = "vibetraining_bench-0.1.0.data/data/share/vibetraining-bench/"
    missing = [f for f in tracked if f not in names and data + f not in names]
    assert not missing, missing
    assert any(n.endswith("share/vibetraining-bench/conf/bench.yaml") for n in names)
