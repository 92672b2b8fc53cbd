"""The bench from a Python environment other than `<checkout>/.venv` as it is (issue 39): sandboxes
mount what the orchestrator's interpreter uses, by the paths it names them with."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BACKENDS

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import sys
from vtb.sandbox import make_sandbox, runtime_mounts
from vtb.sandbox.base import Limits
out = make_sandbox(sys.argv[1]).run(
    [sys.executable, "-c", "import sys, torch, vtb.protocol; print('inside', sys.prefix)"],
    mounts=runtime_mounts(), limits=Limits(wall_seconds=120),
)
print(out.returncode, out.stdout.strip(), out.stderr[-500:])
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_virtualenv_reached_through_a_symlink_runs_sandboxed_steps(tmp_path, backend) -> None:
    """A `.venv` that is a symlink to a virtualenv elsewhere: the interpreter runs as
    <link>/bin/python, which did not exist inside a sandbox (`bwrap: execvp ...: No such file`)."""
    from tests.conftest import sandbox_backend

    sandbox_backend(backend)  # skips (or fails under VTB_REQUIRE_DOCKER=1) without an engine
    link = tmp_path / "venv"
    link.symlink_to(os.path.realpath(sys.prefix))
    python = link / "bin" / Path(sys.executable).name
    out = subprocess.run(
        [str(python), "-c", PROBE, backend], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[:3] == ["0", "inside", str(link)], out.stdout
