"""swe episodes over the real protocol in real bwrap sandboxes: grader both ways, attacks, bounds.

A test-only oracle harness answers with each instance's gold patch (handed to it in a file this
test writes; the pipeline never gives a harness gold patches) and must resolve 100% of the test
split; an empty patch must resolve 0%. Patches that attack the grading, and harnesses that look
for the hidden tests, must fail; a patch that makes the tests loop is stopped by the limits.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import BACKENDS
from vtb.config import TaskConfig
from vtb.domains.swe import patching
from vtb.domains.swe.domain import SweDomain

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (scripts/install.sh)")

TASK = TaskConfig(name="swe", n_pool=12, n_val=6, n_test=18)

# Answers each instance with the patch listed for it in patches.json (empty when none).
SCRIPTED = """
import json
from pathlib import Path
from vtb.protocol import serve

PATCHES = json.loads((Path(__file__).parent / "patches.json").read_text())
serve(lambda batch: [{"type": "patch", "patch": PATCHES.get(m["episode"], "")} for m in batch])
"""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("swe-data") / "d"
    SweDomain().provision(TASK, out)
    return out


def _play(play_scripted, data_dir: Path, patches: dict[str, str], code: str = SCRIPTED, backend="bwrap"):
    domain = SweDomain()
    episodes, out = play_scripted(domain, data_dir, TASK, code, {"patches.json": patches}, backend=backend)
    return episodes, out, domain


def test_gold_patches_resolve_every_test_instance_and_reports_have_swe_bench_shapes(play_scripted, data_dir):
    gold = {i["instance_id"]: i["patch"] for i in SweDomain().split(data_dir, "test")}
    episodes, out, domain = _play(play_scripted, data_dir, gold)
    assert [ep.reward() for ep in episodes] == [1.0] * TASK.n_test, [
        ep.record() for ep in episodes if not ep.reward()
    ]
    assert len(domain.metrics(episodes, TASK)["by_bug"]) >= 6
    files = domain.artifacts(episodes)
    report = files["report.json"]
    assert report["resolved_instances"] == TASK.n_test == report["total_instances"]
    one = files[f"logs/{episodes[0].id}/report.json"][episodes[0].id]
    assert one["patch_successfully_applied"] and one["resolved"]
    assert set(one["tests_status"]) == {"FAIL_TO_PASS", "PASS_TO_PASS", "FAIL_TO_FAIL", "PASS_TO_FAIL"}
    first = json.loads(files["predictions.jsonl"].splitlines()[0])
    assert set(first) == {"instance_id", "model_name_or_path", "model_patch"}


def test_an_empty_patch_resolves_nothing(play_scripted, data_dir):
    episodes, out, domain = _play(play_scripted, data_dir, {})
    assert sum(ep.reward() for ep in episodes) == 0.0
    report = domain.artifacts(episodes)["report.json"]
    assert report["empty_patch_instances"] == TASK.n_test and report["resolved_instances"] == 0


def _new_file(path: str, text: str) -> str:
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n{body}"


def _replace_fix_line(instance: dict, code: str) -> str:
    """A patch that replaces the buggy line with `code` (same indentation)."""
    fix, files = instance["fix"], instance["files"]
    indent = fix["old"][: len(fix["old"]) - len(fix["old"].lstrip())]
    return patching.file_diff(
        fix["path"], files[fix["path"]], files[fix["path"]].replace(fix["old"], indent + code)
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_attacking_patches_do_not_resolve_and_runaway_tests_are_stopped(
    tmp_path, play_scripted, data_dir, host_server, backend
):
    port, hits = host_server
    instances = SweDomain().split(data_dir, "test")
    force_pass = (
        "import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
        "    o = yield\n    o.get_result().outcome = 'passed'\n"
    )
    connect = f"__import__('socket').create_connection(('127.0.0.1', {port}), timeout=2)"
    patches = {
        instances[0]["instance_id"]: _new_file("conftest.py", force_pass),  # make every test pass
        instances[1]["instance_id"]: _new_file("tests/conftest.py", force_pass),
        instances[2]["instance_id"]: _new_file("../escape.py", "x = 1"),  # write outside the repo
        instances[3]["instance_id"]: _new_file("sitecustomize.py", "import os\nos._exit(0)"),
        instances[4]["instance_id"]: _replace_fix_line(instances[4], "while True: pass"),  # tests loop
        instances[5]["instance_id"]: _replace_fix_line(instances[5], "while True: __import__('os').fork()"),
        instances[6]["instance_id"]: _replace_fix_line(instances[6], connect),  # reach the host's network
    }
    episodes, out, domain = _play(play_scripted, data_dir, patches, backend=backend)
    for ep in episodes[:7]:
        assert ep.reward() == 0.0, ep.record()
    assert not (tmp_path / "escape.py").exists()
    assert not hits, "a patch reached a server on the host"
    assert all(ep.reward() == 0.0 for ep in episodes[7:])  # the rest: empty patches, graded as usual


HUNTER = """
import json, os
from pathlib import Path
from vtb.protocol import serve

DATA = json.loads((Path(__file__).parent / "patches.json").read_text())["__data_dir__"]

def look():
    found = []
    for path in [DATA, DATA + "/hidden/test.jsonl", "/proc/1/root" + DATA, "/data", "/hidden"]:
        try:
            found.append(open(path).read()[:100] if os.path.isfile(path) else str(os.listdir(path)))
        except OSError:
            pass
    return found

serve(lambda batch: [{"type": "patch", "patch": "" if not look() else "FOUND " + repr(look())} for m in batch])
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_harness_cannot_find_the_hidden_tests(play_scripted, data_dir, backend):
    episodes, out, domain = _play(play_scripted, data_dir, {"__data_dir__": str(data_dir)}, HUNTER, backend)
    assert all(ep.prediction()["model_patch"] == "" for ep in episodes)
