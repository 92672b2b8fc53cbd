"""GPU-seconds: the NVML meter, its use by both sandbox backends, and the budget unit built on it.

There is no GPU here, so NVML is replaced by fake readers: one with a fixed schedule of GPU
holders (meter arithmetic), and one that reports as holding GPU 0 every host process whose
command line carries a marker (real sandboxes, real pids, metered from outside as NVML would).
"""

from __future__ import annotations

import os
import sys
import uuid

import pytest

from tests.conftest import BACKENDS, sandbox_backend
from vtb.ledger import check_budget
from vtb.sandbox import Limits, runtime_mounts
from vtb.sandbox import gpu as gpumod
from vtb.sandbox.gpu import GpuMeter, parse_gpus
from vtb.sandbox.monitor import POLL_S

PY = sys.executable


class ScheduleReader:
    """Holders and utilization per device, set by the test between samples."""

    def __init__(self, n: int = 2) -> None:
        self.n = n
        self.holders: dict[int, set[int]] = {i: set() for i in range(n)}
        self.util: dict[int, float] = dict.fromkeys(range(n), 0.0)
        self.fail = False

    def device_count(self) -> int:
        return self.n

    def compute_pids(self, index: int) -> set[int]:
        if self.fail:
            raise RuntimeError("NVML went away")
        return set(self.holders[index])

    def utilization(self, index: int) -> float:
        return self.util[index]


class MarkerReader:
    """GPU 0 (of `n`) is 'held' by every host process whose /proc/<pid>/cmdline contains `marker`."""

    def __init__(self, marker: str, n: int = 2) -> None:
        self.marker, self.n = marker.encode(), n

    def device_count(self) -> int:
        return self.n

    def compute_pids(self, index: int) -> set[int]:
        if index != 0:
            return set()
        pids = set()
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/cmdline", "rb") as f:
                        if self.marker in f.read():
                            pids.add(int(name))
                except OSError:
                    pass
        return pids

    def utilization(self, index: int) -> float:
        return 100.0


# -- the meter on fixed sample sequences -------------------------------------------------------


def test_a_gpu_held_throughout_is_charged_its_full_span():
    reader = ScheduleReader(1)
    meter = GpuMeter(reader, [0], started=10.0)
    reader.holders[0] = {5}
    for t in (10.2, 10.4, 10.6, 10.8, 11.0):
        meter.sample({5, 6}, t)
    assert meter.gpu_seconds == pytest.approx(1.0)
    reader.holders[0] = set()  # the process is gone: the last interval still counts (held at its start)
    meter.sample(set(), 11.2)
    assert meter.gpu_seconds == pytest.approx(1.2) and meter.devices_used == {0}


def test_a_gap_without_the_gpu_is_not_charged():
    reader = ScheduleReader(1)
    meter = GpuMeter(reader, [0], started=0.0)
    for t, held in [(0.2, True), (0.4, False), (0.6, False), (0.8, True), (1.0, True)]:
        reader.holders[0] = {7} if held else set()
        meter.sample({7}, t)
    # [0, .2] held at its end, [.2, .4] at its start, [.4, .6] never, [.6, 1] at both ends
    assert meter.gpu_seconds == pytest.approx(0.2 + 0.2 + 0.4)


def test_other_processes_on_the_gpu_are_not_charged_to_the_step():
    reader = ScheduleReader(1)
    reader.holders[0] = {999}
    meter = GpuMeter(reader, [0], started=0.0)
    for t in (0.5, 1.0):
        meter.sample({5}, t)
    assert meter.gpu_seconds == 0.0 and meter.devices_used == set()


def test_two_gpus_count_twice_and_busy_seconds_weight_by_utilization():
    reader = ScheduleReader(2)
    reader.holders = {0: {5}, 1: {6}}
    reader.util = {0: 50.0, 1: 100.0}
    meter = GpuMeter(reader, [0, 1], started=0.0)
    meter.sample({5, 6}, 1.0)
    meter.sample({5, 6}, 2.0)
    assert meter.gpu_seconds == pytest.approx(4.0) and meter.devices_used == {0, 1}
    assert meter.busy_seconds == pytest.approx(2 * 0.5 + 2 * 1.0)


def test_without_a_start_the_first_sample_only_sets_the_baseline():
    reader = ScheduleReader(1)
    reader.holders[0] = {5}
    meter = GpuMeter(reader, [0])
    meter.sample({5}, 3.0)
    assert meter.gpu_seconds == 0.0
    meter.sample({5}, 3.5)
    assert meter.gpu_seconds == pytest.approx(0.5)


def test_a_failing_nvml_query_keeps_the_last_state_and_never_raises():
    reader = ScheduleReader(1)
    reader.holders[0] = {5}
    meter = GpuMeter(reader, [0], started=0.0)
    meter.sample({5}, 1.0)
    reader.fail = True
    meter.sample({5}, 2.0)  # unknown: still held, as last seen
    assert meter.gpu_seconds == pytest.approx(2.0)


# -- sandbox.gpus and NVML ---------------------------------------------------------------------


def test_parse_gpus():
    reader = ScheduleReader(3)
    assert parse_gpus(None) is None and parse_gpus("") is None
    assert parse_gpus("all", reader) == [0, 1, 2]
    assert parse_gpus("0,2", reader) == [0, 2] and parse_gpus(" 1 ") == [1] and parse_gpus(0) == [0]
    for bad in ("gpu0", "0,,1", "-1", "1.5", "0,0"):
        with pytest.raises(ValueError, match="sandbox.gpus"):
            parse_gpus(bad, reader)
    with pytest.raises(ValueError, match="NVML sees 3"):
        parse_gpus("3", reader)
    with pytest.raises(ValueError, match="no GPU"):
        parse_gpus("all", ScheduleReader(0))


def test_without_pynvml_the_error_names_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # as if nvidia-ml-py were not installed
    with pytest.raises(RuntimeError, match="nvidia-ml-py") as e:
        gpumod.PynvmlReader()
    assert "sandbox.gpus" in str(e.value)


# -- real sandboxes, metered from outside ------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def backend_name(request) -> str:
    return request.param


def gpu_sandbox(name: str, reader, monkeypatch, gpus: str = "0"):
    """A sandbox of `name` given GPU `gpus` and the fake reader (docker: without the device request,
    which needs the NVIDIA container toolkit; the metering under test is the host side)."""
    if name == "docker":
        from vtb.sandbox import docker as dk

        original = dk.DockerSandbox.host_config

        def without_device_request(self, *args):
            config = original(self, *args)
            config.pop("DeviceRequests", None)
            return config

        monkeypatch.setattr(dk.DockerSandbox, "host_config", without_device_request)
    return sandbox_backend(name, gpus=gpus, gpu_reader=reader)


def _marked(marker: str, seconds: float) -> list[str]:
    return [PY, "-c", f"import time; time.sleep({seconds})", marker]


def test_a_process_holding_a_gpu_is_charged_its_wall_time(backend_name, monkeypatch):
    marker = f"vtb-gpu-user-{uuid.uuid4().hex}"
    sandbox = gpu_sandbox(backend_name, MarkerReader(marker), monkeypatch)
    result = sandbox.run(_marked(marker, 1.5), mounts=runtime_mounts(), limits=Limits(wall_seconds=30))
    assert result.returncode == 0 and result.killed is None
    assert result.wall_seconds >= 1.5
    assert result.wall_seconds - 2 * POLL_S - 0.2 <= result.gpu_seconds <= result.wall_seconds + 0.05
    assert result.gpu_busy_seconds == pytest.approx(result.gpu_seconds)  # the fake reports 100 %


def test_only_the_span_a_gpu_was_held_is_charged(backend_name, monkeypatch):
    """Sleeps 1 s without a GPU, then execs into a marked process that holds one for 1 s."""
    marker = f"vtb-gpu-user-{uuid.uuid4().hex}"
    head, tail = marker[:8], marker[8:]  # the marker only ever appears in the exec'd child
    code = (
        "import os, sys, time; time.sleep(1.0); "
        "os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(1.0)', "
        "sys.argv[1] + sys.argv[2]])"
    )
    sandbox = gpu_sandbox(backend_name, MarkerReader(marker), monkeypatch)
    result = sandbox.run(
        [PY, "-c", code, head, tail], mounts=runtime_mounts(), limits=Limits(wall_seconds=30)
    )
    assert result.returncode == 0 and result.killed is None and result.wall_seconds >= 2.0
    assert 0.95 <= result.gpu_seconds <= 1.0 + 3 * POLL_S + 0.3
    assert result.gpu_seconds < result.wall_seconds - 0.5


def test_an_unmarked_process_is_charged_nothing_even_under_a_zero_gpu_limit(backend_name, monkeypatch):
    marker = f"vtb-gpu-user-{uuid.uuid4().hex}"
    sandbox = gpu_sandbox(backend_name, MarkerReader(marker), monkeypatch)
    limits = Limits(wall_seconds=30, gpu_seconds=0.0)
    result = sandbox.run([PY, "-c", "import time; time.sleep(0.8)"], mounts=runtime_mounts(), limits=limits)
    assert result.returncode == 0 and result.killed is None and result.gpu_seconds == 0.0


def test_the_gpu_seconds_limit_kills_the_tree(backend_name, monkeypatch):
    marker = f"vtb-gpu-user-{uuid.uuid4().hex}"
    sandbox = gpu_sandbox(backend_name, MarkerReader(marker), monkeypatch)
    limits = Limits(wall_seconds=30, gpu_seconds=0.5)
    result = sandbox.run(_marked(marker, 10), mounts=runtime_mounts(), limits=limits)
    assert result.killed == "gpu" and result.returncode != 0
    assert 0.5 < result.gpu_seconds < 3.0 and result.wall_seconds < 5.0


# -- bwrap: device nodes and CUDA_VISIBLE_DEVICES ----------------------------------------------


def test_bwrap_gpus_without_device_nodes_still_start(monkeypatch, tmp_path):
    from vtb.sandbox import bwrap as bw

    monkeypatch.setattr(bw, "DEV_DIR", str(tmp_path))  # an empty /dev: a host without NVIDIA nodes
    sandbox = sandbox_backend("bwrap", gpus="1", gpu_reader=ScheduleReader(2))
    script = 'echo "cvd=$CUDA_VISIBLE_DEVICES order=$CUDA_DEVICE_ORDER"; ls /dev'
    result = sandbox.run(["/bin/sh", "-c", script], mounts=runtime_mounts(), limits=Limits(wall_seconds=30))
    assert result.returncode == 0, result.stderr
    assert "cvd=1 order=PCI_BUS_ID" in result.stdout and "nvidia" not in result.stdout


def test_bwrap_binds_the_selected_gpus_nodes_only(monkeypatch, tmp_path):
    from vtb.sandbox import bwrap as bw

    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):  # stand-ins for the device nodes
        (tmp_path / name).write_text(name)
    monkeypatch.setattr(bw, "DEV_DIR", str(tmp_path))
    sandbox = sandbox_backend("bwrap", gpus="1", gpu_reader=ScheduleReader(2))
    result = sandbox.run(
        ["/bin/sh", "-c", "ls /dev; cat /dev/nvidia1"],
        mounts=runtime_mounts(),
        limits=Limits(wall_seconds=30),
    )
    assert result.returncode == 0, result.stderr
    listed = result.stdout.split()
    assert {"nvidia1", "nvidiactl", "nvidia-uvm"} <= set(listed) and "nvidia0" not in listed
    assert listed[-1] == "nvidia1"  # the host node's content: a bind, not an empty placeholder


def test_bwrap_without_gpus_has_no_nvidia_nodes_and_never_touches_nvml(monkeypatch, tmp_path):
    from vtb.sandbox import bwrap as bw
    from vtb.sandbox import gpu as gpu_module

    (tmp_path / "nvidia0").write_text("x")
    monkeypatch.setattr(bw, "DEV_DIR", str(tmp_path))
    monkeypatch.setitem(sys.modules, "pynvml", None)  # any import of pynvml would fail

    def no_nvml():
        raise AssertionError("NVML was used without sandbox.gpus")

    monkeypatch.setattr(gpu_module, "default_reader", no_nvml)  # where every backend gets its reader
    sandbox = sandbox_backend("bwrap")
    result = sandbox.run(
        ["/bin/sh", "-c", 'ls /dev; echo "cvd=${CUDA_VISIBLE_DEVICES-unset}"'],
        mounts=runtime_mounts(),
        limits=Limits(wall_seconds=30, gpu_seconds=0.0),
    )
    assert result.returncode == 0 and result.gpu_seconds == 0.0
    assert "nvidia" not in result.stdout and "cvd=unset" in result.stdout


def test_bad_gpu_specs_fail_when_the_sandbox_is_made():
    for spec, match in (("0,x", "device indices"), ("2", "NVML sees 2")):
        with pytest.raises(ValueError, match=match):
            sandbox_backend("bwrap", gpus=spec, gpu_reader=ScheduleReader(2))


# -- the budget unit ---------------------------------------------------------------------------


def test_a_gpu_budget_without_sandbox_gpus_fails_at_run_start(tmp_path):
    check_budget("gpu_seconds", "all")
    check_budget("flops", None)
    with pytest.raises(ValueError, match="sandbox.gpus=all") as e:
        check_budget("gpu_seconds", None)
    assert "budget.unit=flops" in str(e.value)

    from flows.bench import run_bench
    from tests.conftest import small_config
    from vtb.bench import Bench, plain_steps

    cfg = small_config(tmp_path, "noop", 0, "budget=h100_10h")
    assert cfg.budget.unit == "gpu_seconds" and cfg.sandbox.gpus is None
    with pytest.raises(ValueError, match="sandbox.gpus"):
        run_bench(cfg)  # before any Prefect or sandbox work
    with pytest.raises(ValueError, match="sandbox.gpus"):
        Bench(cfg, plain_steps())  # the flow itself (a sweep calls it without run_bench)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()


def test_charge_of_a_sandbox_result_carries_gpu_seconds():
    from vtb.runner import charge_of
    from vtb.sandbox import SandboxResult

    result = SandboxResult(0, "", "", wall_seconds=3.0, cpu_seconds=1.0, gpu_seconds=2.5)
    assert charge_of(result).gpu_seconds == 2.5


def test_a_steps_gpu_seconds_limit_reaches_its_sandbox_limits():
    from vtb import pipeline
    from vtb.config import SandboxConfig
    from vtb.ledger import StepLimits

    assert pipeline.step_limits(SandboxConfig(), StepLimits(None, 10.0, 7.5)).gpu_seconds == 7.5
    assert pipeline.step_limits(SandboxConfig(), StepLimits(1e9, 10.0)).gpu_seconds is None


# -- bwrap: sysfs and /dev/nvidia-uvm for CUDA and NVML ----------------------------------------


def _fake_host(tmp_path, monkeypatch, nodes=("nvidia0", "nvidia2", "nvidiactl", "nvidia-uvm")):
    """A fake /dev and /sys for the bwrap backend: the NVIDIA nodes given, sysfs with two nvidia
    modules, another module and the subtrees a GPU sandbox must NOT get (fs, kernel, firmware)."""
    from vtb.sandbox import bwrap as bw

    dev, sys_dir = tmp_path / "dev", tmp_path / "sys"
    dev.mkdir()
    for name in nodes:
        (dev / name).write_text(name)
    for d in ("module/nvidia", "module/nvidia_uvm", "module/loop", "bus/pci/devices", "devices/system/node"):
        (sys_dir / d).mkdir(parents=True)
    for d in ("class", "dev", "fs/cgroup", "kernel/debug", "firmware"):
        (sys_dir / d).mkdir(parents=True)
    monkeypatch.setattr(bw, "DEV_DIR", str(dev))
    monkeypatch.setattr(bw, "SYS_DIR", str(sys_dir))
    return dev, sys_dir


def _pairs(cmd: list[str], flag: str) -> set[tuple[str, str]]:
    return {(cmd[i + 1], cmd[i + 2]) for i, a in enumerate(cmd) if a == flag}


def test_a_gpu_sandboxs_command_binds_what_cuda_and_nvml_read(monkeypatch, tmp_path):
    dev, sys_dir = _fake_host(tmp_path, monkeypatch)
    gpu = sandbox_backend("bwrap", gpus="2", gpu_reader=ScheduleReader(3))
    cmd = gpu.command(["true"], runtime_mounts(), "/", tmp_path)
    ro = _pairs(cmd, "--ro-bind")
    expected = {
        (str(sys_dir / rel), f"/sys/{rel}")
        for rel in ("module/nvidia", "module/nvidia_uvm", "bus", "class", "dev", "devices")
    }
    assert expected <= ro  # read-only: a sandbox running as the host's root cannot write a knob
    sys_targets = {t for _, t in ro | _pairs(cmd, "--bind") if t.startswith("/sys")}
    assert sys_targets == {t for _, t in expected}  # no /sys/fs (cgroups), /sys/kernel, other modules
    assert _pairs(cmd, "--dev-bind") == {
        (str(dev / n), f"/dev/{n}") for n in ("nvidiactl", "nvidia-uvm", "nvidia2")
    }

    plain = sandbox_backend("bwrap").command(["true"], runtime_mounts(), "/", tmp_path)
    assert not [a for a in plain if a.startswith("/sys") or "nvidia" in a]  # no GPU: no /sys at all


def test_a_gpu_sandbox_sees_sysfs_read_only_and_a_plain_one_none(monkeypatch, tmp_path):
    """Real bwrap runs with the host's real /sys: the binds are accepted unprivileged."""
    from vtb.sandbox import bwrap as bw

    monkeypatch.setattr(bw, "DEV_DIR", str(tmp_path))  # no NVIDIA nodes here: only the /sys part is tested
    script = 'ls /sys; awk \'$5 ~ "^/sys" {print "mount", $5, $6}\' /proc/self/mountinfo'
    gpu = sandbox_backend("bwrap", gpus="0", gpu_reader=ScheduleReader(1))
    seen = gpu.run(["/bin/sh", "-c", script], mounts=runtime_mounts(), limits=Limits(wall_seconds=30))
    assert seen.returncode == 0, seen.stderr
    mounts = [line.split()[1:] for line in seen.stdout.splitlines() if line.startswith("mount ")]
    listed = {line for line in seen.stdout.splitlines() if not line.startswith("mount ")}
    assert {"bus", "class", "dev", "devices"} <= listed and not {"fs", "kernel", "firmware"} & listed
    assert {"/sys/bus", "/sys/devices"} <= {m[0] for m in mounts}
    assert all(opts.split(",")[0] == "ro" for _, opts in mounts), mounts  # every sysfs mount read-only
    plain = sandbox_backend("bwrap").run(
        ["/bin/sh", "-c", "ls /sys"], mounts=runtime_mounts(), limits=Limits(wall_seconds=30)
    )
    assert plain.returncode != 0 and plain.stdout == ""


def _modprobe(tmp_path, dev, creates: bool) -> str:
    """A stand-in for nvidia-modprobe that records its arguments and (maybe) makes the uvm nodes."""
    script = tmp_path / "nvidia-modprobe"
    make = f'touch "{dev}/nvidia-uvm" "{dev}/nvidia-uvm-tools"' if creates else "exit 1"
    script.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/modprobe-args"\n{make}\n')
    script.chmod(0o755)
    return str(script)


def test_a_missing_nvidia_uvm_is_created_before_binding(monkeypatch, tmp_path):
    from vtb.sandbox import bwrap as bw

    dev, _ = _fake_host(tmp_path, monkeypatch, nodes=("nvidia0", "nvidiactl"))
    monkeypatch.setattr(bw, "NVIDIA_MODPROBE", _modprobe(tmp_path, dev, creates=True))
    sandbox = sandbox_backend("bwrap", gpus="0", gpu_reader=ScheduleReader(1))
    assert (tmp_path / "modprobe-args").read_text().split() == ["-u", "-c=0"]
    bound = {t for _, t in _pairs(sandbox.command(["true"], [], "/", tmp_path), "--dev-bind")}
    assert {"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl", "/dev/nvidia0"} == bound


def test_a_missing_nvidia_uvm_that_cannot_be_made_fails_naming_the_fix(monkeypatch, tmp_path):
    from vtb.sandbox import bwrap as bw

    dev, _ = _fake_host(tmp_path, monkeypatch, nodes=("nvidia0", "nvidiactl"))
    monkeypatch.setattr(bw, "NVIDIA_MODPROBE", str(tmp_path / "no-such-nvidia-modprobe"))
    with pytest.raises(RuntimeError, match=r"nvidia-modprobe -u -c=0") as e:
        sandbox_backend("bwrap", gpus="0", gpu_reader=ScheduleReader(1))
    assert "nvidia-uvm is missing" in str(e.value)
    monkeypatch.setattr(bw, "NVIDIA_MODPROBE", _modprobe(tmp_path, dev, creates=False))
    with pytest.raises(RuntimeError, match="did not create"):
        sandbox_backend("bwrap", gpus="0", gpu_reader=ScheduleReader(1))
    sandbox_backend("bwrap")  # without GPUs nothing about NVIDIA is checked
