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


def n_params_of(model_dir: Path) -> int:
    """`count_params` of the model in model_dir without loading its weights.

    From the sidecar when there is one; otherwise the model is built on the meta device
    (shapes only), so a hub checkpoint's count matches what the transformers engine counts.
    """
    info = read_model_info(model_dir)
    if info.get("n_params"):
        return int(info["n_params"])
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return count_params(model)
