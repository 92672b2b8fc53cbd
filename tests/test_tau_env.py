"""The tau-bench reward of a retail episode, driven by hand with scripted action lists.

Reward 1 iff the episode ended (###STOP### or a transfer to a human) within the step limit, the
final database equals the gold one (extra or wrong writes fail, extra reads do not), and every
expected output appears in the agent's messages (case-insensitive, commas removed). Also pinned:
pass^k, the disjoint splits a provisioned domain writes, the scripted user, the demo tools and the
text format of actions.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest

from vtb.config import TaskConfig
from vtb.domains.common import pass_hat_k
from vtb.domains.tau import demos as datatools
from vtb.domains.tau import expert
from vtb.domains.tau.db import make_db
from vtb.domains.tau.domain import TauConfig, TauDomain
from vtb.domains.tau.env import MAX_STEPS, TauEpisode
from vtb.domains.tau.generator import TEMPLATES, make_tasks, replay
from vtb.domains.tau.kit import prompting
from vtb.domains.tau.tools import WRITE_TOOLS, hash_db
from vtb.domains.tau.user import STOP, ScriptedUser


@pytest.fixture(scope="module")
def db() -> dict:
    return make_db(7, n_users=12)


@pytest.fixture(scope="module")
def task_list(db) -> list[dict]:
    """40 tasks, five of each template (the 12-user database holds that many distinct ones)."""
    tasks = make_tasks(db, 1, 40, "t")
    assert {t["template"] for t in tasks} == set(TEMPLATES)
    return tasks


def of(task_list: list[dict], template: str) -> list[dict]:
    return [t for t in task_list if t["template"] == template]


def episode(db: dict, task: dict, trial: int = 0, max_steps: int = MAX_STEPS) -> TauEpisode:
    gold = hash_db(replay(db, task["actions"]))
    return TauEpisode(task, trial, db, gold, ScriptedUser(), policy="the policy", max_steps=max_steps)


def gold_plan(ep: TauEpisode) -> list[dict]:
    """The expert's actions for this episode: identify, gold reads, [confirm, write], closing message."""
    return copy.deepcopy(expert.plan(ep.task, ep.messages[0]["content"]))


def drive(ep: TauEpisode, actions: list[dict]) -> bool:
    """Play the actions in order (the episode must still run before each); return step's last value."""
    running = True
    for action in actions:
        assert running, f"episode ended before {action}"
        running = ep.step(action)
    return running


def call(name: str, **arguments) -> dict:
    return {"type": "tool_call", "name": name, "arguments": arguments}


def say(content: str) -> dict:
    return {"type": "message", "content": content}


def last_tool_result(ep: TauEpisode) -> str:
    return next(m["content"] for m in reversed(ep.messages) if m["role"] == "tool")


def write_index(actions: list[dict]) -> int:
    return next(i for i, a in enumerate(actions) if a.get("name") in WRITE_TOOLS)


NEW_ADDRESS = {
    "address1": "1 New Road",
    "address2": "Suite 2",
    "city": "Boston",
    "state": "MA",
    "country": "USA",
    "zip": "02108",
}


# --- 1. the gold path -----------------------------------------------------------------------------


@pytest.mark.parametrize("template", TEMPLATES)
def test_the_experts_gold_path_earns_one_for_every_template(db, task_list, template):
    for task in of(task_list, template)[:2]:
        for trial in range(4):  # trials change the user's identity form, hence the expert's lookup
            ep = episode(db, task, trial)
            agent = expert.Expert(task)
            steps = 0
            while ep.step(agent.act(ep.messages)):
                steps += 1
                assert steps < MAX_STEPS
            assert ep.finished and not ep.timeout and ep.failure is None
            assert STOP in ep.messages[-1]["content"]
            assert hash_db(ep.db) == ep.gold_hash
            assert ep.reward() == 1.0
            assert ep.record()["reward"] == 1.0
            assert ep.record()["steps"] == ep.steps == len(gold_plan(episode(db, task, trial)))


def test_the_episode_acts_on_a_copy_of_the_database(db, task_list):
    before = hash_db(db)
    task = of(task_list, "cancel")[0]
    ep = episode(db, task)
    drive(ep, gold_plan(ep))
    assert ep.reward() == 1.0
    assert hash_db(db) == before
    assert db["orders"][task["user"]["order_id"]]["status"] == "pending"


# --- 2. an extra write ----------------------------------------------------------------------------


@pytest.mark.parametrize("template", TEMPLATES)
def test_an_extra_address_write_after_the_gold_path_gives_zero(db, task_list, template):
    task = of(task_list, template)[0]
    ep = episode(db, task)
    actions = gold_plan(ep)
    extra = call("modify_user_address", user_id=task["user_id"], **NEW_ADDRESS)
    drive(ep, [*actions[:-1], extra, actions[-1]])
    assert not any(m["role"] == "tool" and m["content"].startswith("Error") for m in ep.messages)
    assert ep.finished
    assert ep.reward() == 0.0


def test_cancelling_another_pending_order_as_well_gives_zero(db, task_list):
    task = of(task_list, "cancel")[0]
    gold_order = task["user"]["order_id"]
    other = next(
        o for o in sorted(db["orders"]) if db["orders"][o]["status"] == "pending" and o != gold_order
    )
    ep = episode(db, task)
    actions = gold_plan(ep)
    drive(
        ep,
        [*actions[:-1], call("cancel_pending_order", order_id=other, reason="no longer needed"), actions[-1]],
    )
    assert json.loads(last_tool_result(ep))["status"] == "cancelled"
    assert ep.finished and ep.reward() == 0.0


def test_repeating_the_same_address_write_leaves_the_state_and_the_reward(db, task_list):
    """tau-bench compares database states: an idempotent repeat is not an extra change."""
    task = of(task_list, "user_address")[0]
    ep = episode(db, task)
    actions = gold_plan(ep)
    i = write_index(actions)
    drive(ep, [*actions[: i + 1], copy.deepcopy(actions[i]), *actions[i + 1 :]])
    assert ep.reward() == 1.0


# --- 3. a wrong argument in the write -------------------------------------------------------------


def _wrong_write(db: dict, task: dict) -> dict | None:
    """The gold write with one argument changed to another valid value, or None if there is none."""
    write = copy.deepcopy(next(a for a in task["actions"] if a["name"] in WRITE_TOOLS))
    kw = write["kwargs"]
    template = task["template"]
    order = db["orders"].get(kw.get("order_id"))
    methods = db["users"][task["user_id"]]["payment_methods"]
    if template == "cancel":
        kw["reason"] = "ordered by mistake" if kw["reason"] == "no longer needed" else "no longer needed"
    elif template == "modify_payment":
        current = order["payment_history"][0]["payment_method_id"]
        others = sorted(set(methods) - {current, kw["payment_method_id"]})
        if not others:
            return None
        kw["payment_method_id"] = others[0]
    elif template == "return":
        others = sorted({i["item_id"] for i in order["items"]} - set(kw["item_ids"]))
        if not others:
            return None
        kw["item_ids"] = others[:1]
    elif template in ("exchange", "modify_items"):
        old = next(i for i in order["items"] if i["item_id"] == kw["item_ids"][0])
        variants = db["products"][old["product_id"]]["variants"].values()
        others = sorted(
            v["item_id"]
            for v in variants
            if v["available"] and v["item_id"] not in (old["item_id"], kw["new_item_ids"][0])
        )
        if not others:
            return None
        kw["new_item_ids"] = others[:1]
    elif template in ("user_address", "order_address"):
        kw["zip"] = "99999"
    else:
        raise AssertionError(template)
    return write


@pytest.mark.parametrize("template", [t for t in TEMPLATES if t != "order_status"])
def test_a_wrong_argument_in_the_write_gives_zero(db, task_list, template):
    for task in of(task_list, template):
        wrong = _wrong_write(db, task)
        if wrong is None:
            continue
        ep = episode(db, task)
        actions = gold_plan(ep)
        i = write_index(actions)
        actions[i]["arguments"] = wrong["kwargs"]
        drive(ep, actions)
        assert not last_tool_result(ep).startswith("Error"), last_tool_result(ep)  # the write itself succeeds
        assert ep.finished and ep.reward() == 0.0
        return
    pytest.fail(f"no {template} task has another valid argument for its write")


def test_a_failed_write_leaves_the_database_and_gives_zero(db, task_list):
    task = of(task_list, "cancel")[0]
    ep = episode(db, task)
    actions = gold_plan(ep)
    i = write_index(actions)
    actions[i]["arguments"]["reason"] = "changed my mind"  # not a valid reason
    before = hash_db(ep.db)
    drive(ep, actions)
    assert last_tool_result(ep) == "Error: invalid reason"
    assert hash_db(ep.db) == before
    assert ep.finished and ep.reward() == 0.0


def test_skipping_the_write_gives_zero(db, task_list):
    task = of(task_list, "modify_payment")[0]
    ep = episode(db, task)
    actions = gold_plan(ep)
    del actions[write_index(actions)]
    drive(ep, actions)
    assert ep.finished and ep.reward() == 0.0


# --- 4. expected outputs --------------------------------------------------------------------------


def _status_episode(db: dict, task: dict, final: str) -> TauEpisode:
    ep = episode(db, task)
    drive(ep, [*gold_plan(ep)[:-1], say(final)])
    assert ep.finished
    return ep


def test_order_status_needs_the_status_in_an_agent_message(db, task_list):
    for task in of(task_list, "order_status"):
        status, oid = task["outputs"][0], task["user"]["order_id"]
        assert status in {"pending", "processed", "delivered", "cancelled"}
        # the status is in the tool result the agent read, but never said
        assert _status_episode(db, task, f"I have looked up order {oid} for you.").reward() == 0.0
        wrong = "processed" if status != "processed" else "delivered"
        assert _status_episode(db, task, f"Order {oid} is {wrong}.").reward() == 0.0
        assert _status_episode(db, task, f"Order {oid} is {status}.").reward() == 1.0
        assert _status_episode(db, task, f"Order {oid} is {status.upper()}.").reward() == 1.0
        assert _status_episode(db, task, f"Status: {status.capitalize()}, as of today").reward() == 1.0
        assert _status_episode(db, task, f"It is {status.upper()},").reward() == 1.0
        # commas are removed from the agent's text before the match
        split = f"{status[:2]},{status[2:]}"
        assert _status_episode(db, task, f"It is {split}.").reward() == 1.0


def test_outputs_with_commas_match_with_or_without_them(db, task_list):
    task = copy.deepcopy(of(task_list, "order_status")[0])
    task["outputs"] = ["1,234.50"]
    for said, reward in [
        ("It costs 1234.50 dollars.", 1.0),
        ("It costs 1,234.50 dollars.", 1.0),
        ("It costs 1,234.5 dollars.", 0.0),
    ]:
        assert _status_episode(db, task, said).reward() == reward, said


def test_every_expected_output_must_appear(db, task_list):
    task = copy.deepcopy(of(task_list, "order_status")[0])
    status = task["outputs"][0]
    task["outputs"] = [status, "express"]
    assert _status_episode(db, task, f"It is {status}.").reward() == 0.0
    assert _status_episode(db, task, f"It is {status}, shipped express.").reward() == 1.0


# --- 5. timeouts, unfinished and failed episodes ----------------------------------------------------


def test_an_agent_that_only_reads_times_out_after_max_steps(db, task_list):
    task = of(task_list, "order_status")[0]
    ep = episode(db, task)
    reads = [call("get_order_details", order_id=task["user"]["order_id"]), call("list_all_product_types")]
    running, steps = True, 0
    while running:
        running = ep.step(reads[steps % 2])
        steps += 1
        assert steps <= MAX_STEPS
    assert steps == MAX_STEPS == 30
    assert ep.timeout and not ep.finished
    assert ep.reward() == 0.0
    assert ep.record()["timeout"] is True and ep.record()["reward"] == 0.0


def test_the_step_limit_counts_every_action(db, task_list):
    task = of(task_list, "cancel")[0]
    n = len(gold_plan(episode(db, task)))
    ep = episode(db, task, max_steps=n)  # the closing message is the last allowed action
    assert not drive(ep, gold_plan(ep))
    assert ep.finished and not ep.timeout and ep.reward() == 1.0
    ep = episode(db, task, max_steps=n - 1)  # one short: the write happens, the goodbye never does
    assert not drive(ep, gold_plan(ep)[:-1])
    assert ep.timeout and not ep.finished
    assert hash_db(ep.db) == ep.gold_hash
    assert ep.reward() == 0.0


@pytest.mark.parametrize("template", TEMPLATES)
def test_an_episode_that_never_ended_scores_zero(db, task_list, template):
    ep = episode(db, of(task_list, template)[0])
    actions = gold_plan(ep)
    if template == "order_status":  # say the status while asking for more, so the user does not stop
        actions[-1] = say(f"It is {ep.task['outputs'][0]}. Can you confirm your email?")
    else:
        actions = actions[:-1]
    assert drive(ep, actions)  # still running
    assert not ep.finished and not ep.timeout
    assert all(STOP not in (m.get("content") or "") for m in ep.messages)
    assert hash_db(ep.db) == ep.gold_hash
    assert ep.reward() == 0.0


def test_a_failed_episode_scores_zero(db, task_list):
    task = of(task_list, "exchange")[0]
    ep = episode(db, task)
    drive(ep, gold_plan(ep))
    assert ep.reward() == 1.0
    ep.fail("harness gave no valid action")
    assert ep.reward() == 0.0
    assert ep.record()["failure"] == "harness gave no valid action"


def test_a_user_simulator_crash_fails_the_episode(db, task_list):
    class Broken(ScriptedUser):
        def step(self, agent_message: str) -> str:
            raise RuntimeError("endpoint down")

    task = of(task_list, "order_status")[0]
    ep = TauEpisode(task, 0, db, hash_db(replay(db, task["actions"])), Broken(), policy="")
    assert not ep.step(say("Hello, how can I help?"))
    assert ep.failure == "user simulator: RuntimeError: endpoint down"
    assert ep.reward() == 0.0


def test_a_user_simulator_that_cannot_start_costs_only_its_episode(db, task_list):
    class Down(ScriptedUser):
        def reset(self, task: dict, trial: int = 0) -> str:
            raise ConnectionError("refused")

    task = of(task_list, "order_status")[0]
    ep = TauEpisode(task, 0, db, hash_db(replay(db, task["actions"])), Down(), policy="")
    assert ep.over and ep.reward() == 0.0
    assert ep.failure == "user simulator: ConnectionError: refused"


# --- 6. extra read-only calls ---------------------------------------------------------------------

READS = {
    "get_product_details": lambda db, task: call("get_product_details", product_id=sorted(db["products"])[0]),
    "list_all_product_types": lambda db, task: call("list_all_product_types"),
    "calculate": lambda db, task: call("calculate", expression="(12.5 + 7) * 2"),
    "get_user_details": lambda db, task: call("get_user_details", user_id=task["user_id"]),
    "get_order_details": lambda db, task: call("get_order_details", order_id=sorted(db["orders"])[0]),
    "find_user_id_by_name_zip": lambda db, task: call(
        "find_user_id_by_name_zip",
        first_name=task["user"]["first_name"],
        last_name=task["user"]["last_name"],
        zip=task["user"]["zip"],
    ),
}


@pytest.mark.parametrize("read", sorted(READS))
@pytest.mark.parametrize("template", TEMPLATES)
def test_an_extra_read_in_the_gold_path_still_earns_one(db, task_list, template, read):
    task = of(task_list, template)[0]
    ep = episode(db, task)
    actions = gold_plan(ep)
    extra = READS[read](db, task)
    drive(ep, [actions[0], extra, *actions[1:-1], copy.deepcopy(extra), actions[-1]])
    results = [m["content"] for m in ep.messages if m["role"] == "tool" and m["name"] == read]
    assert len(results) >= 2 and not results[0].startswith("Error")
    # (after a user_address write the old zip no longer finds the user: an error, still read-only)
    assert ep.finished and ep.reward() == 1.0


# --- 7. bad actions are observations, not crashes -------------------------------------------------

BAD_ACTIONS = [
    (
        {"type": "tool_call", "name": "refund_everything", "arguments": {}},
        "Error: unknown tool refund_everything",
    ),
    (
        {"type": "tool_call", "name": "get_order_details", "arguments": "#W1234567"},
        "Error: arguments of get_order_details must be a JSON object, not str",
    ),
    (
        {"type": "tool_call", "name": "get_order_details", "arguments": {"order_id": 1234567}},
        "Error: argument order_id of get_order_details must be a string, not int",
    ),
    (
        {"type": "tool_call", "name": "get_order_details"},
        "Error: missing argument(s) for get_order_details: order_id",
    ),
    (
        {"type": "tool_call", "name": "get_order_details", "arguments": {"order_id": "#W0", "x": 1}},
        "Error: unexpected argument(s) for get_order_details: x",
    ),
    ({"type": "tool_call", "name": None, "arguments": {}}, "Error: tool name must be a string"),
    (
        {"type": "tool_call", "name": "calculate", "arguments": {"expression": "__import__('os')"}},
        "Error: invalid characters in expression",
    ),
]


@pytest.mark.parametrize("bad,error", BAD_ACTIONS)
def test_a_bad_tool_call_is_an_error_observation_and_the_run_goes_on(db, task_list, bad, error):
    task = of(task_list, "modify_items")[0]
    ep = episode(db, task)
    actions = gold_plan(ep)
    assert drive(ep, actions[:1])
    assert ep.step(copy.deepcopy(bad))  # still running
    assert last_tool_result(ep) == error
    call_msg = ep.messages[-2]
    assert (
        call_msg["role"] == "assistant"
        and json.loads(call_msg["tool_calls"][0]["function"]["arguments"]) is not None
    )
    observation = ep.message(fresh=False)
    assert (
        observation["type"] == "observation"
        and observation["observation"]["messages"][-1]["content"] == error
    )
    drive(ep, actions[1:])
    assert ep.finished and ep.reward() == 1.0


def test_malformed_arguments_to_a_write_change_nothing(db, task_list):
    task = of(task_list, "cancel")[0]
    ep = episode(db, task)
    before = hash_db(ep.db)
    args = json.dumps({"order_id": task["user"]["order_id"], "reason": task["user"]["reason"]})
    assert ep.step({"type": "tool_call", "name": "cancel_pending_order", "arguments": args})  # a JSON string
    assert last_tool_result(ep).startswith("Error: arguments of cancel_pending_order must be a JSON object")
    shown = json.loads(ep.messages[-2]["tool_calls"][0]["function"]["arguments"])
    assert shown == {"_raw": args}
    assert hash_db(ep.db) == before


@pytest.mark.parametrize("bad", [{"type": "dance"}, {}, {"type": None, "content": "hi"}])
def test_an_unknown_action_type_is_answered_and_the_run_goes_on(db, task_list, bad):
    task = of(task_list, "order_address")[0]
    ep = episode(db, task)
    actions = gold_plan(ep)
    assert ep.step(bad)
    assert ep.messages[-2] == {"role": "assistant", "content": ""}
    assert ep.messages[-1]["role"] == "user" and "is not a tool call or message" in ep.messages[-1]["content"]
    assert ep.steps == 1
    drive(ep, actions)
    assert ep.finished and ep.reward() == 1.0


def test_answer_and_non_string_content_are_messages(db, task_list):
    task = of(task_list, "order_status")[0]
    ep = episode(db, task)
    assert drive(ep, gold_plan(ep)[:-1])
    assert ep.step({"type": "message", "content": {"note": "please confirm"}})  # asks for a confirmation
    assert ep.messages[-2]["content"] == '{"note": "please confirm"}'
    assert ep.messages[-1]["content"] == "Yes."
    assert not ep.step({"type": "answer", "content": f"It is {task['outputs'][0]}."})
    assert ep.finished and ep.reward() == 1.0


def test_start_and_observation_messages(db, task_list):
    ep = episode(db, of(task_list, "return")[0], trial=3)
    start = ep.message(fresh=True)
    assert start["type"] == "start" and start["domain"] == "tau" and start["episode"] == ep.id
    assert ep.id == f"{ep.task['id']}.t3"
    assert start["observation"]["policy"] == "the policy" and start["observation"]["tools"]
    assert start["observation"]["messages"] == [{"role": "user", "content": ep.messages[0]["content"]}]
    later = ep.message(fresh=False)
    assert later["type"] == "observation" and set(later["observation"]) == {"messages"}
    # the agent never sees the instruction, the gold actions or the database
    text = json.dumps(start)
    assert ep.task["instruction"] not in text and ep.gold_hash not in text


# --- 8. transfer to a human -----------------------------------------------------------------------


def test_a_transfer_to_a_human_ends_the_episode(db, task_list):
    task = of(task_list, "cancel")[0]
    ep = episode(db, task)
    actions = gold_plan(ep)
    transfer = call("transfer_to_human_agents", summary="user wants a human")
    assert not drive(ep, [*actions[:-1], transfer])  # after the gold write
    assert ep.finished and not ep.timeout
    assert last_tool_result(ep) == "Transfer successful"
    assert ep.reward() == 1.0  # ended, gold state, no outputs expected

    ep = episode(db, task)
    assert not drive(ep, [actions[0], transfer])  # before any write: ended, but the state is wrong
    assert ep.finished and ep.reward() == 0.0


def test_a_malformed_transfer_does_not_end_the_episode(db, task_list):
    ep = episode(db, of(task_list, "cancel")[0])
    assert ep.step(call("transfer_to_human_agents"))  # no summary
    assert last_tool_result(ep).startswith("Error: missing argument")
    assert not ep.finished


def test_a_transfer_without_the_expected_output_scores_zero(db, task_list):
    task = of(task_list, "order_status")[0]
    ep = episode(db, task)
    assert not drive(ep, [*gold_plan(ep)[:-1], call("transfer_to_human_agents", summary="status request")])
    assert ep.finished and ep.reward() == 0.0


# --- 9. pass^k ------------------------------------------------------------------------------------


def test_pass_hat_k_hand_computed():
    runs = {"a": [True, True, False], "b": [True, False, False]}
    assert pass_hat_k(runs, 1) == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert pass_hat_k(runs, 2) == pytest.approx((1 / 3 + 0) / 2)
    assert pass_hat_k(runs, 3) == 0.0
    assert pass_hat_k({"a": [True] * 4, "b": [True, True, True, False]}, 2) == pytest.approx((1 + 3 / 6) / 2)
    assert pass_hat_k({"a": [True, True]}, 2) == 1.0
    assert pass_hat_k({}, 1) == 0.0
    with pytest.raises(ValueError, match="fewer than k=4"):
        pass_hat_k(runs, 4)
    with pytest.raises(ValueError):
        pass_hat_k({"a": [True, True, True], "b": [True]}, 2)


def test_pass_hat_k_never_grows_with_k():
    rng = random.Random(0)
    runs = {str(i): [rng.random() < 0.7 for _ in range(5)] for i in range(20)}
    values = [pass_hat_k(runs, k) for k in range(1, 6)]
    assert values == sorted(values, reverse=True)
    assert values[0] == pytest.approx(sum(map(sum, runs.values())) / 100)


# --- 10. provisioned splits -----------------------------------------------------------------------


def _key(task: dict) -> tuple:
    writes = [a for a in task["actions"] if a["name"] in WRITE_TOOLS]
    # a read-only task's target is its order (order_status tasks have no writes to tell them apart)
    return task["template"], task["user_id"], json.dumps(writes, sort_keys=True), task["user"].get("order_id")


@pytest.fixture(scope="module")
def provisioned(tmp_path_factory) -> tuple[TauDomain, Path, TaskConfig]:
    cfg = TauConfig(name="tau", n_pool=40, n_val=8, n_test=8, n_users=20)
    out = tmp_path_factory.mktemp("tau")
    counts = TauDomain().provision(cfg, out)
    assert counts["pool"] == 40 and counts["val"] == 8 and counts["test"] == 8 and counts["users"] == 20
    return TauDomain(), out, cfg


def test_provisioned_splits_are_disjoint(provisioned):
    domain, out, _ = provisioned
    pool, val, test = (domain.split(out, name) for name in ("pool", "val", "test"))
    assert (len(pool), len(val), len(test)) == (40, 8, 8)
    ids = [t["id"] for t in pool + val + test]
    assert len(set(ids)) == len(ids)
    pool_keys = {_key(t) for t in pool}
    assert not [t["id"] for t in val + test if _key(t) in pool_keys]
    assert not {_key(t) for t in val} & {_key(t) for t in test}
    assert len({t["template"] for t in pool}) == len(TEMPLATES)


def test_the_research_side_sees_no_val_answers(provisioned):
    domain, out, _ = provisioned
    research_val = [json.loads(line) for line in (out / "research" / "val.jsonl").read_text().splitlines()]
    hidden_val = domain.split(out, "val")
    assert [r["id"] for r in research_val] == [t["id"] for t in hidden_val]
    for row in research_val:
        assert set(row) == {"id", "template"}
        assert not {"actions", "outputs", "instruction", "user"} & set(row)
    research_text = "".join(p.read_text() for p in (out / "research").iterdir())
    for t in hidden_val + domain.split(out, "test"):
        assert t["instruction"] not in research_text
    assert sorted(p.name for p in (out / "research").iterdir()) == [
        "db.json",
        "demos.jsonl",
        "policy.md",
        "pool.jsonl",
        "tools.json",
        "val.jsonl",
    ]
    pool_ids = {t["id"] for t in domain.split(out, "pool")}
    bank = [json.loads(line) for line in (out / "research" / "demos.jsonl").read_text().splitlines()]
    assert bank and {d["task_id"] for d in bank} == pool_ids  # demonstrations of train tasks only


def test_every_hidden_task_replays_its_gold_actions(provisioned):
    domain, out, _ = provisioned
    db = domain.db(out)
    for t in domain.split(out, "val") + domain.split(out, "test"):
        after = replay(db, t["actions"])  # raises on any "Error: ..."
        writes = [a for a in t["actions"] if a["name"] in WRITE_TOOLS]
        assert (hash_db(after) != hash_db(db)) == bool(writes), t["id"]
        assert t["actions"][0]["name"] == "find_user_id_by_email"
        assert bool(t["outputs"]) == (t["template"] == "order_status")


def test_domain_episodes_and_metrics(provisioned):
    domain, out, cfg = provisioned
    episodes = domain.episodes(out, "test", cfg)
    assert len(episodes) == 8 * cfg.trials == 16
    assert len({ep.id for ep in episodes}) == 16
    untouched = domain.metrics(episodes, cfg)
    assert untouched["pass^1"] == 0.0 and untouched["finished"] == 0
    for ep in episodes:
        agent = expert.Expert(ep.task)
        while ep.step(agent.act(ep.messages)):
            pass
    m = domain.metrics(episodes, cfg)
    assert m["pass^1"] == 1.0 and m["pass^2"] == 1.0 and m["finished"] == 16
    assert m["timeouts"] == 0 and m["harness_failures"] == 0
    assert set(m["by_template"].values()) == {1.0}
    episodes[0].fail("crash")  # one trial of one task of eight
    m = domain.metrics(episodes, cfg)
    assert m["pass^1"] == pytest.approx(1 - 0.5 / 8, abs=1e-4)
    assert m["pass^2"] == pytest.approx(1 - 1 / 8, abs=1e-4)
    assert m["harness_failures"] == 1


# --- 11. the scripted user ------------------------------------------------------------------------


def test_the_trial_changes_the_conversation_and_is_deterministic(task_list):
    user = ScriptedUser()
    changed = 0
    for task in task_list:
        firsts = [user.reset(task, trial) for trial in range(6)]
        assert firsts == [ScriptedUser().reset(task, trial) for trial in range(6)]
        changed += len(set(firsts)) > 1
    assert changed == len(task_list)
    task = task_list[0]
    assert {user.reset(task, 0) for _ in range(3)} == {ScriptedUser().reset(task, 0)}


def test_the_first_message_states_the_request_and_one_identity(task_list):
    for task in task_list:
        facts = task["user"]
        for trial in range(4):
            first = ScriptedUser().reset(task, trial)
            by_email = facts["email"] in first
            by_name = f"{facts['first_name']} {facts['last_name']}, zip code {facts['zip']}" in first
            assert by_email != by_name, first
            if "order_id" in facts:
                assert facts["order_id"] in first
            assert STOP not in first


def test_the_user_answers_identity_confirmation_and_order_questions(task_list):
    task = next(t for t in task_list if t["template"] == "cancel")
    facts = task["user"]
    name_zip = f"{facts['first_name']} {facts['last_name']}, zip code {facts['zip']}"
    for trial in range(4):
        user = ScriptedUser()
        first = user.reset(task, trial)
        reply = user.step("Could you please verify your identity?")
        # the other form of identity than the opening gave, and both are the user's true facts
        assert (facts["email"] in reply) == (facts["email"] not in first)
        assert facts["email"] in reply or name_zip in reply
        again = user.step("What is your email or your name and zip code?")
        assert {facts["email"] in reply, facts["email"] in again} == {True, False}
        assert user.step("I will cancel order X. Please confirm (yes/no).").lower().startswith("yes")
        assert user.step("Shall I proceed?").lower().startswith("yes")
        assert facts["order_id"] in user.step("Which order is it about?")
        assert facts["reason"] in user.step("What is the reason for the cancellation?")
        assert user.step("Done. Anything else I can help with?").endswith(STOP)


def test_the_user_stops_after_max_turns(task_list):
    user = ScriptedUser(max_turns=3)
    user.reset(task_list[0], 0)
    replies = [user.step("Please confirm (yes/no).") for _ in range(4)]
    assert [STOP in r for r in replies] == [False, False, False, True]


# --- 12. demonstrations -----------------------------------------------------------------------------


def test_clean_demos_all_earn_one(db, task_list):
    demos = datatools.make_demos(task_list[:16], db, 16, seed=3, flawed=0.0)
    assert len(demos) == 16 and {d["task_id"] for d in demos} == {t["id"] for t in task_list[:16]}
    by_id = {t["id"]: t for t in task_list}
    for demo in demos:
        assert demo["reward"] == 1.0
        assert datatools.score(demo, by_id[demo["task_id"]], db) == 1.0


def test_flawed_demos_mostly_fail_and_score_agrees(db, task_list):
    demos = datatools.make_demos(task_list, db, 40, seed=5, flawed=1.0)
    by_id = {t["id"]: t for t in task_list}
    rewards = [d["reward"] for d in demos]
    assert sum(r == 0.0 for r in rewards) > len(demos) / 2
    for demo in demos:
        assert datatools.score(demo, by_id[demo["task_id"]], db) == demo["reward"], demo["task_id"]


def test_score_rejects_a_tampered_demo(db, task_list):
    task = of(task_list, "cancel")[0]
    demo = datatools.play_demo(task, db, trial=0)
    assert demo["reward"] == 1.0
    tampered = copy.deepcopy(demo)
    for m in tampered["messages"]:
        for c in m.get("tool_calls") or []:
            if c["function"]["name"] == "cancel_pending_order":
                args = json.loads(c["function"]["arguments"])
                args["reason"] = (
                    "ordered by mistake" if args["reason"] == "no longer needed" else "no longer needed"
                )
                c["function"]["arguments"] = json.dumps(args)
    assert datatools.score(tampered, task, db) == 0.0
    unfinished = copy.deepcopy(demo)
    unfinished["messages"] = unfinished["messages"][:-1]  # drop the user's ###STOP###
    assert datatools.score(unfinished, task, db) == 0.0


def test_score_agrees_with_the_episode_on_a_transfer(db, task_list):
    task = of(task_list, "cancel")[0]
    ep = episode(db, task)
    actions = gold_plan(ep)
    drive(ep, [*actions[:-1], call("transfer_to_human_agents", summary="user asked for a human")])
    assert ep.reward() == 1.0
    demo = {"task_id": task["id"], "trial": 0, "messages": ep.messages, "reward": ep.reward()}
    assert datatools.score(demo, task, db) == 1.0


# --- 13. the text format of actions ----------------------------------------------------------------

ROUND_TRIP = [
    call("get_order_details", order_id="#W1234567"),
    call("list_all_product_types"),
    call(
        "exchange_delivered_order_items",
        order_id="#W1",
        item_ids=["1", "1"],
        new_item_ids=["2", "3"],
        payment_method_id="gift_card_1",
    ),
    call(
        "modify_user_address",
        user_id="mei_kim_1",
        address1='12 "Oak" St',
        address2="",
        city="Zürich",
        state="ZH",
        country="CH",
        zip="8001",
    ),
    say("Your order #W1234567 is delivered."),
    say(""),
    say('Line one, line two, with "quotes" and a \\ backslash and ünïcode'),
    say('respond {"content": "nested"}'),
]


@pytest.mark.parametrize("action", ROUND_TRIP)
def test_action_text_round_trips(action):
    text = prompting.action_text(action)
    assert "\n" not in text
    assert prompting.parse(text) == action
    assert prompting.parse(" " + text + "\nuser: ignored second line") == action


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "   \n  ",
        "hello there",
        "123 get_order_details",
        '{"name": "respond"}',
        "get_order_details {order_id: 1}",
        "respond_to_user hello",
        "cancel_pending_order #W1",
        "get_order_details #W1 | #W2",
        "get_order_details",
    ],
)
def test_parse_rejects_garbage(garbage):
    with pytest.raises(ValueError):
        prompting.parse(garbage)


def test_sft_rows_complete_each_agent_turn_with_its_action(db, task_list):
    demo = datatools.play_demo(of(task_list, "modify_payment")[0], db, trial=1)
    rows = datatools.sft_rows([demo])
    assert len(rows) == 1  # one multi-turn row per conversation
    segments = rows[0]["segments"]
    assistant = [m for m in demo["messages"] if m["role"] == "assistant"]
    trained = [text for text, train in segments if train]
    assert len(trained) == len(assistant)
    for text, m in zip(trained, assistant, strict=True):
        assert prompting.parse(text) == prompting.message_action(m)
    # every trained turn follows exactly the prompt a harness would send at that point
    i = 0
    for k, (_text, train) in enumerate(segments):
        if train:
            while demo["messages"][i]["role"] != "assistant":
                i += 1
            assert "".join(t for t, _ in segments[:k]) == prompting.prompt(demo["messages"][:i])
            i += 1
    assert segments[0][0] == f"user: {demo['messages'][0]['content']}\nagent:"


def test_parse_undoes_spaced_decoding():
    spaced = ' get_order_details { " order_id " : " # W885 " , " x " : [ " a . b @ c " ] }'
    assert prompting.parse(spaced, spaced=True) == {
        "type": "tool_call",
        "name": "get_order_details",
        "arguments": {"order_id": "#W885", "x": ["a.b@c"]},
    }


def test_kit_check_without_replay_agrees_with_the_replayed_reward(provisioned):
    """The sandbox-side check (no database, no user simulator) scores every bank demonstration,
    clean and flawed, as the orchestrator's replay did."""
    from vtb.domains.tau.kit import datatools as kit

    domain, out, _ = provisioned
    pool = {t["id"]: t for t in domain.split(out, "pool")}
    bank = [json.loads(line) for line in (out / "research" / "demos.jsonl").read_text().splitlines()]
    assert {d["reward"] for d in bank} == {0.0, 1.0}
    assert [kit.gold_reward(d, pool[d["task_id"]]) for d in bank] == [d["reward"] for d in bank]
    picked = kit.sample_demos(bank, 30, seed=1, flawed=0.5)
    assert len(picked) == 30 and 0 < sum(d["reward"] for d in picked) < 30
