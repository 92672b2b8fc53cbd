"""FLOPs accounting shared by the train and inference engines.

Estimated FLOPs are deterministic (6·params·tokens to train, 2·params·tokens to infer), so
the same run costs the same on any machine. The engines run inside the sandbox and write
their running total to ``$VTB_USAGE_FILE``; the orchestrator reads it from outside. Code in
the sandbox could fake this file, which is why metered CPU-seconds are always a hard cap too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


class BudgetExhausted(RuntimeError):
    """Raised by an engine before it would spend more than ``$VTB_MAX_FLOPS``."""


_totals = {"flops": 0.0, "train_tokens": 0, "infer_tokens": 0}
_meta: dict = {}  # facts about the run for the record (e.g. which engine generated), not charges


def train_flops(n_params: int, tokens: int) -> float:
    return 6.0 * n_params * tokens


def infer_flops(n_params: int, tokens: int) -> float:
    return 2.0 * n_params * tokens


def max_flops() -> float | None:
    value = os.environ.get("VTB_MAX_FLOPS")
    return float(value) if value else None


def would_exceed(extra_flops: float) -> bool:
    limit = max_flops()
    return limit is not None and _totals["flops"] + extra_flops > limit


def charge(flops: float, *, train_tokens: int = 0, infer_tokens: int = 0) -> None:
    """Add to this process's running total and rewrite the usage file, if one is set."""
    _totals["flops"] += flops
    _totals["train_tokens"] += train_tokens
    _totals["infer_tokens"] += infer_tokens
    _write()


def note(**facts: str) -> None:
    """Record facts next to the totals (e.g. engine="vllm"); the orchestrator keeps them."""
    _meta.update(facts)
    _write()


def _write() -> None:
    path = os.environ.get("VTB_USAGE_FILE")
    if path:
        tmp = Path(path + ".tmp")
        tmp.write_text(json.dumps({**_meta, **_totals}))
        os.replace(tmp, path)


def totals() -> dict:
    return dict(_totals)
