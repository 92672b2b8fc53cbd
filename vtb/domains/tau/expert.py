"""A scripted expert that follows a task's gold actions the way the policy asks.

It authenticates with whatever identity the user gave, makes the gold reads, asks for an
explicit confirmation before the write, writes, and closes; for information tasks it states
the expected outputs. Used for demonstration trajectories of TRAIN tasks (the data tools) and
by the test-only oracle harness; it never runs on val/test tasks inside the pipeline.
`flaw` makes a plausible-looking but wrong demonstration (for the initial, partly flawed data).

A real tau-bench / tau2 task has no scripted-user facts: its plan is its gold actions in their
order (the identity lookup included), a confirmation before each write, and a closing message
that states the expected outputs (`gold_plan`).
"""

from __future__ import annotations

import copy
import random

from vtb.domains.tau.kit.schemas import WRITE_TOOLS

FLAWS = ["wrong_id", "skip_write", "wrong_tool"]
VERBS = {
    "cancel_pending_order": "cancel",
    "modify_pending_order_payment": "change payment of",
    "return_delivered_order_items": "return items of",
    "exchange_delivered_order_items": "exchange items of",
    "modify_pending_order_items": "change items of",
    "modify_user_address": "change address of",
    "modify_pending_order_address": "change address of",
    "book_reservation": "book a reservation for",
    "cancel_reservation": "cancel reservation",
    "send_certificate": "send a certificate to",
    "update_reservation_baggages": "change the bags of",
    "update_reservation_flights": "change the flights of",
    "update_reservation_passengers": "change the passengers of",
}


def _call(name: str, kwargs: dict) -> dict:
    return {"type": "tool_call", "name": name, "arguments": kwargs}


def _say(text: str) -> dict:
    return {"type": "message", "content": text}


def plan(
    task: dict, first_message: str, flaw: str | None = None, rng: random.Random | None = None
) -> list[dict]:
    """The expert's actions for an episode whose user opened with `first_message`."""
    if "user" not in task:
        return gold_plan(task, flaw, rng or random.Random(0))
    facts = task["user"]
    if facts["email"] in first_message:
        identify = _call("find_user_id_by_email", {"email": facts["email"]})
    else:
        identify = _call(
            "find_user_id_by_name_zip",
            {"first_name": facts["first_name"], "last_name": facts["last_name"], "zip": facts["zip"]},
        )
    gold = task["actions"][1:]  # the first gold action is the identity lookup
    reads = [_call(a["name"], a["kwargs"]) for a in gold if a["name"] not in WRITE_TOOLS]
    writes = [_call(a["name"], copy.deepcopy(a["kwargs"])) for a in gold if a["name"] in WRITE_TOOLS]
    actions = [identify, *reads]
    if not writes:
        target = facts.get("order_id", "")
        answer = ", ".join(task.get("outputs", []))
        if flaw:  # a confidently wrong answer
            answer = "processed" if answer != "processed" else "pending"
        return [*actions, _say(f"Order {target} is {answer}.")]
    write = writes[0]
    if flaw:
        write = _flawed(write, flaw, rng or random.Random(0))
    target = write["arguments"].get("order_id") or write["arguments"].get("user_id")
    confirm = _say(f"Confirm: {VERBS.get(write['name'], write['name'])} {target}? (yes/no)")
    done = _say("Done.")
    if flaw == "skip_write":
        return [*actions, confirm, done]
    return [*actions, confirm, write, done]


def _confirm(write: dict) -> dict:
    args = write["arguments"]
    target = args.get("order_id") or args.get("user_id") or args.get("reservation_id") or ""
    return _say(f"Confirm: {VERBS.get(write['name'], write['name'])} {target}? (yes/no)")


def gold_plan(task: dict, flaw: str | None, rng: random.Random) -> list[dict]:
    """A real task's gold actions as a conversation: confirm before each write, state the outputs."""
    actions = [_call(a["name"], copy.deepcopy(a["kwargs"])) for a in task["actions"]]
    writes = [i for i, a in enumerate(actions) if a["name"] in WRITE_TOOLS]
    outputs = [str(o) for o in task.get("outputs") or []]
    if flaw and writes:
        first = writes[0]
        if flaw == "skip_write":
            actions = [a for i, a in enumerate(actions) if i not in writes]
        else:
            actions[first] = _flawed(actions[first], flaw, rng)
    elif flaw and outputs:
        outputs = ["I could not find that."]  # a confidently wrong answer
    plan: list[dict] = []
    for action in actions:
        if action["name"] in WRITE_TOOLS:
            plan.append(_confirm(action))
        plan.append(action)
    closing = f"Here is what you asked for: {', '.join(outputs)}." if outputs else "Done. Anything else?"
    return [*plan, _say(closing)]


def _flawed(write: dict, flaw: str, rng: random.Random) -> dict:
    args = write["arguments"]
    if flaw == "wrong_id":
        for key in (
            *("item_ids", "new_item_ids", "payment_method_id", "order_id", "zip", "address1"),
            *("payment_id", "reservation_id", "user_id"),  # airline
        ):
            if key in args:
                value = args[key]
                args[key] = [_bump(v) for v in value] if isinstance(value, list) else _bump(value)
                break
        if "reason" in args:
            args["reason"] = (
                "ordered by mistake" if args["reason"] == "no longer needed" else "no longer needed"
            )
    elif flaw == "wrong_tool":
        swaps = {
            "cancel_pending_order": "modify_pending_order_address",
            "return_delivered_order_items": "exchange_delivered_order_items",
            "exchange_delivered_order_items": "return_delivered_order_items",
            "modify_pending_order_items": "cancel_pending_order",
        }
        if write["name"] not in swaps:
            return _flawed(write, "wrong_id", rng)
        write["name"] = swaps[write["name"]]
    return write


def _bump(value: object) -> object:
    """A near miss of an id: its last digit changed, or a "0" appended (real data: any string)."""
    if not isinstance(value, str):
        return value
    if value and value[-1].isdigit():
        return value[:-1] + str((int(value[-1]) + 1) % 10)
    return value + "0"


class Expert:
    """Plays one episode from its plan: call `act(messages)` once per agent turn."""

    def __init__(self, task: dict, flaw: str | None = None, seed: int = 0):
        self.task, self.flaw, self.seed = task, flaw, seed
        self.actions: list[dict] | None = None
        self.turn = 0

    def act(self, messages: list[dict]) -> dict:
        if self.actions is None:
            first = next((m["content"] for m in messages if m["role"] == "user"), "")
            self.actions = plan(self.task, first, self.flaw, random.Random(self.seed))
        if self.turn >= len(self.actions):
            return _say("Goodbye.")
        action = self.actions[self.turn]
        self.turn += 1
        return action
