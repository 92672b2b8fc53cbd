"""Plain SWE harness: show the model the function the issue names, turn its one edit into a patch.

Speaks the JSON-lines protocol (vtb.protocol): the start message carries the problem statement
and the repository's files; the answer is {"type": "patch", "patch": <unified diff>}. One greedy
edit line per instance; an edit whose old line is not in the file exactly gives an empty patch.
"""

import json
from pathlib import Path

from vtb.domains.swe.kit import prompting
from vtb.protocol import serve
from vtb.serve.client import ModelClient

CONFIG = json.loads((Path(__file__).parent / "config.json").read_text())


def main() -> None:
    engine = ModelClient.from_env()  # the model server, at $OPENAI_BASE_URL

    def policy(batch: list[dict]) -> list[dict]:
        asked = {i: found for i, m in enumerate(batch) if (found := prompting.task_prompt(m["observation"]))}
        outputs = engine.generate(
            [p for _, p in asked.values()], max_new_tokens=CONFIG["max_new_tokens"], stop=["\n"]
        )
        patches = [""] * len(batch)
        for i, answer in zip(asked, outputs, strict=True):
            patches[i] = prompting.patch_for(batch[i]["observation"]["files"], asked[i][0], answer)
        return [{"type": "patch", "patch": p} for p in patches]

    serve(policy)


if __name__ == "__main__":
    main()
