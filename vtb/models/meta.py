"""The `vtb_model.json` sidecar every model directory carries.

The pipeline and the engines read the parameter count from here instead of loading weights,
so FLOPs estimates are known before (and without) a model load.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

INFO_FILE = "vtb_model.json"


def count_params(model: torch.nn.Module) -> int:
    """Distinct parameters (tied embeddings counted once): the `params` of the FLOPs formulas."""
    return sum(p.numel() for p in model.parameters())


def write_model_info(out_dir: Path, **info: object) -> dict:
    out_dir = Path(out_dir)
    (out_dir / INFO_FILE).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return dict(info)


def read_model_info(model_dir: Path) -> dict:
    path = Path(model_dir) / INFO_FILE
    return json.loads(path.read_text()) if path.exists() else {}
