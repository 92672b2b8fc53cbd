"""A research-agent turn: the agent edits the workspace; the host snapshots what it left.

The workspace is sandbox-written: links and special files are removed (and named in the turn's
notes), and a part over the configured caps rejects the turn's edits (after = before) with a
reason the agent reads in its feedback next turn; the run goes on. API keys the agent was
given are scrubbed from its trajectory and its workspace before anything is stored.
"""

from __future__ import annotations

from pathlib import Path

from vtb import safefs
from vtb.agents import Feedback, make_agent
from vtb.agents.env import SandboxResearchEnv, redact, scrub_workspace, secret_values
from vtb.config import AgentConfig
from vtb.results import TurnOutcome
from vtb.safefs import Caps
from vtb.sandbox.base import Limits, Mount, Sandbox
from vtb.workspace import changed_files, restore, snapshot

MAX_LISTED = 20  # dropped links/special files named in the turn's notes and result


def take_turn(
    agent_cfg: AgentConfig,
    feedback: Feedback,
    before: str,
    store: Path,
    ws: Path,
    sandbox: Sandbox,
    mounts: list[Mount],
    limits: Limits,
    caps: Caps,
) -> TurnOutcome:
    restore(store, before, ws)
    env = SandboxResearchEnv(ws, store, feedback, sandbox, mounts, limits)
    error, stopped, usage = None, None, None
    try:
        result = make_agent(agent_cfg).turn(env)
        done, notes, stopped, usage = result.done, result.notes, result.stopped, result.usage
        error = getattr(result, "error", None)
    except Exception as e:  # an agent that fails loses its turn, not the run
        done, notes, error = True, f"agent failed: {type(e).__name__}: {e}", repr(e)
    secrets = secret_values([*agent_cfg.env, *([agent_cfg.api_key_env] if agent_cfg.api_key_env else [])])
    dropped = safefs.prune(ws)  # links and special files the agent's commands left: never followed
    scrubbed = scrub_workspace(ws, secrets)
    if scrubbed:
        env.note({"redacted_files": scrubbed})
    rejected = None
    try:
        after = snapshot(ws, store, caps)
    except OSError as e:  # safefs.Rejected past the caps, or a file the host cannot read
        after, rejected = before, f"workspace rejected, edits discarded: {e}"
        restore(store, before, ws)
    if dropped:
        env.note({"dropped": dropped[:MAX_LISTED]})
    fields = {
        "after": after,
        "done": bool(done),
        "notes": _with_warnings(str(notes), rejected, dropped),
        "edits": changed_files(store, before, after),
        "rejected": rejected,
        "dropped": [f"{d['path']} ({d['kind']})" for d in dropped[:MAX_LISTED]],
        "stopped": stopped,
        "usage": usage,
        "error": error,
        "trajectory": env.log,
        "egress": env.egress,
    }
    return TurnOutcome(**redact(fields, secrets), charge=env.charge)


def _with_warnings(notes: str, rejected: str | None, dropped: list[dict]) -> str:
    """The agent's notes led by what the host refused, so the agent reads it first next turn."""
    lead = []
    if rejected:
        lead.append(f"[{rejected}]")
    if dropped:
        named = ", ".join(f"{d['path']} ({d['kind']})" for d in dropped[:5])
        more = f" and {len(dropped) - 5} more" if len(dropped) > 5 else ""
        lead.append(f"[links and special files are not kept; dropped: {named}{more}]")
    return " ".join([*lead, notes]) if lead else notes
