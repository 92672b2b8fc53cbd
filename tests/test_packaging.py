"""A wheel of the project holds everything the code reads, not only its .py files.

setuptools packs .py files by default; the kits' harness configs and proposals, the domains'
prompts and Hydra's conf/ folder are data. Without them a non-editable install (the docker images'
`pip install /opt/vtb`) imports fine and fails at its first bench."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """This checkout as a wheel, as `pip install .` would build it."""
    out = tmp_path_factory.mktemp("wheel")
    args = ["wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), "."]
    subprocess.run(
        [sys.executable, "-m", "pip", *args], cwd=ROOT, check=True, capture_output=True, timeout=300
    )
    (built,) = out.glob("*.whl")
    return built


def test_the_wheel_holds_every_tracked_file_the_code_reads(wheel) -> None:
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


def test_a_non_editable_install_run_from_elsewhere_is_refused_in_one_line(tmp_path, wheel) -> None:
    """A new user's `pip install .` into an environment of their own, then the README's command
    from another folder: its configs are found (the wheel carries conf/), and the run is refused
    at once, naming the fix, because every sandbox would see the whole package in site-packages."""
    import sysconfig

    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # the dependencies from this environment (not its editable vtb: a path line, not a site dir)
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    run = subprocess.run(
        [
            str(python),
            "-m",
            "flows.bench",
            f"runs_dir={tmp_path / 'runs'}",
            f"cache_dir={tmp_path / 'cache'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    assert "Primary config directory not found" not in run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert (
        len(lines) == 1
        and lines[0].startswith("refused: the vtb package at ")
        and "pip install -e ." in lines[0]
    )
    assert not (tmp_path / "cache").exists()  # nothing done
