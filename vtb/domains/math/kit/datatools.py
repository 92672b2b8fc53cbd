"""Data tools the research agent runs in its sandbox to inspect and edit math training data.

    python -m vtb.domains.math.kit.datatools check IN
    python -m vtb.domains.math.kit.datatools clean IN OUT
    python -m vtb.domains.math.kit.datatools from-pool POOL OUT --n N --seed S [--direct]
    python -m vtb.domains.math.kit.datatools merge A B [C ...] OUT

Training rows are prompt/completion JSONL ({"prompt": "Question: <q>\\nAnswer:", "completion":
" <gsm8k answer>"}); GSM8K-schema rows ({"question", "answer"}) are read too. A pool record says
how its answers are graded in "answer_format": "gsm8k" (a final `#### N` line, GSM8K's strict
metric; the default) or "boxed" (the last `\\boxed{...}`, MATH-500 / AIME). `to_sft_row` writes
the target in that format and the prompt that asks for it (PROMPTS), as the shipped harnesses
do, so a row played back as a completion is what the metric credits.

What `clean` keeps (and `check` counts as good): a row whose answer has a `#### N` line, whose
every equation is arithmetically right (calculator annotations `<<expr=v>>` and the visible
`a op b = c` equations alike, so direct-format rows are checked too), and whose N equals the
value of its last equation. A row with a `#### N` but no equation at all cannot be verified;
it is kept (direct answers with no working are a legitimate data choice) and counted as
`unverifiable`, as is a row that ends in a `\\boxed{...}` answer (its LaTeX working is not
checked). Rows with neither are dropped: no metric could credit them.
Arithmetic is evaluated by a small AST walker (numbers and + - * / only), never `eval`.
"""

from __future__ import annotations

import argparse
import ast
import json
import operator
import random
import re
import sys

from vtb.domains.kit import rowtools
from vtb.domains.kit.jsonl import read_jsonl, write_jsonl

PROMPT_TEMPLATE = "Question: {question}\nAnswer:"
BOXED_PROMPT_TEMPLATE = "Question: {question}\nGive the final answer in \\boxed{{}}.\nAnswer:"
# The prompt of each answer format; the shipped harnesses keep the same two in their config.json.
PROMPTS = {"gsm8k": PROMPT_TEMPLATE, "boxed": BOXED_PROMPT_TEMPLATE}
FORMATS = tuple(PROMPTS)

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_NUM = r"-?\d+(?:\.\d+)?"
ANNOTATION_RE = re.compile(r"<<([^<>=]*)=([^<>]*)>>")
EQUATION_RE = re.compile(rf"(?<![\d.])({_NUM}(?:\s*[-+*/]\s*{_NUM})+)\s*=\s*({_NUM})(?![\d])")
FINAL_RE = re.compile(r"####\s*(-?[\d,]*\.?\d+)")
_BLOCK_RE = re.compile(r"<<[^<>]*>>")

__all__ = [
    "read_jsonl",
    "write_jsonl",
    "strip_annotations",
    "to_sft_row",
    "verify",
    "safe_eval",
    "last_boxed",
    "final_answer",
]


def strip_annotations(answer: str) -> str:
    """GSM8K 'direct' format: the same solution without the <<expr=value>> calculator blocks."""
    return _BLOCK_RE.sub("", answer)


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (braces balanced), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth = 0
    for i in range(start + len("\\boxed"), len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + len("\\boxed{") : i]
    return None


def answer_format(problem: dict) -> str:
    fmt = problem.get("answer_format") or "gsm8k"
    if fmt not in FORMATS:
        raise ValueError(f"answer_format {fmt!r} is not one of {', '.join(FORMATS)}")
    return fmt


def final_answer(problem: dict) -> str:
    """The short final answer of a record: after a GSM8K `####`, or the whole (MATH/AIME) answer."""
    answer = str(problem["answer"])
    return answer.rsplit("####", 1)[1].strip() if "####" in answer else answer.strip()


def _working(problem: dict, direct: bool) -> str:
    """The worked solution before the final answer: GSM8K's answer body, or a MATH/AIME solution."""
    answer = str(problem["answer"])
    if "####" in answer:
        body = answer.rsplit("####", 1)[0].rstrip()
        return strip_annotations(body) if direct else body
    solution = problem.get("solution")
    return solution.strip() if isinstance(solution, str) else ""


def to_sft_row(problem: dict, direct: bool = False) -> dict:
    """A prompt/completion training row in the record's answer format (see the module doc).

    gsm8k: the solution ending in `#### N`; `direct` drops the calculator annotations.
    boxed: the worked solution ending in `\\boxed{answer}` (a box is appended when the solution's
    own last box is not the answer verbatim); `direct` is the boxed answer alone.
    """
    fmt = answer_format(problem)
    prompt = PROMPTS[fmt].format(question=problem["question"])
    final = final_answer(problem)
    if fmt == "gsm8k":
        answer = str(problem["answer"])
        if "####" not in answer:  # a short (MATH/AIME) answer graded the GSM8K way
            answer = f"{_working(problem, direct)}\n#### {final}".lstrip()
        completion = strip_annotations(answer) if direct else answer
    elif direct:
        completion = f"\\boxed{{{final}}}"
    else:
        work = _working(problem, direct=False)
        if last_boxed(work) != final:
            work = f"{work}\nThe final answer is $\\boxed{{{final}}}$.".lstrip()
        completion = work
    return {"prompt": prompt, "completion": " " + completion}


def safe_eval(expr: str) -> float:
    """Value of an arithmetic expression of numbers and + - * /; ValueError for anything else."""

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError(f"not plain arithmetic: {expr!r}")

    if len(expr) > 200:
        raise ValueError("expression too long")
    try:
        tree = ast.parse(expr.replace(",", "").strip(), mode="eval")
        return float(ev(tree.body))
    except (SyntaxError, ZeroDivisionError, TypeError, OverflowError) as err:
        raise ValueError(f"not plain arithmetic: {expr!r}") from err


def _matches(expr: str, written: str) -> bool:
    """Is the written value right, to the precision it was written with?"""
    try:
        value, target = safe_eval(expr), float(written.replace(",", ""))
    except ValueError:
        return False
    decimals = len(written.split(".")[1]) if "." in written else 0
    return abs(value - target) <= (0.5 * 10**-decimals if decimals else 1e-9)


def verify(answer: str) -> str:
    """'ok', 'unverifiable', or the reason the answer is wrong: 'no_final', 'bad_equation', 'final_mismatch'."""
    answer = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", answer)
    final = FINAL_RE.search(answer)
    if not final:
        return "unverifiable" if last_boxed(answer) is not None else "no_final"
    body = answer[: final.start()]
    annotations = ANNOTATION_RE.findall(body)
    equations = [(e, v) for e, v in EQUATION_RE.findall(strip_annotations(body))]
    if not all(_matches(e, v) for e, v in annotations + equations):
        return "bad_equation"
    last = [v for _, v in annotations] or [v for _, v in equations]
    if not last:
        return "unverifiable"
    return "ok" if float(last[-1]) == float(final.group(1)) else "final_mismatch"


def _answer_of(row: dict) -> str:
    text = row.get("completion", row.get("answer"))
    return text if isinstance(text, str) else ""


def cmd_check(args: argparse.Namespace) -> int:
    rows = read_jsonl(args.inp)
    counts = {"ok": 0, "unverifiable": 0, "no_final": 0, "bad_equation": 0, "final_mismatch": 0}
    for row in rows:
        counts[verify(_answer_of(row))] += 1
    inconsistent = counts["bad_equation"] + counts["final_mismatch"]
    print(f"rows: {len(rows)}")
    print(f"inconsistent: {inconsistent}")
    for key, value in counts.items():
        print(f"  {key}: {value}")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    rows = read_jsonl(args.inp)
    kept = [row for row in rows if verify(_answer_of(row)) in ("ok", "unverifiable")]
    write_jsonl(args.out, kept)
    print(f"kept: {len(kept)}")
    print(f"dropped: {len(rows) - len(kept)}")
    return 0


def cmd_from_pool(args: argparse.Namespace) -> int:
    pool = read_jsonl(args.pool)
    if args.n > len(pool):
        print(f"pool has only {len(pool)} problems; taking all of them", file=sys.stderr)
    chosen = random.Random(args.seed).sample(pool, min(args.n, len(pool)))
    write_jsonl(args.out, [to_sft_row(p, direct=args.direct) for p in chosen])
    print(f"wrote: {len(chosen)}")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    seen: set[str] = set()
    merged = []
    for path in args.inputs:
        for row in read_jsonl(path):
            key = json.dumps(row, sort_keys=True)
            if key not in seen:
                seen.add(key)
                merged.append(row)
    write_jsonl(args.out, merged)
    print(f"wrote: {len(merged)} (exact duplicates dropped)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser, sub = rowtools.parser(sys.modules[__name__])
    p = sub.add_parser("check", help="count rows and arithmetically inconsistent rows")
    p.add_argument("inp")
    p.set_defaults(fn=cmd_check)
    p = sub.add_parser("clean", help="drop rows with a wrong equation or a final answer that does not follow")
    p.add_argument("inp")
    p.add_argument("out")
    p.set_defaults(fn=cmd_clean)
    p = sub.add_parser("from-pool", help="sample N pool problems into SFT rows in their answer format")
    p.add_argument("pool")
    p.add_argument("out")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--direct",
        action="store_true",
        help="gsm8k records: strip the <<expr=value>> annotations; boxed records: the boxed answer alone",
    )
    p.set_defaults(fn=cmd_from_pool)
    p = sub.add_parser("merge", help="concatenate JSONL files, dropping exact duplicate rows")
    p.add_argument("inputs", nargs="+", metavar="IN")
    p.add_argument("out", metavar="OUT")
    p.set_defaults(fn=cmd_merge)
    args = parser.parse_args(argv)
    if args.cmd == "merge" and len(args.inputs) < 2:
        parser.error("merge needs at least two inputs and an output")
    try:
        return args.fn(args)
    except OSError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
