"""Shell SWE harness for real SWE-bench instances: look at the code, then submit the repository's diff.

Speaks the JSON-lines protocol (vtb.protocol). The start message carries the repository name and
the problem statement (no files: the repository is /testbed in the episode's container); each
message also carries the commands run so far with their output, so the harness keeps no state.
First it asks the model for one command (trained rows: `cat <the file the fix edits>`), then it
`cat`s up to max_files source files the issue names, then it answers, and the bench takes
`git diff` of /testbed as the prediction. A minimal baseline: the model's edits are what a
research agent adds (e.g. ask for a `sed -i` or a patch and send {"type": "patch", ...}).
"""

import json
import shlex
from pathlib import Path

from vtb.domains.swe.kit import prompting
from vtb.protocol import serve
from vtb.serve.client import ModelClient

CONFIG = json.loads((Path(__file__).parent / "config.json").read_text())


def _command(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line or "git status --short"


def main() -> None:
    engine = ModelClient.from_env()  # the model server, at $OPENAI_BASE_URL

    def policy(batch: list[dict]) -> list[dict]:
        actions: list[dict | None] = [None] * len(batch)
        ask = []
        for i, msg in enumerate(batch):
            obs = msg["observation"]
            done = len(obs.get("history") or [])
            named = prompting.named_paths(obs["problem_statement"])[: CONFIG["max_files"]]
            if done == 0:
                ask.append(i)
            elif done <= len(named):
                actions[i] = {
                    "type": "shell",
                    "command": f"cat -- {shlex.quote(named[done - 1])} | head -200",
                }
            else:
                actions[i] = {"type": "answer", "content": "done"}
        prompts = [prompting.shell_prompt(batch[i]["observation"]["problem_statement"]) for i in ask]
        outputs = (
            engine.generate(prompts, max_new_tokens=CONFIG["max_new_tokens"], stop=["\n"]) if ask else []
        )
        for i, text in zip(ask, outputs, strict=True):
            actions[i] = {"type": "shell", "command": _command(text)}
        return actions

    serve(policy)


if __name__ == "__main__":
    main()
