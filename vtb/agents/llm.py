"""A research agent driven by any LLM behind an OpenAI-compatible chat-completions API.

Each turn is a fresh conversation: the rendered turn prompt (conf/prompts/research.md) and a
tool-calling loop. The loop runs in the orchestrator; every tool acts through the
`ResearchEnv`, so commands execute in the research sandbox and files stay in the workspace.
A turn ends when the model calls `end_turn`, or at the first per-turn limit (model calls,
tokens, wall time); whatever it edited until then is trained and validated as usual. Tokens
and their cost (from `agent.prices`) are charged to the ledger as they are spent.

    OPENAI_API_KEY=... python -m flows.bench agent=llm agent.base_url=http://localhost:8000/v1 \
        agent.model=Qwen/Qwen3-8B
"""

from __future__ import annotations

import json
import time

from vtb.agents import ResearchEnv, TurnResult, register
from vtb.agents.prompt import render
from vtb.chat import ChatClient, ChatError
from vtb.config import AgentConfig
from vtb.ledger import checked

MAX_TOOL_OUTPUT = 12000  # characters of a tool result shown to the model
NUDGE = "Continue with a tool call. When your edits for this turn are done, call end_turn."


def _tool(name: str, description: str, **props: dict) -> dict:
    required = [k for k, v in props.items() if not v.pop("optional", False)]
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": required},
        },
    }


TOOLS = [
    _tool(
        "list_files",
        "List the workspace's files with their sizes.",
        path={"type": "string", "description": "a folder in the workspace, default '.'", "optional": True},
    ),
    _tool(
        "read_file",
        "Read a text file of the workspace.",
        path={"type": "string"},
        offset={"type": "integer", "description": "first character, default 0", "optional": True},
    ),
    _tool(
        "write_file",
        "Create or replace a file of the workspace.",
        path={"type": "string"},
        content={"type": "string"},
    ),
    _tool(
        "run",
        "Run a bash command in the research sandbox (cwd = workspace, /data and /base read-only, "
        "no network). Returns exit code, stdout and stderr.",
        command={"type": "string"},
        timeout_s={"type": "number", "description": "default 300", "optional": True},
    ),
    _tool("feedback", "Past candidates (val score, edits per part, notes) and the budget left."),
    _tool(
        "end_turn",
        "End this turn: the pipeline trains and validates the workspace as it is now.",
        notes={"type": "string", "description": "what you changed and why", "optional": True},
        submit={
            "type": "boolean",
            "description": "true: stop iterating and submit the best candidate",
            "optional": True,
        },
    ),
]

TOOLS_TEXT = (
    "Tools: list_files, read_file, write_file (paths relative to the workspace), run (a bash command in "
    "the sandbox), feedback, and end_turn (call it when this turn's edits are done; submit=true stops "
    "the research)."
)


def price_of(prices: dict, model: str | None, prompt_tokens: int, completion_tokens: int) -> float:
    """USD for one call from a {model: {input, output}} table of prices per 1M tokens ('default' fallback)."""
    row = prices.get(model or "") or prices.get("default") or {}
    return (
        prompt_tokens * float(row.get("input", 0.0)) + completion_tokens * float(row.get("output", 0.0))
    ) / 1e6


def usage_checked(body: dict) -> tuple[tuple[int, int] | None, list[str]]:
    """((prompt, completion) tokens or None, errors): the endpoint's usage, each figure `checked`.

    An endpoint (or a proxy in front of it) may answer with negative, non-finite or non-numeric
    counts; then the call's tokens are estimated from its text instead, and the reason kept.
    """
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return None, []
    counts, errors = [], []
    for key in ("prompt_tokens", "completion_tokens"):
        number, error = checked(0 if usage.get(key) is None else usage[key], "agent_tokens")
        counts.append(int(number))
        if error:
            errors.append(f"endpoint usage {key}: {error}")
    return (None if errors else (counts[0], counts[1])), errors


def _clip(text: str) -> str:
    if len(text) <= MAX_TOOL_OUTPUT:
        return text
    half = MAX_TOOL_OUTPUT // 2
    return f"{text[:half]}\n... [{len(text) - MAX_TOOL_OUTPUT} characters cut] ...\n{text[-half:]}"


class LLMAgent:
    def __init__(self, cfg: AgentConfig):
        if not cfg.base_url or not cfg.model:
            raise ValueError(
                "agent=llm needs agent.base_url=<OpenAI-compatible URL, e.g. http://localhost:8000/v1> and "
                "agent.model=<served model name>"
            )
        self.cfg = cfg
        self.client = ChatClient(
            cfg.base_url,
            cfg.model,
            cfg.api_key_env,
            timeout_s=float(cfg.options.get("request_timeout_s", 300)),
        )
        self.params = {k: cfg.options[k] for k in ("temperature", "top_p", "seed") if k in cfg.options}
        self.max_completion = int(cfg.options.get("max_completion_tokens", 4096))

    def preflight(self) -> None:
        """Before any work: the endpoint answers (and takes the key), and serves agent.model where
        it lists its models. Else a run would provision and train its initial system, then submit
        it unchanged with exit 0, looking like agent=noop (issue 39)."""
        try:
            served = self.client.models()
        except ChatError as e:
            key = self.cfg.api_key_env
            hint = f" or the key in ${key}" if key and ("401" in str(e) or "403" in str(e)) else ""
            raise ValueError(
                f"agent=llm: the endpoint does not answer ({e}): start the server, or fix agent.base_url{hint}"
            ) from None
        if served and self.cfg.model not in served:
            raise ValueError(
                f"agent=llm: {self.cfg.base_url} does not serve agent.model={self.cfg.model} "
                f"(it lists: {', '.join(served[:20])}{' ...' if len(served) > 20 else ''})"
            )

    def turn(self, env: ResearchEnv) -> TurnResult:
        result = self._turn(env)
        result.usage = (
            "metered"  # tokens from the endpoint's answers, read by this loop (outside the sandbox)
        )
        return result

    def _turn(self, env: ResearchEnv) -> TurnResult:
        cfg = self.cfg
        fb = env.feedback()
        messages = [
            {"role": "system", "content": render(cfg, fb, env.workspace, TOOLS_TEXT)},
            {"role": "user", "content": f"Iteration {fb.iteration}: make your changes, then call end_turn."},
        ]
        deadline = time.monotonic() + cfg.turn_wall_s
        tokens = 0
        for step in range(1, cfg.max_steps + 1):
            if time.monotonic() >= deadline:
                return self._stopped("wall", f"{cfg.turn_wall_s:g} s of wall time")
            if tokens >= cfg.max_tokens:
                return self._stopped("tokens", f"{tokens} of {cfg.max_tokens} tokens")
            params = {**self.params, "max_tokens": max(1, min(self.max_completion, cfg.max_tokens - tokens))}
            try:
                body = self.client.complete(messages, tools=TOOLS, tool_choice="auto", **params)
                message = body["choices"][0]["message"]
            except ChatError as err:
                why = f"llm: the endpoint failed: {err}"
                return TurnResult(done=True, notes=why, error=why)
            except (KeyError, IndexError, TypeError):
                why = f"llm: response without choices[0].message: {body!r:.200}"
                return TurnResult(done=True, notes=why, error=why)
            usage, errors = usage_checked(body)
            estimated = usage is None  # no (valid) usage from the endpoint: about 4 characters per token
            p, c = usage or (len(json.dumps(messages)) // 4, len(json.dumps(message, default=str)) // 4)
            tokens += p + c
            env.charge_agent(p + c, price_of(cfg.prices, cfg.model, p, c), errors)
            env.note(
                {
                    "llm_call": step,
                    "prompt_tokens": p,
                    "completion_tokens": c,
                    "estimated": estimated,
                    "message": message,
                    **({"usage_errors": errors} if errors else {}),
                }
            )
            calls = message.get("tool_calls") or []
            messages.append(
                {
                    "role": "assistant",
                    "content": message.get("content"),
                    **({"tool_calls": calls} if calls else {}),
                }
            )
            if not calls:
                messages.append({"role": "user", "content": NUDGE})
                continue
            for call in calls:
                name = (call.get("function") or {}).get("name", "")
                try:
                    args = json.loads((call.get("function") or {}).get("arguments") or "{}")
                    if not isinstance(args, dict):
                        raise ValueError("arguments must be a JSON object")
                except ValueError as err:
                    result = f"error: arguments are not valid JSON ({err})"
                else:
                    if name == "end_turn":
                        notes = str(args.get("notes") or "")[:500]
                        return TurnResult(done=bool(args.get("submit")), notes=f"llm: {notes}".strip())
                    result = self._act(env, name, args, deadline)
                messages.append(
                    {"role": "tool", "tool_call_id": call.get("id", ""), "content": _clip(result)}
                )
        return self._stopped("steps", f"{cfg.max_steps} model calls")

    def _stopped(self, limit: str, what: str) -> TurnResult:
        return TurnResult(done=False, stopped=limit, notes=f"llm: stopped at the turn's limit of {what}")

    def _act(self, env: ResearchEnv, name: str, args: dict, deadline: float) -> str:
        """Run one tool; errors become the tool's answer, so the model can correct itself."""
        try:
            if name == "list_files":
                root = (env.workspace / str(args.get("path") or ".")).resolve()
                if not root.is_relative_to(env.workspace.resolve()):
                    raise PermissionError(f"{args.get('path')!r} is outside the workspace")
                files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
                rels = [p.relative_to(env.workspace.resolve()) for p in files if not p.name.startswith(".")]
                return (
                    "\n".join(f"{r}  {(env.workspace / r).stat().st_size}" for r in rels[:300]) or "(empty)"
                )
            if name == "read_file":
                offset = int(args.get("offset") or 0)
                return env.read_file(str(args["path"]))[offset : offset + MAX_TOOL_OUTPUT]
            if name == "write_file":
                env.write_file(str(args["path"]), str(args["content"]))
                return f"wrote {len(str(args['content']))} characters to {args['path']}"
            if name == "run":
                left = max(1.0, deadline - time.monotonic())
                out = env.run(str(args["command"]), timeout_s=min(float(args.get("timeout_s") or 300), left))
                keep = ("returncode", "killed", "stdout", "stderr")
                return json.dumps({k: out[k] for k in keep if k in out})
            if name == "feedback":
                fb = env.feedback()
                return json.dumps(fb.to_json())
            return f"error: unknown tool {name!r}; tools: {', '.join(t['function']['name'] for t in TOOLS)}"
        except (KeyError, TypeError, ValueError) as err:
            return f"error: bad arguments for {name}: {err!r}"
        except OSError as err:
            return f"error: {type(err).__name__}: {err}"


@register("llm")
def make(cfg: AgentConfig) -> LLMAgent:
    return LLMAgent(cfg)
