"""A research-agent turn: the agent edits the workspace; the result is snapshotted.

The workspace is sandbox-written: links and special files are removed (and named in the turn's
notes), and a part over the configured caps rejects the turn's edits (after = before) with a
reason the agent reads in its feedback next turn; the run goes on.

Cached by hash(agent config, prompt template, seed, workspace before, feedback), so a resumed
run replays an agent's past edits instead of asking it again. API keys the agent was given
are scrubbed from its trajectory and its workspace before anything is stored.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from steps.common import step
from vtb import pipeline, runner, safefs
from vtb.agents import Feedback, make_agent
from vtb.config import AgentConfig, SandboxConfig
from vtb.research import SandboxResearchEnv, redact, scrub_workspace, secret_values
from vtb.workspace import changed_files, restore, snapshot


@step("agent-turn")
def agent_turn_step(
    key: str,
    agent_cfg: AgentConfig,
    feedback: dict,
    before: str,
    store: str,
    workspace: str,
    data_dir: str,
    base_dir: str,
    sandbox_cfg: SandboxConfig,
    cpu_seconds: float,
    gpu_seconds: float | None = None,
) -> dict:
    store_, ws = Path(store), Path(workspace)
    restore(store_, before, ws)
    env = SandboxResearchEnv(
        ws,
        store_,
        Feedback(**feedback),
        pipeline.sandbox_for(sandbox_cfg),
        runner.research_mounts(ws, Path(data_dir), Path(base_dir)),
        pipeline.step_limits(sandbox_cfg, None, cpu_seconds, gpu_seconds),
    )
    error, stopped, usage = None, None, None
    try:
        result = make_agent(agent_cfg).turn(env)
        done, notes, stopped, usage = result.done, result.notes, result.stopped, result.usage
    except Exception as e:  # an agent that fails loses its turn, not the run
        done, notes, error = True, f"agent failed: {type(e).__name__}: {e}", repr(e)
    secrets = secret_values([*agent_cfg.env, *([agent_cfg.api_key_env] if agent_cfg.api_key_env else [])])
    dropped = safefs.prune(ws)  # links and special files the agent's commands left: never followed
    scrubbed = scrub_workspace(ws, secrets)
    if scrubbed:
        env.note({"redacted_files": scrubbed})
    rejected = None
    try:
        after = snapshot(ws, store_, sandbox_cfg.part_caps())
    except OSError as e:  # safefs.Rejected past the caps, or a file the host cannot read
        after, rejected = before, f"workspace rejected, edits discarded: {e}"
        restore(store_, before, ws)
    if dropped:
        env.note({"dropped": dropped[:MAX_LISTED]})
    notes = _with_warnings(str(notes), rejected, dropped)
    return redact({
        "after": after,
        "done": done,
        "notes": notes,
        "rejected": rejected,
        "dropped": [f"{d['path']} ({d['kind']})" for d in dropped[:MAX_LISTED]],
        "stopped": stopped,
        "usage": usage,
        "error": error,
        "edits": changed_files(store_, before, after),
        "charge": asdict(env.charge),
        "trajectory": env.log,
        "egress": env.egress,
    }, secrets)  # fmt: skip


MAX_LISTED = 20  # dropped links/special files named in the turn's notes and result


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
