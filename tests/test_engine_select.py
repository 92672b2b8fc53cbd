"""Engine selection and the vLLM engine's CPU-side logic (the GPU run is in tests/gpu/).

`VLLMEngine` is driven here by a stand-in for `vllm.LLM` that decodes greedily with the same
tiny model (a plain loop, independent of our engine's batched KV-cache decoder): the texts
and the FLOPs charged must then equal the transformers engine's for the same prompts.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM

from vtb.engine import usage
from vtb.engine.infer import Engine
from vtb.engine.select import engine_env, open_engine, vllm_unavailable
from vtb.engine.vllm_engine import VLLMEngine, llm_kwargs, sampling_kwargs
from vtb.models.meta import n_params_of
from vtb.models.toy import toy_example


@pytest.fixture(scope="module")
def model_dir(toy_model_dir):
    return toy_model_dir


class FakeLLM:
    """What VLLMEngine uses of vllm.LLM: generate(token prompts, per-prompt params) -> outputs."""

    sampling_params_class = SimpleNamespace  # SamplingParams(**kwargs) -> an object with those fields

    def __init__(self, model_dir):
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.eos = self.tok.eos_token_id
        self.calls = []

    def generate(self, prompts, params, use_tqdm=False):
        self.calls.append((prompts, params))
        outs = []
        for prompt, p in zip(prompts, params, strict=True):
            assert p.temperature == 0  # this stand-in only decodes greedily
            ids, new = list(prompt["prompt_token_ids"]), []
            with torch.inference_mode():
                while len(new) < p.max_tokens and len(ids) < self.model.config.n_positions:
                    token = int(self.model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
                    new.append(token)
                    ids.append(token)
                    text = self.tok.backend_tokenizer.decode(new, skip_special_tokens=True)
                    if token == self.eos or any(s in text for s in p.stop or []):
                        break
            outs.append(
                SimpleNamespace(
                    prompt_token_ids=prompt["prompt_token_ids"], outputs=[SimpleNamespace(token_ids=new)]
                )
            )
        return outs


def _prompts(n: int) -> list[str]:
    import random

    rng = random.Random(5)
    return [f"Q: {toy_example(rng)[0]}\nA:" for _ in range(n)] + ["Q: How many?\nA:"]


def test_vllm_engine_gives_the_transformers_engines_texts_and_flops(model_dir):
    hf = Engine(model_dir, threads=2)
    vl = VLLMEngine(model_dir, llm=FakeLLM(model_dir))
    assert vl.n_params == hf.n_params == n_params_of(model_dir) and vl.spaced == hf.spaced
    batch = _prompts(5)
    for stop in (None, ["="], [">>", "<<"]):
        a = hf.generate(batch, max_new_tokens=12, stop=stop)
        before = usage.totals()["flops"]
        b = vl.generate(batch, max_new_tokens=12, stop=stop)
        assert b == a and any(b)
        assert usage.totals()["flops"] - before == vl.last_usage["flops"] == hf.last_usage["flops"]
        assert vl.last_usage == hf.last_usage
    prompts, params = vl.llm.calls[-1]
    assert [p["prompt_token_ids"] for p in prompts] == hf.encode(batch, 12)  # same ids reach both engines
    assert params[0].stop == [">>", "<<"] and params[0].include_stop_str_in_output


def test_vllm_engine_checks_the_budget_before_generating(model_dir, monkeypatch):
    vl = VLLMEngine(model_dir, llm=FakeLLM(model_dir))
    monkeypatch.setenv("VTB_MAX_FLOPS", str(usage.totals()["flops"] + 1000.0))
    with pytest.raises(usage.BudgetExhausted):
        vl.generate(_prompts(2), max_new_tokens=4)
    assert vl.llm.calls == []


def test_llm_and_sampling_arguments():
    kw = llm_kwargs("/model", 256, {"gpu_memory_utilization": 0.3})
    assert kw["model"] == kw["tokenizer"] == "/model" and kw["max_model_len"] == 256
    assert kw["gpu_memory_utilization"] == 0.3 and kw["enforce_eager"] is True
    with pytest.raises(ValueError, match="gpu_memory_util"):
        llm_kwargs("/model", 256, {"gpu_memory_util": 0.3})
    greedy = sampling_kwargs(8, 0.0, 0.9, None, [])
    assert (
        greedy["temperature"] == 0
        and greedy["top_p"] == 1.0
        and "seed" not in greedy
        and greedy["stop"] is None
    )
    sampled = sampling_kwargs(8, 0.7, 0.9, 42, ["\n"])
    assert (sampled["seed"], sampled["top_p"], sampled["stop"]) == (42, 0.9, ["\n"])


def test_vllm_falls_back_to_transformers_without_a_gpu(model_dir, tmp_path, monkeypatch):
    reason = vllm_unavailable()
    assert reason is not None  # this machine has no CUDA GPU (the gpu suite covers the other case)
    usage_file = tmp_path / "usage.json"
    monkeypatch.setenv("VTB_USAGE_FILE", str(usage_file))
    for key, value in engine_env("vllm", {"dtype": "auto"}, fallback=True).items():
        monkeypatch.setenv(key, value)
    engine = open_engine(model_dir, threads=2)
    assert isinstance(engine, Engine) and engine.generate(["Q: How many?\nA:"], max_new_tokens=3)
    noted = json.loads(usage_file.read_text())
    assert noted["engine"] == "transformers" and noted["engine_fallback"].startswith("vllm: ")
    monkeypatch.setenv("VTB_ENGINE_FALLBACK", "0")
    with pytest.raises(RuntimeError, match="engine=vllm cannot run"):
        open_engine(model_dir)


def test_engine_names_are_checked(model_dir, monkeypatch):
    with pytest.raises(ValueError, match="engine='vlm'"):
        engine_env("vlm")
    monkeypatch.setenv("VTB_ENGINE", "vlm")
    with pytest.raises(ValueError, match="VTB_ENGINE='vlm'"):
        open_engine(model_dir)


def test_n_params_without_a_sidecar_matches_a_loaded_model(model_dir, tmp_path):
    import shutil

    copy = tmp_path / "m"
    shutil.copytree(model_dir, copy)
    (copy / "vtb_model.json").unlink()
    assert n_params_of(copy) == Engine(model_dir).n_params


# -- engine.options.max_model_len: the smaller window wins -------------------------------------


def test_the_serving_window_is_the_smaller_of_the_models_and_max_model_len():
    from vtb.engine.vllm_engine import serving_window

    assert serving_window(128, None) == serving_window(128, {"dtype": "auto"}) == 128
    assert serving_window(128, {"max_model_len": 48}) == 48
    assert serving_window(128, {"max_model_len": 4096}) == 128  # positions the model lacks are not used
    for bad in (0, -5, 1.5, "64", True):
        with pytest.raises(ValueError, match="max_model_len"):
            serving_window(128, {"max_model_len": bad})
    assert llm_kwargs("/m", 128, {"max_model_len": 48})["max_model_len"] == 48
    assert llm_kwargs("/m", 128, {"max_model_len": 4096})["max_model_len"] == 128


def test_a_smaller_max_model_len_truncates_prompts_in_the_engine_and_the_server(model_dir):
    from vtb.serve.api import Limits
    from vtb.serve.server import ModelServer

    vl = VLLMEngine(model_dir, options={"max_model_len": 48}, llm=FakeLLM(model_dir))
    assert vl.max_positions == 48 < Engine(model_dir).max_positions
    long = "Q: " + "1 + 2 = 3, " * 60 + "\nA:"
    vl.generate([long], max_new_tokens=8)
    (prompt,), _ = vl.llm.calls[-1]
    assert len(prompt["prompt_token_ids"]) == 48 - 8  # left-truncated to the serving window, not 128

    api = ModelServer(vl, "k", Limits(max_tokens=16))
    auth = "Bearer k"
    status, models = api.handle("GET", "/v1/models", auth, None)
    assert status == 200 and models["data"][0]["max_model_len"] == 48
    body = {"prompt": long, "max_tokens": 8, "temperature": 0}
    status, reply = api.handle("POST", "/v1/completions", auth, json.dumps(body).encode())
    assert status == 400 and "window of 48" in reply["error"]["message"]
    body["truncate_prompt_tokens"] = 1000  # more than the window: capped at what it leaves
    status, reply = api.handle("POST", "/v1/completions", auth, json.dumps(body).encode())
    assert status == 200, reply
    (prompt,), _ = vl.llm.calls[-1]
    assert len(prompt["prompt_token_ids"]) == 48 - 8 == reply["usage"]["prompt_tokens"]
