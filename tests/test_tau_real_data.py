"""Real-format tau data through the domain (no bench): provisioning, splits, reward basis, preflight.

The checkouts are hand-written in tau-bench's and tau2's own layouts (tests/fixtures/tau/). Each
test names the failure it guards: real tasks carry gold actions and an instruction, not the
embedded generator's scripted-user facts, and tau2 tasks carry their own splits and reward basis.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from tests.chat_server import ChatServer, text
from vtb.config import SandboxConfig, TrainerConfig
from vtb.domains.kit.jsonl import read_jsonl, write_jsonl
from vtb.domains.tau import generator, loaders, tools
from vtb.domains.tau.domain import TauConfig, TauDomain
from vtb.domains.tau.env import NOT_JUDGED, TauEpisode
from vtb.domains.tau.grading import Judge
from vtb.domains.tau.user import ScriptedUser
from vtb.preflight import Systems

FIXTURES = Path(__file__).parent / "fixtures" / "tau"
SOURCES = {"tau_bench": FIXTURES / "tau-bench", "tau2": FIXTURES / "tau2-bench"}
TAU2_RETAIL = SOURCES["tau2"] / "data" / "tau2" / "domains" / "retail"


@pytest.fixture(scope="module")
def customer():
    server = ChatServer([text("Hi, I need help with my order.")], repeat_last=True)
    yield server
    server.stop()


def _config(source: str, url: str, env: str = "retail", **extra) -> TauConfig:
    """A shrunk real-source config; unjudged NL assertions allowed (their refusal is tested apart)."""
    return TauConfig(
        name="tau",
        source=source,
        path=str(SOURCES[source]),
        env=env,
        allow_unjudged=extra.pop("allow_unjudged", True),
        user="llm",
        user_base_url=url,
        user_model="customer",
        n_val=2,
        n_test=4,
        initial_data_size=8,
        **extra,
    )


_MADE: dict[str, tuple] = {}


def _provision(
    source: str, tmp_path_factory, url: str, env: str = "retail"
) -> tuple[TauConfig, Path, Systems]:
    """(config, data dir, systems) of a real source, as the bench makes them before its preflight."""
    if (source, env) not in _MADE:
        task = _config(source, url, env)
        root = tmp_path_factory.mktemp(f"{source}-{env}")
        domain = TauDomain()
        domain.provision(task, root / "data")
        initial, reference = root / "initial", root / "reference"
        domain.write_initial_system(initial, task, TrainerConfig(), root / "data")
        domain.write_reference_system(reference, task, root / "data")
        _MADE[source, env] = (task, root / "data", Systems(initial, reference))
    return _MADE[source, env]


KINDS = [("tau2", "airline"), ("tau2", "retail"), ("tau_bench", "airline"), ("tau_bench", "retail")]


@pytest.fixture(scope="module", params=KINDS, ids=[f"{s}-{e}" for s, e in KINDS])
def provisioned(request, tmp_path_factory, customer):
    return _provision(*request.param[:1], tmp_path_factory, customer.url, request.param[1])


def test_real_tasks_make_demos_and_pretraining_texts(provisioned):
    """Was: StopIteration in expert.py (demos.write_bank -> play_demo needs task["user"]), then
    IndexError in pretraining_texts (no narrations). Now both come from gold actions and instructions."""
    task, data_dir, systems = provisioned
    domain = TauDomain()
    bank = read_jsonl(data_dir / "research" / "demos.jsonl")
    clean = [d for d in bank if d["flaw"] is None]
    assert clean and all(d["reward"] == 1.0 for d in clean)  # every train task's gold replayed in a demo
    first = clean[0]["messages"][0]
    assert first["role"] == "user" and first["content"].startswith(
        ("I ", "My ")
    )  # the instruction, first person
    texts = domain.pretraining_texts(task, data_dir, 5, seed=0)
    assert len(texts) == 5 and all(texts)
    rows = read_jsonl(systems.reference / "data" / "train.jsonl")
    assert rows and all(r["segments"] for r in rows)
    spec = domain.tokenizer_spec(task, data_dir)
    policy = "Airline agent policy" if task.env == "airline" else "Retail agent policy"
    assert any(policy in w for w in spec["words"])  # the data set's policy, not ours


def test_official_splits_are_used(provisioned):
    """Was: the pool, val and test were all cut from the test tasks; tau2's train split was ignored."""
    task, data_dir, _ = provisioned
    domain = TauDomain()
    ids = {s: [t["id"] for t in domain.split(data_dir, s)] for s in ("pool", "val", "test")}
    if task.source == "tau_bench" and task.env == "airline":  # tau-bench's airline has a test split only
        assert sorted(ids["test"] + ids["val"] + ids["pool"]) == [f"test-{i:04d}" for i in range(12)]
        assert (len(ids["test"]), len(ids["val"])) == (4, 2)
    elif task.source == "tau_bench":
        assert sorted(ids["test"]) == [f"test-{i:04d}" for i in range(4)]
        assert sorted(ids["val"]) == ["dev-0000", "dev-0001"]
        assert sorted(ids["pool"]) == [f"train-{i:04d}" for i in range(6)]
    else:
        folder = TAU2_RETAIL.parent / task.env
        splits = json.loads((folder / "split_tasks.json").read_text())
        assert sorted(ids["test"]) == sorted(splits["test"])
        assert sorted(ids["val"] + ids["pool"]) == sorted(splits["train"]) and len(ids["val"]) == 2
    tools_sent = [
        s["function"]["name"] for s in json.loads((data_dir / "research" / "tools.json").read_text())
    ]
    assert ("get_item_details" in tools_sent) == (task.source == "tau2" and task.env == "retail")
    assert ("book_reservation" in tools_sent) == (task.env == "airline")


def test_preflight_passes_on_real_data(provisioned):
    task, data_dir, systems = provisioned
    assert TauDomain().preflight(task, data_dir, systems, SandboxConfig()) == []


def test_preflight_refuses_a_dead_customer_endpoint_in_seconds(provisioned):
    task, data_dir, systems = provisioned
    dead = ChatServer([text("")])
    url = dead.url
    dead.stop()  # nothing listens there any more
    task = _config(task.source, url, task.env)
    start = time.monotonic()
    problems = TauDomain().preflight(task, data_dir, systems, SandboxConfig())
    assert time.monotonic() - start < 15
    assert [p.where for p in problems] == [f"task.user_base_url={url}"]
    assert "did not answer" in problems[0].what and "task.user_model=customer" in problems[0].what


def test_preflight_refuses_unjudged_nl_assertions_unless_allowed(tmp_path_factory, customer):
    """tau2 retail's val/test tasks 3 and 11 rest on NL assertions: without a judge their score
    would not be tau2's, so the run is refused with both fixes named (was: a log line, and doing
    nothing scored 1 on task 11)."""
    task, data_dir, systems = _provision("tau2", tmp_path_factory, customer.url)
    refused = _config("tau2", customer.url, allow_unjudged=False)
    problems = TauDomain().preflight(refused, data_dir, systems, SandboxConfig())
    assert [p.where for p in problems] == ["val tasks 3", "test tasks 11"]  # the pool is never scored
    assert "NL_ASSERTION" in problems[0].what and "task.judge_base_url" in problems[0].fix
    assert "task.allow_unjudged=true" in problems[0].fix
    judged = _config("tau2", customer.url, allow_unjudged=False, judge_base_url=customer.url, judge_model="j")
    assert not [
        p for p in TauDomain().preflight(judged, data_dir, systems, SandboxConfig()) if "NL_" in p.what
    ]


def test_preflight_names_broken_gold_an_unscorable_task_and_lying_rows(tmp_path_factory, customer, tmp_path):
    task, data_dir, systems = _provision("tau2", tmp_path_factory, customer.url)  # one source: same checks
    data = tmp_path / "data"
    shutil.copytree(data_dir, data)
    test = read_jsonl(data / "hidden" / "test.jsonl")
    test[0]["actions"][-1]["kwargs"]["order_id"] = "#W0000000"  # gold that cannot replay
    test[1]["reward_basis"] = ["COMMUNICATE"]  # a write the reward never looks at
    write_jsonl(data / "hidden" / "test.jsonl", test)
    initial = tmp_path / "initial"
    shutil.copytree(systems.initial, initial)
    rows = read_jsonl(initial / "data" / "trajectories.jsonl")
    rows[0]["reward"] = 1.0 - rows[0]["reward"]  # a row whose recorded reward its replay does not give
    write_jsonl(initial / "data" / "trajectories.jsonl", rows)
    problems = TauDomain().preflight(task, data, Systems(initial, None), SandboxConfig())
    text_ = "\n".join(map(str, problems))
    assert f"test task {test[0]['id']}: its gold action" in text_ and "order not found" in text_
    assert f"test task {test[1]['id']}: an episode in which the agent does nothing earns reward 1" in text_
    assert "system initial (data/trajectories.jsonl): 1 of 8 rows record a reward" in text_


def test_embedded_preflight_passes(tmp_path):
    task = TauConfig(name="tau", n_users=20, n_pool=24, n_val=4, n_test=4, initial_data_size=12)
    domain = TauDomain()
    domain.provision(task, tmp_path / "data")
    domain.write_initial_system(tmp_path / "initial", task, TrainerConfig(), tmp_path / "data")
    domain.write_reference_system(tmp_path / "reference", task, tmp_path / "data")
    systems = Systems(tmp_path / "initial", tmp_path / "reference")
    assert domain.preflight(task, tmp_path / "data", systems, SandboxConfig()) == []


def test_a_folder_of_the_other_environment_is_refused_with_the_setting_that_fits(tmp_path):
    """Was: an airline folder was read as retail (`retail db needs a 'orders' table`).

    Now each environment is played when asked for (task.env), and a folder of the other one is
    refused by name with the setting that fits, never misread.
    """
    airline = SOURCES["tau2"] / "data" / "tau2" / "domains" / "airline"
    with pytest.raises(
        ValueError, match=r"tau 'airline' domain .*task.env=retail was asked for; set task.env=airline"
    ):
        loaders.load_splits("tau2", airline)
    assert tools.env_of(loaders.load_splits("tau2", airline, "airline")[0]) == "airline"
    with pytest.raises(ValueError, match=r"tau 'retail' domain .*set task.env=retail"):
        loaders.load_splits("tau2", TAU2_RETAIL, "airline")
    env = SOURCES["tau_bench"] / "tau_bench" / "envs" / "airline"  # data/{flights,reservations,users}.json
    with pytest.raises(ValueError, match=r"tau 'airline' domain \(db tables: flights, reservations, users\)"):
        loaders.load_splits("tau_bench", env)
    telecom = tmp_path / "telecom"  # tau2's third domain: named by its tasks, not played here
    shutil.copytree(TAU2_RETAIL, telecom)
    tasks_ = json.loads((telecom / "tasks.json").read_text())
    for t in tasks_:
        t["user_scenario"]["instructions"]["domain"] = "telecom"
    (telecom / "tasks.json").write_text(json.dumps(tasks_))
    with pytest.raises(ValueError, match=r"tau 'telecom' domain .*task=tau plays retail and airline only"):
        loaders.load_splits("tau2", telecom)
    with pytest.raises(ValueError, match=r"task.env='telecom' is not one of retail, airline"):
        loaders.load_splits("tau2", telecom, "telecom")


# --- tau2's reward basis ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tau2_tasks():
    db, splits, _ = loaders.load_splits("tau2", SOURCES["tau2"])
    return db, {t["id"]: t for s in splits.values() for t in s}


def _episode(task: dict, db: dict, actions: list[dict], judge=None) -> TauEpisode:
    episode = TauEpisode(
        task, 0, db, tools.hash_db(generator.replay(db, task["actions"])), ScriptedUser(), ""
    )
    episode.judge = judge
    for action in actions:
        episode.step({"type": "tool_call", "name": action["name"], "arguments": action["kwargs"]})
    episode.step({"type": "message", "content": "Done. " + " ".join(task["outputs"])})
    assert episode.finished
    return episode


def test_action_basis_needs_every_gold_call(tau2_tasks):
    """Was: reward_basis ignored; a task graded on ACTION earned 1 with the right writes alone."""
    db, by_id = tau2_tasks
    task = by_id["5"]  # reward_basis DB + ACTION
    assert task["reward_basis"] == ["DB", "ACTION"]
    writes_only = [a for a in task["actions"] if a["name"] in tools.WRITE_TOOLS]
    episode = _episode(task, db, writes_only)
    assert episode.components() == {"DB": 1.0, "ACTION": 0.0} and episode.reward() == 0.0
    episode = _episode(task, db, task["actions"])
    assert episode.components() == {"DB": 1.0, "ACTION": 1.0} and episode.reward() == 1.0
    assert episode.record()["reward_basis"] == {"DB": 1.0, "ACTION": 1.0}


def test_communicate_basis_and_tau_bench_tasks_unchanged(tau2_tasks):
    db, by_id = tau2_tasks
    task = by_id["4"]  # DB + COMMUNICATE ("49.67")
    silent = _episode(task | {"outputs": []}, db, task["actions"])
    silent.task = task  # the agent said nothing of the price
    assert silent.components() == {"DB": 1.0, "COMMUNICATE": 0.0} and silent.reward() == 0.0
    tau_bench = {k: v for k, v in task.items() if k != "reward_basis"}
    assert "reward_basis" not in _episode(tau_bench, db, task["actions"]).record()


def test_nl_assertions_are_judged_only_with_a_judge(tau2_tasks):
    """Was: nl_assertions loaded and never used. Without a judge: recorded as not judged."""
    db, by_id = tau2_tasks
    task = by_id["3"]  # DB + NL_ASSERTION, one assertion
    episode = _episode(task, db, task["actions"])
    assert episode.components() == {"DB": 1.0, "NL_ASSERTION": NOT_JUDGED}
    assert episode.not_judged() == ["NL_ASSERTION"] and episode.reward() == 1.0
    assert TauDomain().metrics([episode], TauConfig(trials=1, pass_k=1))["not_judged"] == 1
    verdicts = ChatServer([text("[false]"), text("Verdicts: [true]"), text("yes")])
    try:
        judge = Judge(verdicts.url, "judge")
        assert _episode(task, db, task["actions"], judge).components()["NL_ASSERTION"] == 0.0
        judged = _episode(task, db, task["actions"], judge)
        assert judged.components()["NL_ASSERTION"] == 1.0 and judged.reward() == 1.0
        unreadable = _episode(task, db, task["actions"], judge)
        assert unreadable.components()["NL_ASSERTION"] == NOT_JUDGED  # never a guessed verdict
        prompt = verdicts.requests[0]["body"]["messages"][0]["content"]
        assert task["nl_assertions"][0] in prompt and "assistant: Done." in prompt
    finally:
        verdicts.stop()


def test_kit_data_tools_run_on_real_tasks(provisioned, tmp_path, capsys):
    """Was: `datatools check` (greedy's clean-demos edit) died on real tasks: they have no template."""
    from vtb.domains.tau.kit import datatools

    _, data_dir, _ = provisioned
    files = [
        "--pool",
        str(data_dir / "research" / "pool.jsonl"),
        "--bank",
        str(data_dir / "research" / "demos.jsonl"),
    ]
    out = tmp_path / "trajectories.jsonl"
    datatools.main(["demos", "--n", "12", "--out", str(out), *files])
    datatools.main(["check", str(out), *files])
    printed = capsys.readouterr().out
    assert "12/12 demonstrations earn reward 1" in printed and "-               reward 1: 12" in printed


def test_the_summary_says_how_many_episodes_were_not_judged():
    """A score with unjudged components is never printed as if it were whole."""
    from vtb import record
    from vtb.bench_result import BenchResult
    from vtb.results import Grade

    score = record._score(Grade(0.25, metrics={"pass^1": 0.25, "not_judged": 1})).to_json()
    budget = {"used": 1.0, "limit": 2.0, "unit": "flops", "cpu_seconds": 1.0}
    result = {
        "run_id": "tau-noop-s0",
        "task": "tau",
        "agent": "noop",
        "model": "tiny",
        "seed": 0,
        "initial": score,
        "submitted": {**score, "iteration": 0},
        "reference": None,
    }
    result |= {"budget": budget, "gains_by_part": {}, "contamination": None, "record": "runs/x"}
    result = BenchResult.from_json(result)
    table = record.summary_table(result)
    assert (
        "initial system (test)     0.250  (1 episodes not judged: scored on their other components)" in table
    )
