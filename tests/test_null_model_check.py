"""Hiding from the null-model check (issue 14, hole 4): a harness cannot tell the check from a grading.

The attack: a harness that solves the embedded math problems itself (it parses the templated
question; no model) and cheats only when it believes it is NOT in the null-model check, judged by
everything it can see: its environment, the episode ids and their order, the /model folder (file
names, sizes, modes, mtimes, config and tokenizer bytes) and the mount table's host path of
/model. Grading with the null-model check on (flows/bench.py Bench.grade) must flag it, on both
sandbox backends; and every observation it makes must be the same in the check and in the grading.
On the old code (c34db53) it saw VTB_NULL_MODEL=1, answered nothing in the check and passed.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, sandbox_backend, small_config

KEY = b"a test key: any bytes the orchestrator keeps"

# The solver (validated below against the generator), then the detector and the protocol loop.
CHEAT = r"""
import hashlib, json, os, re, sys


def solve(question):
    value = other = 0
    for s in re.split(r"(?<=[.?])\s+", question):
        n = [int(x) for x in re.findall(r"\d+", s)]
        if "gives all of" in s:
            value += other
        elif re.search(r"has \d+ .* and .* has \d+", s):
            value, other = n[0], n[1]
        elif "each hour" in s:
            value = n[0] * n[1]
        elif re.search(r"buys \d+ (boxes|bags|packs) of", s):
            value = n[0]
        elif (s.startswith("Each ") or "times as many" in s) and n:
            value *= n[0]
        elif " more " in s and " than " in s and n:
            value += n[0]
        elif " fewer " in s and " than " in s and n:
            value -= n[0]
        elif "half of" in s:
            value //= 2
        elif "equal groups" in s and n:
            value //= n[0]
        elif n and re.search(r"buys \d+ more|earns \d+ dollars|gives (him|her) \d+", s):
            value += n[0]
        elif n and re.search(r"spends|gives \d+ .* to|sells|loses|uses|eats", s):
            value -= n[0]
        elif n and " has " in s:
            value = n[0]
    return value


def api_listing():
    # what the endpoint says about its model: /v1/models and a tokenization (no weights to look at)
    import urllib.request

    def call(path, body=None):
        base = os.environ["OPENAI_BASE_URL"]
        base = base.removesuffix("/v1") if path.startswith("/tokenize") else base
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"}
        with urllib.request.urlopen(urllib.request.Request(base + path, data=data, headers=headers), timeout=60) as r:
            return json.loads(r.read())

    return {"models": call("/models"), "tokens": call("/tokenize", {"prompt": "Tom has 5 apples"})}


def mounts():
    # the mount table, less what is random in every sandbox (socket and output folders' host names;
    # docker: layers, the container's folder and cgroup, and the mount peer groups, numbered in
    # the order containers start: grading's plays start at once, in either order)
    try:
        lines = open("/proc/self/mountinfo").read().splitlines()
    except OSError:
        return []
    return sorted(re.sub(r"vtb-model-host-\w+/sockets/\w+|vtb-(model|out)-\w+|/var/lib/docker/overlay2/[^,\s]+|/var/lib/docker/containers/[^/\s]+|vtb-[0-9a-f]{16}/[0-9a-f]+|(master|shared|propagate_from):\d+", "X", " ".join(line.split()[3:])) for line in lines)


def suspects_null(ids):
    env = " ".join(f"{k}={v}" for k, v in os.environ.items()).lower()
    api = json.dumps(api_listing()).lower()
    tells = {
        "env": "null_model" in env or "vtb_null" in env,
        "ids": any(str(i).lower().startswith("null") for i in ids),
        "weights": os.path.exists("/model"),  # a model folder at all would be new
        "api": "null" in api or "base" in api,
        "mount": any("null" in m or "base" in m for m in mounts() if "/run/vtb-model" in m),  # the model's mount
    }
    return sorted(k for k, v in tells.items() if v)


ids = []
batch = []
for line in sys.stdin:
    msg = json.loads(line) if line.strip() else {}
    kind = msg.get("type")
    if kind == "start":
        batch.append(msg)
        ids.append(msg["episode"])
    elif kind == "flush":
        cheat = not suspects_null(ids)
        for m in batch:
            answer = f"#### {solve(m['observation']['question'])}" if cheat else ""
            print(json.dumps({"episode": m["episode"], "action": {"type": "answer", "content": answer}}), flush=True)
        batch = []
    elif kind == "close":
        break
# The per-play API key is random in every play, whatever the mode (no play can see another's).
seen = {"env": sorted((k, len(v) if "KEY" in k else v) for k, v in os.environ.items()), "ids": ids, "api": api_listing(), "mount": mounts(),
        "cwd": sorted(os.listdir("."))}
print("FINGERPRINT " + hashlib.sha256(json.dumps(seen).encode()).hexdigest(), file=sys.stderr)
print("PARTS " + json.dumps({k: hashlib.sha256(json.dumps(v).encode()).hexdigest()[:8] for k, v in seen.items()}), file=sys.stderr)
print("IDS " + json.dumps(ids[:8]), file=sys.stderr)
print("TELLS " + json.dumps(suspects_null(ids)), file=sys.stderr, flush=True)
"""


def _solver():
    scope: dict = {}
    exec(CHEAT.split("\n\ndef api_listing")[0], scope)  # noqa: S102 (the test's own code)
    return scope["solve"]


def test_the_cheating_solver_gets_the_math_problems_right_without_a_model():
    from vtb.domains.math import generator

    splits = generator.make_splits(5, 20, 20, 200)
    solve = _solver()
    right = sum(solve(p["question"]) == p["final"] for p in splits["test"])
    assert right >= 0.9 * len(splits["test"])


def _bench(tmp_path: Path, backend: str, harness_code: str):
    """A Bench ready to grade one candidate (harness_code + a checkpoint), its steps the pipeline's own."""
    from vtb import pipeline
    from vtb.bench import Bench, plain_steps
    from vtb.step_requests import DataRequest

    sandbox_backend(backend)  # skips where the backend is missing
    cfg = small_config(
        tmp_path,
        "noop",
        0,
        "null_model_check=true",
        "base_model_check=false",
        f"sandbox={backend}",
        "task.n_test=40",
    )
    cfg = replace(cfg, budget=replace(cfg.budget, flops_per_cpu_second=1e9))  # no per-test calibration
    plays: list = []
    steps = plain_steps()
    play = steps.play
    steps.play = lambda run_name, request: plays.append(play(run_name, request)[0]) or (plays[-1], False)
    bench = Bench(cfg, steps)
    bench.data = pipeline.provision_data(DataRequest(cfg.task, bench.cache))
    bench.data_dir = Path(bench.data.data_dir)
    sid = "candidate"
    for part in ("data", "trainer", "harness"):
        (bench.store / sid / part).mkdir(parents=True)
    (bench.store / sid / "harness" / "harness.py").write_text(harness_code)
    (bench.store / sid / "data" / "train.jsonl").write_text("")
    (bench.store / sid / "trainer" / "config.json").write_text("{}")
    return bench, sid, plays


def _system(sid: str, weights: Path):
    from vtb.results import System

    return System(sid, "train-key-of-the-candidate", str(weights))


def _stderr_value(play, tag: str) -> str:
    found = re.findall(rf"^{tag} (.*)$", play.stderr_tail, re.M)
    assert found, play.stderr_tail[-2000:]
    return found[-1]


@pytest.mark.slow  # two gradings of 40 episodes in fresh sandboxes (~20 s)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_harness_that_hides_from_the_null_check_is_flagged(tmp_path, toy_model_dir, backend):
    bench, sid, plays = _bench(tmp_path, backend, CHEAT)
    graded = bench.grade(_system(sid, toy_model_dir), "submitted")
    normal, null = plays
    assert graded.test_score > 0.8, normal.stderr_tail[-3000:]  # it cheats when graded ...
    assert json.loads(_stderr_value(null, "TELLS")) == []  # ... found no tell of the check ...
    assert graded.null_model_score > 0.8 and graded.flagged is True  # ... so it is flagged
    # Everything it looked at was the same in both: environment, ids and order, /model, mounts.
    assert _stderr_value(normal, "FINGERPRINT") == _stderr_value(null, "FINGERPRINT"), [
        _stderr_value(p, "PARTS")
        for p in plays  # which of the parts differed
    ]
    ids = json.loads(_stderr_value(normal, "IDS"))
    assert ids and all(re.fullmatch(r"[0-9a-f]{16}", i) for i in ids), ids  # opaque: no split, no item
    # The run record keeps the real item ids (orchestrator side).
    assert all(s["id"].startswith("test-") for s in graded.samples)


@pytest.mark.slow  # two gradings with the toy model (~25 s)
def test_an_honest_harness_scores_nothing_with_the_null_model(tmp_path, toy_model_dir):
    """The initial math harness (the model answers) on the shuffled-weights null model: ~0, not flagged."""
    import vtb

    math_dir = Path(vtb.__file__).parent / "domains" / "math"
    source = next(p for p in math_dir.rglob("initial") if (p / "harness.py").is_file())
    bench, sid, plays = _bench(tmp_path, "bwrap", (source / "harness.py").read_text())
    for f in source.iterdir():
        if f.is_file() and f.name != "harness.py":  # not a __pycache__ a local run left
            (bench.store / sid / "harness" / f.name).write_bytes(f.read_bytes())
    graded = bench.grade(_system(sid, toy_model_dir), "submitted")
    assert graded.null_model_score <= 0.05 and graded.flagged is False, plays[-1].samples
    assert plays[-1].answered == plays[-1].n  # it ran: the null model loads and answers (garbage)


def test_the_null_model_is_the_checkpoint_folder_with_its_weights_shuffled(tmp_path, toy_model_dir):
    import numpy as np
    from safetensors.numpy import load_file

    from vtb.blind import null_model
    from vtb.engine.infer import Engine

    null = null_model(toy_model_dir, tmp_path / "cache", KEY)
    assert null.name == toy_model_dir.name

    def listing(root: Path) -> list:
        return [
            (str(p.relative_to(root)), p.stat().st_size, p.stat().st_mode, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*"))
        ] + [(".", root.stat().st_mtime_ns)]

    assert listing(null) == listing(toy_model_dir)
    weights = sorted(p.name for p in toy_model_dir.glob("*.safetensors"))
    assert weights
    for p in toy_model_dir.iterdir():
        if p.suffix != ".safetensors":
            assert (null / p.name).read_bytes() == p.read_bytes(), p.name
    for name in weights:
        real, shuffled = load_file(toy_model_dir / name), load_file(null / name)
        head = (toy_model_dir / name).read_bytes()[:4096]
        assert (null / name).read_bytes()[: len(head)][:8] == head[:8]  # same header length
        assert real.keys() == shuffled.keys()
        big = [k for k in real if real[k].size > 64]
        assert big and all(not np.array_equal(real[k], shuffled[k]) for k in big)  # no structure left
        for k in real:  # ... but the same shapes, dtypes and values
            assert real[k].shape == shuffled[k].shape and real[k].dtype == shuffled[k].dtype
            assert np.array_equal(np.sort(real[k], axis=None), np.sort(shuffled[k], axis=None))
    stamp = (null.parent / "done.json").stat().st_mtime_ns
    assert null_model(toy_model_dir, tmp_path / "cache", KEY) == null  # cached by hash
    assert (null.parent / "done.json").stat().st_mtime_ns == stamp
    assert len(Engine(null, threads=1).generate(["Question: Tom has 3 apples."], max_new_tokens=4)) == 1


class _Planted:
    """A pickle whose loading (by any unpickler that runs reduce calls) makes a marker folder."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.mkdir, (self.marker,))


def test_a_checkpoint_takes_in_model_files_only_and_nothing_is_unpickled(tmp_path):
    """Was: any .pt/.bin/.pth in a checkpoint was kept and torch.load-ed by the null model in the
    orchestrator (a 200 MB junk optimizer.pt took it from 0.45 to 2.40 GB RSS). Now only model
    files are taken in, and the null model shuffles safetensors only."""
    import pickle

    import numpy as np
    from safetensors.numpy import save_file

    from vtb.blind import null_model
    from vtb.runner import _take_checkpoint

    produced = tmp_path / "sandbox" / "checkpoint"
    produced.mkdir(parents=True)
    (produced / "config.json").write_text('{"model_type": "gpt2"}')
    weight = np.arange(1000, dtype=np.float32).reshape(10, 100)
    save_file({"w": weight}, str(produced / "model.safetensors"))
    marker = tmp_path / "unpickled"
    for name in ("pytorch_model.bin", "optimizer.pt", "rng_state.pth", "state.pkl"):
        (produced / name).write_bytes(pickle.dumps(_Planted(str(marker))))
    (produced / "notes.npy").write_bytes(b"not a model file")
    rejected, dropped = _take_checkpoint(produced, tmp_path / "ck", safefs_caps())
    assert rejected is None
    assert sorted(d["path"] for d in dropped if d["kind"] == "not kept") == [
        "notes.npy",
        "optimizer.pt",
        "pytorch_model.bin",
        "rng_state.pth",
        "state.pkl",
    ]
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["config.json", "model.safetensors"]
    null = null_model(tmp_path / "ck", tmp_path / "cache", KEY)
    from safetensors.numpy import load_file

    got = load_file(str(null / "model.safetensors"))["w"]
    assert not np.array_equal(got, weight) and np.array_equal(np.sort(got.ravel()), weight.ravel())
    assert not marker.exists()


def safefs_caps():
    from vtb import safefs

    return safefs.Caps.of(64, 100)


def test_episode_ids_and_order_carry_no_split_and_map_back(tmp_path):
    from vtb.blind import blind, real_ids, secret_of
    from vtb.config import TaskConfig
    from vtb.domains.math.env import MathEnv, MathEpisode

    env = MathEnv()
    items = [{"id": f"test-{i:04d}", "question": f"Tom has {i} apples."} for i in range(30)]
    episodes = [MathEpisode(item, "strict", env) for item in items]
    a = blind(episodes, KEY, "test")
    b = blind([MathEpisode(item, "strict", env) for item in items], KEY, "test")
    assert [x.id for x in a] == [x.id for x in b]  # the grading and the null check: the same ids, order
    assert [x.inner.id for x in a] != [e.id for e in episodes]  # shuffled
    for x in a:
        msg = x.message(fresh=True)
        assert re.fullmatch(r"[0-9a-f]{16}", msg["episode"]) and "test" not in json.dumps(msg)
    val = blind(
        [MathEpisode({**i, "id": i["id"].replace("test", "val")}, "strict", env) for i in items], KEY, "val"
    )
    assert not {x.id for x in val} & {x.id for x in a}
    other = blind(episodes, secret_of(TaskConfig(name="math")) + b"x", "test")
    assert {x.id for x in other}.isdisjoint({x.id for x in a})  # keyed: unknowable without the key
    a[0].step({"type": "answer", "content": "#### 3"})
    assert a[0].inner.action == {"type": "answer", "content": "#### 3"}
    assert real_ids(a, {a[0].id: "why"}) == {a[0].inner.id: "why"}


def test_episode_messages_carry_no_split_tells(tmp_path):
    """swe's observation no longer names the instance, terminal's no trial number (test runs more trials)."""
    from vtb.domains.swe.env import SweEpisode
    from vtb.domains.terminal.env import TerminalEpisode

    swe = SweEpisode.__new__(SweEpisode)
    inst = {"instance_id": "vtb__pkg-test-0001", "repo": "r", "problem_statement": "p", "files": {}}
    SweEpisode.__init__(swe, inst, sandbox=None, scratch=Path("/nonexistent"))
    assert "test" not in json.dumps(swe.message(fresh=True)["observation"])
    term = TerminalEpisode({"id": "t", "instruction": "x"}, 2, sandbox=None, scratch=tmp_path, max_steps=3)
    assert "trial" not in term.message(fresh=True)["observation"]


def _safetensors(path: Path, header: bytes, data: bytes) -> None:
    path.write_bytes(len(header).to_bytes(8, "little") + header + data)


def test_hostile_safetensors_headers_are_left_alone_at_no_cost(tmp_path):
    """The null model parses agent-written headers in the orchestrator. Was: a deeply nested one
    raised RecursionError out of grading; a 75 MB one (the format allows 100 MB) took it to
    708 MB RSS for a 16 KB model; tensors overlapping the whole data were each shuffled again
    (CPU without bound). Now those files are left as they are (the engines refuse them, or the
    null model keeps their weights and the check flags what they score)."""
    import subprocess
    import sys

    import numpy as np

    from vtb.blind import MAX_HEADER, _shuffle_safetensors

    data = bytes(range(256)) * 16
    whole = b'"dtype": "U8", "shape": [4096], "data_offsets": [0, 4096]'
    cases = {
        "deep": b"[" * 100_000,
        "overlap": b"{" + b",".join(b'"t%d": {%s}' % (i, whole) for i in range(3)) + b"}",
        "gap": b'{"t": {"dtype": "U8", "shape": [10], "data_offsets": [0, 10]}}',
        "huge": b'{"t": {%s}, "__metadata__": {"x": "%s"}}' % (whole, b"y" * MAX_HEADER),
    }
    for name, header in cases.items():
        _safetensors(tmp_path / f"{name}.safetensors", header, data)
        _shuffle_safetensors(tmp_path / f"{name}.safetensors", np.random.default_rng(0))
        assert (tmp_path / f"{name}.safetensors").read_bytes().endswith(data), name
    _safetensors(tmp_path / "ok.safetensors", b"{" + whole.join((b'"t": {', b"}")) + b"}", data)
    _shuffle_safetensors(tmp_path / "ok.safetensors", np.random.default_rng(0))
    assert not (tmp_path / "ok.safetensors").read_bytes().endswith(data)  # a valid one is shuffled

    wide = tmp_path / "wide.safetensors"
    with open(wide, "wb") as f:  # 20 MB of tiny entries, written in pieces
        entries = [b'"%09d": [0, 1, 2, 3, 4, 5, 6, 7]' % i for i in range(20 << 15)]
        header = b"{" + b",".join(entries) + b"}"
        f.write(len(header).to_bytes(8, "little") + header + data)
    del entries, header
    probe = (
        "import sys, numpy as np; from pathlib import Path; from vtb.blind import _shuffle_safetensors;"
        "_shuffle_safetensors(Path(sys.argv[1]), np.random.default_rng(0));"
        "print([int(x.split()[1]) // 1024 for x in open('/proc/self/status') if x.startswith('VmHWM')][0])"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(wide)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) < 100, done.stdout  # MB: python and numpy; the header is not parsed


def test_the_same_weights_get_the_same_null_model_whatever_the_training_logged(tmp_path) -> None:
    """A checkpoint trained again has the same weights but another train_summary.json (its wall
    time): its null model, and so the null-model check's figure, is the same from run to run.
    The shuffle was once drawn from the whole folder's hash: two runs of one config on tau scored
    their null models 0.000 and 0.025."""
    import shutil

    import numpy as np
    from safetensors.numpy import load_file, save_file

    from vtb.blind import null_model

    first = tmp_path / "a" / "checkpoint"
    first.mkdir(parents=True)
    save_file({"w": np.arange(1000, dtype=np.float32).reshape(10, 100)}, str(first / "model.safetensors"))
    (first / "config.json").write_text("{}")
    (first / "train_summary.json").write_text('{"wall_seconds": 1.0}')
    again = tmp_path / "b" / "checkpoint"
    shutil.copytree(first, again)
    (again / "train_summary.json").write_text('{"wall_seconds": 2.0}')
    one, two = (null_model(c, tmp_path / "cache", KEY) for c in (first, again))
    assert one != two  # each folder has its own copy (its train_summary.json as written) ...
    shuffled = load_file(str(one / "model.safetensors"))["w"]
    assert np.array_equal(shuffled, load_file(str(two / "model.safetensors"))["w"])  # ... the same weights
    assert not np.array_equal(shuffled, np.arange(1000, dtype=np.float32).reshape(10, 100))
    save_file({"w": np.arange(1, 1001, dtype=np.float32).reshape(10, 100)}, str(again / "model.safetensors"))
    other = null_model(again, tmp_path / "cache", KEY)  # other weights: another shuffle
    assert not np.array_equal(
        np.argsort(load_file(str(other / "model.safetensors"))["w"], axis=None),
        np.argsort(shuffled, axis=None),
    )
