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


@pytest.mark.parametrize("cores", [1, 2])
def test_the_two_probes_run_side_by_side_where_there_are_cores_for_both(tmp_path, monkeypatch, cores) -> None:
    """A round's inference probe and training probe each meter their own CPU-seconds, so on a
    machine with a core for each they run at once (a fresh default run's calibration: 18 s one
    after the other, 9.4 s side by side, the same rates within the rounds' spread); with one core
    they run one after the other, as before."""
    import json
    import time
    from types import SimpleNamespace

    from vtb import runner

    spans: dict[str, list[float]] = {}

    def timed(name: str, out):
        start = time.monotonic()
        time.sleep(0.3)
        spans[name] = [start, time.monotonic()]
        return out

    charge = SimpleNamespace(flops=1e9, cpu_seconds=5.0)
    infer = SimpleNamespace(stdout=json.dumps({"work_cpu_seconds": 1.5}), charge=charge)
    monkeypatch.setattr(calibrate, "_run", lambda *a: timed("infer", infer))
    trained = SimpleNamespace(charge=SimpleNamespace(flops=1e10, cpu_seconds=10.0))  # long enough to time
    monkeypatch.setattr(calibrate, "_train", lambda *a: timed("train", trained))
    monkeypatch.setattr(runner, "charge_of", lambda result: result.charge)
    monkeypatch.setattr(calibrate, "machine_busy_seconds", lambda: 0.0)
    monkeypatch.setattr(calibrate, "_cores", lambda: cores)
    system = calibrate.toy_system(tmp_path / "system", {"batch_size": 16})
    found = calibrate.measure(SimpleNamespace(threads=1), tmp_path, system)
    overlap = min(spans["infer"][1], spans["train"][1]) - max(spans["infer"][0], spans["train"][0])
    assert (overlap > 0.1) == (cores == 2), spans
    assert found["startup_cpu_seconds"] == 3.5 and len(found["points"]["train"]) == 1
