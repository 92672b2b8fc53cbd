"""The SFT trainer: completion-only loss, full and LoRA runs, config errors, FLOPs budget stop."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from vtb.engine import usage
from vtb.engine.infer import Engine
from vtb.engine.sft import main, train
from vtb.engine.sft_config import ConfigError, resolve_config
from vtb.engine.sft_data import IGNORE, encode_rows

SHAPE = {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 128}
ROWS = [
    {"prompt": "Q: Tom has 3 apples and buys 4 more. How many?\nA:", "completion": " <<3+4=7>>7\n#### 7"},
    {"prompt": "Q: Ann has 9 pears and gives 5 away. How many?\nA:", "completion": " <<9-5=4>>4\n#### 4"},
    {"prompt": "Q: Tom has 8 pears and buys 8 more. How many?\nA:", "completion": " <<8+8=16>>16\n#### 16"},
    {"prompt": "Q: Ann has 6 apples and gives 1 away. How many?\nA:", "completion": " <<6-1=5>>5\n#### 5"},
]
QUIET = {"progress": lambda s: None}


@pytest.fixture(scope="module")
def base_dir(toy_model_dir):
    """The session's toy base model (tests/conftest.py), of this file's SHAPE: built once per session."""
    config = json.loads((toy_model_dir / "config.json").read_text())
    assert {k: config[k] for k in SHAPE} == SHAPE
    return toy_model_dir


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def weights(model_dir) -> dict[str, torch.Tensor]:
    return load_file(model_dir / "model.safetensors")


def test_prompt_tokens_are_masked(base_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base_dir)
    (ids, labels), *_ = encode_rows(ROWS[:1], tok, max_length=256)
    n_prompt = len(tok(ROWS[0]["prompt"]).input_ids)
    assert labels[:n_prompt] == [IGNORE] * n_prompt
    assert labels[n_prompt:] == ids[n_prompt:] and IGNORE not in labels[n_prompt:]
    assert ids[-1] == tok.eos_token_id
    (short_ids, short_labels), *_ = encode_rows(ROWS[:1], tok, max_length=8)
    # Too long: the completion is cut from the right, one prompt token stays as context.
    assert short_ids == ids[n_prompt - 1 : n_prompt + 7] and short_labels == [
        IGNORE,
        *ids[n_prompt : n_prompt + 7],
    ]


def test_full_sft_memorises(base_dir, data, tmp_path):
    out = tmp_path / "ckpt"
    config = {
        "method": "full",
        "lr": 5e-3,
        "epochs": 60,
        "batch_size": 4,
        "lr_schedule": "cosine",
        "warmup_steps": 3,
    }
    summary = train(config, data, base_dir, out, **QUIET)
    assert summary["steps"] == 60 and summary["stopped_early"] is None
    assert summary["final_loss"] < 0.2 * summary["first_loss"]
    assert summary["flops"] == 6 * summary["n_params"] * summary["tokens"]
    saved = json.loads((out / "train_summary.json").read_text())
    assert saved["steps"] == 60 and saved["wall_seconds"] > 0
    before, after = weights(base_dir), weights(out)
    assert any(not before[k].equal(after[k]) for k in before)
    engine = Engine(out)
    got = engine.generate([r["prompt"] for r in ROWS], max_new_tokens=20)
    tok = engine.tokenizer
    want = [tok.decode(tok(r["completion"], add_special_tokens=False).input_ids) for r in ROWS]
    assert got == want
    assert json.loads((out / "vtb_model.json").read_text())["n_params"] == engine.n_params
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name]


def test_lora_trains_only_adapters(base_dir, data, tmp_path):
    base = weights(base_dir)
    seen = {}

    def check(model):
        for name, param in model.named_parameters():
            seen[name] = param.detach().clone()

    config = {"method": "lora", "lr": 1e-2, "epochs": 3, "batch_size": 2, "lora": {"r": 4, "alpha": 8}}
    summary = train(config, data, base_dir, tmp_path / "lora", before_merge=check, **QUIET)
    assert summary["steps"] == 6
    lora = {k: v for k, v in seen.items() if "lora_" in k}
    assert lora and any(v.abs().sum() > 0 for k, v in lora.items() if "lora_B" in k)
    frozen = {
        k.replace("base_model.model.", "").replace(".base_layer", ""): v
        for k, v in seen.items()
        if "lora_" not in k
    }
    assert frozen.keys() == base.keys()
    assert all(value.equal(base[name]) for name, value in frozen.items())
    merged = weights(tmp_path / "lora")
    assert merged.keys() == base.keys()
    assert any(not base[k].equal(merged[k]) for k in base)
    assert all(base[k].equal(merged[k]) for k in base if "wte" in k or "wpe" in k or "ln_" in k)


def test_unknown_config_key():
    with pytest.raises(
        ConfigError,
        match=r"'learning_rate'.*allowed keys: batch_size, chat_template, deepspeed, epochs, lora, lr",
    ):
        resolve_config({"learning_rate": 1e-3})
    with pytest.raises(ConfigError, match=r"unknown lora key 'rank'.*alpha, dropout, r, target_modules"):
        resolve_config({"method": "lora", "lora": {"rank": 4}})
    with pytest.raises(ConfigError, match="lr_schedule must be one of"):
        resolve_config({"lr_schedule": "exp"})
    with pytest.raises(ConfigError, match="batch_size must be an integer"):
        resolve_config({"batch_size": 2.5})
    assert resolve_config({"max_steps": 5})["lora"]["r"] == 8


def test_cli_reports_config_errors(base_dir, data, tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"lr": 1e-3, "optimizer": "sgd"}))
    argv = [
        "--config",
        str(config),
        "--data",
        str(data),
        "--base",
        str(base_dir),
        "--out",
        str(tmp_path / "o"),
    ]
    assert main(argv) == 2
    assert "unknown trainer config key 'optimizer'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_cli_seed_and_max_steps(base_dir, data, tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"epochs": 5, "max_steps": 3, "batch_size": 2}))
    out = tmp_path / "o"
    argv = [
        "--config",
        str(config),
        "--data",
        str(data),
        "--base",
        str(base_dir),
        "--out",
        str(out),
        "--seed",
        "11",
    ]
    assert main(argv) == 0
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["steps"] == 3 and summary["seed"] == 11
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["steps"] == 3


def test_stops_early_on_flops_budget(base_dir, data, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base_dir)
    n_params = json.loads((base_dir / "vtb_model.json").read_text())["n_params"]
    per_row = {len(ids) for ids, _ in encode_rows(ROWS, tok, 256)}
    assert len(per_row) == 1  # every row has the same length, so every step costs the same
    step = usage.train_flops(n_params, 2 * per_row.pop())
    monkeypatch.setenv("VTB_MAX_FLOPS", str(usage.totals()["flops"] + 2.5 * step))
    out = tmp_path / "ckpt"
    summary = train({"epochs": 5, "batch_size": 2}, data, base_dir, out, **QUIET)
    assert summary["steps"] == 2 and summary["stopped_early"] == "budget"
    assert summary["flops"] == 2 * step
    assert json.loads((out / "train_summary.json").read_text())["stopped_early"] == "budget"
    assert (out / "model.safetensors").exists()
