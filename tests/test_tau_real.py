"""Whole shrunken benches on real-format tau data: tau-bench retail and tau2 retail, LLM customer.

The data are small checkouts written by hand in each project's own layout (tests/fixtures/tau/):
tau-bench's `tau_bench/envs/retail/{data/*.json, wiki.md, tasks_{train,dev,test}.py}` and tau2's
`data/tau2/domains/retail/{db.json, tasks.json, policy.md, split_tasks.json}`. Real tasks carry
gold actions and an instruction, never the embedded generator's scripted-user facts, so these runs
catch what a loader test cannot: the demo bank, the base model's texts, the initial and reference
systems and the episodes all built from what real tasks hold. The customer is an LLM behind an
OpenAI-compatible endpoint (tests/chat_server.py, the one fake: a remote API).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.chat_server import ChatServer, text
from tests.conftest import SHRUNK_BENCH, needs_bwrap

pytestmark = [pytest.mark.slow, needs_bwrap()]

FIXTURES = Path(__file__).parent / "fixtures" / "tau"
TAU_BENCH = FIXTURES / "tau-bench"
TAU2 = FIXTURES / "tau2-bench"
OPENING = "Hi, I need help with an order of mine."

SHRUNK = [
    "task=tau",
    "task.user=llm",
    "task.user_model=customer",
    "task.n_val=2",
    "task.n_test=4",
    "task.trials=1",
    "task.pass_k=1",
    "task.initial_data_size=8",
    "task.max_steps_per_episode=3",
    *SHRUNK_BENCH,
    "model.pretrain_texts=40",
    "agent=noop",
]


def customer(body: dict):
    """The customer: an opening line to the agent's greeting, then ###STOP### to whatever follows.

    The same endpoint judges tau2's NL assertions (a prompt that starts "You grade"): all met.
    """
    first = body["messages"][0]["content"]
    if first.startswith("You grade"):
        statements = first.split("Statements:", 1)[1]
        return text(json.dumps([True] * sum(line[:1].isdigit() for line in statements.splitlines())))
    turns = [m for m in body["messages"] if m["role"] != "system"]
    return text(OPENING if len(turns) == 1 else "###STOP###")


@pytest.fixture(scope="module")
def user_server():
    server = ChatServer([customer], repeat_last=True)
    yield server
    server.stop()


def _bench(tmp: Path, user_server: ChatServer, *overrides: str) -> dict:
    from flows.bench import run_bench
    from vtb.compose import compose_config

    cfg = compose_config(
        [
            *SHRUNK,
            f"task.user_base_url={user_server.url}",
            *overrides,
            f"runs_dir={tmp / 'runs'}",
            f"cache_dir={tmp / 'cache'}",
        ]
    )
    return run_bench(cfg).to_json()


@pytest.fixture(scope="module")
def tau_bench_run(tmp_path_factory, prefect_server, user_server):
    tmp = tmp_path_factory.mktemp("tau-bench-real")
    return _bench(tmp, user_server, "task.source=tau_bench", f"task.path={TAU_BENCH}")


@pytest.fixture(scope="module")
def tau2_run(tmp_path_factory, prefect_server, user_server):
    tmp = tmp_path_factory.mktemp("tau2-real")
    return _bench(
        tmp,
        user_server,
        "task.source=tau2",
        f"task.path={TAU2}",
        f"task.judge_base_url={user_server.url}",
        "task.judge_model=judge",
        "null_model_check=false",  # checked on the tau-bench run
    )


@pytest.fixture(scope="module")
def airline_run(tmp_path_factory, prefect_server, user_server):
    tmp = tmp_path_factory.mktemp("tau2-airline")
    return _bench(
        tmp,
        user_server,
        "task.source=tau2",
        f"task.path={TAU2}",
        "task.env=airline",
        "null_model_check=false",  # checked on the tau-bench run
    )


def _grading(result: dict) -> dict:
    """grading.json with each system's samples from private/samples.json (the test episodes)."""
    record = Path(result["record"])
    grading = json.loads((record / "grading.json").read_text())
    samples = json.loads((record / "private" / "samples.json").read_text())
    return {label: g | {"samples": samples.get(label, [])} for label, g in grading.items()}


def _preflight(result: dict) -> dict:
    return json.loads((Path(result["record"]) / "preflight.json").read_text())


def test_tau_bench_retail_runs_a_whole_bench(tau_bench_run, user_server):
    result = tau_bench_run
    assert result["task"] == "tau"
    grading = _grading(result)
    assert grading["submitted"]["n"] == 4  # tau-bench's own test split, one trial each
    sample = grading["submitted"]["samples"][0]
    assert sample["messages"][0] == {"role": "user", "content": OPENING}  # the LLM customer spoke
    assert 0.0 <= result["initial"]["test_score"] <= 1.0
    assert any(r["body"]["model"] == "customer" for r in user_server.requests)
    assert "domain tau" in _preflight(result)["checked"]  # gold replays, systems' rows, the endpoint
    assert grading["submitted"]["null_model_score"] == 0.0


def test_tau2_retail_runs_a_whole_bench(tau2_run):
    grading = _grading(tau2_run)
    assert grading["submitted"]["n"] == 4  # tau2's own test split (split_tasks.json)
    splits = _preflight(tau2_run)["splits"]
    assert {k: splits[k] for k in ("pool", "val", "test")} == {"pool": 6, "val": 2, "test": 4}  # from train
    assert 0.0 <= tau2_run["initial"]["test_score"] <= 1.0
    for sample in grading["submitted"]["samples"]:  # each episode records its reward basis
        assert set(sample["reward_basis"]) <= {"DB", "COMMUNICATE", "ACTION", "NL_ASSERTION"}


def test_tau2_airline_runs_a_whole_bench(airline_run):
    """Was: an airline folder was refused (and before that, read as retail)."""
    grading = _grading(airline_run)
    assert sorted(s["task"] for s in grading["submitted"]["samples"]) == ["10", "11", "8", "9"]
    preflight = _preflight(airline_run)
    assert {k: preflight["splits"][k] for k in ("pool", "val", "test", "env")} == {
        "pool": 6,
        "val": 2,
        "test": 4,
        "env": "airline",
    }
    config = json.loads((Path(airline_run["record"]) / "config.json").read_text())
    assert config["task"]["env"] == "airline"
    assert 0.0 <= airline_run["initial"]["test_score"] <= 1.0
    for sample in grading["submitted"]["samples"]:
        assert sample["messages"][0] == {"role": "user", "content": OPENING}
        assert set(sample["reward_basis"]) <= {"DB", "COMMUNICATE"}
