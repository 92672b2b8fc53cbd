"""What both trainers share (vtb.engine.sft on CPU or one GPU, vtb.engine.sft_deepspeed with ZeRO):
the learning-rate schedule and step tally, LoRA, the completion-only loss and the checkpoint
writer. Each trainer imports this module; neither imports the other's internals.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from vtb.engine import usage
from vtb.engine.sft_config import ConfigError
from vtb.models.meta import count_params, read_model_info, write_model_info

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


def save_checkpoint(model, tokenizer, base_dir: Path, out_dir: Path, summary: dict) -> None:
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
