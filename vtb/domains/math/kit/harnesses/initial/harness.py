"""Initial math harness: plain prompt, greedy decoding, the raw completion as the answer.

Speaks the JSON-lines harness protocol (vtb.protocol) on stdin/stdout. The model is a server at
$OPENAI_BASE_URL (an OpenAI-compatible API, key in $OPENAI_API_KEY). Settings are in config.json next to this file.
"""

import json
from pathlib import Path

from vtb.protocol import serve
from vtb.serve.client import ModelClient

CONFIG = json.loads((Path(__file__).parent / "config.json").read_text())


def main() -> None:
    engine = ModelClient.from_env()  # the model server, at $OPENAI_BASE_URL

    def policy(batch: list[dict]) -> list[dict]:
        prompts = [CONFIG["prompt"].format(question=m["observation"]["question"]) for m in batch]
        outputs = engine.generate(prompts, max_new_tokens=CONFIG["max_new_tokens"])
        return [{"type": "answer", "content": text} for text in outputs]

    serve(policy)


if __name__ == "__main__":
    main()
