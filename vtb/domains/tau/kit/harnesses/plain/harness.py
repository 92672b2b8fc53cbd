"""Plain tau harness: the conversation as the prompt, one greedy action per turn, no repair, no retry.

Speaks the JSON-lines protocol (vtb.protocol). Every message carries the whole conversation, so
the harness keeps no state. A completion that does not parse as `<tool> <JSON>` or
`respond {"content": ...}` is sent to the user as a plain message, as it is.
"""

import json
import os
from pathlib import Path

from vtb.domains.tau.kit import prompting
from vtb.engine.select import open_engine
from vtb.protocol import serve

CONFIG = json.loads((Path(__file__).parent / "config.json").read_text())


def main() -> None:
    engine = open_engine(os.environ["VTB_MODEL_DIR"])

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
