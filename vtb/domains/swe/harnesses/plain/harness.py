"""Plain SWE harness: show the model the function the issue names, turn its one edit into a patch.

Speaks the JSON-lines protocol (vtb.protocol): the start message carries the problem statement
and the repository's files; the answer is {"type": "patch", "patch": <unified diff>}. One greedy
edit line per instance; an edit whose old line is not in the file exactly gives an empty patch.
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
        asked = [i for i, f in enumerate(found) if f]
        prompts = [prompting.prompt(batch[i]["observation"]["problem_statement"], *found[i]) for i in asked]
        outputs = dict(
            zip(
                asked,
                engine.generate(prompts, max_new_tokens=CONFIG["max_new_tokens"], stop=["\n"]),
                strict=True,
            )
        )
        actions = []
        for i, msg in enumerate(batch):
            patch = ""
            edit = prompting.parse_edit(outputs.get(i, ""))
            if edit:
                path = found[i][0]
                before = msg["observation"]["files"][path]
                after = prompting.apply_edit(before, *edit)
                if after is not None and after != before:
                    patch = patching.file_diff(path, before, after)
            actions.append({"type": "patch", "patch": patch})
        return actions

    serve(policy)


if __name__ == "__main__":
    main()
