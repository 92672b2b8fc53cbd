"""Build the tiny base model from a spec file: `python -m vtb.models.build SPEC OUT`.

Provisioning runs this inside a sandbox (no network, only the spec and the output folder
visible), so base-model pre-training is metered like every other compute step.
SPEC is JSON: {"words": [...], "number_max": int, "tokenizer": "words"|"ids", "texts": [...], "model": {n_layer, n_embd,
n_head, n_positions, steps, seed}}.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vtb.models.tiny import build_tiny_model, build_tokenizer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("spec", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    spec = json.loads(args.spec.read_text())
    tokenizer = build_tokenizer(spec["words"], spec["number_max"], mode=spec.get("tokenizer", "words"))
    m = spec["model"]
    build_tiny_model(
        args.out,
        spec["texts"],
        tokenizer,
        n_layer=m["n_layer"],
        n_embd=m["n_embd"],
        n_head=m["n_head"],
        n_positions=m["n_positions"],
        steps=m["steps"],
        seed=m["seed"],
        progress=lambda s: print(s, flush=True),
    )


if __name__ == "__main__":
    main()
