"""SFT under DeepSpeed ZeRO-2/3: what `vtb.engine.sft` runs on each rank when the config has `deepspeed`.

The deepspeed launcher (see `vtb.engine.ds_launch`) starts one process per GPU inside the
research sandbox. Every rank walks the same seeded batch order; each step's global batch is
split over the ranks (rank r takes rows r, r+W, ...), so the FLOPs of a step are known on every
rank before it is taken and all ranks stop together when the budget would be passed. Only
rank 0 writes the usage file and the checkpoint. The checkpoint is gathered (ZeRO-3 shards the
parameters), loaded into a plain CPU copy of the model, LoRA-merged if needed, and saved as a
model directory like the single-process trainer's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from vtb.engine import usage

MASTER_PORT = 29500  # the sandbox has its own loopback, so a fixed port cannot collide


def ds_config(cfg: dict, world: int) -> dict:
    """The DeepSpeed JSON config for a resolved trainer config on `world` ranks."""
    from vtb.engine.sft_core import CLIP_NORM

    ds = cfg["deepspeed"]
    micro = max(1, cfg["batch_size"] // world)
    zero: dict = {"stage": ds["stage"], "contiguous_gradients": True, "overlap_comm": False}
    if ds["stage"] == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True  # rank 0 can save a whole model
    if ds["offload_optimizer"]:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": 1,
        "train_batch_size": micro * world,
        "gradient_clipping": CLIP_NORM,
        # torch's AdamW: nothing to compile (DeepSpeed's fused Adam needs nvcc at first use)
        "optimizer": {
            "type": "AdamW",
            "params": {"lr": cfg["lr"], "weight_decay": cfg["weight_decay"], "torch_adam": True},
        },
        "zero_force_ds_cpu_optimizer": False,
        "bf16": {"enabled": ds["precision"] == "bf16"},
        "fp16": {"enabled": ds["precision"] == "fp16", "initial_scale_power": 12},
        "zero_optimization": zero,
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }


def rank_rows(batch: list[int], rank: int, world: int) -> list[int]:
    """This rank's rows of a global batch."""
    return batch[rank::world]


def train_deepspeed(
    cfg: dict, data_path: Path, base_dir: Path, out_dir: Path, progress: Callable[[str], None]
) -> dict | None:
    """Train on this rank; rank 0 saves and returns the summary, the others return None."""
    import deepspeed

    from vtb.engine.sft_core import Tally, add_lora, completion_loss, save_checkpoint
    from vtb.engine.sft_data import batch_tensors, encode_rows, epoch_order, load_rows
    from vtb.models.meta import count_params

    started = time.time()
    if os.environ.get("DS_ACCELERATOR") == "cpu":
        # CPU ranks (deepspeed.cpu, tests): skip DeepSpeed's shared-memory all-reduce, a C++ op it
        # would compile at start (minutes on 2 cores, in every fresh sandbox); gloo does the work.
        import importlib

        importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: (
            None
        )  # (deepspeed.comm.torch is torch)
    deepspeed.init_distributed(dist_backend=None, verbose=False)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if rank != 0:
        os.environ.pop("VTB_USAGE_FILE", None)  # every rank counts; rank 0 alone reports
        progress = _silent
    torch.manual_seed(cfg["seed"])
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    n_params = count_params(model)
    examples = encode_rows(load_rows(data_path), tokenizer, cfg["max_length"], cfg["chat_template"])
    if cfg["method"] == "lora":
        model = add_lora(model, cfg["lora"])
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    engine, optimizer, _, _ = deepspeed.initialize(
        model=model, model_parameters=trainable, config=ds_config(cfg, world)
    )
    batches = [
        b
        for b in epoch_order(len(examples), cfg["batch_size"], cfg["epochs"], cfg["seed"])
        if len(b) >= world
    ]
    total = len(batches) if not cfg["max_steps"] else min(len(batches), cfg["max_steps"])
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ds = cfg["deepspeed"]
    progress(
        f"sft {cfg['method']} deepspeed ZeRO-{ds['stage']} on {world} rank(s) ({ds['precision']}): "
        f"{len(examples)} rows, {total} steps, batch {cfg['batch_size']}, {n_params} params"
    )
    tally = Tally(total, progress)
    for batch in batches[:total]:
        n_tokens = int(batch_tensors([examples[i] for i in batch], pad_id)[1].sum())  # the global batch
        step_flops = usage.train_flops(n_params, n_tokens)
        if not tally.can_afford(step_flops):  # the same answer on every rank: they stop together
            break
        for group in optimizer.param_groups:
            group["lr"] = tally.lr(cfg)
        rows = [examples[i] for i in rank_rows(batch, rank, world)]
        ids, mask, labels = (t.to(engine.device) for t in batch_tensors(rows, pad_id))
        loss = completion_loss(engine, ids, mask, labels)
        engine.backward(loss)
        engine.step()
        tally.add(float(loss.item()), n_tokens, step_flops)
    state = _full_state_dict(engine, ds["stage"])  # every rank takes part in the gather
    summary = None
    if rank == 0:
        plain = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        if cfg["method"] == "lora":
            plain = add_lora(plain, cfg["lora"])
        _load(plain, state)
        plain.eval()
        if cfg["method"] == "lora":
            plain = plain.merge_and_unload()
        summary = {
            "method": cfg["method"],
            "deepspeed": {**ds, "world_size": world},
            **tally.summary(),
            "rows": len(examples),
            "n_params": n_params,
            "seed": cfg["seed"],
            "wall_seconds": round(time.time() - started, 3),
            "config": cfg,
        }
        save_checkpoint(plain, tokenizer, base_dir, out_dir, summary)
    torch.distributed.barrier()
    return summary


def _full_state_dict(engine, stage: int) -> dict | None:
    """The whole model's weights on rank 0 (ZeRO-3 gathers its shards; ZeRO-2 has them on every rank)."""
    if stage == 3:
        return engine._zero3_consolidated_16bit_state_dict()
    return engine.module.state_dict() if int(os.environ.get("RANK", 0)) == 0 else None


def _load(model: torch.nn.Module, state: dict) -> None:
    """Load gathered weights into a plain fp32 model; tied weights may be listed once."""
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    tied = {k for k, p in model.named_parameters(remove_duplicate=False)} - {
        k for k, _ in model.named_parameters()
    }
    if unexpected or set(missing) - tied:
        raise RuntimeError(
            f"gathered checkpoint does not match the model: missing {missing}, unexpected {unexpected}"
        )


def _silent(_: str) -> None:
    pass
