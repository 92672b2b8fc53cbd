"""Plain terminal harness: one greedy command from the instruction, then declare the task done.

Speaks the JSON-lines protocol (vtb.protocol). Every message carries the instruction and the
commands run so far with their output, so the harness keeps no state: with no history it
asks the model for a command, otherwise it ends the episode.
"""

import json
from pathlib import Path

from vtb.domains.terminal.kit import prompting
from vtb.protocol import serve
from vtb.serve.client import ModelClient

CONFIG = json.loads((Path(__file__).parent / "config.json").read_text())


def main() -> None:
    engine = ModelClient.from_env()  # the model server, at $OPENAI_BASE_URL

    def policy(batch: list[dict]) -> list[dict]:
        actions: list[dict | None] = [None] * len(batch)
        todo = []
        for i, msg in enumerate(batch):
            if msg["observation"].get("history"):
                actions[i] = {"type": "answer", "content": "done"}
            else:
                todo.append(i)
        prompts = [prompting.prompt(batch[i]["observation"]["instruction"]) for i in todo]
        outputs = engine.generate(prompts, max_new_tokens=CONFIG["max_new_tokens"], stop=["\n"])
        for i, text in zip(todo, outputs, strict=True):
            actions[i] = {"type": "shell", "command": prompting.command_of(text)}
        return actions

    serve(policy)


if __name__ == "__main__":
    main()
