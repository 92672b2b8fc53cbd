"""The harness protocol: JSON lines over the sandbox's stdin/stdout (this docstring is its reference).

The orchestrator sends *rounds*: any number of messages followed by ``{"type": "flush"}``.
A message is either an episode start or an observation for a running episode::

    {"type": "start", "episode": "val-0007", "domain": "math", "observation": {...}}
    {"type": "observation", "episode": "val-0007", "observation": {...}}
    {"type": "flush"}
    {"type": "close"}

After a flush the harness answers every message of the round with one action line::

    {"episode": "val-0007", "action": {"type": "answer", "content": "#### 42"}}

Action types: ``answer`` (final answer; in terminal episodes: "I am done"), ``tool_call``
(name, arguments), ``message`` (to the user), ``shell`` (``command``: one line of bash),
``patch`` (``patch``: a unified diff). Single-turn domains are one round. Rounds exist so a
harness can batch generation across episodes.

Anything the harness prints that is not such a line is ignored by the orchestrator (and
recorded); an episode that gets no valid action in time scores 0.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from typing import IO

ACTION_TYPES = ("answer", "tool_call", "message", "shell", "patch")


def send(stream: IO[str], message: dict) -> None:
    stream.write(json.dumps(message) + "\n")
    stream.flush()


def parse_action_line(line: str) -> tuple[str, dict] | None:
    """Return (episode, action) for a valid harness line, None for anything else."""
    try:
        msg = json.loads(line)
    except (json.JSONDecodeError, ValueError):
        return None
    if not isinstance(msg, dict):
        return None
    episode, action = msg.get("episode"), msg.get("action")
    if not isinstance(episode, str) or not isinstance(action, dict):
        return None
    if action.get("type") not in ACTION_TYPES:
        return None
    return episode, action


def serve(
    policy: Callable[[list[dict]], Iterable[dict]],
    stdin: IO[str] | None = None,
    stdout: IO[str] | None = None,
) -> None:
    """Harness side of the protocol.

    ``policy`` gets the messages of one round and returns one action dict per message, in
    the same order. The harness's own code stays a pure function of the round.
    """
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    batch: list[dict] = []
    for line in stdin:
        line = line.strip()
        if not line:
            continue
        msg = json.loads(line)
        kind = msg.get("type")
        if kind == "close":
            return
        if kind == "flush":
            if batch:
                for msg_, action in zip(batch, policy(batch), strict=True):
                    send(stdout, {"episode": msg_["episode"], "action": action})
            batch = []
            continue
        batch.append(msg)
