"""A CLI research agent (Claude Code, Codex CLI, OpenCode, Gemini CLI, aider, ...) run in the research sandbox.

Each turn the pipeline renders the turn prompt to /agent/prompt.md and runs `agent.command`
(a bash command; {prompt_file}, {model}, {max_steps} and {base_url} are filled in) inside the
research sandbox with the workspace as its working directory, a fresh HOME, and the API keys
named in `agent.env`. Its only network is the orchestrator's egress proxy, which lets through
the hosts in `agent.allow_hosts` plus the host of `agent.base_url` (the CLI's API endpoint:
the vendor's by default, a user's own server or proxy with one override), and logs what it
sees. Its stdout/stderr, timestamped, are the turn's trajectory. The CLI ends the whole
research early by creating the file `.submit` in the workspace.

Where the binary comes from: `scripts/install_agents.sh` puts pinned versions in the project's
`.agents/` (or $VTB_AGENTS_DIR); that folder is mounted read-only and its bin/ leads the
sandbox's PATH, after each folder of `agent.mounts` (and its bin/). `check_cli` resolves the
binary, and its `#!` interpreter, on exactly that PATH and only through folders the sandbox
sees, so "installed here, missing in the sandbox" fails before the run, not in its first turn.
A new CLI is a new config file (see conf/agent/cli.yaml).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path
from urllib.parse import urlsplit

from vtb.agents import ResearchEnv, TurnResult, register
from vtb.agents.cli_usage import USAGE_KINDS, estimate_from_bytes, parse_usage
from vtb.agents.env import home_path
from vtb.agents.llm import price_of
from vtb.agents.prompt import render
from vtb.config import AgentConfig
from vtb.sandbox.base import Mount
from vtb.sandbox.runtime import SANDBOX_PATH, SYSTEM_DIRS, is_inside

SUBMIT_MARKER = ".submit"
TOOLS_TEXT = (
    "You work in a bash shell in the workspace. When this turn's edits are done, just exit; the pipeline "
    f"then trains and validates. To stop the research and submit the best candidate, create the file "
    f"`{SUBMIT_MARKER}` in the workspace before you exit."
)
PROJECT_AGENTS = Path(__file__).resolve().parents[2] / ".agents"


def agents_dir() -> Path:
    """Where scripts/install_agents.sh installed the CLIs ($VTB_AGENTS_DIR, else <project>/.agents)."""
    return Path(os.environ.get("VTB_AGENTS_DIR") or PROJECT_AGENTS).expanduser().resolve()


def fill(command: str, **values: object) -> str:
    """Replace {name} placeholders (only the known ones: shell braces elsewhere stay as they are)."""
    for name, value in values.items():
        command = command.replace("{" + name + "}", str(value))
    return command


def endpoint(base_url: str | None) -> str | None:
    """The allowlist entry (host:port) for an API base URL, or a clear error for a bad one."""
    if not base_url:
        return None
    url = urlsplit(base_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(
            f"agent.base_url={base_url!r}: give a URL such as https://api.anthropic.com "
            "or http://127.0.0.1:8000/v1"
        )
    host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
    return f"{host}:{url.port or (443 if url.scheme == 'https' else 80)}"


def mount_dirs(cfg: AgentConfig) -> list[Path]:
    """The host folders the CLI's sandbox mounts read-only at their own path: agent.mounts, then
    the project's installed agents (when scripts/install_agents.sh has run)."""
    dirs = [Path(f).expanduser().resolve() for f in cfg.mounts]
    if (agents_dir() / "bin").is_dir():
        dirs.append(agents_dir())
    return dirs


def sandbox_path(cfg: AgentConfig) -> str:
    """PATH inside the CLI's sandbox: each mounted folder's bin/ (or the folder), then the default."""
    lead = [str(d / "bin") if (d / "bin").is_dir() else str(d) for d in mount_dirs(cfg)]
    return ":".join([*lead, SANDBOX_PATH])


def _visible(path: Path, cfg: AgentConfig) -> bool:
    roots = [
        *SYSTEM_DIRS,
        os.path.realpath(sys.prefix),
        os.path.realpath(sys.base_prefix),
        *map(str, mount_dirs(cfg)),
    ]
    return any(is_inside(os.path.realpath(path), r) for r in roots)


def _interpreter(binary: Path) -> str | None:
    """The program a `#!` line names (`/usr/bin/env node` -> node), or None for a native binary."""
    try:
        with open(binary, "rb") as f:
            head = f.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if words[:1] == ["/usr/bin/env"]:
        words = [w for w in words[1:] if not w.startswith("-")]
    return words[0] if words else None


def resolve_binary(cfg: AgentConfig) -> Path:
    """The binary the sandbox will run for `agent.command`, or a ValueError naming the fix."""
    binary = shlex.split(cfg.command)[0]
    search = sandbox_path(cfg)
    hint = f" ({cfg.install_hint})" if cfg.install_hint else ""
    found = shutil.which(binary, path=search) if "/" not in binary else binary
    if found is None or not Path(found).is_file():
        where = (
            f" (here it is {shutil.which(binary)}, which the sandbox does not see)"
            if shutil.which(binary)
            else ""
        )
        raise ValueError(
            f"agent {cfg.name}: `{binary}` is not on the sandbox's PATH{where}{hint}; install it "
            "into the project with scripts/install_agents.sh, or list its install folder in agent.mounts"
        )
    if not _visible(Path(found), cfg):
        raise ValueError(
            f"agent {cfg.name}: {found} resolves to {os.path.realpath(found)}, outside every folder the "
            "sandbox mounts: add that folder to agent.mounts"
        )
    program = _interpreter(Path(found))
    if program is not None:
        interp = shutil.which(program, path=search) if "/" not in program else program
        if interp is None or not Path(interp).exists() or not _visible(Path(interp), cfg):
            raise ValueError(
                f"agent {cfg.name}: {found} runs `{program}`, which the sandbox does not see "
                "(install it system-wide, e.g. Node.js 20+ for the npm CLIs, or mount its folder)"
            )
    return Path(found)


def check_cli(cfg: AgentConfig) -> None:
    """Fail before the run starts when the CLI cannot work: no command, binary missing, key unset."""
    if not cfg.command:
        raise ValueError(
            "agent=cli needs agent.command (a bash command run in the workspace; {prompt_file} is the "
            "prompt): use a ready-made config such as agent=claude_code or agent=codex"
        )
    if cfg.usage not in USAGE_KINDS:
        raise ValueError(f"agent.usage={cfg.usage!r} is not one of {', '.join(USAGE_KINDS)}")
    for folder in cfg.mounts:
        if not Path(folder).expanduser().is_dir():
            raise ValueError(f"agent.mounts: {folder} is not a folder")
    for rel in cfg.home_files:
        home_path(rel)
    endpoint(cfg.base_url)
    resolve_binary(cfg)
    missing = [name for name in cfg.env if not os.environ.get(name)]
    if missing:
        raise ValueError(f"agent {cfg.name}: set {', '.join(missing)} in the environment (passed to the CLI)")


class CLIAgent:
    def __init__(self, cfg: AgentConfig):
        check_cli(cfg)
        self.cfg = cfg

    def turn(self, env: ResearchEnv) -> TurnResult:
        cfg = self.cfg
        prompt = render(cfg, env.feedback(), env.workspace, TOOLS_TEXT)
        values = {
            "prompt_file": "/agent/prompt.md",
            "model": cfg.model or "",
            "max_steps": cfg.max_steps,
            "base_url": (cfg.base_url or "").rstrip("/"),
        }
        command = fill(cfg.command, **values)
        fixed = {k: fill(str(v), **values) for k, v in cfg.set_env.items()}
        home_files = {k: fill(str(v), **values) for k, v in cfg.home_files.items()}
        secrets = {name: os.environ[name] for name in cfg.env}
        mounts = [Mount(d, str(d)) for d in mount_dirs(cfg)]
        allow = [*cfg.allow_hosts, *filter(None, [endpoint(cfg.base_url)])]
        marker = env.workspace / SUBMIT_MARKER
        marker.unlink(missing_ok=True)
        egress_before = len(env.egress)
        out = env.run_agent(
            command,
            prompt=prompt,
            env={"PATH": sandbox_path(cfg), **fixed, **secrets},
            allow_hosts=allow,
            timeout_s=cfg.turn_wall_s,
            extra_mounts=mounts,
            home_files=home_files,
        )
        stdout = [line["line"] for line in out["output"] if line["stream"] == "stdout"]
        usage = parse_usage(stdout, cfg.usage)
        traffic = env.egress[egress_before:]
        up = sum(int(e.get("bytes_up") or 0) for e in traffic)
        down = sum(int(e.get("bytes_down") or 0) for e in traffic)
        if usage.prompt + usage.completion == 0 and up + down > 0:  # nothing (usable) reported
            usage = estimate_from_bytes(up, down, errors=usage.errors)
        cost = (
            usage.cost_usd
            if usage.cost_usd is not None
            else price_of(cfg.prices, cfg.model, usage.prompt, usage.completion)
        )
        env.charge_agent(usage.prompt + usage.completion, cost, usage.errors)
        env.note(
            {
                "usage": usage.source,
                "prompt_tokens": usage.prompt,
                "completion_tokens": usage.completion,
                "proxy_bytes": {"up": up, "down": down},
                **({"usage_errors": usage.errors} if usage.errors else {}),
            }
        )
        submit = marker.exists()
        marker.unlink(missing_ok=True)
        ended = f"killed ({out['killed']})" if out["killed"] else f"exited {out['returncode']}"
        if out.get("bridge"):  # the bridge stopped or died: the turn ended for that reason
            ended += f": {out['bridge']}"
        stopped = "wall" if out["killed"] == "wall" else None
        crashed = not out["killed"] and not out.get("bridge") and out["returncode"] not in (0, None)
        last = " / ".join(line["line"] for line in out["output"][-3:])[-300:]
        return TurnResult(
            done=submit,
            stopped=stopped,
            usage=usage.source,
            notes=f"{cfg.name}: {ended}" + (", submitted" if submit else ""),
            # the CLI itself failed (an API error, a crash): the run ends errored, not scored
            error=f"{cfg.name} exited {out['returncode']}" + (f": {last}" if last else ", printing nothing")
            if crashed
            else None,
        )


@register("cli")
def make(cfg: AgentConfig) -> CLIAgent:
    return CLIAgent(cfg)
