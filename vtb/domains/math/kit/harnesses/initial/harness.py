"""Initial math harness: plain prompt, greedy decoding, the raw completion as the answer.

Speaks the JSON-lines harness protocol (vtb.protocol) on stdin/stdout. The model lives at
$VTB_MODEL_DIR (read-only). Settings are in config.json next to this file.
"""

import json
import os
from pathlib import Path

from vtb.engine.select import open_engine
from vtb.protocol import serve

CONFIG = json.loads((Path(__file__).parent / "config.json").read_text())


def main() -> None:
    engine = open_engine(os.environ["VTB_MODEL_DIR"])

    def policy(batch: list[dict]) -> list[dict]:
        prompts = [CONFIG["prompt"].format(question=m["observation"]["question"]) for m in batch]
        outputs = engine.generate(prompts, max_new_tokens=CONFIG["max_new_tokens"])
        return [{"type": "answer", "content": text} for text in outputs]

    serve(policy)


if __name__ == "__main__":
    main()
