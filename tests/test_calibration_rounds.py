"""The FLOPs floor's calibration repeats a round only when the first one may have been slowed by
other work on the machine (vtb/calibrate.py): one round on a quiet machine, another under load.

Was: every calibration ran REPEATS rounds (4 sandboxes, 35 s of a fresh default run on 2 cores)
to guard against load it never looked at."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from tests.conftest import sandbox_backend
from vtb import calibrate

BUSY = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"


def test_the_machine_counter_sees_another_process_work() -> None:
    """/proc/stat's busy CPU-seconds grow by at least what a child burns (the counter the quiet
    check reads); the figure is a float of seconds, not ticks."""
    before = calibrate.machine_busy_seconds()
    spent = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", BUSY.format(s=1.0)], check=True)
    after = calibrate.machine_busy_seconds()
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = (now.ru_utime - spent.ru_utime) + (now.ru_stime - spent.ru_stime)
    assert isinstance(before, float) and isinstance(after, float)
    assert child >= 0.9 and after - before >= 0.8 * child, (before, after, child)


@pytest.mark.slow
def test_a_quiet_round_is_not_repeated_and_a_loaded_one_is(tmp_path, toy_model_dir, monkeypatch) -> None:
    """A machine with nothing else running (its busy counter moved only by the round's own
    sandboxes: stood in for by a counter that stays put) measures once; a machine with a busy
    process beside the round measures again, and says how much other work it saw."""
    monkeypatch.setattr(
        calibrate, "INFER_CPU_SECONDS", 0.5
    )  # short rounds: the count is tested, not the rates
    monkeypatch.setattr(calibrate, "MIN_BUSY_CPU_SECONDS", 0.5)
    sandbox = sandbox_backend("bwrap")
    system = calibrate.toy_system(tmp_path / "system", {"batch_size": 16, "max_steps": 400, "epochs": 100})

    with monkeypatch.context() as quiet:
        quiet.setattr(calibrate, "machine_busy_seconds", lambda: 0.0)
        once = calibrate.measure(sandbox, toy_model_dir, system)
    assert len(once["points"]["train"]) == len(once["points"]["infer"]) == 1
    assert once["points"]["other_cpu_seconds"] == [0.0] and once["train_rate"] > 0

    hog = subprocess.Popen([sys.executable, "-c", BUSY.format(s=600)])
    try:
        loaded = calibrate.measure(sandbox, toy_model_dir, system)
    finally:
        hog.kill()
        hog.wait()
    points = loaded["points"]
    assert len(points["train"]) == len(points["infer"]) == calibrate.REPEATS == 2
    own = points["infer"][0]["cpu_seconds"] + points["train"][0]["cpu_seconds"]
    assert points["other_cpu_seconds"][0] >= calibrate.QUIET_SHARE * own, (points, own)


def test_an_unreadable_counter_runs_every_round(monkeypatch) -> None:
    """Where the machine's load cannot be read, nothing is assumed quiet."""
    monkeypatch.setattr(calibrate, "machine_busy_seconds", lambda: None)
    assert calibrate._other_load(None, 5.0) is None
    assert calibrate._other_load(12.0, 5.0) is None
