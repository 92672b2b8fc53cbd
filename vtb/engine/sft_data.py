"""SFT rows to training batches: loss on the completion only, EOS appended.

The prompt is encoded the way the inference engine encodes it (with the tokenizer's special
tokens) and the completion without them, so a trained model continues a harness's prompt
the way it saw in training.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import torch

IGNORE = -100


def load_rows(path: Path) -> list[dict]:
    """`{"prompt": str, "completion": str}` JSON lines; a bad line is an error naming its number."""
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{number}: not JSON ({e})") from None
            if not (
                isinstance(row, dict)
                and isinstance(row.get("prompt"), str)
                and isinstance(row.get("completion"), str)
            ):
                raise ValueError(f'{path}:{number}: a row must be {{"prompt": str, "completion": str}}')
            rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no training rows")
    return rows


def encode_rows(rows: list[dict], tokenizer, max_length: int) -> list[tuple[list[int], list[int]]]:
    """(input ids, labels) per row; prompt labels are IGNORE.

    Too-long rows lose prompt tokens from the left first (the completion is what is learned),
    then completion tokens from the right (at least one prompt token stays, if there was one).
    """
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the base model's tokenizer has no EOS token; SFT appends one after each completion")
    prompts = tokenizer([r["prompt"] for r in rows], add_special_tokens=True).input_ids
    completions = tokenizer([r["completion"] for r in rows], add_special_tokens=False).input_ids
    out = []
    for prompt, completion in zip(prompts, completions, strict=True):
        completion = (completion + [eos])[: max_length - min(len(prompt), 1)]
        prompt = (
            prompt[len(prompt) - (max_length - len(completion)) :]
            if len(prompt) + len(completion) > max_length
            else prompt
        )
        out.append((prompt + completion, [IGNORE] * len(prompt) + completion))
    return out


def batch_tensors(examples: list[tuple[list[int], list[int]]], pad_id: int):
    """Right-padded ids, attention mask and labels."""
    width = max(len(ids) for ids, _ in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (seq, lab) in enumerate(examples):
        ids[row, : len(seq)] = torch.tensor(seq)
        labels[row, : len(lab)] = torch.tensor(lab)
        mask[row, : len(seq)] = 1
    return ids, mask, labels


def epoch_order(n: int, batch_size: int, epochs: int, seed: int) -> Iterator[list[int]]:
    """Index batches, reshuffled each epoch by a seeded generator (the last batch may be short)."""
    rng = random.Random(seed)
    for _ in range(epochs):
        order = list(range(n))
        rng.shuffle(order)
        for start in range(0, n, batch_size):
            yield order[start : start + batch_size]
