"""A deterministic scripted user simulator with tau-bench's interface (`reset`, `step`).

It speaks from the task's structured `user` facts, never from the gold actions: the first
message states the request and one form of identity (email, or name + zip); later it answers
identity, order and reason questions, confirms writes, and ends with `###STOP###` when the
agent stops asking (or after `max_turns` replies). The trial number picks the phrasing and the
identity form, so k trials of one task are k different conversations (what pass^k measures).

Real tau-bench / tau2 tasks carry no such facts, only an instruction and gold actions. For them
(the demonstrations of train tasks and the preflight's gold replays; real episodes are played by
the LLM customer) the user opens with the instruction said in the first person, says "Yes." to a
confirmation and ###STOP### to anything else.
"""

from __future__ import annotations

import random
import re

STOP = "###STOP###"

OPENINGS = {
    "cancel": [
        "I want to cancel order {order_id} because it is {reason}.",
        "Please cancel my order {order_id}, reason: {reason}.",
    ],
    "modify_payment": [
        "I want to pay for order {order_id} with my {payment} instead.",
        "Please switch the payment of order {order_id} to my {payment}.",
    ],
    "return": [
        "I want to return the {item} from order {order_id}, refund to the original payment method.",
        "Please return the {item} in order {order_id} to the original payment method.",
    ],
    "exchange": [
        "I want to exchange the {item} in order {order_id} for the {wanted} one.",
        "Please exchange my {item} from order {order_id} for the {wanted} one.",
    ],
    "modify_items": [
        "I want to change the {item} in order {order_id} to the {wanted} one.",
        "Please change my {item} in order {order_id} to the {wanted} one.",
    ],
    "user_address": [
        "I moved. Please change my address to {address}.",
        "Please update my default address to {address}.",
    ],
    "order_address": [
        "Please ship order {order_id} to {address} instead.",
        "I want order {order_id} sent to {address}.",
    ],
    "order_status": [
        "What is the status of order {order_id}?",
        "Can you tell me the status of my order {order_id}?",
    ],
}


def _identity(facts: dict, by_email: bool) -> str:
    if by_email:
        return f"My email is {facts['email']}."
    return f"I am {facts['first_name']} {facts['last_name']}, zip code {facts['zip']}."


_LABELS = ("Known info", "Reason for call", "Instructions")  # what a tau2 scenario's customer says
_FIRST_PERSON = [
    (r"\byou are\b", "I am"),
    (r"\byou were\b", "I was"),
    (r"\byou're\b", "I'm"),
    (r"\byourself\b", "myself"),
    (r"\byours\b", "mine"),
    (r"\byour\b", "my"),
    (r"\byou\b", "I"),
]


def opening(instruction: str) -> str:
    """A real task's instruction as the customer's first message, in the first person.

    tau2 instructions rendered by the loader ("Reason for call: ...", "Known info: ...") keep the
    lines a customer would say; a tau-bench instruction is said whole.
    """
    lines = dict(
        line.split(": ", 1) for line in instruction.splitlines() if line.split(": ", 1)[0] in _LABELS
    )
    said = [lines[k] for k in _LABELS if k in lines] or [instruction]
    text = " ".join(" ".join(said).split())
    for pattern, words in _FIRST_PERSON:
        text = re.sub(
            pattern,
            lambda m, w=words: w if m.group(0)[0].islower() else w[0].upper() + w[1:],
            text,
            flags=re.I,
        )
    return text


class ScriptedUser:
    """reset(task, trial) -> first message; step(agent message) -> reply (contains ###STOP### at the end)."""

    def __init__(self, max_turns: int = 10):
        self.max_turns = max_turns

    def reset(self, task: dict, trial: int = 0) -> str:
        self.turns = 0
        if "user" not in task:  # a real task: no facts but the instruction
            self.facts = None
            return opening(task["instruction"])
        facts = task["user"]
        rng = random.Random(f"{task['id']}/{trial}")
        self.facts = facts
        self.by_email = rng.random() < 0.5
        self.turns = 0
        values = {k: v for k, v in facts.items() if isinstance(v, str)}
        if "address" in facts:
            values["address"] = ", ".join(facts["address"].values())
        request = rng.choice(OPENINGS[facts["kind"]]).format(**values)
        greeting = rng.choice(["Hi!", "Hello.", "Hi there."])
        return f"{greeting} {_identity(facts, self.by_email)} {request}"

    def step(self, agent_message: str) -> str:
        self.turns += 1
        text = agent_message.lower()
        if self.turns > self.max_turns:
            return STOP
        if any(w in text for w in ("confirm", "proceed", "yes/no", "(yes")):
            return "Yes."
        if self.facts is None:
            return STOP
        if any(w in text for w in ("email", "zip", "your name", "identity", "verify", "authenticate")):
            self.by_email = not self.by_email  # give the other form of identity
            return _identity(self.facts, self.by_email)
        if "order id" in text or "which order" in text:
            if "order_id" in self.facts:
                return f"It is order {self.facts['order_id']}."
            return "I do not have an order id for this."
        if "reason" in text and "reason" in self.facts:
            return f"The reason is: {self.facts['reason']}."
        return f"Thanks, that is all. {STOP}"
