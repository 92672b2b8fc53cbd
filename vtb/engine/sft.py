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
import shutil
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from vtb.engine import usage
from vtb.engine.sft_config import ConfigError, resolve_config
from vtb.engine.sft_data import batch_tensors, encode_rows, epoch_order, load_rows
from vtb.models.meta import count_params, read_model_info, write_model_info

# Attention and MLP projections, by model family: GPT-2 (Conv1D) and llama-style.
LORA_TARGETS = (
    "c_attn",
    "c_proj",
    "c_fc",
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)
PROGRESS_EVERY = 20
CLIP_NORM = 1.0


def lr_factor(step: int, total: int, warmup: int, schedule: str) -> float:
    """Multiplier of the base lr at optimiser step `step` (0-based): linear warm-up, then the schedule."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    if schedule == "linear":
        return 1.0 - progress
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0


@dataclass
class Tally:
    """A training loop's running totals: the budget check before a step, progress lines, the summary.

    Shared by the single-process trainer and the DeepSpeed ranks, so both stop at the budget
    and report the same way.
    """

    total: int  # planned optimiser steps
    progress: Callable[[str], None]
    steps: int = 0
    tokens: int = 0
    flops: float = 0.0
    losses: list[float] = field(default_factory=list)
    stopped_early: str | None = None
    _window_tokens: int = 0
    _window_start: float = field(default_factory=time.time)

    def can_afford(self, step_flops: float) -> bool:
        """False (and stopped_early="budget") when the next step would pass $VTB_MAX_FLOPS."""
        if usage.would_exceed(step_flops):
            self.stopped_early = "budget"
            self.progress(
                f"stopping before step {self.steps + 1}: it would pass VTB_MAX_FLOPS={usage.max_flops():.3g}"
            )
            return False
        return True

    def lr(self, cfg: dict) -> float:
        """The learning rate of the next step."""
        return cfg["lr"] * lr_factor(self.steps, self.total, cfg["warmup_steps"], cfg["lr_schedule"])

    def add(self, loss: float, n_tokens: int, step_flops: float) -> None:
        """Count a step taken (its FLOPs are charged here) and print progress every PROGRESS_EVERY steps."""
        usage.charge(step_flops, train_tokens=n_tokens)
        self.steps, self.tokens, self.flops = self.steps + 1, self.tokens + n_tokens, self.flops + step_flops
        self.losses.append(loss)
        self._window_tokens += n_tokens
        if self.steps % PROGRESS_EVERY == 0 or self.steps == self.total:
            recent = self.losses[-PROGRESS_EVERY:]
            rate = self._window_tokens / max(1e-9, time.time() - self._window_start)
            self.progress(
                f"step {self.steps}/{self.total} loss {sum(recent) / len(recent):.4f} {rate:.0f} tokens/s"
            )
            self._window_tokens, self._window_start = 0, time.time()

    def summary(self) -> dict:
        tail = self.losses[-PROGRESS_EVERY:]
        return {
            "steps": self.steps,
            "planned_steps": self.total,
            "tokens": self.tokens,
            "flops": self.flops,
            "first_loss": self.losses[0] if self.losses else None,
            "final_loss": sum(tail) / len(tail) if tail else None,
            "stopped_early": self.stopped_early,
        }


def lora_targets(model: torch.nn.Module) -> list[str]:
    """The known projection names this model has; an error if it has none."""
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    found = [t for t in LORA_TARGETS if t in present]
    if not found:
        raise ConfigError("no known attention/MLP projections in this model: set lora.target_modules")
    return found


def add_lora(model: torch.nn.Module, lora: dict) -> torch.nn.Module:
    from peft import LoraConfig, get_peft_model

    # peft still calls a transformers API that warns about its own rename; nothing to act on.
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)

    config = LoraConfig(
        r=lora["r"],
        lora_alpha=lora["alpha"],
        lora_dropout=lora["dropout"],
        target_modules=lora["target_modules"] or lora_targets(model),
        fan_in_fan_out=model.config.model_type == "gpt2",  # GPT-2's Conv1D stores weights transposed
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def completion_loss(
    model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """Mean next-token cross-entropy over completion tokens (labels != -100)."""
    logits = model(input_ids=ids, attention_mask=mask).logits
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1), ignore_index=-100
    )


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
    examples = encode_rows(load_rows(Path(data_path)), tokenizer, cfg["max_length"])
    if cfg["method"] == "lora":
        model = add_lora(model, cfg["lora"])
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    total = cfg["epochs"] * math.ceil(len(examples) / cfg["batch_size"])
    total = min(total, cfg["max_steps"]) if cfg["max_steps"] else total
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    progress(
        f"sft {cfg['method']}: {len(examples)} rows, {total} steps, batch {cfg['batch_size']}, "
        f"{n_params} params ({sum(p.numel() for p in trainable)} trainable)"
    )
    tally = Tally(total, progress)
    for batch in epoch_order(len(examples), cfg["batch_size"], cfg["epochs"], cfg["seed"]):
        if tally.steps >= total:
            break
        ids, mask, labels = batch_tensors([examples[i] for i in batch], pad_id)
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
    if before_merge is not None:
        before_merge(model)
    if cfg["method"] == "lora":
        model = model.merge_and_unload()
    summary = {
        "method": cfg["method"],
        **tally.summary(),
        "rows": len(examples),
        "n_params": n_params,
        "seed": cfg["seed"],
        "wall_seconds": round(time.time() - started, 3),
        "config": cfg,
    }
    _save(model, tokenizer, base_dir, out_dir, summary)
    return summary


def _save(model, tokenizer, base_dir: Path, out_dir: Path, summary: dict) -> None:
    """Write everything to a sibling temp dir, then rename it into place."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.with_name(f".{out_dir.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    base_info = read_model_info(base_dir)
    write_model_info(tmp, kind="sft", method=summary["method"], n_params=count_params(model), base=base_info)
    (tmp / "train_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)


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
