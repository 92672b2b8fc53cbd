"""What the orchestrator spends on a trained checkpoint is bounded by the model's own size.

A hostile trainer (its own trainer/train.py, in the research sandbox of each backend) writes a
checkpoint with a 200 MB torch-pickled "optimizer state", a pickle whose loading would plant a
marker, 150 MB of junk, and a mostly-hole safetensors shard (100 MB or 3 GB apparent). The host side (the take-in of vtb/runner.py and the null model of
vtb/blind.py) runs in a child process whose peak RSS and written blocks are measured. Was: the
pickle was torch.load-ed and permuted in the orchestrator (0.45 -> 2.40 GB RSS for 200 MB), and
a sparse shard was written out in full twice (the cache copy and the null model's); then, with
sparse-aware copies, the null model's shuffle still expanded it to its apparent size.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import BACKENDS

ROOT = Path(__file__).resolve().parents[1]
MB = 1 << 20

TRAINER = """
import os, shutil, sys
import torch
out = sys.argv[sys.argv.index("--out") + 1]
os.makedirs(out)
for name in ("config.json", "model.safetensors"):
    shutil.copy("/base/" + name, out)
torch.save({{"exp_avg": torch.randn(50 * 1024 * 1024)}}, out + "/optimizer.pt")  # 200 MB
shutil.copy("/ws/trainer/planted.pkl", out + "/rng_state.pth")  # unpickling it makes a marker folder
with open(out + "/training_args.bin", "wb") as f:  # 150 MB of junk, every byte written
    f.write(os.urandom(150 * 1024 * 1024))
with open(out + "/model-extra.safetensors", "wb") as f:  # {BYTES} bytes apparent, 4 KB written
    header = b'{{"x": {{"dtype": "F32", "shape": [{N}], "data_offsets": [0, {BYTES}]}}}}'
    f.write(len(header).to_bytes(8, "little") + header + b"\\1" * 4096)
    f.truncate(8 + len(header) + {BYTES})  # a hole up to {BYTES} bytes
"""

HOST = """
import json, os, sys
from pathlib import Path
from vtb import runner
from vtb.blind import null_model
from vtb.config import SandboxConfig
from vtb.pipeline import checkpoint_caps
from vtb.sandbox.base import Limits

cand, base, out, cache, backend = map(Path, sys.argv[1:6])
caps = checkpoint_caps(SandboxConfig(), base)
outcome = runner.train(runner.sandbox_for(SandboxConfig(backend=str(backend))), cand, base, out, seed=0,
                       limits=Limits(wall_seconds=240, cpu_seconds=240), checkpoint_caps=caps)
blocks = {}
if outcome.ok:
    null = null_model(out / "checkpoint", cache, b"k" * 32)
    for root in (out / "checkpoint", null):
        blocks[str(root)] = sum(p.stat().st_blocks * 512 for p in root.rglob("*") if p.is_file())
# VmHWM: this process's peak RSS since its exec (ru_maxrss would carry pytest's over the exec)
hwm_kb = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM"))
print(json.dumps({"ok": outcome.ok, "summary": outcome.summary, "blocks": blocks, "cap": caps.max_bytes,
                  "rss_mb": hwm_kb / 1024,
                  "unpickled": os.path.exists(sys.argv[6])}))
"""


def _base(root: Path) -> Path:
    import numpy as np
    from safetensors.numpy import save_file

    base = root / "base"
    base.mkdir()
    (base / "config.json").write_text('{"model_type": "gpt2"}')
    save_file({"w": np.ones((64, 64), dtype=np.float32)}, str(base / "model.safetensors"))
    return base


class _Planted:
    """A pickle whose loading (any unpickler that runs reduce calls, torch.load's legacy path) makes a folder."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _run(tmp_path: Path, backend: str, shard_bytes: int) -> dict:
    cand = tmp_path / "cand"
    for part in ("data", "trainer", "harness"):
        (cand / part).mkdir(parents=True)
    marker = tmp_path / "unpickled"
    trainer = TRAINER.format(N=shard_bytes // 4, BYTES=shard_bytes)
    (cand / "trainer" / "train.py").write_text(trainer)
    (cand / "trainer" / "planted.pkl").write_bytes(pickle.dumps(_Planted(str(marker))))
    (cand / "trainer" / "config.json").write_text("{}")
    (cand / "data" / "train.jsonl").write_text("")
    args = [cand, _base(tmp_path), tmp_path / "ck", tmp_path / "cache", backend, marker]
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(HOST), *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    print(
        f"\n[{backend}] peak RSS {got['rss_mb']:.0f} MB, blocks written {sum(got['blocks'].values()) / MB:.2f} MB"
    )
    return got


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_junk_and_pickles_are_never_opened_and_cost_the_host_nothing(tmp_path, backend):
    """Was: optimizer.pt torch.load-ed and permuted (0.45 -> 2.40 GB RSS for 200 MB), junk stored."""
    got = _run(tmp_path, backend, shard_bytes=4096)
    assert got["ok"], got["summary"]
    dropped = got["summary"]["dropped"]
    for name in ("optimizer.pt", "rng_state.pth", "training_args.bin"):
        assert f"{name} (not kept)" in dropped, dropped  # never opened, never unpickled, never stored
    assert not got["unpickled"]
    copy, null = got["blocks"].values()
    assert copy < 1 * MB and null < 1 * MB  # the model's own files only
    assert got["rss_mb"] < 700, got  # python, numpy and the sandbox client; no pickle, no permutation


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sparse_shard_is_refused_not_expanded_on_the_host(tmp_path, backend):
    """Was: a 100 MB mostly-hole shard (4 KB allocated, under the cap) was taken in, and the null
    model's shuffle wrote it out in full on the host."""
    got = _run(tmp_path, backend, shard_bytes=100 * MB)
    assert not got["ok"] and "model-extra.safetensors is a sparse file" in got["summary"]["rejected"], got
    assert got["blocks"] == {}, got


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_checkpoint_far_over_the_models_size_fails_its_train_step_only(tmp_path, backend):
    got = _run(tmp_path, backend, shard_bytes=3 << 30)
    assert not got["ok"] and "checkpoint rejected" in got["summary"]["rejected"]
    assert "is over 256 MB" in got["summary"]["rejected"]  # 4 x 16 KB of base weights + 256 MB
    assert got["blocks"] == {}, got
