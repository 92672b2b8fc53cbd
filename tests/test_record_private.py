"""A harness that echoes its test inputs cannot publish them through the run record (issue 37 point 7).

A real grading play of an echoing harness, on both backends, on the real provisioned math test
split (the other steps are the fakes of tests/test_bench_core.py, so no model is trained or
served): the harness writes every message it is given after its answer, into its stderr, as
"No such file or directory" lines the sandbox keeps as blocked-access attempts, and on stdout.
What it echoed is kept in the record's private/ folder only: no other file of the record holds
a test question, a gold answer or a canary. The record code is the same for every domain
(graded episodes, denial lines and the graders' reports all go to private/), so one domain's
real play covers the class.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, sandbox_backend
from tests.test_bench_core import PLAN, FakeSteps, config, run
from vtb import runner
from vtb.blind import blind, secret_of
from vtb.domains.registry import get_domain
from vtb.sandbox.base import Limits

ECHO = """import json, sys
from vtb.protocol import serve


def answer(m):
    text = json.dumps(m)
    print(text, file=sys.stderr)
    print(f"cat: {text}: No such file or directory", file=sys.stderr)
    print(text, flush=True)  # not a protocol line: kept as garbage
    return {"type": "answer", "content": "#### 0\\n" + text}


serve(lambda batch: [answer(m) for m in batch])
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_echoing_harness_publishes_no_test_item(tmp_path, backend) -> None:
    sandbox = sandbox_backend(backend)
    harness = tmp_path / "echo"
    harness.mkdir()
    (harness / "harness.py").write_text(ECHO)
    cfg = config(tmp_path, 1)
    fake = FakeSteps(tmp_path, PLAN[:1])
    fake_play, fake_data = fake.play, fake.data
    made: dict[str, Path] = {}

    def data(key, task, cache):
        # the provisioned folder, remembered (scanning the cache races the grid's snapshots)
        out = fake_data(key, task, cache)
        made["data"] = Path(out.data_dir)
        return out

    def echoing_play(key, harness_dir, model_dir, split, **kw):
        out = fake_play(key, harness_dir, model_dir, split, **kw)
        if split != "test":
            return out
        data_dir = made["data"]
        episodes = get_domain("math").episodes(data_dir, "test", cfg.task)
        got = runner.play(
            sandbox,
            harness,
            runner.NoModel(),
            blind(episodes, secret_of(cfg.task), "test"),
            limits=Limits(wall_seconds=60, cpu_seconds=60),
            round_timeout_s=20,
            per_episode_timeout_s=2,
        )
        rewards = {ep.id: ep.reward() for ep in episodes}
        return dataclasses.replace(
            out,
            answered=len(got.actions),
            rewards=rewards,
            samples=[ep.record() for ep in episodes[:5]],
            denials=got.denials[:50],
            garbage=got.garbage,
            stderr_tail=got.stderr_tail,
        )

    fake.play, fake.data = echoing_play, data
    _, result = run(cfg, fake)
    record = Path(result["record"])
    data_dir = made["data"]
    items = [json.loads(line) for line in (data_dir / "hidden" / "test.jsonl").read_text().splitlines()]
    needles = [i[k].encode() for i in items for k in ("question", "answer")] + [items[0]["canary"].encode()]
    # the harness did echo (so the check below is not vacuous), and what it echoed is private
    private = record / "private"
    assert "do not publish" in (private / "README.md").read_text()
    for name in ("samples.json", "denials.json"):
        text = (private / name).read_text()
        assert items[0]["question"] in text or any(i["question"] in text for i in items), name
    published = [p for p in record.rglob("*") if p.is_file() and not p.is_relative_to(private)]
    leaks = {str(p.relative_to(record)) for p in published for n in needles if n in p.read_bytes()}
    assert published and not leaks, f"test items in the publishable record: {sorted(leaks)}"
