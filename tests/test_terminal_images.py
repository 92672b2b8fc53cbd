"""Terminal-Bench and Harbor tasks whose environment exists only in their Dockerfile.

Each task's /app input comes only through a `COPY` in its Dockerfile (FROM a public base image,
mapped to the local vtb/hostroot, as an offline machine would). On docker the image is built
from the Dockerfile, the gold solution resolves and doing nothing does not; on bwrap such a task
is refused at provisioning and at play, never started with an empty /app. The agent's state
outlives a shell that exits, and what it plants for the tests does not count. A Harbor task's
[environment] limits (cpus, memory_mb, storage_mb, build_timeout_sec) are its containers' and its
build's; a docker-compose.yaml with containers beyond the task's own marks it multi-container.
"""

from __future__ import annotations

import json
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import sandbox_backend
from tests.test_native_image import HOSTROOT, hostroot_image
from vtb.domains.registry import get_domain
from vtb.domains.terminal import grading, images
from vtb.domains.terminal.domain import TerminalConfig
from vtb.domains.terminal.env import TerminalEpisode
from vtb.domains.terminal.loaders import read_task

BASES = {"python:3.13-slim": HOSTROOT, "ubuntu:24.04": HOSTROOT}

TB_TASK = {
    "task.yaml": "instruction: Count the lines of /app/data.txt into /app/count.txt.\nmax_test_timeout_sec: 30\n",
    "Dockerfile": "FROM python:3.13-slim\nWORKDIR /app\nCOPY data.txt /app/data.txt\nRUN chmod 0644 /app/data.txt\n",
    "data.txt": "a\nb\nc\n",
    "run-tests.sh": "#!/bin/bash\ncd $TEST_DIR && python3 -m pytest test_outputs.py -rA -p no:cacheprovider\n",
    "tests/test_outputs.py": """
        from pathlib import Path

        def test_count():
            assert Path("/app/count.txt").read_text().strip() == "3"
        """,
    "solution.sh": "#!/bin/bash\nwc -l < /app/data.txt > /app/count.txt\n",
}
HARBOR_TASK = {
    "task.toml": "[verifier]\ntimeout_sec = 30.0\n[agent]\ntimeout_sec = 60.0\n",
    "instruction.md": "Sum the numbers in /app/input.csv into /app/sum.txt.\n",
    "environment/Dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\nCOPY input.csv /app/input.csv\n",
    "environment/input.csv": "2\n3\n5\n",
    "solution/solve.sh": "#!/bin/bash\npython3 -c \"print(sum(map(int, open('/app/input.csv'))))\" > /app/sum.txt\n",
    "tests/test.sh": """
        #!/bin/bash
        if [ "$(cat /app/sum.txt 2>/dev/null)" = "10" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
        """,
}


def _folder(root: Path, name: str, files: dict) -> Path:
    for rel, text in files.items():
        path = root / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return root / name


@pytest.fixture(params=["tb", "harbor"])
def task(request, tmp_path) -> dict:
    files = TB_TASK if request.param == "tb" else HARBOR_TASK
    return read_task(_folder(tmp_path, f"{request.param}-copy-only", files))


def _play(sandbox, task: dict, tmp_path: Path, commands: list[str]) -> TerminalEpisode:
    cfg = TerminalConfig(name="terminal", base_images=[f"{k}={v}" for k, v in BASES.items()])
    tag = images.ensure_image(sandbox.api, task, cfg.base_map())
    workdir = sandbox.api.inspect_image(tag)["Config"]["WorkingDir"]
    ep = TerminalEpisode(task, 0, sandbox, tmp_path / "scratch", image=(tag, workdir))
    for command in commands:
        ep.step({"type": "shell", "command": command})
    ep.step({"type": "answer"})
    return ep


def test_the_input_is_only_in_the_dockerfile(task):
    assert task["files"] == {} and "environment" in task
    assert not any(rel.startswith(("tests", "solution")) for rel in task["environment"]["context"])


@pytest.mark.docker
def test_a_task_keeps_one_image_whatever_its_edits(task, tmp_path):
    """Was: each content of a task's environment left its own vtb-task-* image in the engine."""
    import base64
    import uuid

    hostroot_image()
    sandbox = sandbox_backend("docker")
    cfg = TerminalConfig(name="terminal", base_images=[f"{k}={v}" for k, v in BASES.items()])
    tags = []
    for edit in (uuid.uuid4().hex, uuid.uuid4().hex):  # contents this engine has never built
        env = task["environment"]
        dockerfile = base64.b64decode(env["context"][env["dockerfile"]]["b64"]).decode()
        changed = dockerfile + f"\nENV VTB_EDIT={edit}\n"
        env["context"][env["dockerfile"]]["b64"] = base64.b64encode(changed.encode()).decode()
        tags.append(images.ensure_image(sandbox.api, task, cfg.base_map()))
    repo = tags[0].rsplit(":", 1)[0]
    left = [t for image in sandbox.api.images(name=repo) for t in image.get("RepoTags") or []]
    assert tags[0] != tags[1] and left == [tags[1]]


@pytest.mark.docker
def test_gold_resolves_and_nothing_does_not_on_docker(task, tmp_path):
    hostroot_image()
    sandbox = sandbox_backend("docker")
    gold = _play(sandbox, task, tmp_path / "gold", [task["solution"]])
    assert gold.reward() == 1.0, gold.record()
    assert _play(sandbox, task, tmp_path / "nothing", []).reward() == 0.0


@pytest.mark.docker
def test_the_state_outlives_a_shell_that_exits_and_planted_tests_do_not_count(task, tmp_path):
    hostroot_image()
    sandbox = sandbox_backend("docker")
    plant = (
        "mkdir -p /tests && printf 'def test_ok():\\n    pass\\n' > /tests/test_outputs.py"
        " && printf '#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh; exit 3"
    )
    ep = _play(sandbox, task, tmp_path / "plant", [plant, "ls /tests"])
    assert "test_outputs.py" in ep.history[1]["output"], ep.history  # the second shell saw the state
    assert ep.reward() == 0.0, ep.record()


@pytest.mark.docker
def test_a_missing_base_image_names_it_and_the_mapping(task, tmp_path):
    sandbox = sandbox_backend("docker")
    with pytest.raises(images.BuildError, match=r"(python:3\.13-slim|ubuntu:24\.04).*task\.base_images"):
        images.ensure_image(sandbox.api, task, {})


def test_bwrap_refuses_such_a_task_at_provisioning_and_at_play(task, tmp_path):
    domain = get_domain("terminal")
    data = tmp_path / "data"
    (data / "hidden").mkdir(parents=True)
    (data / "research").mkdir()
    (data / "research" / "pool.jsonl").write_text("")
    (data / "hidden" / "val.jsonl").write_text("")
    (data / "hidden" / "test.jsonl").write_text(json.dumps(task) + "\n")
    with pytest.raises(ValueError, match=rf"{task['id']}.*sandbox=docker"):
        domain.check_sandbox(data, "bwrap")
    domain.check_sandbox(data, "docker")
    with pytest.raises(ValueError, match=rf"{task['id']}.*sandbox=docker"):
        domain.episodes(data, "test", TerminalConfig(name="terminal"), sandbox_backend("bwrap"))


# Built tasks' tests share the agent's filesystem (as in Terminal-Bench), so an agent can try to
# forge them through the runner itself. Each of these makes one format's tests pass without the
# work when nothing checks the final state (the control below shows it).
FORGERIES = {
    "python3 prints a pass": (
        'printf \'#!/bin/sh\\necho "=== short test summary info ==="\\necho "PASSED test_outputs.py::test_count"\\n\''
        " > $(readlink -f $(which python3))"
    ),
    "cat prints the answer": "printf '#!/bin/sh\\necho 10\\n' > $(readlink -f $(which cat))",
    "a .pth that fakes the file": (
        "echo 'import pathlib; pathlib.Path.read_text = lambda self, *a, **k: \"3\"'"
        " > /usr/lib/python3/dist-packages/zz.pth"
    ),
    "a bash earlier on PATH": "mkdir -p /usr/local/bin && printf '#!/bin/sh\\necho 1 > /logs/verifier/reward.txt\\n' > /usr/local/bin/bash && chmod +x /usr/local/bin/bash",
}


@pytest.mark.docker
def test_forging_the_test_runner_is_never_a_pass(task, tmp_path, monkeypatch):
    hostroot_image()
    sandbox = sandbox_backend("docker")
    for name, forge in FORGERIES.items():
        ep = _play(sandbox, task, tmp_path / name.replace(" ", "-"), [forge])
        assert ep.reward() == 0.0, (name, ep.record())
        assert "<changed the test runner's files>" in ep.grade()[0], (name, ep.grade())
    # The control: without the check, some forgery passes for this format.
    monkeypatch.setattr(grading, "runner_tampering", lambda changes: [])
    forged = [
        n
        for n, f in FORGERIES.items()
        if _play(sandbox, task, tmp_path / f"u-{hash(n)}", [f]).reward() == 1.0
    ]
    assert forged, "no forgery works even unchecked: the test shows nothing"


# --- Harbor's [environment] limits (task.toml), as published tasks write them -----------------
LIMITED = {
    **HARBOR_TASK,
    "task.toml": (
        "[verifier]\ntimeout_sec = 30.0\n[agent]\ntimeout_sec = 60.0\n"
        "[environment]\nbuild_timeout_sec = 120.0\ncpus = 1\nmemory_mb = 600\nstorage_mb = 50\n"
    ),
}


def test_harbor_environment_limits_are_read_in_both_spellings(tmp_path):
    task = read_task(_folder(tmp_path, "limited", LIMITED))
    assert task["resources"] == {"build_timeout_sec": 120.0, "cpus": 1.0, "memory_mb": 600, "storage_mb": 50}
    older = {**LIMITED, "task.toml": '[environment]\nmemory = "2G"\nstorage = "512M"\ncpus = 2\n'}
    assert read_task(_folder(tmp_path, "older", older))["resources"] == {
        "cpus": 2.0,
        "memory_mb": 2048,
        "storage_mb": 512,
    }
    bad = {**LIMITED, "task.toml": "[environment]\nmemory_mb = -1\n"}
    with pytest.raises(
        ValueError, match=r"task\.toml: \[environment\] memory_mb = -1 is not a number above 0"
    ):
        read_task(_folder(tmp_path, "bad", bad))


def test_a_compose_file_with_only_the_tasks_own_container_is_not_multi_container(tmp_path):
    own = "services:\n  client:\n    build:\n      dockerfile: Dockerfile\n"
    assert "compose" not in read_task(_folder(tmp_path, "own", {**TB_TASK, "docker-compose.yaml": own}))
    two = own + "  db:\n    image: postgres:16\n"
    task = read_task(_folder(tmp_path, "two", {**TB_TASK, "docker-compose.yaml": two}))
    assert task["compose"] == {"file": "docker-compose.yaml", "services": ["client", "db"]}
    sidecar = "services:\n  main:\n    build: .\n  mcp-server:\n    build: mcp-server\n"
    harbor = read_task(_folder(tmp_path, "h", {**HARBOR_TASK, "environment/docker-compose.yaml": sidecar}))
    assert harbor["compose"]["services"] == ["main", "mcp-server"]


@pytest.mark.docker
def test_harbor_environment_limits_are_the_containers_limits(tmp_path):
    hostroot_image()
    sandbox = sandbox_backend("docker")
    task = read_task(_folder(tmp_path, "limited", LIMITED))
    cfg = TerminalConfig(name="terminal", base_images=[f"{k}={v}" for k, v in BASES.items()])
    tag, workdir = images.built_image(sandbox, task, cfg.base_map())
    ep = TerminalEpisode(task, 0, sandbox, tmp_path / "scratch", image=(tag, workdir))
    ep.step({"type": "shell", "command": "echo up"})
    host = sandbox.api.inspect_container(ep.turns.shell._proc.id)["HostConfig"]
    assert host["NanoCpus"] == 10**9 and host["Memory"] == 600 << 20, host
    # Each kill ends the shell; the sleeps keep it alive until the monitor sees what it did.
    ep.step({"type": "shell", "command": "head -c 120M /dev/zero > /app/big; sleep 10"})
    ep.step({"type": "shell", "command": "python3 -c 'b = bytearray(1200 << 20)'; sleep 10"})
    ep.step({"type": "answer"})
    statuses, _ = ep.grade()
    assert ep.turns.usage["killed"] == ["disk", "memory"], (ep.turns.usage, ep.history)
    assert ep.reward() == 0.0 and statuses  # the tests still ran on the state left


@pytest.mark.docker
def test_a_build_past_its_build_timeout_is_stopped_and_named(tmp_path):
    hostroot_image()
    sandbox = sandbox_backend("docker")
    slow = {
        **LIMITED,
        "task.toml": "[environment]\nbuild_timeout_sec = 3.0\n",
        "environment/Dockerfile": (
            "FROM ubuntu:24.04\nWORKDIR /app\nCOPY input.csv /app/input.csv\n"
            f"RUN echo {uuid.uuid4()} && sleep 60\n"  # unique: an image built before would be found
        ),
    }
    task = read_task(_folder(tmp_path, "slow", slow))
    started = time.monotonic()
    with pytest.raises(
        images.BuildError, match=r"task slow: its image build took longer than its build_timeout_sec = 3"
    ):
        images.ensure_image(sandbox.api, task, {"ubuntu:24.04": HOSTROOT})
    assert time.monotonic() - started < 20
