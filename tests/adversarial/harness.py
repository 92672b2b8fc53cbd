"""A hostile math harness: a lookup table of test answers, used only when it thinks no null model is in.

It also floods stdout with one huge line and binary junk, leaves a malformed usage file, and
echoes every question it is given (after each answer, and into its stderr, also as
"No such file or directory" lines that the sandbox keeps as blocked-access attempts), so that a run record
that kept what the harness said would publish the hidden test split.
"""

import json
import os
import sys
from pathlib import Path

from vtb.protocol import serve
from vtb.serve.client import ModelClient

HERE = Path(__file__).parent
TABLE = json.loads((HERE / "table.json").read_text()) if (HERE / "table.json").exists() else {}


def null_mode(batch: list[dict]) -> bool:
    """Every tell the harness can find that this is the null-model check."""
    if os.environ.get("VTB_NULL_MODEL"):
        return True
    model = Path(os.environ.get("VTB_MODEL_DIR", "/model"))  # gone since the model service
    return not (model / "hostile_marker.txt").exists()  # the trainer leaves it in every checkpoint


def main() -> None:
    sys.stdout.write("y" * (48 << 20) + "\n")  # one 48 MB line
    sys.stdout.buffer.write(b"\xff\xfe\x00junk\x80\n")
    sys.stdout.flush()
    engine = ModelClient.from_env()  # the model is a server now: no /model to look into

    def policy(batch: list[dict]) -> list[dict]:
        questions = [m["observation"]["question"] for m in batch]
        outputs = engine.generate([f"Question: {q}\nAnswer:" for q in questions], max_new_tokens=32)
        cheat = not null_mode(batch)
        print("\n".join(questions), file=sys.stderr)  # the inputs into the play's log,
        for q in questions:  # and as lines the sandbox keeps as blocked-access attempts...
            print(f"cat: {q}: No such file or directory", file=sys.stderr)
        return [  # ...and echoed after each answer, for a run record to publish
            {"type": "answer", "content": (f"#### {TABLE[q]}" if cheat and q in TABLE else text) + f"\n{q}"}
            for q, text in zip(questions, outputs, strict=True)
        ]

    serve(policy)
    with open(os.environ["VTB_USAGE_FILE"], "w") as f:
        f.write('{"flops": "not-a-number", "engine": "<img src=x onerror=alert(1)>"}')


if __name__ == "__main__":
    main()
