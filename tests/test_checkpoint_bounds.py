"""What the orchestrator spends on a trained checkpoint is bounded by the model's own size.

A hostile trainer (its own trainer/train.py, in the research sandbox of each backend) writes a
checkpoint with a 200 MB torch-pickled "optimizer state" and a mostly-hole safetensors shard, or
a 3 GB sparse one. The host side (the take-in of vtb/runner.py and the null model of
vtb/blind.py) runs in a child process whose peak RSS and written blocks are measured. Was: the
pickle was torch.load-ed and permuted in the orchestrator (0.45 -> 2.40 GB RSS for 200 MB), and
a sparse shard was written out in full twice (the cache copy and the null model's).
"""

from __future__ import annotations

import json
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
with open(out + "/model-extra.safetensors", "wb") as f:  # {SHARD_MB} MB apparent, one block written
    header = b'{{"x": {{"dtype": "F32", "shape": [{N}], "data_offsets": [0, {BYTES}]}}}}'
    f.write(len(header).to_bytes(8, "little") + header + b"\\1" * 4096)
    f.truncate(8 + len(header) + {BYTES})
"""

HOST = """
import json, resource, sys
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
print(json.dumps({"ok": outcome.ok, "summary": outcome.summary, "blocks": blocks, "cap": caps.max_bytes,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _base(root: Path) -> Path:
    import numpy as np
    from safetensors.numpy import save_file

    base = root / "base"
    base.mkdir()
    (base / "config.json").write_text('{"model_type": "gpt2"}')
    save_file({"w": np.ones((64, 64), dtype=np.float32)}, str(base / "model.safetensors"))
    return base


def _run(tmp_path: Path, backend: str, shard_mb: int) -> dict:
    n = shard_mb * MB // 4
    cand = tmp_path / "cand"
    for part in ("data", "trainer", "harness"):
        (cand / part).mkdir(parents=True)
    (cand / "trainer" / "train.py").write_text(TRAINER.format(SHARD_MB=shard_mb, N=n, BYTES=4 * n))
    (cand / "trainer" / "config.json").write_text("{}")
    (cand / "data" / "train.jsonl").write_text("")
    args = [cand, _base(tmp_path), tmp_path / "ck", tmp_path / "cache", backend]
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(HOST), *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_junk_and_sparse_files_cost_the_host_what_the_model_is(tmp_path, backend):
    got = _run(tmp_path, backend, shard_mb=100)
    assert got["ok"], got["summary"]
    assert "optimizer.pt (not kept)" in got["summary"]["dropped"]  # never opened, never unpickled
    copy, null = got["blocks"].values()
    assert copy < 4 * MB  # the 100 MB shard stays a hole in the cache copy
    assert null <= got["cap"]  # the null model's shuffle: within the checkpoint's cap
    assert got["rss_mb"] < 700, got  # python, numpy and the sandbox client; no pickle, no permutation
    print(
        f"\n[{backend}] peak RSS {got['rss_mb']:.0f} MB, cache copy {copy / MB:.1f} MB, null model {null / MB:.1f} MB"
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_checkpoint_far_over_the_models_size_fails_its_train_step_only(tmp_path, backend):
    got = _run(tmp_path, backend, shard_mb=3 * 1024)
    assert not got["ok"] and "checkpoint rejected" in got["summary"]["rejected"]
    assert "is over 256 MB" in got["summary"]["rejected"]  # 4 x 16 KB of base weights + 256 MB
    assert got["blocks"] == {}
