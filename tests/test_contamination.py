"""The contamination scan (vtb/contamination.py) on a provisioned math data dir: copies of test
items survive re-wrapping and are flagged past the documented threshold, a canary is a certain
flag, the initial and reference systems' data are not flagged, hostile files are neither
followed nor fatal, and the CLI scans a held-out file in GSM8K's own schema. Seconds in all."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vtb import contamination, pipeline, salt
from vtb.compose import compose_config
from vtb.domains.registry import get_domain
from vtb.sandbox.runtime import SANDBOX_CODE, sandbox_code
from vtb.step_requests import DataRequest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def math_data(tmp_path_factory):
    """A provisioned embedded math data dir (canaries planted) and its task config."""
    cfg = compose_config(["task=math"])
    data = pipeline.provision_data(DataRequest(cfg.task, tmp_path_factory.mktemp("data")))
    return cfg, Path(data.data_dir)


def split_items(data_dir: Path, split: str = "test") -> list[dict]:
    return contamination.read_items(salt.full_split_file(data_dir, split))


def initial_system(cfg, data_dir: Path, ws: Path) -> Path:
    get_domain("math").write_initial_system(ws, cfg.task, cfg.trainer, data_dir)
    return ws


def rewrapped(item: dict) -> dict:
    """A test item as an SFT row, its words re-spaced and broken over lines (a disguised copy)."""
    question = "\n".join("  ".join(item["question"].split()[i : i + 3]) for i in range(0, 40, 3))
    return {"prompt": f"Q:\n{question}\n", "completion": item["answer"].replace(" ", " \n\t ")}


def append_rows(path: Path, rows: list[dict]) -> None:
    with open(path, "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def test_canaries_are_planted_keyed_by_the_salt_and_change_nothing_graded(math_data, tmp_path):
    cfg, data_dir = math_data
    test, val = split_items(data_dir, "test"), split_items(data_dir, "val")
    assert {i["canary"] for i in test} == {salt.canary_of(cfg.task, "test")}
    assert not any("canary" in i for i in val)  # math shows val in full: no canary, salt-free
    assert salt.canary_of(cfg.task, "test") != salt.canary_of(cfg.task, "val")
    other = salt.canary("another salt", cfg.task.data_seed, "math", "test")
    assert other != salt.canary_of(cfg.task, "test")
    # the domain's own provisioning, unplanted: the items differ by the canary field only
    get_domain("math").provision(cfg.task, tmp_path)
    plain = contamination.read_items(tmp_path / "hidden" / "test.jsonl")
    assert [{k: v for k, v in i.items() if k != "canary"} for i in test] == plain
    # what a harness is shown of an item does not carry it
    assert "canary" not in json.dumps(get_domain("math").start_message(test[0]))


def test_scan_is_orchestrator_only():
    assert not any("contamination" in rel or rel == "salt.py" for rel in SANDBOX_CODE)
    assert not any(p.endswith(("contamination.py", "salt.py")) for p in sandbox_code())


def test_normalisation_survives_rewrapping_and_json_escapes():
    a = contamination.tokens("Emma buys 9 packs.\nEach pack has 12 stamps!")
    b = contamination.tokens(json.dumps("EMMA   buys\n9 packs .  each\tpack has 12 stamps")[1:-1])
    assert a == b == ["emma", "buys", "9", "packs", "each", "pack", "has", "12", "stamps"]
    assert contamination.tokens(r"\frac{1}{2}") == contamination.tokens(json.dumps(r"\frac{1}{2}"))


def test_clean_initial_and_reference_data_are_not_flagged(math_data, tmp_path):
    cfg, data_dir = math_data
    ws = initial_system(cfg, data_dir, tmp_path / "initial")
    result = contamination.scan_run(data_dir, ws, cfg.task)
    assert not result["flagged"], result["reasons"]
    assert result["splits"]["test"]["hit_items"] == 0 and result["splits"]["test"]["decidable"] >= 190
    assert result["scanned"]["files"] >= 2 and result["scanned"]["bytes"] > 10_000
    ref = tmp_path / "reference"
    get_domain("math").write_reference_system(ref, cfg.task, data_dir)  # 2500 pool rows
    assert not contamination.scan_run(data_dir, ref, cfg.task)["flagged"]


def test_rewrapped_copies_of_test_items_are_flagged_past_the_threshold(math_data, tmp_path):
    cfg, data_dir = math_data
    items = split_items(data_dir)
    n = len(items)
    at_threshold = max(contamination.FLAG_MIN_ITEMS, math.ceil(round(contamination.FLAG_FRACTION * n, 9)))
    assert at_threshold == 4  # 2% of the 200 test items of the default miniature
    ws = initial_system(cfg, data_dir, tmp_path / "ws")
    append_rows(ws / "data" / "train.jsonl", [rewrapped(i) for i in items[: at_threshold - 1]])
    below = contamination.scan_run(data_dir, ws, cfg.task)
    assert below["splits"]["test"]["hit_items"] == at_threshold - 1
    assert not below["flagged"]  # under the documented threshold: reported, not flagged
    (ws / "data" / "extra.txt").write_text(
        "\n\n".join(r["prompt"] + r["completion"] for r in map(rewrapped, items[-1:]))
    )
    flagged = contamination.scan_run(data_dir, ws, cfg.task)
    test = flagged["splits"]["test"]
    assert flagged["flagged"] and test["flagged"] and test["hit_items"] == at_threshold
    assert not test["canary_found"] and flagged["reasons"] == [f"test: {at_threshold} of {n} items copied"]
    by_file = {f["path"]: f for f in test["files"]}
    assert set(by_file) == {"data/train.jsonl", "data/extra.txt"}
    assert by_file["data/train.jsonl"]["items"] == at_threshold - 1
    assert by_file["data/extra.txt"]["examples"][0]["item"] == items[-1]["id"]


def test_a_canary_anywhere_is_a_certain_flag(math_data, tmp_path):
    cfg, data_dir = math_data
    ws = initial_system(cfg, data_dir, tmp_path / "ws")
    mark = salt.canary_of(cfg.task, "test")
    digest = mark.removeprefix(salt.CANARY_PREFIX)  # the prefix stripped, the rest re-spaced
    spaced = " ".join(digest[i : i + 5] for i in range(0, len(digest), 5)).upper()
    (ws / "harness" / "notes.py").write_text(f"# seen: {spaced}\n")
    result = contamination.scan_run(data_dir, ws, cfg.task)
    assert result["flagged"] and result["reasons"] == ["test: canary found"]
    assert result["splits"]["test"]["files"][0] == {
        "path": "harness/notes.py",
        "ngrams": 0,
        "items": 0,
        "canary": True,
        "examples": [],
    }
    # math's val is public: copying it into the data is reported, not flagged
    (ws / "harness" / "notes.py").unlink()
    shutil.copy(salt.full_split_file(data_dir, "val"), ws / "data" / "val_copy.jsonl")
    val = contamination.scan_run(data_dir, ws, cfg.task)
    assert val["splits"]["val"]["flagged"] and not val["splits"]["val"]["canary_checked"]
    assert val["splits"]["val"]["hit_items"] == val["splits"]["val"]["decidable"]
    assert not val["flagged"] and not val["splits"]["val"]["hidden"]


def test_hostile_files_are_neither_followed_nor_fatal(math_data, tmp_path):
    cfg, data_dir = math_data
    ws = initial_system(cfg, data_dir, tmp_path / "ws")
    test_file = salt.full_split_file(data_dir, "test")
    os.symlink(test_file, ws / "data" / "leak.jsonl")  # the hidden split, one link away
    os.symlink(test_file.parent, ws / "harness" / "hidden")
    os.mkfifo(ws / "harness" / "pipe")  # a reader that opened it would hang
    with open(ws / "data" / "huge.bin", "wb") as f:
        f.truncate(8 << 30)  # 8 GiB apparent, sparse
    result = contamination.scan_run(data_dir, ws, cfg.task, max_bytes=4 << 20)
    assert not result["flagged"] and result["splits"]["test"]["hit_items"] == 0
    skipped = {(s["path"], s["kind"]) for s in result["scanned"]["skipped"]}
    assert {
        ("data/leak.jsonl", "symlink"),
        ("harness/hidden", "symlink"),
        ("harness/pipe", "fifo"),
    } <= skipped
    assert "data/huge.bin" in result["scanned"]["truncated"] and result["scanned"]["bytes"] <= 4 << 20
    # a part that is itself a link to the hidden split's folder is not entered
    shutil.rmtree(ws / "trainer")
    os.symlink(test_file.parent, ws / "trainer")
    again = contamination.scan_run(data_dir, ws, cfg.task, max_bytes=4 << 20)
    assert ("trainer", "symlink") in {(s["path"], s["kind"]) for s in again["scanned"]["skipped"]}
    assert not again["flagged"]


def test_cli_scans_a_held_out_file_in_gsm8k_schema(math_data, tmp_path):
    cfg, data_dir = math_data
    gsm8k = tmp_path / "gsm8k_test.jsonl"  # GSM8K's own schema: question, answer ("... #### N")
    items = [{"question": i["question"], "answer": i["answer"]} for i in split_items(data_dir)[:50]]
    gsm8k.write_text("".join(json.dumps(i) + "\n" for i in items))
    clean = initial_system(cfg, data_dir, tmp_path / "clean")
    public = ["--public", str(data_dir / "research" / "pool.jsonl")]
    assert contamination.main(["--submission", str(clean), "--split", str(gsm8k), *public]) == 0
    copied = tmp_path / "copied"
    (copied / "data").mkdir(parents=True)
    append_rows(copied / "data" / "rows.jsonl", [rewrapped(i) for i in items[:5]])
    out = tmp_path / "scan.json"
    cmd = [sys.executable, "-m", "vtb.contamination", "--submission", str(copied), "--split", str(gsm8k)]
    run = subprocess.run(
        [*cmd, *public, "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 1, run.stderr
    assert run.stdout.startswith("FLAGGED (gsm8k_test: 5 of 50 items copied)")
    assert json.loads(out.read_text())["splits"]["gsm8k_test"]["files"][0]["path"] == "data/rows.jsonl"
    # a canary the held-out file's owner planted, given on the command line
    (clean / "harness" / "seen.txt").write_text("run-7f3a9c0e5d1b2a4f")
    args = ["--submission", str(clean), "--split", str(gsm8k), "--canary", "RUN-7F3A9C0E5D1B2A4F"]
    assert contamination.main(args) == 1
