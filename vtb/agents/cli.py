"""A CLI research agent (Claude Code, Codex CLI, OpenCode, Gemini CLI, aider, ...) run in the research sandbox.

Each turn the pipeline renders the turn prompt to /agent/prompt.md and runs `agent.command`
(a bash command; {prompt_file}, {model} and {max_steps} are filled in) inside the research
sandbox with the workspace as its working directory, a fresh HOME, and the API keys named in
`agent.env`. Its only network is the orchestrator's egress proxy, which lets through the
hosts in `agent.allow_hosts` and logs every request. Its stdout/stderr, timestamped, are the
turn's trajectory. The CLI ends the whole research early by creating the file `.submit` in
the workspace. A new CLI is a new config file (see conf/agent/cli.yaml).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

from vtb.agents import ResearchEnv, TurnResult, register
from vtb.agents.llm import price_of
from vtb.agents.prompt import render
from vtb.config import AgentConfig
from vtb.ledger import MAX_ERRORS, checked
from vtb.sandbox.base import Mount

SUBMIT_MARKER = ".submit"
TOOLS_TEXT = (
    "You work in a bash shell in the workspace. When this turn's edits are done, just exit; the pipeline "
    f"then trains and validates. To stop the research and submit the best candidate, create the file "
    f"`{SUBMIT_MARKER}` in the workspace before you exit."
)
USAGE_KINDS = ("none", "claude", "codex")


def fill(command: str, **values: object) -> str:
    """Replace {name} placeholders (only the known ones: shell braces elsewhere stay as they are)."""
    for name, value in values.items():
        command = command.replace("{" + name + "}", str(value))
    return command


def usage_from_output(
    lines: list[str], kind: str, errors: list[str] | None = None
) -> tuple[int, int, float | None]:
    """(prompt tokens, completion tokens, cost in USD or None) as the CLI reported them on stdout.

    claude: `claude -p --output-format json|stream-json` ends with {"type": "result", "usage":
    {...}, "total_cost_usd": x}. codex: `codex exec --json` emits {"type": "turn.completed",
    "usage": {...}} events. Self-reported by the agent's own tool, so every figure goes through
    the ledger's `checked`: a negative, non-finite or non-numeric one counts 0 (a bad cost:
    the price table instead) and is described in `errors`.
    """
    if kind == "none":
        return 0, 0, None
    errors = [] if errors is None else errors
    prompt = completion = 0
    cost = None

    def number(value: object, name: str) -> float:
        got, error = checked(0 if value is None else value, name)
        if error and len(errors) < MAX_ERRORS:
            errors.append(f"agent usage event: {error}")
        return got

    for line in lines:
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(event, dict) or not isinstance(event.get("usage"), dict):
            continue
        usage = event["usage"]
        if kind == "claude" and event.get("type") == "result":
            for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
                prompt += int(number(usage.get(k), "agent_tokens"))
            completion += int(number(usage.get("output_tokens"), "agent_tokens"))
            if event.get("total_cost_usd") is not None:
                got, error = checked(event["total_cost_usd"], "agent_cost_usd")
                if error:
                    errors.append(f"agent usage event: {error} (priced from tokens instead)")
                    cost = float("nan")  # marks the cost unusable: priced from the tokens
                elif cost is None or cost == cost:
                    cost = (cost or 0.0) + got
        elif kind == "codex" and event.get("type") == "turn.completed":
            prompt += int(number(usage.get("input_tokens"), "agent_tokens"))
            completion += int(number(usage.get("output_tokens"), "agent_tokens"))
    if cost is not None and cost != cost:
        cost = None
    return prompt, completion, cost


def check_cli(cfg: AgentConfig) -> None:
    """Fail before the run starts when the CLI cannot work: no command, binary missing, key unset."""
    if not cfg.command:
        raise ValueError(
            "agent=cli needs agent.command (a bash command run in the workspace; {prompt_file} is the "
            "prompt): use a ready-made config such as agent=claude_code or agent=codex"
        )
    if cfg.usage not in USAGE_KINDS:
        raise ValueError(f"agent.usage={cfg.usage!r} is not one of {', '.join(USAGE_KINDS)}")
    binary = shlex.split(cfg.command)[0]
    if shutil.which(binary) is None and not Path(binary).is_file():
        hint = f" ({cfg.install_hint})" if cfg.install_hint else ""
        raise ValueError(
            f"agent {cfg.name}: `{binary}` is not installed on this machine{hint}; it must be visible "
            "inside the sandbox too: install it system-wide or list its folder in agent.mounts"
        )
    missing = [name for name in cfg.env if not os.environ.get(name)]
    if missing:
        raise ValueError(f"agent {cfg.name}: set {', '.join(missing)} in the environment (passed to the CLI)")
    for folder in cfg.mounts:
        if not Path(folder).expanduser().is_dir():
            raise ValueError(f"agent.mounts: {folder} is not a folder")


class CLIAgent:
    def __init__(self, cfg: AgentConfig):
        check_cli(cfg)
        self.cfg = cfg

    def turn(self, env: ResearchEnv) -> TurnResult:
        cfg = self.cfg
        prompt = render(cfg, env.feedback(), env.workspace, TOOLS_TEXT)
        command = fill(
            cfg.command, prompt_file="/agent/prompt.md", model=cfg.model or "", max_steps=cfg.max_steps
        )
        secrets = {name: os.environ[name] for name in cfg.env}
        mounts = [
            Mount(Path(f).expanduser().resolve(), str(Path(f).expanduser().resolve())) for f in cfg.mounts
        ]
        marker = env.workspace / SUBMIT_MARKER
        marker.unlink(missing_ok=True)
        out = env.run_agent(command, prompt=prompt, env={**cfg.set_env, **secrets}, allow_hosts=cfg.allow_hosts,
                            timeout_s=cfg.turn_wall_s, extra_mounts=mounts)  # fmt: skip
        stdout = [line["line"] for line in out["output"] if line["stream"] == "stdout"]
        errors: list[str] = []
        p, c, cost = usage_from_output(stdout, cfg.usage, errors)
        env.charge_agent(p + c, cost if cost is not None else price_of(cfg.prices, cfg.model, p, c), errors)
        if errors:
            env.note({"usage_errors": errors})
        submit = marker.exists()
        marker.unlink(missing_ok=True)
        ended = f"killed ({out['killed']})" if out["killed"] else f"exited {out['returncode']}"
        stopped = "wall" if out["killed"] == "wall" else None
        return TurnResult(
            done=submit, stopped=stopped, notes=f"{cfg.name}: {ended}" + (", submitted" if submit else "")
        )


@register("cli")
def make(cfg: AgentConfig) -> CLIAgent:
    return CLIAgent(cfg)
