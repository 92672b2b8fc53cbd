"""Initial math harness: plain prompt, greedy decoding, the raw completion as the answer.

Speaks the JSON-lines harness protocol (vtb.protocol) on stdin/stdout. The model is a server at
$OPENAI_BASE_URL (an OpenAI-compatible API, key in $OPENAI_API_KEY). Settings are in config.json
next to this file; "chat": "auto" wraps the prompt in the model's chat template when it has one, as
the trainer's "chat_template": "auto" does for the training prompts. The observation's "format"
says how answers are graded: "boxed" (MATH-500, AIME: the last `\\boxed{}`) is asked for with
"prompt_boxed", anything else with "prompt" (GSM8K's `#### N`), the prompts of the training rows.
"""

import json
from pathlib import Path

from vtb.protocol import serve
from vtb.serve.client import ModelClient

CONFIG = json.loads((Path(__file__).parent / "config.json").read_text())


def prompt_of(observation: dict) -> str:
    key = "prompt_boxed" if observation.get("format") == "boxed" else "prompt"
    return CONFIG.get(key, CONFIG["prompt"]).format(question=observation["question"])


def main() -> None:
    engine = ModelClient.from_env()  # the model server, at $OPENAI_BASE_URL

    def policy(batch: list[dict]) -> list[dict]:
        texts = [prompt_of(m["observation"]) for m in batch]
        prompts = engine.user_prompts(
            texts, CONFIG.get("chat", False)
        )  # the model's chat template, if it has one
        outputs = engine.generate(prompts, max_new_tokens=CONFIG["max_new_tokens"])
        return [{"type": "answer", "content": text} for text in outputs]

    serve(policy)


if __name__ == "__main__":
    main()
