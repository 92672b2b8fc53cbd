"""Write a MATH-500-layout file of simple problems with boxed answers (docs/real-benchmarks.md).

    python scripts/simple_math500.py OUT.jsonl [--n 700]

One-digit `+ - \\cdot` in four phrasings, each with a one-line worked solution ending in
`\\boxed{answer}`, in HuggingFaceH4/MATH-500's fields (problem, solution, answer, subject, level,
unique_id). It asks whether a model this size can learn the boxed format at all, which the real
MATH-500 problems cannot tell: every system scores 0 on them.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

PHRASES = ("What is ${e}$?", "Compute ${e}$.", "Find the value of ${e}$.", "Evaluate ${e}$.")
OPS = {
    "+": ("Prealgebra", lambda a, b: a + b),
    "-": ("Prealgebra", lambda a, b: a - b),
    "\\cdot": ("Algebra", lambda a, b: a * b),
}


def problems(n: int, seed: int = 0) -> list[dict]:
    """n distinct problems (at most 756), shuffled by `seed`."""
    items = []
    for phrase in PHRASES:
        for op, (subject, f) in OPS.items():
            for a in range(1, 10):
                for b in range(1, a + 1 if op == "-" else 10):
                    e, c = f"{a} {op} {b}", f(a, b)
                    items.append(
                        {
                            "problem": phrase.format(e=e),
                            "solution": f"${e} = {c}$, so the answer is $\\boxed{{{c}}}$.",
                            "answer": str(c),
                            "subject": subject,
                            "level": 1,
                        }
                    )
    random.Random(seed).shuffle(items)
    return [{**it, "unique_id": f"test/{it['subject'].lower()}/{i}.json"} for i, it in enumerate(items[:n])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--n", type=int, default=700)
    args = parser.parse_args()
    args.out.write_text("".join(json.dumps(p) + "\n" for p in problems(args.n)))


if __name__ == "__main__":
    main()
