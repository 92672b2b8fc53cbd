"""Repairing tau harness: validates every tool call against the schemas and the conversation.

The model decides what to do (which tool, when to confirm, when to stop); this harness checks
the call it wrote before it reaches the environment, the way a careful agent framework would:
- the line is read leniently: a stray `respond` before a tool call, JSON cut short, a tool name
  one typo away, one argument too many or too few;
- every argument value must be grounded in the conversation: an id that appears nowhere is
  snapped to the closest one of its kind that does; a payment method, item or new variant that
  contradicts what the USER asked for (paypal / original payment method / "the Desk Lamp" /
  "the navy large one") is replaced by the one that matches it, when exactly one does;
- a call that is still invalid is re-sampled up to `retries` times at `temperature`; after
  that the raw text goes to the user as a message.
Every repair starts from a tool call the model wrote: with a model that writes nothing, this
harness sends nothing (the null-model check at grading verifies that).
"""

import difflib
import json
import re
from pathlib import Path

from vtb.domains.tau.kit import prompting
from vtb.protocol import serve
from vtb.serve.client import ModelClient

CONFIG = json.loads((Path(__file__).parent / "config.json").read_text())
SHAPES = {
    "order": r"#W\d{7}",
    "payment": r"\b(?:credit_card|paypal|gift_card)_\d{7}\b",
    "user": r"\b[a-z]+_[a-z]+_\d{4}\b",
    "item": r"\b\d{10}\b",
    "email": r"[\w.]+@[\w.]+\.\w+",
    "street": r"\b\d{1,3} [A-Z][a-z]+ (?:Street|Avenue|Road|Lane)\b",
    "suite": r"\bSuite \d{1,3}\b",
}
SOURCES = {"paypal": "paypal", "gift card": "gift_card", "credit card": "credit_card"}
ENUMS = {"reason": ["no longer needed", "ordered by mistake"]}
SCHEMAS: dict[str, dict] = {}  # tool name -> JSON schema of its parameters, from start messages


class Context:
    """What the conversation so far has shown: the user's words and the records tools returned."""

    def __init__(self, messages: list[dict]):
        self.text = json.dumps(messages)
        self.user = " ".join(m["content"] or "" for m in messages if m["role"] == "user").lower()
        self.order: dict | None = None
        self.product: dict | None = None
        self.methods: list[str] = []
        for m in messages:
            if m["role"] != "tool":
                continue
            try:
                data = json.loads(m["content"])
            except (json.JSONDecodeError, TypeError):
                continue
            if isinstance(data, dict) and "items" in data and "order_id" in data:
                self.order = data
            elif isinstance(data, dict) and "variants" in data:
                self.product = data
            elif isinstance(data, dict) and "payment_methods" in data:
                self.methods = sorted(data["payment_methods"])

    def snap(self, value: str) -> str:
        """An ungrounded id or address part -> the closest of its kind in the conversation."""
        if value in self.text:
            return value
        for shape in SHAPES.values():
            if re.fullmatch(shape, value):
                found = sorted(set(re.findall(shape, self.text)))
                best = difflib.get_close_matches(value, found, n=1, cutoff=0.0)
                return best[0] if best else value
        return value

    def payment(self, value: str) -> str:
        wanted = []
        if "original" in self.user and self.order and self.order.get("payment_history"):
            wanted = [self.order["payment_history"][0]["payment_method_id"]]
        else:
            for word, prefix in SOURCES.items():
                if word in self.user:
                    wanted += [m for m in self.methods if m.startswith(prefix)]
        return wanted[0] if len(wanted) == 1 and value not in wanted else value

    def items(self, values: list[str]) -> list[str]:
        if not self.order:
            return values
        named = [i["item_id"] for i in self.order["items"] if i["name"].lower() in self.user]
        if named and not set(values) <= set(named):
            return named[: max(1, len(values))]
        return values

    def new_items(self, values: list[str]) -> list[str]:
        if not self.product:
            return values
        fits = [
            v["item_id"]
            for v in self.product["variants"].values()
            if v.get("available") and all(str(o).lower() in self.user.split() for o in v["options"].values())
        ]
        return fits if len(fits) == 1 and values != fits else values

    def order_id(self, value: str) -> str:
        mentioned = sorted(set(re.findall(SHAPES["order"], self.user.upper())))
        return mentioned[0] if len(mentioned) == 1 and value not in mentioned else value


def _read(text: str, spaced: bool) -> tuple[str, str] | None:
    line = text.strip().split("\n", 1)[0].strip()
    line = prompting.despace(line) if spaced else line
    match = re.match(r"([A-Za-z_]\w*)\s*(.*)", line)
    if not match:
        return None
    name, rest = match.groups()
    if name == prompting.RESPOND:  # a message, unless it is `respond <tool> ...`
        inner = re.match(r"([A-Za-z_]\w*)\s*(.*)", rest)
        if not (inner and inner.group(1) in SCHEMAS):
            return name, rest
        name, rest = inner.groups()
    if name not in SCHEMAS and SCHEMAS:
        close = difflib.get_close_matches(name, list(SCHEMAS), n=1, cutoff=0.8)
        if not close:
            return None
        name = close[0]
    return name, rest


def _arguments(name: str, rest: str) -> dict | None:
    """Positional or JSON arguments; a surplus of values goes to the last parameter."""
    if rest.startswith("{"):
        rest = rest + "}" * max(0, rest.count("{") - rest.count("}"))
        try:
            args = json.loads(rest)
        except json.JSONDecodeError:
            return None
        return args if isinstance(args, dict) else None
    schema = SCHEMAS.get(name, {})
    order = list(schema.get("required") or schema.get("properties", {}))
    parts = [p.strip() for p in rest.split("|")] if rest else []
    if len(parts) < len(order):
        return None
    if len(parts) > len(order) and order:
        parts = parts[: len(order) - 1] + [parts[-1]]
    kinds = schema.get("properties", {})
    return {k: prompting.typed(kinds.get(k, {}).get("type"), v) for k, v in zip(order, parts, strict=False)}


def repair(text: str, messages: list[dict], spaced: bool) -> dict | None:
    """The action in the model's text, repaired against the conversation; None if there is none."""
    read = _read(text, spaced)
    if read is None:
        return None
    name, rest = read
    if name == prompting.RESPOND:
        return {"type": "message", "content": rest} if rest else None
    args = _arguments(name, rest)
    if args is None:
        return None
    params = SCHEMAS.get(name, {}).get("properties", {})
    args = {k: v for k, v in args.items() if k in params}
    if any(k not in args for k in SCHEMAS.get(name, {}).get("required", [])):
        return None
    ctx = Context(messages)
    for key, value in args.items():
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = [ctx.snap(v) for v in value]
            value = (
                ctx.items(value)
                if key == "item_ids"
                else ctx.new_items(value)
                if key == "new_item_ids"
                else value
            )
        elif isinstance(value, str):
            value = ctx.snap(value)
            if key == "payment_method_id":
                value = ctx.payment(value)
            elif key == "order_id":
                value = ctx.order_id(value)
            elif key in ENUMS:
                value = (difflib.get_close_matches(value, ENUMS[key], n=1, cutoff=0.3) or [value])[0]
        args[key] = value
    return {"type": "tool_call", "name": name, "arguments": args}


def main() -> None:
    engine = ModelClient.from_env()  # the model server, at $OPENAI_BASE_URL

    def policy(batch: list[dict]) -> list[dict]:
        for m in batch:
            for tool in m["observation"].get("tools", []):
                fn = tool.get("function", tool)
                SCHEMAS[fn["name"]] = fn.get("parameters", {})
        convs = [m["observation"]["messages"] for m in batch]
        prompts = [prompting.prompt(c) for c in convs]
        limit = CONFIG["max_new_tokens"]
        texts = engine.generate(prompts, max_new_tokens=limit, stop=["\n"])
        actions = [repair(t, c, engine.spaced) for t, c in zip(texts, convs, strict=True)]
        for attempt in range(CONFIG["retries"]):
            todo = [i for i, a in enumerate(actions) if a is None]
            if not todo:
                break
            again = engine.generate(
                [prompts[i] for i in todo],
                max_new_tokens=limit,
                stop=["\n"],
                temperature=CONFIG["temperature"],
                seed=attempt + 1,
            )
            for i, text in zip(todo, again, strict=True):
                actions[i] = repair(text, convs[i], engine.spaced)
        return [a or {"type": "message", "content": t.strip()} for a, t in zip(actions, texts, strict=True)]

    serve(policy)


if __name__ == "__main__":
    main()
