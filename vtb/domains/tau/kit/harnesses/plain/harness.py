"""Plain tau harness: the conversation as the prompt, one greedy action per turn, no repair, no retry.

Speaks the JSON-lines protocol (vtb.protocol). Every message carries the whole conversation, so
the harness keeps no state. A completion that does not parse as `<tool> <JSON>` or
`respond {"content": ...}` is sent to the user as a plain message, as it is.
"""

import json
from pathlib import Path

from vtb.domains.tau.kit import prompting
from vtb.protocol import serve
from vtb.serve.client import ModelClient

CONFIG = json.loads((Path(__file__).parent / "config.json").read_text())


def main() -> None:
    engine = ModelClient.from_env()  # the model server, at $OPENAI_BASE_URL

    def policy(batch: list[dict]) -> list[dict]:
        prompts = [prompting.prompt(m["observation"]["messages"]) for m in batch]
        outputs = engine.generate(prompts, max_new_tokens=CONFIG["max_new_tokens"], stop=["\n"])
        actions = []
        for text in outputs:
            try:
                actions.append(prompting.parse(text, spaced=engine.spaced))
            except ValueError:
                actions.append({"type": "message", "content": text.strip()})
        return actions

    serve(policy)


if __name__ == "__main__":
    main()
