"""vtb/preflight.py: the split-size check, the error's form, and the domain hook's contract."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vtb.config import SandboxConfig, TaskConfig
from vtb.preflight import PreflightError, Problem, Systems, check_domain, check_sizes, sample, split_sizes


def test_splits_as_asked_pass():
    assert split_sizes(TaskConfig(n_val=2, n_test=3), {"pool": 5, "val": 2, "test": 3}) == []


def test_a_thirty_item_set_with_default_sizes_is_refused_with_sizes_that_fit():
    # AIME: 30 problems, val takes the default 100 first, nothing is left for test or pool
    task = TaskConfig(source="aime", n_val=100, n_test=200)
    with pytest.raises(PreflightError) as err:
        check_sizes(task, {"pool": 0, "val": 30, "test": 0})
    msg = str(err.value)
    assert "split test: has 0 items, 200 needed (task.n_test=200)" in msg
    assert "split val: has 30 items, 100 needed (task.n_val=100)" in msg
    assert "split pool: has 0 items" in msg
    assert "task.n_val=7 task.n_test=15" in msg  # 30 items: a quarter for val, half for test
    assert msg.count("Fix:") == 3 and "Traceback" not in msg


def test_too_few_items_for_any_bench_names_the_data_set():
    (p,) = [
        x
        for x in split_sizes(TaskConfig(source="gsm8k", n_val=1, n_test=1), {"pool": 0, "val": 1, "test": 1})
    ]
    assert p.where == "split pool" and "at least 3" in p.fix


def test_sample_is_spread_and_deterministic():
    assert sample(list(range(10)), 3) == [0, 4, 9]  # round(4.5) is 4: banker's rounding, fixed
    assert sample([1, 2], 3) == [1, 2]


class _Refuses:
    name = "refuses"

    def preflight(self, task, data_dir, systems, sandbox):
        return [Problem("item x-1", "its gold answer scores 0", "fix the record")]


class _Silent:
    name = "silent"


def test_a_domain_hook_is_called_and_its_problems_refuse_the_run(tmp_path: Path):
    systems = Systems(tmp_path, None)
    with pytest.raises(PreflightError, match=r"item x-1: its gold answer scores 0\. Fix: fix the record"):
        check_domain(_Refuses(), TaskConfig(name="refuses"), tmp_path, systems, SandboxConfig())
    assert check_domain(_Silent(), TaskConfig(name="silent"), tmp_path, systems, SandboxConfig()) == []


def test_an_embedded_split_asked_empty_is_refused_with_the_setting():
    (p,) = split_sizes(TaskConfig(n_val=5, n_test=0), {"pool": 10, "val": 5, "test": 0})
    assert "0 items, 1 needed (task.n_test=0)" in p.what and p.fix.startswith("set task.n_test>=1")


def test_the_cli_refuses_in_seconds_with_one_message_and_spends_nothing(tmp_path: Path):
    """`python -m flows.bench` with an empty test split: exit 2, the reason and the fix once, no
    traceback, no base model provisioned, no flow run started (so no run record)."""
    import subprocess
    import sys
    import time

    repo = Path(__file__).resolve().parents[1]
    t0 = time.monotonic()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "flows.bench",
            "task.n_test=0",
            f"runs_dir={tmp_path / 'runs'}",
            f"cache_dir={tmp_path / 'cache'}",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    seconds = time.monotonic() - t0
    text = out.stdout + out.stderr
    assert out.returncode == 2, text[-3000:]
    assert text.count("split test: has 0 items") == 1 and "Fix: set task.n_test>=1" in text
    assert "Traceback" not in text and seconds < 60
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["data", "snapshots"]  # no model
    assert not (tmp_path / "runs").exists()


def test_an_inline_sweeps_bench_with_a_data_problem_is_a_failed_row_before_its_flow(tmp_path: Path):
    """A sweep checks each bench's data as the CLI does: the refusal is the row's error, no flow ran."""
    from flows.sweep import _one
    from vtb.compose import compose_config

    cfg = compose_config(
        ["task.n_test=0", f"runs_dir={tmp_path / 'runs'}", f"cache_dir={tmp_path / 'cache'}"]
    )
    row = _one(cfg)
    assert row.state == "failed" and row.error.startswith("config: preflight: task=math")
    assert "split test: has 0 items" in row.error and not (tmp_path / "runs").exists()


def test_long_problem_lists_are_capped_and_every_place_named():
    """One helper caps every domain's lists (math per split, swe per data set, tau and terminal ids)."""
    from vtb.preflight import capped, some

    assert some(["a", "b", "c"], 2) == "a, b and 1 more" and some(["a"], 2) == "a"
    problems = [Problem(f"item {i}", "gold scores 0", "fix the answer") for i in range(25)]
    out = capped(problems, 10)
    assert [p.where for p in out[:10]] == [f"item {i}" for i in range(10)] and len(out) == 11
    assert out[10] == Problem(
        "15 more",
        "problems of the same kinds at: " + some([f"item {i}" for i in range(10, 25)], 30),
        "fix the answer",
    )
    mixed = capped([*problems[:10], Problem("x", "y", "other fix"), problems[0]], 10)
    assert mixed[10].fix == "as above, for each" and capped(problems[:3], 10) == problems[:3]


def test_a_cli_run_writes_each_system_once(tmp_path: Path, monkeypatch):
    """Was: the CLI's preflight, the flow's and the background reference each wrote the systems
    (for tau, three replays of every demonstration). Now a process builds each system once."""
    from vtb.build import check_data
    from vtb.compose import compose_config
    from vtb.domains.registry import get_domain
    from vtb.pipeline import build_system, provision_data
    from vtb.step_requests import DataRequest

    cfg = compose_config([f"cache_dir={tmp_path}", "task.n_pool=40", "task.n_val=5", "task.n_test=5"])
    domain = type(get_domain("math"))
    calls = {"initial": 0, "reference": 0}
    for kind in calls:
        method = getattr(domain, f"write_{kind}_system")

        def counted(self, *args, _kind=kind, _method=method):
            calls[_kind] += 1
            return _method(self, *args)

        monkeypatch.setattr(domain, f"write_{kind}_system", counted)
    store = tmp_path / "snapshots"
    store.mkdir()
    data = provision_data(DataRequest(cfg.task, tmp_path))
    first = check_data(cfg, data, store)  # the CLI, before the flow
    assert check_data(cfg, data, store) == first  # the flow's own preflight
    assert build_system("reference", cfg, Path(data.data_dir), store)  # the background reference
    assert calls == {"initial": 1, "reference": 1}


def test_a_deployed_bench_that_is_refused_ends_failed_with_the_reason_and_no_traceback(
    tmp_path: Path, prefect_server, caplog
):
    """Was: a deployment's flow raised the PreflightError, so the worker logged a traceback and the
    sweep's row carried Prefect's wording. Now the run ends Failed with the refusal as its message."""
    from flows.bench import bench_deployment

    where = [f"runs_dir={tmp_path / 'runs'}", f"cache_dir={tmp_path / 'cache'}"]
    data = bench_deployment(overrides=["task.n_test=0", *where], return_state=True)  # in the flow
    assert data.is_failed() and data.message.startswith("refused: preflight: task=math cannot give")
    assert "split test: has 0 items" in data.message and "Fix: set task.n_test>=1" in data.message
    config = bench_deployment(overrides=["agent=no-such-agent", *where], return_state=True)  # before it
    assert config.is_failed() and config.message.startswith("refused: ")
    assert "Traceback" not in caplog.text
    made = {p.name for p in (tmp_path / "cache").iterdir()}
    assert made == {"data", "snapshots", "prefect"}  # the data step and its step cache; no model


def test_a_mistyped_key_or_option_is_refused_with_the_closest_valid_ones(tmp_path: Path):
    """A typo gets one line naming the key and what was meant, exit 2, not Hydra's hint to add it
    with `+` (which then failed on the typed config with a traceback; issue 39)."""
    import subprocess
    import sys

    from vtb.compose import check_command_line

    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-m", "flows.bench", "task.n_vall=40", f"runs_dir={tmp_path / 'runs'}"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.strip() == "refused: unknown config key task.n_vall; did you mean task.n_val?"
    assert not (tmp_path / "runs").exists()
    cases = {
        ("+task.n_vall=40",): "did you mean task.n_val?",  # Hydra's own hint, followed
        ("agent=gredy",): "did you mean agent=greedy?",
        ("task=tau", "task.n_userz=3"): "did you mean task.n_users",  # the task node typed by its domain
        ("agent.command=x",): "add it as +agent.command=",  # typed, but agent=greedy does not set it
        # a bare false is YAML's boolean: the text setting would hold 'False' (a command `False`)
        ("agent=cli", "agent.command=false"): "agent.command=false is read as a boolean, but "
        "agent.command is text (it would hold 'False'): quote the value for Hydra, \"agent.command='false'\"",
        ("agent=cli", "agent.command='false'"): None,  # quoted: the text false
        ("sandbox.reproducible=false",): None,  # a boolean setting takes it as it is
        ("-m", "agent=noop,gredy"): None,  # a multirun is checked on each sweep's first value
    }
    for args, expected in cases.items():
        if expected is None:
            check_command_line(list(args))
            continue
        with pytest.raises(ValueError, match=re.escape(expected)):
            check_command_line(list(args))
    with pytest.raises(
        ValueError,
        match=re.escape("in overrides: unknown config key budget.limt; did you mean budget.limit?"),
    ):
        check_command_line(['overrides=["budget.limt=5"]'], "sweep")
    with pytest.raises(ValueError, match="did you mean agents?"):
        check_command_line(["agentz=[noop]"], "sweep")


def test_an_agent_endpoint_that_does_not_answer_refuses_the_run_before_any_work(tmp_path: Path):
    """`agent=llm` at a port nothing listens on: exit 2 in seconds, nothing provisioned; it used
    to run the whole bench and exit 0 with the initial system submitted, like agent=noop."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "flows.bench",
            "agent=llm",
            f"agent.base_url={dead}",
            "agent.model=m",
            f"runs_dir={tmp_path / 'runs'}",
            f"cache_dir={tmp_path / 'cache'}",
        ],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.startswith("refused: agent=llm: the endpoint does not answer") and dead in out.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()
