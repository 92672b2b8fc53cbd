"""The model reverses the word (the tiny model cannot)."""

import json
from pathlib import Path

from vtb.protocol import serve
from vtb.serve.client import ModelClient

CONFIG = json.loads((Path(__file__).parent / "config.json").read_text())


def main() -> None:
    engine = ModelClient.from_env()  # the model server, at $OPENAI_BASE_URL

    def policy(batch: list[dict]) -> list[dict]:
        prompts = [f"reverse : {' '.join(m['observation']['word'])} :" for m in batch]
        outputs = engine.generate(prompts, max_new_tokens=CONFIG["max_new_tokens"])
        return [{"type": "answer", "content": text.replace(" ", "")} for text in outputs]

    serve(policy)


if __name__ == "__main__":
    main()
