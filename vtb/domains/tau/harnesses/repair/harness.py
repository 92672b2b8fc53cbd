"""Repairing tau harness: validates every tool call against the schemas and repairs or retries it.

What the model wrote is checked before it reaches the environment:
- JSON that is cut short gets its closing braces; a tool name that is not in the schemas is
  replaced by the closest one (if close enough); arguments not in the schema are dropped;
- an id the model wrote that appears nowhere in the conversation (a copying slip) is snapped to
  the closest id of the same kind that does appear; an enum value to its closest allowed value;
- a call still invalid (unknown tool, missing required argument) is re-sampled up to `retries`
  times at `temperature`; after that the raw text goes to the user as a message.
Every repair starts from the model's own output: with a model that writes nothing, it sends nothing.
"""

import difflib
import json
import os
import re
from pathlib import Path

from vtb.domains.tau import prompting
from vtb.engine.infer import Engine
from vtb.protocol import serve

CONFIG = json.loads((Path(__file__).parent / "config.json").read_text())
ID_SHAPES = [r"#W\d{7}", r"\b(?:credit_card|paypal|gift_card)_\d{7}\b", r"\b[a-z]+_[a-z]+_\d{4}\b", r"\b\d{10}\b",
             r"[\w.]+@[\w.]+"]  # fmt: skip
ENUMS = {"reason": ["no longer needed", "ordered by mistake"]}
SCHEMAS: dict[str, dict] = {}  # tool name -> JSON schema of its parameters, from start messages


def _close_json(text: str) -> str:
    text = text.strip()
    for _ in range(3):
        try:
            json.loads(text)
            return text
        except json.JSONDecodeError:
            if text.count("{") > text.count("}"):
                text += "}"
            elif text.count('"') % 2:
                text += '"'
            else:
                break
    return text


def _snap(value: str, seen: str) -> str:
    if value in seen:
        return value
    for shape in ID_SHAPES:
        if re.fullmatch(shape, value):
            candidates = sorted(set(re.findall(shape, seen)))
            best = difflib.get_close_matches(value, candidates, n=1, cutoff=0.6)
            return best[0] if best else value
    return value


def repair(text: str, seen: str, spaced: bool) -> dict | None:
    """The action in the model's text, repaired; None if it is no valid action."""
    line = text.strip().split("\n", 1)[0].strip()
    match = re.match(r"([A-Za-z_]\w*)\s*(.*)", prompting.despace(line) if spaced else line)
    if not match:
        return None
    name, rest = match.groups()
    if name != prompting.RESPOND and name not in SCHEMAS and SCHEMAS:
        match = difflib.get_close_matches(name, list(SCHEMAS), n=1, cutoff=0.8)
        if not match:
            return None
        name = match[0]
    try:
        action = prompting.parse(f"{name} {_close_json(rest)}")
    except ValueError:
        return None
    if action["type"] != "tool_call" or not SCHEMAS:
        return action
    params = SCHEMAS[name].get("properties", {})
    args = {k: v for k, v in action["arguments"].items() if k in params}
    for key, value in args.items():
        if isinstance(value, str):
            value = _snap(value, seen)
            if key in ENUMS:
                value = (difflib.get_close_matches(value, ENUMS[key], n=1, cutoff=0.3) or [value])[0]
        elif isinstance(value, list):
            value = [_snap(v, seen) if isinstance(v, str) else v for v in value]
        args[key] = value
    if any(k not in args for k in SCHEMAS[name].get("required", [])):
        return None
    return {"type": "tool_call", "name": name, "arguments": args}


def main() -> None:
    engine = Engine(os.environ["VTB_MODEL_DIR"])

    def policy(batch: list[dict]) -> list[dict]:
        for m in batch:
            for tool in m["observation"].get("tools", []):
                fn = tool.get("function", tool)
                SCHEMAS[fn["name"]] = fn.get("parameters", {})
        prompts = [prompting.prompt(m["observation"]["messages"]) for m in batch]
        seen = [json.dumps(m["observation"]["messages"]) for m in batch]
        texts = engine.generate(prompts, max_new_tokens=CONFIG["max_new_tokens"], stop=["\n"])
        actions = [repair(t, s, engine.spaced) for t, s in zip(texts, seen, strict=True)]
        for attempt in range(CONFIG["retries"]):
            todo = [i for i, a in enumerate(actions) if a is None]
            if not todo:
                break
            again = engine.generate([prompts[i] for i in todo], max_new_tokens=CONFIG["max_new_tokens"],
                                    stop=["\n"], temperature=CONFIG["temperature"], seed=attempt + 1)  # fmt: skip
            for i, text in zip(todo, again, strict=True):
                actions[i] = repair(text, seen[i], engine.spaced)
        return [
            a if a is not None else {"type": "message", "content": t.strip()}
            for a, t in zip(actions, texts, strict=True)
        ]

    serve(policy)


if __name__ == "__main__":
    main()
