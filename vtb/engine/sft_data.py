"""SFT rows to training batches: loss on the completion only, EOS appended.

The prompt is encoded the way the inference engine encodes it (with the tokenizer's special
tokens) and the completion without them, so a trained model continues a harness's prompt
the way it saw in training.

A multi-turn row may instead be `{"segments": [[text, train], ...]}`: the texts are concatenated
and the loss is on the segments whose `train` is true (every agent turn of a conversation in
one row, as chat SFT does, instead of one row per turn with the whole prefix repeated).
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
            if not (_is_pair(row) or _is_segments(row)):
                raise ValueError(
                    f'{path}:{number}: a row must be {{"prompt": str, "completion": str}} '
                    'or {"segments": [[str, bool], ...]}'
                )
            rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no training rows")
    return rows


def _is_pair(row: object) -> bool:
    return (
        isinstance(row, dict)
        and isinstance(row.get("prompt"), str)
        and isinstance(row.get("completion"), str)
    )


def _is_segments(row: object) -> bool:
    segments = row.get("segments") if isinstance(row, dict) else None
    return (
        isinstance(segments, list)
        and bool(segments)
        and all(
            isinstance(s, list) and len(s) == 2 and isinstance(s[0], str) and isinstance(s[1], bool)
            for s in segments
        )
    )


def encode_segments(row: dict, tokenizer, max_length: int) -> tuple[list[int], list[int]]:
    """A multi-turn row: the first segment with special tokens, the rest without; EOS after the last."""
    ids: list[int] = []
    labels: list[int] = []
    for k, (text, train) in enumerate(row["segments"]):
        piece = tokenizer(text, add_special_tokens=k == 0).input_ids
        ids += piece
        labels += piece if train else [IGNORE] * len(piece)
    ids.append(tokenizer.eos_token_id)
    labels.append(tokenizer.eos_token_id if row["segments"][-1][1] else IGNORE)
    return ids[:max_length], labels[:max_length]


def wraps_chat(tokenizer, chat_template: bool | str) -> bool:
    """Whether the trainer's chat_template setting wraps prompts for this tokenizer."""
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat_template is True and not has_template:
        raise ValueError(
            'chat_template is true but the base model has no chat template; set it to false or "auto"'
        )
    return bool(chat_template) and has_template


def chat_prompts(prompts: list[str], tokenizer, chat_template: bool | str) -> list[str]:
    """The prompts as one user turn in the model's chat template, up to where the assistant starts.

    The same text a harness gets from the model server (ModelClient.user_prompts), so training and
    inference see one format. "auto" wraps only when the tokenizer has a template.
    """
    if not wraps_chat(tokenizer, chat_template):
        return prompts
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
        )
        for p in prompts
    ]


def encode_rows(
    rows: list[dict], tokenizer, max_length: int, chat_template: bool | str = False
) -> list[tuple[list[int], list[int]]]:
    """(input ids, labels) per row; prompt labels are IGNORE.

    Too-long rows lose prompt tokens from the left first (the completion is what is learned),
    then completion tokens from the right (at least one prompt token stays, if there was one).
    With chat_template, a {"prompt", "completion"} row's prompt is wrapped as a user turn
    (chat_prompts); multi-turn "segments" rows are taken as written.
    """
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the base model's tokenizer has no EOS token; SFT appends one after each completion")
    segmented = {i: encode_segments(r, tokenizer, max_length) for i, r in enumerate(rows) if "segments" in r}
    pairs = [r for r in rows if "segments" not in r]
    texts = chat_prompts([r["prompt"] for r in pairs], tokenizer, chat_template)
    prompts = tokenizer(texts, add_special_tokens=True).input_ids if pairs else []
    completions = (
        tokenizer([r["completion"] for r in pairs], add_special_tokens=False).input_ids if pairs else []
    )
    out = []
    for prompt, completion in zip(prompts, completions, strict=True):
        completion = (completion + [eos])[: max_length - min(len(prompt), 1)]
        prompt = (
            prompt[len(prompt) - (max_length - len(completion)) :]
            if len(prompt) + len(completion) > max_length
            else prompt
        )
        out.append((prompt + completion, [IGNORE] * len(prompt) + completion))
    it = iter(out)
    return [segmented[i] if i in segmented else next(it) for i in range(len(rows))]


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
