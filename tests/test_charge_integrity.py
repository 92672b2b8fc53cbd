"""Budget forgery (issue 14, hole 3): no charge can be negative, non-finite or below the outside meter.

The attacks: a custom trainer/train.py writes a forged FLOPs figure to its usage file (on the
old code c34db53, {"flops": -1e14} refunded the ledger, and a string made charge_of raise), and
a CLI agent prints a result event with negative tokens and cost (charged nothing, or less).
"""

from __future__ import annotations

import json
import math

import pytest

from tests.conftest import BACKENDS, cli_turn_env, sandbox_backend
from vtb import runner
from vtb.agents import make_agent
from vtb.agents.cli_usage import parse_usage
from vtb.ledger import Charge, FlopsFloor, Ledger, checked
from vtb.sandbox.base import Limits, SandboxResult

FORGED = ["-1e14", "NaN", "Infinity", "1e400", '"not-a-number"', "[1, 2]", '{"a": 1}', "true", "1e40"]

# Writes the forged figure where the engines write theirs, burns about a CPU-second, and leaves a
# checkpoint, so the train step itself succeeds and is charged.
FORGING_TRAINER = """import os, sys, time
open(os.environ["VTB_USAGE_FILE"], "w").write('{{"flops": {value}}}')
end = time.process_time() + 1.0
while time.process_time() < end:
    pass
out = sys.argv[sys.argv.index("--out") + 1]
os.makedirs(out)
open(out + "/config.json", "w").write("{{}}")
"""


@pytest.mark.parametrize(
    "value", [-1e14, float("nan"), float("inf"), True, "1e5", None, 10**400, -0.5, 2e27, [1]]
)
def test_checked_refuses_every_bad_number(value) -> None:
    number, error = checked(value, "flops")
    assert number == 0.0 and error and error.startswith("flops:")


def test_checked_accepts_honest_numbers() -> None:
    assert checked(0, "flops") == (0.0, None) and checked(3.5e12, "flops") == (3.5e12, None)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("value", FORGED)
def test_a_forged_usage_file_is_charged_at_least_the_floor(tmp_path, backend, value) -> None:
    sandbox = sandbox_backend(backend)
    cand = tmp_path / "cand"
    for part in ("data", "trainer"):
        (cand / part).mkdir(parents=True)
    (cand / "data" / "train.jsonl").write_text("")
    (cand / "trainer" / "config.json").write_text("{}")
    (cand / "trainer" / "train.py").write_text(FORGING_TRAINER.format(value=value))
    base = tmp_path / "base"
    base.mkdir()
    out = runner.train(
        sandbox, cand, base, tmp_path / "out", seed=0, limits=Limits(wall_seconds=60, cpu_seconds=60)
    )
    assert out.ok, out.log
    charge = out.charge
    assert math.isfinite(charge.flops) and 0 <= charge.flops <= 1e27  # old code: -1e14, nan, inf or a raise
    assert charge.errors and charge.errors[0].startswith("flops:")
    assert charge.cpu_seconds >= 0.9  # metered from outside: the forgery cannot touch it

    ledger = Ledger("flops", 1e13, 3600.0, floor=FlopsFloor(cpu_rate=1e10, fraction=0.5))
    booked = ledger.charge("train", 1, Charge(**json.loads(json.dumps(charge.__dict__))))
    floor = 0.5 * 1e10 * charge.cpu_seconds
    assert booked.flops == pytest.approx(floor) and booked.flops_floor == pytest.approx(floor)
    assert booked.flops_reported == 0.0 and ledger.used() == pytest.approx(floor) and ledger.left() < 1e13
    assert "bad charge figures: flops:" in ledger.entries[0].note
    assert ledger.summary().charge_errors >= 1


def test_the_ledger_checks_again_and_never_goes_below_the_floor() -> None:
    ledger = Ledger(
        "flops", 1e12, 3600.0, floor=FlopsFloor(cpu_rate=1e9, fraction=0.1, startup_cpu_seconds=2.0)
    )
    ledger.charge("train", 0, Charge(flops=-5e13, cpu_seconds=12.0))  # built by hand, never checked
    ledger.charge("play-val", 0, Charge(flops=float("nan"), cpu_seconds=float("inf"), agent_tokens=-7))
    ledger.charge("agent", 1, Charge(flops=3e11, cpu_seconds=12.0))  # honest: above the floor
    first, second, third = (e.charge for e in ledger.entries)
    assert first.flops == pytest.approx(0.1 * 1e9 * 10.0) and first.flops_reported == 0.0
    assert second.flops == 0.0 and second.cpu_seconds == 0.0 and second.agent_tokens == 0
    assert len(second.errors) == 3
    assert third.flops == 3e11 and third.flops_floor == pytest.approx(1e9)  # charged as reported
    assert ledger.used() == pytest.approx(1e9 + 3e11)
    assert all(
        math.isfinite(v) and v >= 0 for v in ledger.summary().to_json().values() if isinstance(v, float)
    )


def test_only_the_harness_seconds_of_a_play_are_floored() -> None:
    """The model server counts its tokens (our code); the harness's seconds are what the floor watches."""
    floor = FlopsFloor(cpu_rate=1e9, fraction=0.5, startup_cpu_seconds=2.0, infer_rate=1e9)
    ledger = Ledger("flops", 1e13, 3600.0, floor=floor)
    served = Charge(flops=1e6, cpu_seconds=30.0, served_cpu_seconds=20.0)  # server 20 s + harness 10 s
    assert ledger.charge("play-val", 1, served).flops == pytest.approx(0.5 * 1e9 * (10.0 - 2.0))
    killed = Charge(flops=1e6, cpu_seconds=30.0)  # a killed server's seconds carry no exemption
    assert ledger.charge("play-val", 1, killed).flops == pytest.approx(0.5 * 1e9 * (30.0 - 2.0))
    broken = Charge(flops=1e6, cpu_seconds=5.0, served_cpu_seconds=float("inf"))  # never below 0 or NaN
    booked = ledger.charge("play-val", 1, broken)
    assert booked.flops == pytest.approx(0.5 * 1e9 * 3.0) and booked.errors


def test_under_reporting_is_stopped_where_the_floor_runs_out() -> None:
    """With flops as the unit, the FLOPs left are also a CPU cap (through the floor's rate)."""
    ledger = Ledger(
        "flops", 1e10, 3600.0, floor=FlopsFloor(cpu_rate=1e9, fraction=0.5, startup_cpu_seconds=3.0)
    )
    assert ledger.step_limits(step_cpu_cap=600).cpu_seconds == pytest.approx(3.0 + 1e10 / 5e8)
    assert (
        Ledger("flops", 1e10, 3600.0).step_limits(step_cpu_cap=600).cpu_seconds == 600
    )  # no floor: as before


def test_charge_of_never_raises_on_a_hostile_usage_dict() -> None:
    for usage in ({"flops": "not-a-number"}, {"flops": None}, {"flops": [1]}, {"flops": -1.0}, {}):
        result = SandboxResult(0, "", "", 1.0, 2.0, usage=usage)
        charge = runner.charge_of(result)
        assert charge.flops == 0.0 and charge.cpu_seconds == 2.0


def test_negative_or_junk_cli_usage_is_not_credited() -> None:
    lines = [
        '{"type": "result", "usage": {"input_tokens": 500, "output_tokens": 20}, "total_cost_usd": 0.5}',
        '{"type": "result", "usage": {"input_tokens": -1000000, "output_tokens": -5}, "total_cost_usd": -100}',
        '{"type": "result", "usage": {"input_tokens": 1e400, "output_tokens": "x"}, "total_cost_usd": NaN}',
    ]
    u = parse_usage(lines, "claude")
    assert (u.prompt, u.completion) == (500, 20)  # old code: -999500 and -5, or OverflowError
    assert u.cost_usd is None  # a bad cost: the price table prices the tokens instead
    assert len(u.errors) == 6
    hostile = [
        '{"type":"step_finish","part":{"tokens":{"input":-5000,"cache":[1]},"cost":-3}}',  # opencode
        "[" * 100000 + "]" * 100000,  # a nesting bomb
        '{"stats": {"models": {"m": {"tokens": {"prompt": "1e9", "candidates": -1}}}}}',  # gemini
        "Tokens: 99999999999999999999999999k sent, 1 received.",  # aider: absurd but finite
    ]
    for kind in ("opencode", "gemini", "aider", "claude", "codex"):
        got = parse_usage(hostile, kind)
        assert got.prompt >= 0 and got.completion >= 0 and (got.cost_usd is None or got.cost_usd >= 0)


HOSTILE_CLI = """#!/bin/bash
echo '{"type": "result", "usage": {"input_tokens": 300, "output_tokens": 10}, "total_cost_usd": 0.1}'
echo '{"type": "result", "usage": {"input_tokens": -100000000, "output_tokens": -1}, "total_cost_usd": -50}'
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cli_agent_cannot_refund_its_tokens(tmp_path, backend) -> None:
    prices = {"default": {"input": 1.0, "output": 2.0}}
    cfg, env = cli_turn_env(tmp_path, backend, HOSTILE_CLI, usage="claude", prices=prices)
    make_agent(cfg).turn(env)
    assert env.charge.agent_tokens == 310  # old code: -99999691
    assert env.charge.agent_cost_usd == pytest.approx((300 * 1.0 + 10 * 2.0) / 1e6)  # a bad cost: priced
    assert any("negative" in e for e in env.charge.errors)
    ledger = Ledger("flops", 1e13, 3600.0, floor=FlopsFloor(cpu_rate=1e9, fraction=0.1))
    booked = ledger.charge("agent", 1, env.charge)
    assert booked.agent_tokens == 310 and booked.agent_cost_usd > 0 and "negative" in ledger.entries[0].note


def test_the_floor_rate_depends_on_the_step_kind() -> None:
    floor = FlopsFloor(cpu_rate=1e9, fraction=0.5, startup_cpu_seconds=2.0, train_rate=4e9, infer_rate=2e9)
    ledger = Ledger("flops", 1e13, 3600.0, floor=floor)
    train = ledger.charge("train", 1, Charge(cpu_seconds=12.0))
    play = ledger.charge("play-val", 1, Charge(cpu_seconds=12.0))
    turn = ledger.charge("agent", 1, Charge(cpu_seconds=12.0))
    assert (train.flops, play.flops, turn.flops) == pytest.approx((2e10, 1e10, 5e9))
    small = Ledger("flops", 1e11, 3600.0, floor=floor)  # 1e11 FLOPs left: the rate turns it into seconds
    assert small.step_limits(600, "train").cpu_seconds == pytest.approx(2.0 + 1e11 / 2e9)
    assert small.step_limits(600, "infer").cpu_seconds == pytest.approx(2.0 + 1e11 / 1e9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_idle_openmp_threads_sleep_so_cpu_seconds_meter_work(backend) -> None:
    """Spinning OpenMP threads bill load as CPU-seconds (3.3x under 3x oversubscription, measured)."""
    from vtb.sandbox import runtime_mounts

    result = sandbox_backend(backend).run(
        ["sh", "-c", "echo $OMP_WAIT_POLICY"], mounts=runtime_mounts(), limits=Limits(wall_seconds=30)
    )
    assert result.stdout.strip() == "PASSIVE", result


# Runs the built-in trainer exactly as an honest candidate does, then overwrites the usage file
# the engine wrote with 0: the same work, reported as none.
UNDER_REPORTING_TRAINER = """import os, runpy, sys
sys.argv = ["sft"] + sys.argv[1:]
try:
    runpy.run_module("vtb.engine.sft", run_name="__main__")
finally:
    open(os.environ["VTB_USAGE_FILE"], "w").write('{"flops": 0}')
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_under_reporting_buys_at_most_one_over_the_floor_fraction(
    tmp_path, backend, toy_model_dir, monkeypatch
) -> None:
    """Calibrated on the base model, the floor sits under an honest train step and close to it.

    On the old calibration (a smaller toy model than the base, one rate for every kind) the same
    work reported as 0 FLOPs was charged 1/100 or less of the honest figure.
    """
    from vtb import calibrate
    from vtb.config import BudgetConfig

    monkeypatch.setattr(calibrate, "REPEATS", 1)  # one run of each probe: the assert below has slack for load
    sandbox = sandbox_backend(backend)
    system = calibrate.toy_system(tmp_path / "system", {"batch_size": 16, "max_steps": 400, "epochs": 100})
    rates = calibrate.measure(sandbox, toy_model_dir, system)
    fraction = BudgetConfig().floor_fraction
    floor = FlopsFloor(
        cpu_rate=rates["cpu_rate"],
        fraction=fraction,
        train_rate=rates["train_rate"],
        infer_rate=rates["infer_rate"],
        startup_cpu_seconds=rates["startup_cpu_seconds"],
        slack_cpu_seconds=BudgetConfig().floor_slack_cpu_seconds,
    )
    limits = Limits(wall_seconds=300, cpu_seconds=300)
    honest = runner.train(sandbox, system, toy_model_dir, tmp_path / "honest", seed=0, limits=limits)
    (system / "trainer" / "train.py").write_text(UNDER_REPORTING_TRAINER)
    forged = runner.train(sandbox, system, toy_model_dir, tmp_path / "forged", seed=0, limits=limits)
    assert honest.ok and forged.ok, (honest.log[-2000:], forged.log[-2000:])
    assert forged.charge.flops == 0 and honest.charge.flops > 0

    ledger = Ledger("flops", 1e15, 3600.0, floor=floor)
    booked_honest = ledger.charge("train", 1, honest.charge)
    booked_forged = ledger.charge("train", 2, forged.charge)
    assert booked_honest.flops == honest.charge.flops  # an honest step is charged what it reported
    # The same work reported as nothing still costs about `fraction` of the honest figure (a
    # quarter of that asserted: timed runs on a shared 2-core machine are noisy; measured 0.25 to
    # 0.6 of the honest figure here, against 0.01 with the old calibration).
    assert booked_forged.flops >= 0.25 * fraction * honest.charge.flops, (booked_forged, honest.charge, rates)


@pytest.mark.slow
def test_a_model_too_big_for_the_cpu_is_calibrated_on_the_tiny_shape_without_gpus(tmp_path) -> None:
    """A hub model (and a GPU run) gets CPU rates from the tiny shape, measured with no GPU attached."""
    from dataclasses import replace

    from vtb.build import flops_floor_calibration
    from vtb.config import BenchConfig

    cfg = BenchConfig()
    cfg = replace(
        cfg, model=replace(cfg.model, kind="hub", hub_id="Org/big"), sandbox=replace(cfg.sandbox, gpus="0")
    )
    missing = tmp_path / "no-model"  # never read: the proxy stands in for it
    found = flops_floor_calibration(cfg, tmp_path / "cache", missing, missing)
    assert "tiny model shape" in found["proxy"]
    assert (
        found["train_rate"] > 0
        and found["infer_rate"] > 0
        and found["cpu_rate"] == max(found["train_rate"], found["infer_rate"])
    )
