"""Repairing SWE harness: snap a mis-copied old line to the closest line, resample when that fails.

Like the plain harness, but an edit whose old line is not in the file exactly is matched to the
most similar line (prompting.apply_edit(fuzzy=True)); an edit that still cannot be applied, or
one that changes nothing, is re-sampled up to `retries` times at `temperature`.
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
        patches = [""] * len(batch)
        todo = list(asked)
        for attempt in range(CONFIG["retries"] + 1):
            if not todo:
                break
            sampling = {"temperature": CONFIG["temperature"], "seed": attempt} if attempt else {}
            outputs = engine.generate(
                [asked[i][1] for i in todo], max_new_tokens=CONFIG["max_new_tokens"], stop=["\n"], **sampling
            )
            for i, answer in zip(todo, outputs, strict=True):
                files = batch[i]["observation"]["files"]
                patches[i] = prompting.patch_for(files, asked[i][0], answer, fuzzy=True)
            todo = [i for i in todo if not patches[i]]
        return [{"type": "patch", "patch": p} for p in patches]

    serve(policy)


if __name__ == "__main__":
    main()
