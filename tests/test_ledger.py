import json
from dataclasses import asdict

import pytest

from vtb.agents import Feedback
from vtb.ledger import Charge, FlopsFloor, Ledger, StepLimits


def test_ledger_charges_and_enforces_the_configured_unit():
    ledger = Ledger("flops", 100.0, cpu_cap=50.0)
    ledger.charge("train", 0, Charge(flops=60, cpu_seconds=5))
    assert ledger.left() == 40
    assert ledger.step_limits(step_cpu_cap=1000) == (
        40,
        45,
        None,
    )  # no GPU-seconds limit unless they are the unit
    ledger.charge("play-val", 0, Charge(flops=45, cpu_seconds=1))
    assert ledger.exhausted() and ledger.left() == 0
    assert ledger.summary().used == 105


def test_cpu_seconds_are_a_hard_cap_even_when_flops_are_the_unit():
    ledger = Ledger("flops", 1e12, cpu_cap=10.0)
    ledger.charge("train", 0, Charge(flops=1, cpu_seconds=11))
    assert ledger.exhausted()
    assert ledger.step_limits(step_cpu_cap=1000)[1] == 0


def test_cpu_seconds_unit_limits_the_step():
    ledger = Ledger("cpu_seconds", 30.0, cpu_cap=100.0)
    ledger.charge("train", 0, Charge(cpu_seconds=10))
    assert ledger.step_limits(step_cpu_cap=1000) == (None, 20, None)


def test_bad_unit_is_a_clear_error():
    with pytest.raises(ValueError, match="budget.unit"):
        Ledger("dollars", 1.0, 1.0)


def test_gpu_seconds_as_the_budget_unit():
    ledger = Ledger("gpu_seconds", 100.0, cpu_cap=1000.0)
    assert ledger.step_limits(step_cpu_cap=50) == StepLimits(None, 50, 100)
    ledger.charge("train", 0, Charge(flops=1e15, cpu_seconds=30, gpu_seconds=70))
    assert ledger.left() == 30 and ledger.gpu_left() == 30 and not ledger.exhausted()
    limits = ledger.step_limits(step_cpu_cap=50)
    assert limits.gpu_seconds == 30 and limits.max_flops is None and limits.cpu_seconds == 50
    ledger.charge("play-val", 0, Charge(gpu_seconds=31))
    assert ledger.exhausted() and ledger.step_limits(step_cpu_cap=50).gpu_seconds == 0
    summary = ledger.summary()
    assert (summary.gpu_seconds, summary.used, summary.unit) == (101, 101, "gpu_seconds")


def test_other_units_leave_gpu_seconds_unlimited_but_recorded():
    ledger = Ledger("flops", 100.0, cpu_cap=1000.0)
    ledger.charge("train", 0, Charge(flops=10, gpu_seconds=5000))
    assert ledger.step_limits(step_cpu_cap=50).gpu_seconds is None and ledger.gpu_left() is None
    assert not ledger.exhausted() and ledger.summary().gpu_seconds == 5000


def test_the_summary_is_typed_and_its_json_keeps_the_shape_agents_and_records_read():
    """Agents are shown the summary as JSON and iterations/NN.json records it as budget_after:
    the typed summary must give the same keys in the same order, and the turn's cache key (built
    from `asdict` of the feedback) must see the same dict, so cached turns still hit."""
    floor = FlopsFloor(cpu_rate=1e9, fraction=0.5)
    ledger = Ledger("flops", 1e13, 3600.0, floor=floor)
    ledger.charge("train", 0, Charge(flops=2e12, cpu_seconds=3.0, agent_tokens=5))
    summary = ledger.summary()
    assert list(summary.to_json()) == [
        "unit", "limit", "used", "left", "flops", "cpu_seconds", "cpu_seconds_cap", "gpu_seconds",
        "agent_tokens", "agent_cost_usd", "flops_reported", "flops_floor", "floor", "charge_errors",
    ]  # fmt: skip
    assert summary.to_json()["floor"] == asdict(floor) and summary.left == 8e12
    assert summary.percent_used() == 20.0 and summary.cpu_seconds_cap == 3600.0
    fb = Feedback("math", 1, 2, 0, budget=summary)
    shown = json.loads(json.dumps(fb.to_json()))
    assert shown["budget"] == summary.to_json() and asdict(fb)["budget"] == summary.to_json()
    assert Feedback("math", 1, 2, 0).to_json()["budget"] == {}  # no ledger: nothing to show
