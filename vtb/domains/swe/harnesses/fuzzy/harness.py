"""Repairing SWE harness: snap a mis-copied old line to the closest line, resample when that fails.

Like the plain harness, but an edit whose old line is not in the file exactly is matched to the
most similar line (prompting.apply_edit(fuzzy=True)); an edit that still cannot be applied, or
one that changes nothing, is re-sampled up to `retries` times at `temperature`.
"""

import json
import os
from pathlib import Path

from vtb.domains.swe import patching, prompting
from vtb.engine.infer import Engine
from vtb.protocol import serve

CONFIG = json.loads((Path(__file__).parent / "config.json").read_text())


def main() -> None:
    engine = Engine(os.environ["VTB_MODEL_DIR"])

    def policy(batch: list[dict]) -> list[dict]:
        found = [
            prompting.locate(m["observation"]["problem_statement"], m["observation"]["files"]) for m in batch
        ]
        patches = [""] * len(batch)
        todo = [i for i, f in enumerate(found) if f]
        for attempt in range(CONFIG["retries"] + 1):
            if not todo:
                break
            prompts = [
                prompting.prompt(batch[i]["observation"]["problem_statement"], *found[i]) for i in todo
            ]
            sampling = {"temperature": CONFIG["temperature"], "seed": attempt} if attempt else {}
            outputs = engine.generate(
                prompts, max_new_tokens=CONFIG["max_new_tokens"], stop=["\n"], **sampling
            )
            left = []
            for i, text in zip(todo, outputs, strict=True):
                edit = prompting.parse_edit(text)
                path = found[i][0]
                before = batch[i]["observation"]["files"][path]
                after = prompting.apply_edit(before, *edit, fuzzy=True) if edit else None
                if after is None or after == before:
                    left.append(i)
                else:
                    patches[i] = patching.file_diff(path, before, after)
            todo = left
        return [{"type": "patch", "patch": p} for p in patches]

    serve(policy)


if __name__ == "__main__":
    main()
