"""Tokens and cost from a CLI research agent's own machine-readable output, one parser per CLI.

`agent.usage` names the parser. Every figure is what the CLI says about itself (the agent's
own tool, run in the research sandbox), so each one goes through the ledger's `checked`: a
negative, non-finite or non-numeric figure counts 0 and is described in `errors`. Where a CLI
prints nothing usable, the caller estimates from the egress proxy's byte counts instead.

    claude    `claude -p --output-format json` (one result object; with --verbose one JSON
              array of events) or `stream-json` (one event per line): the "result" event's
              usage and total_cost_usd.
    codex     `codex exec --json`: each "turn.completed" event's usage (input includes cached).
    opencode  `opencode run --format json`: each "step_finish" event's part.tokens and part.cost.
    gemini    `gemini --output-format json`: one object; stats.models.<m>.tokens (no cost).
    aider     its console line `Tokens: 2.4k sent, 27 received. Cost: $0.0076 message, ...`:
              rounded, and counted by aider's own tokenizer rather than the API.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from vtb.ledger import MAX_ERRORS, checked


@dataclass
class Usage:
    prompt: int = 0
    completion: int = 0
    cost_usd: float | None = None  # None: price the tokens with agent.prices
    source: str = "none"  # self-reported | self-reported (rounded) | estimated | none
    errors: list[str] = field(default_factory=list)

    def number(self, value: object, name: str = "agent_tokens") -> float:
        got, error = checked(0 if value is None else value, name)
        if error and len(self.errors) < MAX_ERRORS:
            self.errors.append(f"agent usage: {error}")
        return got

    def add_cost(self, value: object) -> None:
        if value is None:
            return
        got, error = checked(value, "agent_cost_usd")
        if error:
            if len(self.errors) < MAX_ERRORS:
                self.errors.append(f"agent usage: {error} (priced from tokens instead)")
            self.cost_usd = float("nan")  # unusable from now on: parse_usage drops it
        elif self.cost_usd is None or self.cost_usd == self.cost_usd:
            self.cost_usd = (self.cost_usd or 0.0) + got


def json_events(lines: list[str]) -> list[dict]:
    """Every JSON object the output holds: the whole text as one document (an object or an array,
    pretty-printed or not), else one per line. Lines that are not JSON are skipped."""

    def loads(text: str) -> object:
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            return None

    whole = loads("\n".join(lines))
    items = (
        [whole] if whole is not None else [loads(line) for line in lines if line.lstrip()[:1] in ("{", "[")]
    )
    out: list[dict] = []
    for item in items:
        out += [e for e in item if isinstance(e, dict)] if isinstance(item, list) else [item]
    return [e for e in out if isinstance(e, dict)]


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _claude(lines: list[str], u: Usage) -> None:
    for event in json_events(lines):
        if event.get("type") != "result":
            continue
        usage = _dict(event.get("usage"))
        for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
            u.prompt += int(u.number(usage.get(k)))
        u.completion += int(u.number(usage.get("output_tokens")))
        u.add_cost(event.get("total_cost_usd"))
        u.source = "self-reported"


def _codex(lines: list[str], u: Usage) -> None:
    for event in json_events(lines):
        if event.get("type") == "turn.completed":
            usage = _dict(event.get("usage"))
            u.prompt += int(u.number(usage.get("input_tokens")))
            u.completion += int(u.number(usage.get("output_tokens")))
            u.source = "self-reported"


def _opencode(lines: list[str], u: Usage) -> None:
    for event in json_events(lines):
        part = _dict(event.get("part"))
        if event.get("type") != "step_finish" or not isinstance(part.get("tokens"), dict):
            continue
        tokens, cache = part["tokens"], _dict(part["tokens"].get("cache"))
        u.prompt += int(
            u.number(tokens.get("input")) + u.number(cache.get("read")) + u.number(cache.get("write"))
        )
        u.completion += int(u.number(tokens.get("output")) + u.number(tokens.get("reasoning")))
        u.add_cost(part.get("cost"))
        u.source = "self-reported"


def _gemini(lines: list[str], u: Usage) -> None:
    for event in json_events(lines):
        for model in _dict(_dict(event.get("stats")).get("models")).values():
            tokens = _dict(_dict(model).get("tokens"))
            u.prompt += int(u.number(tokens.get("prompt")))
            u.completion += int(u.number(tokens.get("candidates")) + u.number(tokens.get("thoughts")))
            u.source = "self-reported"


_COUNT = r"([0-9][0-9.,]*)\s*([kKmM]?)"
_AIDER = re.compile(
    rf"^Tokens: {_COUNT} sent, (?:{_COUNT} cache write, )?(?:{_COUNT} cache hit, )?{_COUNT} received\."
)
_AIDER_COST = re.compile(r"Cost: \$([0-9][0-9.]*) message")


def _count(digits: str | None, unit: str | None) -> float:
    if not digits:
        return 0.0
    scale = {"": 1, "k": 1e3, "m": 1e6}[(unit or "").lower()]
    return float(digits.replace(",", "")) * scale


def _aider(lines: list[str], u: Usage) -> None:
    for line in lines:
        match = _AIDER.match(line.strip())
        if not match:
            continue
        sent, write, hit, received = (_count(*match.groups()[i : i + 2]) for i in (0, 2, 4, 6))
        u.prompt += int(u.number(sent + write + hit))
        u.completion += int(u.number(received))
        if cost := _AIDER_COST.search(line):
            u.add_cost(float(cost.group(1)))
        u.source = "self-reported (rounded)"


PARSERS: dict[str, Callable[[list[str], Usage], None]] = {
    "claude": _claude,
    "codex": _codex,
    "opencode": _opencode,
    "gemini": _gemini,
    "aider": _aider,
}
USAGE_KINDS = ("none", *PARSERS)


def parse_usage(lines: list[str], kind: str) -> Usage:
    """What the CLI reported on stdout about its own tokens and cost (`kind`: agent.usage)."""
    u = Usage()
    if kind in PARSERS:
        PARSERS[kind](lines, u)
    if u.cost_usd is not None and u.cost_usd != u.cost_usd:
        u.cost_usd = None
    return u


BYTES_PER_TOKEN = 4  # a rough mean for English and code; an estimate is marked as one


def estimate_from_bytes(bytes_up: int, bytes_down: int, errors: list[str] = ()) -> Usage:
    """Tokens guessed from the traffic the proxy counted. TLS, HTTP and JSON framing count too,
    so it errs high; the record marks it `estimated`."""
    return Usage(
        prompt=bytes_up // BYTES_PER_TOKEN,
        completion=bytes_down // BYTES_PER_TOKEN,
        source="estimated",
        errors=list(errors),
    )
