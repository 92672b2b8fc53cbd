import pytest

from vtb.ledger import Charge, Ledger, StepLimits


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
    assert ledger.summary()["used"] == 105


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
    assert summary["gpu_seconds"] == 101 and summary["used"] == 101 and summary["unit"] == "gpu_seconds"


def test_other_units_leave_gpu_seconds_unlimited_but_recorded():
    ledger = Ledger("flops", 100.0, cpu_cap=1000.0)
    ledger.charge("train", 0, Charge(flops=10, gpu_seconds=5000))
    assert ledger.step_limits(step_cpu_cap=50).gpu_seconds is None and ledger.gpu_left() is None
    assert not ledger.exhausted() and ledger.summary()["gpu_seconds"] == 5000
