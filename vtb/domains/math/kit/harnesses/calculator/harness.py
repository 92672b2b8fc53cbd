"""Calculator math harness: the GSM8K calculator, answer extraction and optional voting.

Generation pauses whenever the model opens a calculator annotation and writes its `=`
(`<<12+5=`); the harness evaluates the expression the MODEL wrote, appends the value and
`>>`, and lets the model continue, as the original GSM8K calculator did. The final answer is
the model's last `\\boxed{...}` or `#### N`, or else the last number it wrote, and it is written
the way the observation's "format" is graded: `\\boxed{a}` for "boxed" (MATH-500, AIME, asked for
with "prompt_boxed"), `#### a` otherwise. With votes > 1 it samples several solutions and returns
the majority answer (self-consistency). It never answers on its own: with a model that writes
nothing, it answers nothing.
"""

import ast
import json
import operator
import re
from collections import Counter
from pathlib import Path

from vtb.domains.math.kit.datatools import last_boxed
from vtb.protocol import serve
from vtb.serve.client import ModelClient

CONFIG = json.loads((Path(__file__).parent / "config.json").read_text())
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def calc(expr: str) -> str | None:
    """Value of an arithmetic expression the model wrote, or None if it is not one."""

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPS:
            return OPS[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError(expr)

    try:
        value = ev(ast.parse(expr.replace(" ", ""), mode="eval").body)
    except (ValueError, SyntaxError, ZeroDivisionError, TypeError):
        return None
    return str(int(value)) if float(value).is_integer() else f"{value:.4f}".rstrip("0")


def open_annotation(text: str) -> str | None:
    """The expression of an unclosed `<<expr=` at the end of text, if any."""
    start = text.rfind("<<")
    if start < 0 or text.rfind(">>") > start or not text.rstrip().endswith("="):
        return None
    return text[start + 2 :].rstrip()[:-1]


def final_answer(text: str) -> str:
    boxed = (last_boxed(text) or "").strip()
    if boxed:
        return boxed
    match = re.search(r"####\s*(-?[0-9.,]+)", text)
    if match:
        return match.group(1)
    numbers = re.findall(r"-?\d+(?:\.\d+)?", text)
    return numbers[-1] if numbers else ""


def prompt_of(observation: dict) -> str:
    key = "prompt_boxed" if observation.get("format") == "boxed" else "prompt"
    return CONFIG.get(key, CONFIG["prompt"]).format(question=observation["question"])


def written(work: str, answer: str, fmt: str | None) -> str:
    """The answer as the observation's format is graded, after the model's working."""
    if fmt == "boxed":
        return f"{work}\nThe final answer is $\\boxed{{{answer}}}$."
    return f"{re.sub(r'####.*', '', work).strip()}\n#### {answer}"


def solve(engine, prompts: list[str], temperature: float, seed: int) -> list[str]:
    texts = [""] * len(prompts)
    active = list(range(len(prompts)))
    budget = CONFIG["max_new_tokens"]
    for _ in range(CONFIG["max_calls"]):
        if not active:
            break
        outs = engine.generate(
            [prompts[i] + texts[i] for i in active],
            max_new_tokens=budget,
            stop=["="],
            temperature=temperature,
            seed=seed,
        )
        still = []
        for i, out in zip(active, outs, strict=True):
            texts[i] += out
            if not out.endswith("="):
                continue  # finished: EOS or token limit
            expr = open_annotation(texts[i])
            if expr is not None:
                value = calc(expr)
                if value is None:
                    continue  # the model wrote something that is not arithmetic: stop here
                texts[i] += f"{value}>>"
            still.append(i)
        active = still
    return texts


def main() -> None:
    engine = ModelClient.from_env()  # the model server, at $OPENAI_BASE_URL

    def policy(batch: list[dict]) -> list[dict]:
        texts = [prompt_of(m["observation"]) for m in batch]
        prompts = engine.user_prompts(texts, CONFIG.get("chat", False))  # chat template, if on and any
        votes = max(1, int(CONFIG.get("votes", 1)))
        runs = [
            solve(engine, prompts, 0.0 if votes == 1 else CONFIG["temperature"], seed)
            for seed in range(votes)
        ]
        actions = []
        for j in range(len(batch)):
            answers = [final_answer(run[j]) for run in runs]
            best = Counter(a for a in answers if a).most_common(1)
            fmt = batch[j]["observation"].get("format")
            content = written(runs[0][j].strip(), best[0][0], fmt) if best else runs[0][j]
            actions.append({"type": "answer", "content": content})
        return actions

    serve(policy)


if __name__ == "__main__":
    main()
