"""Repairing terminal harness: ground the command's paths in the instruction; retry a failed command.

Each command the model writes has its /app paths checked against the instruction: a path the
instruction never names is snapped to the closest one it does (prompting.ground_paths), when
config "ground" is on. A command failed when its exit code is not 0 or it timed out. The first
try is greedy; each retry samples (temperature, a seed per try) so it can differ from what
already failed. After
`tries` commands, or the first that succeeds, the harness declares the task done. The model
never sees the outputs: the harness reads them (it only uses the exit codes).
"""

import json
from pathlib import Path

from vtb.domains.terminal.kit import prompting
from vtb.protocol import serve
from vtb.serve.client import ModelClient

CONFIG = json.loads((Path(__file__).parent / "config.json").read_text())


def failed(step: dict) -> bool:
    return step.get("timed_out") or step.get("exit_code") not in (0, None)


def main() -> None:
    engine = ModelClient.from_env()  # the model server, at $OPENAI_BASE_URL

    def policy(batch: list[dict]) -> list[dict]:
        actions: list[dict | None] = [None] * len(batch)
        greedy, retries = [], {}  # try number -> rows: one sampling seed per try
        for i, msg in enumerate(batch):
            history = msg["observation"].get("history", [])
            if not history:
                greedy.append(i)
            elif failed(history[-1]) and len(history) < CONFIG["tries"]:
                retries.setdefault(len(history), []).append(i)
            else:
                actions[i] = {"type": "answer", "content": "done"}

        def ask(rows: list[int], **kw) -> None:
            if not rows:
                return
            prompts = [prompting.prompt(batch[i]["observation"]["instruction"]) for i in rows]
            outputs = engine.generate(prompts, max_new_tokens=CONFIG["max_new_tokens"], stop=["\n"], **kw)
            for i, text in zip(rows, outputs, strict=True):
                command = prompting.command_of(text)
                if CONFIG.get("ground", True):
                    command = prompting.ground_paths(command, batch[i]["observation"]["instruction"])
                actions[i] = {"type": "shell", "command": command}

        ask(greedy)
        for attempt, rows in retries.items():
            ask(rows, temperature=CONFIG["temperature"], seed=attempt)
        return actions

    serve(policy)


if __name__ == "__main__":
    main()
