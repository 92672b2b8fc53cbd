"""Grading looks like validation from inside the harness sandbox, and its inference is capped (both backends).

Issue 37 point 2: a harness that told grading from validation (by its first batch's size) spent
only when graded. OBSERVER records everything a harness can see at its start, in a validation
play and in a grading play of the same harness and model (component level: `pipeline.play`
twice, with the val and the grading configuration, as vtb/bench.py calls it), and the two must
be identical. SPLIT_SPENDER spends only when its batch is not the validation size: its grading
inference is capped per episode at what validation spent, and the play says so (the bench then
flags the submission, tests/test_bench_core.py).
"""

from __future__ import annotations

import json

import pytest
from conftest import BACKENDS

from tests.conftest import play_split
from vtb import pipeline
from vtb.compose import task_config
from vtb.config import SandboxConfig
from vtb.engine.infer import Engine
from vtb.step_requests import DataRequest

OBSERVER = r"""
import hashlib, json, os, re, resource, socket, sys, time
from vtb.protocol import serve
from vtb.serve.client import ModelClient

T0 = time.monotonic()
RANDOM = re.compile(r"[A-Za-z0-9_-]{20,}|vtb-[a-z]+-[a-z0-9_]{6,}|tmp[a-z0-9_]{6,}|[0-9a-f]{12,}")

def norm(text):
    return RANDOM.sub("<r>", text)

def mountinfo():
    out = []
    for line in open("/proc/self/mountinfo"):
        left, _, right = line.partition(" - ")
        f = left.split()
        out.append(norm(" ".join([f[3], f[4], f[5].split(",")[0], right.split()[0]])))
    return sorted(out)  # dockerd orders sibling mounts arbitrarily, per container, in every mode

def listing(top):
    # The runtime is mounted at its host path: a checkout under /tmp puts a whole virtualenv
    # under /tmp (42 MB of listing, the play timed out). It is the same read-only mount in
    # every play: skipped.
    got = []
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if os.path.join(root, d) != sys.prefix]
        for n in sorted(dirs + files):
            p = os.path.join(root, n)
            st = os.lstat(p)
            got.append(f"{norm(p)} {st.st_mode:o} {st.st_size if os.path.isfile(p) else ''}")
    return sorted(got)

def cgroup():
    out = {}
    for n in ("memory.max", "pids.max", "cpu.max"):
        try:
            out[n] = open("/sys/fs/cgroup/" + n).read().strip()
        except OSError as e:
            out[n] = type(e).__name__
    return out

ROUNDS = []

def policy(batch):
    ROUNDS.append(len(batch))
    first = time.monotonic() - T0
    t = time.monotonic()
    ModelClient.from_env().generate(["Tom has 3 apples."], max_new_tokens=4)
    seen = {
        "batch_sizes": ROUNDS,
        "ids": sorted({f"{len(m['episode'])}:{bool(re.fullmatch('[0-9a-f]+', m['episode']))}" for m in batch}),
        "types": sorted({m["type"] for m in batch}),
        "keys": sorted({",".join(sorted(m)) for m in batch}),
        "env": {k: norm(v) for k, v in sorted(os.environ.items())},
        "cwd": os.getcwd(),
        "cwd_listing": listing("."),
        "tmp": listing("/tmp"),
        "mountinfo": mountinfo(),
        "hostname": norm(socket.gethostname()),
        "ids_uid": [os.getuid(), os.getgid(), os.getppid() > 0],
        "rlimits": {n: resource.getrlimit(getattr(resource, n)) for n in dir(resource) if n.startswith("RLIMIT_")},
        "cgroup": cgroup(),
        "cpus": len(os.sched_getaffinity(0)),
    }
    digest = hashlib.sha256(json.dumps(seen, sort_keys=True).encode()).hexdigest()[:16]
    timing = {"first_message_s": round(first, 3), "first_call_s": round(time.monotonic() - t, 3)}
    obs = json.dumps({"digest": digest, "seen": seen, "timing": timing})
    return [{"type": "answer", "content": "#### 0\n" + obs} for _ in batch]

serve(policy)
"""


def _observations(result) -> list[dict]:
    out = []
    for sample in result.samples:
        content = (sample.get("action") or {}).get("content", "")
        out.append(json.loads(content.split("\n", 1)[1]))
    return out


def _delta(a, b):
    """What differs between two observations of one channel (lists: only the differing entries)."""
    if isinstance(a, list) and isinstance(b, list):
        return [x for x in a if x not in b], [x for x in b if x not in a]
    return a, b


def _setup(tmp_path, n_val: int, n_test: int):
    task = task_config("math", n_pool=20, n_val=n_val, n_test=n_test)
    (tmp_path / "cache").mkdir()
    data = pipeline.provision_data(DataRequest(task, tmp_path / "cache"))
    return task, data.data_dir


def grading_kwargs(val, per_episode: float | None) -> dict:
    """A grading play's extra parameters, as vtb/bench.py _grading_request sets them."""
    return {"flops_per_episode": per_episode, "shard": val.n}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_grading_play_looks_like_a_validation_play(tmp_path, backend, toy_model_dir):
    """Every channel OBSERVER reads (batch sizes, ids, env, cwd and /tmp, mounts, limits, cgroup,
    CPUs, timing) is the same in each grading harness process as in the validation play."""
    task, data_dir = _setup(tmp_path, n_val=3, n_test=5)
    harness = tmp_path / "observer"
    harness.mkdir()
    (harness / "harness.py").write_text(OBSERVER)
    cfg = SandboxConfig(backend=backend)
    val = play_split(harness, toy_model_dir, "val", data_dir, task, cfg, None, 120.0)
    test = play_split(
        harness, toy_model_dir, "test", data_dir, task, cfg, None, 120.0, **grading_kwargs(val, None)
    )
    seen_val, seen_test = _observations(val), _observations(test)
    assert len(seen_val) == 3 and len(seen_test) == 5 and test.answered == 5 and test.n == 5
    assert val.server_threads == test.server_threads == cfg.server_threads == 1  # the harness has 2
    reference = seen_val[0]["seen"]
    for obs in seen_val + seen_test:
        diff = {k: _delta(reference[k], obs["seen"][k]) for k in reference if obs["seen"][k] != reference[k]}
        assert not diff, f"grading told from validation by: {sorted(diff)}: {str(diff)[:1500]}"
    for what in ("first_message_s", "first_call_s"):
        v = [o["timing"][what] for o in seen_val]
        t = [o["timing"][what] for o in seen_test]
        assert max(t) <= 3 * max(v) + 2.0 and min(t) >= min(v) / 3 - 2.0, (what, v, t)
    print(
        f"\n[{backend}] one observation digest in val and grading: {reference['batch_sizes']}, "
        f"timing val {[o['timing'] for o in seen_val][0]} grading {[o['timing'] for o in seen_test][0]}"
    )


SPLIT_SPENDER = r"""
from vtb.protocol import serve
from vtb.serve.client import ModelClient

VAL_SIZE = 3  # what its validation plays showed it (the research side sees val)

def policy(batch):
    spent = 0
    if len(batch) != VAL_SIZE:  # "graded": spend heavily, then answer
        engine = ModelClient.from_env()
        for _ in range(15):
            try:
                engine.generate(["Tom has 3 apples."] * len(batch), max_new_tokens=24)
                spent += 1
            except Exception:  # refused: past the play's FLOPs cap
                break
    return [{"type": "answer", "content": f"#### {spent}"} for _ in batch]

serve(policy)
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_harness_that_spends_only_in_grading_is_capped_and_flagged(tmp_path, backend, toy_model_dir):
    """SPLIT_SPENDER spends nothing in validation; in grading it either cannot tell (sharded plays
    look like val) or is refused past GRADING_SLACK x validation's spend per episode."""
    from vtb.bench import GRADING_SLACK

    task, data_dir = _setup(tmp_path, n_val=3, n_test=5)
    harness = tmp_path / "spender"
    harness.mkdir()
    (harness / "harness.py").write_text(SPLIT_SPENDER)
    cfg = SandboxConfig(backend=backend)
    val = play_split(harness, toy_model_dir, "val", data_dir, task, cfg, None, 120.0)
    floor = 2.0 * Engine(toy_model_dir, threads=1).n_params * 8  # a few tokens: the allowance is never 0
    per_episode = GRADING_SLACK * max(val.charge.flops / val.n, floor)
    free = play_split(harness, toy_model_dir, "test", data_dir, task, cfg, None, 120.0)
    graded = play_split(
        harness, toy_model_dir, "test", data_dir, task, cfg, None, 120.0, **grading_kwargs(val, per_episode)
    )
    allowed = per_episode * (-(-graded.n // val.n) * val.n)  # decoys count against the cap too
    assert graded.charge.flops <= allowed and graded.charge.flops < free.charge.flops / 10
    # One that tells grading anyway (e.g. by inputs it never saw in val) meets the cap, and the play
    # says "flops": the bench flags the submission (Grade.capped -> flagged_by_grading_cap).
    told = play_split(
        harness, toy_model_dir, "test", data_dir, task, cfg, None, 120.0, flops_per_episode=per_episode
    )
    assert told.charge.flops <= per_episode * told.n and "flops" in told.killed
    assert "flops" not in free.killed and free.charge.flops > 10 * per_episode * free.n
    print(
        f"\n[{backend}] val FLOPs {val.charge.flops:.3g}; grading FLOPs uncapped and unsharded "
        f"{free.charge.flops:.3g}; sharded {graded.charge.flops:.3g} (cap {allowed:.3g}); told and capped "
        f"{told.charge.flops:.3g} (cap {per_episode * told.n:.3g}, killed {told.killed})"
    )
