"""Supervised fine-tuning (full or LoRA) that runs inside the research sandbox.

    python -m vtb.engine.sft --config trainer/config.json --data data/train.jsonl \\
        --base /base --out /out/checkpoint [--seed N]

A plain torch loop (no transformers.Trainer) so every step's token count is known and
charged as 6·params·tokens before the step is taken; when the next step would pass
$VTB_MAX_FLOPS it stops and saves what was trained. LoRA adapters are merged into the
weights, so every checkpoint is a plain model directory the inference engine can load.
The checkpoint is written to a temporary directory and renamed at the end: a killed run
never leaves a half-written checkpoint at --out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from vtb.engine import usage
from vtb.engine.sft_config import ConfigError, resolve_config
from vtb.engine.sft_core import CLIP_NORM, Tally, add_lora, completion_loss, save_checkpoint
from vtb.engine.sft_data import batch_tensors, encode_rows, epoch_order, load_rows, wraps_chat
from vtb.models.meta import count_params


# Attention and MLP projections, by model family: GPT-2 (Conv1D) and llama-style.
def _set_threads() -> None:
    threads = os.environ.get("VTB_THREADS")
    if threads:
        torch.set_num_threads(int(threads))


def train(
    config: dict,
    data_path: str | Path,
    base_dir: str | Path,
    out_dir: str | Path,
    progress: Callable[[str], None] = print,
    before_merge: Callable[[torch.nn.Module], None] | None = None,
) -> dict | None:
    """Fine-tune base_dir on data_path and save a full model to out_dir; returns the train summary.

    `before_merge` (tests) sees the trained model before LoRA adapters are merged.
    """
    cfg = resolve_config(config)
    base_dir, out_dir = Path(base_dir), Path(out_dir)
    started = time.time()
    _set_threads()
    hf_logging.disable_progress_bar()  # tqdm bars would flood the step log
    if cfg["deepspeed"] is not None:
        if "WORLD_SIZE" not in os.environ:
            raise ConfigError(
                "the config has a deepspeed block: launch with python -m vtb.engine.ds_launch -- ..."
            )
        from vtb.engine.sft_deepspeed import train_deepspeed

        return train_deepspeed(cfg, Path(data_path), base_dir, out_dir, progress)
    torch.manual_seed(cfg["seed"])
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    n_params = count_params(model)
    examples = encode_rows(load_rows(Path(data_path)), tokenizer, cfg["max_length"], cfg["chat_template"])
    if cfg["method"] == "lora":
        model = add_lora(model, cfg["lora"])
    # the sandbox's GPU when it was given one (sandbox.gpus), else the CPU
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    total = cfg["epochs"] * math.ceil(len(examples) / cfg["batch_size"])
    total = min(total, cfg["max_steps"]) if cfg["max_steps"] else total
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    progress(
        f"sft {cfg['method']}: {len(examples)} rows, {total} steps, batch {cfg['batch_size']}, "
        f"{n_params} params ({sum(p.numel() for p in trainable)} trainable)"
        + (", prompts in the chat template" if wraps_chat(tokenizer, cfg["chat_template"]) else "")
    )
    tally = Tally(total, progress)
    for batch in epoch_order(len(examples), cfg["batch_size"], cfg["epochs"], cfg["seed"]):
        if tally.steps >= total:
            break
        ids, mask, labels = (t.to(device) for t in batch_tensors([examples[i] for i in batch], pad_id))
        n_tokens = int(mask.sum())
        step_flops = usage.train_flops(n_params, n_tokens)
        if not tally.can_afford(step_flops):
            break
        for group in optimizer.param_groups:
            group["lr"] = tally.lr(cfg)
        loss = completion_loss(model, ids, mask, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, CLIP_NORM)
        optimizer.step()
        tally.add(loss.item(), n_tokens, step_flops)
    model.eval()
    model.to("cpu")  # saved from the CPU, as every checkpoint is read
    if before_merge is not None:
        before_merge(model)
    if cfg["method"] == "lora":
        model = model.merge_and_unload()
    summary = {
        "method": cfg["method"],
        **tally.summary(),
        "rows": len(examples),
        "chat_template": wraps_chat(tokenizer, cfg["chat_template"]),  # prompts in the chat template
        "n_params": n_params,
        "device": device.type,
        "seed": cfg["seed"],
        "wall_seconds": round(time.time() - started, 3),
        "config": cfg,
    }
    save_checkpoint(model, tokenizer, base_dir, out_dir, summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vtb.engine.sft", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, required=True, help="trainer config JSON")
    parser.add_argument("--data", type=Path, required=True, help='JSONL rows {"prompt", "completion"}')
    parser.add_argument("--base", type=Path, required=True, help="base model directory")
    parser.add_argument("--out", type=Path, required=True, help="checkpoint directory to write")
    parser.add_argument("--seed", type=int, default=None, help="overrides the config's seed")
    parser.add_argument("--local_rank", type=int, default=None, help=argparse.SUPPRESS)  # launchers add it
    args = parser.parse_args(argv)
    try:
        config = json.loads(args.config.read_text())
        if not isinstance(config, dict):
            raise ConfigError(f"{args.config} must hold a JSON object")
        if args.seed is not None:
            config["seed"] = args.seed
        summary = train(config, args.data, args.base, args.out, progress=lambda s: print(s, flush=True))
    except (ConfigError, ValueError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if summary is not None:  # None on DeepSpeed ranks other than 0
        print(json.dumps({k: v for k, v in summary.items() if k != "config"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
