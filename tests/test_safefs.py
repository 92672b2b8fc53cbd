"""Links and special files made by sandboxed code (issue 14, hole 2).

Units of vtb.safefs, then the attacks through the real pipeline functions on both backends: a
research command leaves links to the hidden test split and to /proc/self/environ, FIFOs, a link
loop and a 512 MB sparse file in the workspace; an agent-written trainer leaves a FIFO as its
train summary and links in its checkpoint. Host-side code must neither hang, nor follow a link,
nor take in more than the caps; a rejection reaches the agent and the run goes on.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import stat
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, sandbox_backend
from vtb import safefs
from vtb.hashing import hash_dir
from vtb.sandbox.base import Limits

ANSWER = "ANSWER-7f3a-HIDDEN-TEST-SPLIT"
HOST_SECRET = "HOST-FILE-SECRET-91c2"
MB = 1 << 20


class Hung(Exception):
    """Not an OSError: shutil.copytree collects OSErrors per entry and goes on."""


@contextmanager
def within(seconds: int):
    """Fail (instead of hanging the suite) when the block takes longer than seconds."""

    def alarm(signum, frame):
        raise Hung(f"host-side code hung for more than {seconds}s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def host_environ_marker() -> bytes:
    """The longest entry of this process's /proc/self/environ: what a followed link would copy."""
    return max(Path("/proc/self/environ").read_bytes().split(b"\0"), key=len)


def tree_report(root: Path) -> tuple[list[str], bytes]:
    """(links and special files under root, the bytes of all its regular files), links not followed."""
    odd, data = [], b""
    for dirpath, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            p = Path(dirpath) / name
            mode = os.lstat(p).st_mode
            if stat.S_ISREG(mode):
                data += p.read_bytes()
            elif not stat.S_ISDIR(mode):
                odd.append(str(p.relative_to(root)))
    return odd, data


def hostile_tree(root: Path, hidden: Path) -> None:
    """What sandboxed code can leave behind (made here on the host, for the unit tests)."""
    (root / "sub").mkdir(parents=True)
    (root / "ok.txt").write_text("fine")
    (root / "sub" / "ok.py").write_text("print(1)")
    (root / "answers.jsonl").symlink_to(hidden)
    (root / "env").symlink_to("/proc/self/environ")
    (root / "loop").symlink_to(".")
    (root / "sub" / "up").symlink_to("..")
    os.mkfifo(root / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "sock"))
    sock.close()


@pytest.fixture
def hidden(tmp_path) -> Path:
    path = tmp_path / "hidden" / "test.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps({"question": "2+2", "answer": ANSWER}) + "\n")
    return path


# -- units -----------------------------------------------------------------------------------


def test_copy_tree_keeps_regular_files_and_reports_the_rest(tmp_path, hidden) -> None:
    src = tmp_path / "src"
    hostile_tree(src, hidden)
    with within(10):
        dropped = safefs.copy_tree(src, tmp_path / "dst")
    assert sorted((d["path"], d["kind"]) for d in dropped) == [
        ("answers.jsonl", "symlink"),
        ("env", "symlink"),
        ("fifo", "fifo"),
        ("loop", "symlink"),
        ("sock", "socket"),
        ("sub/up", "symlink"),
    ]
    odd, data = tree_report(tmp_path / "dst")
    assert odd == [] and data == b"fineprint(1)"
    assert ANSWER.encode() not in data and host_environ_marker() not in data


def test_caps_count_apparent_size_and_entries(tmp_path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "sparse.bin", "wb") as f:
        f.truncate(512 * MB)  # no blocks on disk: apparent size only
    with pytest.raises(safefs.Rejected, match=r"over 256 MB.*sparse.bin is 512.0 MB"):
        safefs.copy_tree(src, tmp_path / "dst", safefs.Caps.of(256, None))
    assert not (tmp_path / "dst").exists()  # nothing half-copied is left
    for i in range(5):
        (src / f"f{i}").write_text("x")
    with pytest.raises(safefs.Rejected, match="more than 3 entries"):
        safefs.copy_tree(src, tmp_path / "dst", safefs.Caps.of(None, 3))


def test_copies_keep_holes_and_dense_trees_refuse_them(tmp_path) -> None:
    """A hole costs nothing inside a sandbox: a copy keeps it a hole, and a tree whose files host
    code rewrites in full (a checkpoint, for its null model) refuses it instead of expanding it."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "dense.bin").write_bytes(b"\1" * 8192)
    with open(src / "holey.bin", "wb") as f:
        f.write(b"\1" * 4096)
        f.seek(64 * MB)
        f.write(b"\1" * 4096)  # a hole inside, data at both ends
    safefs.copy_tree(src, tmp_path / "copy")
    got = tmp_path / "copy" / "holey.bin"
    assert got.read_bytes() == (src / "holey.bin").read_bytes()
    assert got.stat().st_blocks * 512 < MB  # the hole stays a hole
    with pytest.raises(
        safefs.Rejected, match=r"holey.bin is a sparse file \(64.0 MB apparent, a hole at byte 4096\)"
    ):
        safefs.copy_tree(src, tmp_path / "dense", dense=True)
    assert not (tmp_path / "dense").exists()
    (src / "holey.bin").unlink()
    safefs.copy_tree(src, tmp_path / "dense", dense=True)  # files written in full are taken


def test_bounded_reads_never_hang_or_follow(tmp_path, hidden) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link").symlink_to(hidden)
    (tmp_path / "big").write_bytes(b"x" * 2000)
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "deep.json").write_text("[" * 900)
    with within(10):
        for name, match in (
            ("fifo", "fifo, not a regular file"),
            ("link", "symbolic link"),
            ("big", "over the 1000-byte limit"),
            ("bad.json", "not valid JSON"),
            ("deep.json", "not valid JSON"),
        ):
            with pytest.raises(safefs.Rejected, match=match):
                safefs.read_json(tmp_path / name, 1000)
    assert safefs.read_bytes(hidden, 1000).decode().count(ANSWER) == 1  # a real file reads


def test_open_in_follows_no_link_on_the_way(tmp_path, hidden) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (ws / "out").symlink_to(outside)  # a directory link leading out of the workspace
    (ws / "answers").symlink_to(hidden)
    os.mkfifo(ws / "fifo")
    with within(10):
        with pytest.raises(PermissionError):
            safefs.write_in(ws, "out/x.txt", b"escaped")
        with pytest.raises(PermissionError):
            safefs.read_in(ws, "../hidden/test.jsonl", 1000)
        for rel in ("answers", "fifo"):
            with pytest.raises(safefs.Rejected):
                safefs.read_in(ws, rel, 1000)
            with pytest.raises(safefs.Rejected):
                safefs.write_in(ws, rel, b"x")
    assert list(outside.iterdir()) == [] and ANSWER in hidden.read_text()
    safefs.write_in(ws, "new/dir/f.txt", b"ok")
    assert safefs.read_in(ws, "new/dir/f.txt", 10) == b"ok"


def test_hash_dir_skips_what_the_snapshot_drops(tmp_path, hidden) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        root.mkdir()
        (root / "ok.txt").write_text("fine")
    hostile_tree(b / "x", hidden)
    (a / "x" / "sub").mkdir(parents=True)
    (a / "x" / "ok.txt").write_text("fine")
    (a / "x" / "sub" / "ok.py").write_text("print(1)")
    with within(10):
        assert hash_dir(a) == hash_dir(b)  # the links and FIFO neither opened nor hashed
    (tmp_path / "a-link").symlink_to(a)
    assert hash_dir(tmp_path / "a-link") == hash_dir(tmp_path / "missing")  # a link is no directory


def test_restore_removes_a_link_in_a_parts_place(tmp_path, hidden) -> None:
    from vtb.workspace import restore, snapshot

    ws, store, outside = tmp_path / "ws", tmp_path / "store", tmp_path / "outside"
    for part in ("data", "trainer", "harness"):
        (ws / part).mkdir(parents=True)
        (ws / part / "f.txt").write_text(part)
    sid = snapshot(ws, store)
    outside.mkdir()
    (outside / "keep.txt").write_text("host")
    safefs.remove(ws / "data")
    (ws / "data").symlink_to(outside)  # the agent swapped a part for a link to a host directory
    os.mkfifo(ws / "harness" / "fifo")
    with within(10):
        restore(store, sid, ws)
    assert (ws / "data" / "f.txt").read_text() == "data" and not (ws / "data").is_symlink()
    assert [p.name for p in outside.iterdir()] == ["keep.txt"]  # the link's target untouched
    assert not (ws / "harness" / "fifo").exists()


def test_link_tree_copies_no_link_target(tmp_path, hidden) -> None:
    """A checkpoint in the cache made before the fix (links inside) adds no link target to the record."""
    from vtb.record import _link_tree

    ckpt = tmp_path / "ckpt"
    hostile_tree(ckpt, hidden)
    with within(10):
        _link_tree(ckpt, tmp_path / "record" / "model")
    odd, data = tree_report(tmp_path / "record" / "model")
    assert odd == [] and data == b"fineprint(1)"
    assert os.stat(tmp_path / "record" / "model" / "ok.txt").st_ino == os.stat(ckpt / "ok.txt").st_ino


def test_public_feedback_carries_the_rejection() -> None:
    from vtb.bench import public_view
    from vtb.ledger import Charge, LedgerSummary
    from vtb.results import AgentUse, Candidate, Trained

    reason = "workspace rejected, edits discarded: data/ is over 256 MB"
    entry = Candidate(
        iteration=2,
        snapshot="s",
        parts={},
        edits={},
        notes="n",
        agent=AgentUse(),
        train=None,
        train_key=None,
        checkpoint=None,
        val_score=None,
        val=None,
        charge={},
        budget_after=LedgerSummary("flops", 1e13, 0.0, 1e13),
        rejected=reason,
    )
    assert public_view(entry)["rejected"].endswith("data/ is over 256 MB")
    trained = dataclasses.replace(
        entry,
        rejected=None,
        train=Trained(False, None, 1, {"rejected": "checkpoint rejected: x"}, Charge()),
    )
    assert public_view(trained)["rejected"] == "checkpoint rejected: x"
    assert "rejected" not in public_view(dataclasses.replace(entry, rejected=None))


# -- attacks through the pipeline, both backends ---------------------------------------------

ATTACK = """set -e
ln -s {hidden} data/answers.jsonl
ln -s /proc/self/environ data/env.txt
mkfifo data/fifo
mkfifo trainer/pipe
ln -s . harness/loop
mkdir -p harness/deep && ln -s ../.. harness/deep/up
ln -s /proc/self/environ notes.txt
"""
SPARSE = "truncate -s 512M data/big.bin\n"


def _workspace(root: Path) -> Path:
    for part, name, text in (
        ("data", "train.jsonl", '{"q": 1}\n'),
        ("trainer", "config.json", "{}"),
        ("harness", "harness.py", "print(1)\n"),
    ):
        (root / part).mkdir(parents=True, exist_ok=True)
        (root / part / name).write_text(text)
    return root


def _research_env(tmp_path: Path, backend: str):
    from vtb.agents import Feedback
    from vtb.agents.env import SandboxResearchEnv
    from vtb.runner import research_mounts

    ws, data, base = _workspace(tmp_path / "ws"), tmp_path / "data", tmp_path / "base"
    for d in (data / "research", base):
        d.mkdir(parents=True)
    return SandboxResearchEnv(
        ws,
        tmp_path / "store",
        Feedback("math", 1, 2, 0),
        sandbox_backend(backend),
        research_mounts(ws, data, base),
        Limits(wall_seconds=60, cpu_seconds=60),
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_links_and_fifos_from_a_research_command_are_never_followed(tmp_path, hidden, backend) -> None:
    from vtb.agents.env import scrub_workspace
    from vtb.workspace import changed_files, part_hashes, restore, snapshot

    env = _research_env(tmp_path, backend)
    ws, store = env.workspace, tmp_path / "store"
    before = snapshot(ws, store)
    out = env.run(ATTACK.format(hidden=hidden))
    assert out["returncode"] == 0, out
    assert (ws / "data" / "answers.jsonl").is_symlink() and stat.S_ISFIFO(
        os.lstat(ws / "data" / "fifo").st_mode
    )
    with within(30):
        dropped: list[dict] = []
        after = snapshot(ws, store, safefs.Caps.of(256, 20000), dropped)
        assert {(d["path"], d["kind"]) for d in dropped} == {
            ("data/answers.jsonl", "symlink"),
            ("data/env.txt", "symlink"),
            ("data/fifo", "fifo"),
            ("trainer/pipe", "fifo"),
            ("harness/loop", "symlink"),
            ("harness/deep/up", "symlink"),
        }
        assert after == before  # nothing but the dropped links changed: the same candidate
        assert changed_files(store, before, after) == {}
        part_hashes(ws)
        scrub_workspace(ws, {"K": "not-in-any-file-1234"})
        with pytest.raises(OSError):
            env.read_file("data/answers.jsonl")
        with pytest.raises(OSError):
            env.read_file("data/fifo")
        with pytest.raises(OSError):
            env.write_file("notes.txt", "through the link")
        restore(store, after, ws)
    for root in (store, ws / "data", ws / "trainer", ws / "harness"):
        odd, data = tree_report(root)
        assert odd == [], root
        assert ANSWER.encode() not in data and host_environ_marker() not in data
    assert ANSWER in hidden.read_text()


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_oversized_workspace_is_rejected_and_the_agent_is_told(tmp_path, hidden, backend) -> None:
    """A CLI agent's turn (the real agent_turn_step) leaves links, FIFOs and a 512 MB sparse file."""
    from steps import agent_turn_step
    from vtb.agents import Feedback
    from vtb.config import AgentConfig, SandboxConfig
    from vtb.ledger import StepLimits
    from vtb.step_requests import TurnRequest
    from vtb.workspace import snapshot

    sandbox_backend(backend)  # skips where the backend is missing
    script = tmp_path / "cli" / "hostile-cli"
    script.parent.mkdir()
    script.write_text("#!/bin/bash\n" + ATTACK.format(hidden=hidden) + SPARSE)
    script.chmod(0o755)
    cfg = AgentConfig(
        name="hostile", factory="cli", command=f"{script} {{prompt_file}}", mounts=[str(script.parent)]
    )
    ws, store, data, base = (
        _workspace(tmp_path / "ws"),
        tmp_path / "store",
        tmp_path / "data",
        tmp_path / "base",
    )
    for d in (data / "research", base):
        d.mkdir(parents=True)
    before = snapshot(ws, store)
    feedback = Feedback(task="math", iteration=1, max_iterations=2, seed=0)
    sandbox = SandboxConfig(backend=backend, step_wall_s=60, step_cpu_s=60)
    request = TurnRequest(cfg, feedback, before, store, ws, data, base, sandbox, StepLimits(None, 60.0))
    with within(120):
        turn = agent_turn_step.fn(request)
    assert turn.after == before and turn.edits == {}
    assert "data/ is over 256 MB" in turn.rejected and "big.bin" in turn.rejected
    assert turn.notes.startswith("[workspace rejected, edits discarded: data/ is over 256 MB")
    assert "data/answers.jsonl (symlink)" in turn.dropped and "data/fifo (fifo)" in turn.dropped
    odd, blob = tree_report(ws)
    assert odd == [] and not (ws / "data" / "big.bin").exists()  # the workspace is back to `before`
    assert ANSWER.encode() not in blob and host_environ_marker() not in blob
    _, stored = tree_report(store)
    assert ANSWER.encode() not in stored and host_environ_marker() not in stored


HOSTILE_TRAINER = """import os, sys
out = sys.argv[sys.argv.index("--out") + 1]
os.makedirs(out + "/sub")
open(out + "/config.json", "w").write("{{}}")
open(out + "/model.safetensors", "wb").write(b"w" * 1000)
open(out + "/optimizer.pt", "wb").write(b"o" * 1000)  # not a model file: never taken in
os.mkfifo(out + "/train_summary.json")
os.symlink(".", out + "/loop")
os.symlink("..", out + "/sub/up")
os.symlink({host!r}, out + "/host.txt")
os.symlink("/proc/self/environ", out + "/env")
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hostile_checkpoint_is_sanitised_and_train_never_hangs(tmp_path, backend) -> None:
    from vtb import runner
    from vtb.record import _link_tree

    host_file = tmp_path / "host-secret.txt"
    host_file.write_text(HOST_SECRET)
    cand = _workspace(tmp_path / "cand")
    (cand / "trainer" / "train.py").write_text(HOSTILE_TRAINER.format(host=str(host_file)))
    base, out = tmp_path / "base", tmp_path / "cache" / "ck"
    base.mkdir()
    with within(120):
        outcome = runner.train(
            sandbox_backend(backend),
            cand,
            base,
            out,
            seed=0,
            limits=Limits(wall_seconds=60, cpu_seconds=60),
            checkpoint_caps=safefs.Caps.of(64, 100),
        )
        assert outcome.ok, outcome.log
        assert {
            "train_summary.json (fifo)",
            "loop (symlink)",
            "host.txt (symlink)",
            "sub/up (symlink)",
            "env (symlink)",
            "optimizer.pt (not kept)",
        } == set(outcome.summary["dropped"])
        _link_tree(out / "checkpoint", tmp_path / "run" / "submission" / "model")
    for root in (out / "checkpoint", tmp_path / "run"):
        odd, data = tree_report(root)
        assert odd == [] and len(data) == 1002
        assert HOST_SECRET.encode() not in data and host_environ_marker() not in data


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_checkpoint_over_its_caps_fails_the_train_step_only(tmp_path, backend) -> None:
    from vtb import runner

    cand = _workspace(tmp_path / "cand")
    (cand / "trainer" / "train.py").write_text(
        "import os, sys\nout = sys.argv[sys.argv.index('--out') + 1]\nos.makedirs(out)\n"
        "open(out + '/config.json', 'w').write('{}')\nopen(out + '/big.safetensors', 'wb').truncate(512 << 20)\n"
    )
    base = tmp_path / "base"
    base.mkdir()
    with within(120):
        outcome = runner.train(
            sandbox_backend(backend),
            cand,
            base,
            tmp_path / "ck",
            seed=0,
            limits=Limits(wall_seconds=60, cpu_seconds=60),
            checkpoint_caps=safefs.Caps.of(64, 100),
        )
    assert not outcome.ok and outcome.returncode == 0
    assert "checkpoint rejected: checkpoint/ is over 64 MB" in outcome.summary["rejected"]
    assert "checkpoint rejected" in (tmp_path / "ck" / "train.log").read_text()
    assert not (tmp_path / "ck" / "checkpoint").exists()
