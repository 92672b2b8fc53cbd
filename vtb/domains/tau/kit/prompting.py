"""How tau conversations become model text, and model text becomes protocol actions.

Shared by the harnesses (prompt building, parsing) and the data tools (SFT rows), so a
trajectory trains the model in exactly the format a harness will prompt it with. The model
writes one action line per turn, which the harness turns into a protocol JSON action:

    cancel_pending_order #W8850172 | no longer needed      (arguments in the schema's order)
    exchange_delivered_order_items #W42 | 930 161 | 478 | gift_card_7   (lists: space-separated)
    respond Confirm: cancel #W8850172? (yes/no)             (a message to the user)
    update_reservation_baggages ZFA04Y | 3 | 1 | gift_card_7280411   (integers as digits)
    book_reservation {"user_id": "mia_li_3668", "flights": [...], ...}   (objects: JSON)

Positional arguments rather than JSON: the tiny model learned JSON's quotes and keys far
slower than the values that matter (0% after 228 SFT steps with JSON; MEASURED in the issue
note). A line whose arguments start with `{` is read as JSON keyword arguments, so models that
write JSON work too. Tool results are compacted to the facts an agent needs (ids, statuses,
options): a small model's context window cannot hold tau-bench's full JSON records.
"""

from __future__ import annotations

import json
import re

from vtb.domains.tau.kit.schemas import PARAMETERS, WRITE_TOOLS

RESPOND = "respond"
PARAMS = PARAMETERS  # every tool of every environment (retail, airline) by name


def _j(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def compact(name: str, content: str) -> str:
    """A short rendering of a tool result (errors and plain strings pass through)."""
    try:
        data = json.loads(content)
    except (json.JSONDecodeError, TypeError):
        return str(content)[:160]
    if not isinstance(data, dict):
        return str(content)[:160]
    if name in WRITE_TOOLS:  # the agent knows what it changed: the new status is the news
        if "order_id" in data:
            return f"order {data['order_id']} {data.get('status')}"
        if "reservation_id" in data:
            return f"reservation {data['reservation_id']} {data.get('status') or 'updated'}"
        return f"user {data.get('user_id')} updated"
    if "reservation_id" in data and "flights" in data:
        legs = " ".join(f"{f.get('flight_number')} {f.get('date')} {f.get('price')}" for f in data["flights"])
        paid = " ".join(f"{p.get('payment_id')} {p.get('amount')}" for p in data.get("payment_history") or [])
        return (
            f"reservation {data['reservation_id']} {data.get('status') or 'active'} {data.get('cabin')} "
            f"{data.get('flight_type')}: {legs}; passengers {len(data.get('passengers') or [])}; "
            f"bags {data.get('total_baggages')}/{data.get('nonfree_baggages')}; paid {paid}"
        )
    if "order_id" in data and "items" in data:
        items = "; ".join(
            f"{i['name']} {i['item_id']} product {i['product_id']} {' '.join(map(str, i.get('options', {}).values()))}"
            for i in data["items"]
        )
        paid = (data.get("payment_history") or [{}])[0].get("payment_method_id", "")
        return f"order {data['order_id']} {data.get('status')}: {items}; paid {paid}"
    if "user_id" in data and "payment_methods" in data:
        methods = ", ".join(sorted(data["payment_methods"]))
        if "reservations" in data:  # airline: the reservations are the user's records
            return (
                f"user {data['user_id']} payment: {methods}; reservations: {' '.join(data['reservations'])}"
            )
        return f"user {data['user_id']} payment: {methods}"
    if "variants" in data:
        variants = "; ".join(
            f"{v['item_id']} {' '.join(map(str, v.get('options', {}).values()))}"
            for v in data["variants"].values()
            if v.get("available")
        )
        return f"{data.get('name')} available: {variants}"
    return _j(data)[:160]


def render(messages: list[dict]) -> str:
    """The conversation as lines: `user: ...`, `agent: <action>`, `tool: <compact result>`."""
    lines = []
    for m in messages:
        if m["role"] == "user":
            lines.append(f"user: {m['content']}")
        elif m["role"] == "assistant":
            lines.append(f"agent: {action_text(message_action(m))}")
        elif m["role"] == "tool":
            lines.append(f"tool: {compact(m.get('name', ''), m['content'])}")
    return "\n".join(lines)


def prompt(messages: list[dict]) -> str:
    return render(messages) + "\nagent:"


def message_action(m: dict) -> dict:
    """The protocol action an assistant message records."""
    calls = m.get("tool_calls")
    if calls:
        fn = calls[0]["function"]
        try:
            arguments = json.loads(fn["arguments"])
        except (json.JSONDecodeError, TypeError):
            arguments = fn["arguments"]
        return {"type": "tool_call", "name": fn["name"], "arguments": arguments}
    return {"type": "message", "content": m.get("content") or ""}


def _order(name: str) -> list[str]:
    schema = PARAMS.get(name, {})
    return list(schema.get("required") or schema.get("properties", {}))


def _flat(value: object) -> bool:
    """A value the positional format says exactly: a plain string, an integer, a list of words."""
    if isinstance(value, str):
        return "|" not in value and "\n" not in value
    if isinstance(value, list):
        return all(isinstance(v, str) and v and not set(v) & set(" |\n") for v in value)
    return isinstance(value, int) and not isinstance(value, bool)


def action_text(action: dict) -> str:
    if action.get("type") != "tool_call":
        return f"{RESPOND} {action.get('content', '')}".rstrip().replace("\n", " ")
    name, args = action["name"], action.get("arguments", {})
    order = _order(name)
    if not isinstance(args, dict) or set(args) != set(order) or not all(map(_flat, args.values())):
        return f"{name} {_j(args)}"  # not the schema's arguments, or objects: say it as JSON
    values = [" ".join(args[k]) if isinstance(args[k], list) else str(args[k]) for k in order]
    return f"{name} {' | '.join(values)}".rstrip()


def typed(kind: str | None, value: str) -> object:
    """A positional argument as its schema's type: a list of words, an integer, or the text."""
    if kind == "array":
        return value.split()
    if kind in ("integer", "number") and re.fullmatch(r"-?\d+", value):
        return int(value)
    if kind == "number" and re.fullmatch(r"-?\d*\.\d+", value):
        return float(value)
    return value


def despace(text: str) -> str:
    """Undo a word-level tokenizer's decoding (`# W885 | a . b`): no space around punctuation."""
    return re.sub(r"\s*([^\w\s])\s*", r"\1", text).strip()


def parse(text: str, spaced: bool = False) -> dict:
    """The action in a model completion (first line); raises ValueError when it is not one.

    spaced: the text comes from a tokenizer whose decoding puts spaces between all tokens
    (Engine.spaced); they are taken out around punctuation first.
    """
    line = text.strip().split("\n", 1)[0].strip()
    line = despace(line) if spaced else line
    match = re.match(r"([A-Za-z_]\w*)\s*(.*)", line)
    if not match:
        raise ValueError("no action name")
    name, rest = match.group(1), match.group(2).strip()
    if name == RESPOND:
        return {"type": "message", "content": rest}
    if rest.startswith("{"):
        try:
            arguments = json.loads(rest)
        except json.JSONDecodeError as e:
            raise ValueError(f"arguments are not JSON: {e}") from None
        if not isinstance(arguments, dict):
            raise ValueError("arguments are not a JSON object")
        return {"type": "tool_call", "name": name, "arguments": arguments}
    if name not in PARAMS:
        raise ValueError(f"unknown tool {name!r}")
    order = _order(name)
    parts = [p.strip() for p in rest.split("|")] if rest else []
    if len(parts) != len(order):
        raise ValueError(f"{name} takes {len(order)} arguments ({', '.join(order)}), got {len(parts)}")
    kinds = PARAMS[name].get("properties", {})
    arguments = {k: typed(kinds.get(k, {}).get("type"), v) for k, v in zip(order, parts, strict=True)}
    return {"type": "tool_call", "name": name, "arguments": arguments}


def sft_rows(messages: list[dict]) -> list[dict]:
    """One multi-turn SFT row per conversation: loss on every agent turn (and the newline ending it).

    Each agent turn sees exactly the text `prompt(messages[:i])` a harness would send the model.
    """
    segments: list[list] = []
    context = ""
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            segments.append([prompt(messages[:i])[len(context) :], False])
            turn = " " + action_text(message_action(m)) + "\n"
            segments.append([turn, True])
            context = prompt(messages[:i]) + turn
    return [{"segments": segments}] if segments else []
