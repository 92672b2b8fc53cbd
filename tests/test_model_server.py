"""The model server's API in-process (no sandbox): OpenAI's shapes, its checks, the key, the budget.

The sandboxed service, the bridge and the attacks on it are in tests/test_model_service.py.
"""

from __future__ import annotations

import json
import threading

import pytest

from vtb.engine import usage
from vtb.engine.infer import Engine
from vtb.serve.api import Limits
from vtb.serve.server import ModelServer

KEY = "k-test"
AUTH = f"Bearer {KEY}"
PROMPTS = ["Question: What is 3+4?\nAnswer:", "Question: Tom has 5 apples and eats 2. How many?\nAnswer:"]


@pytest.fixture(scope="module")
def engine(toy_model_dir):
    return Engine(toy_model_dir, threads=1, safetensors_only=True)


@pytest.fixture
def api(engine, monkeypatch):
    monkeypatch.delenv("VTB_MAX_FLOPS", raising=False)
    monkeypatch.delenv("VTB_USAGE_FILE", raising=False)
    monkeypatch.setattr(usage, "_totals", {"flops": 0.0, "train_tokens": 0, "infer_tokens": 0})
    return ModelServer(engine, KEY, Limits(max_tokens=64, max_n=4, max_prompts=8))


def post(api, path, body, auth=AUTH):
    return api.handle("POST", path, auth, json.dumps(body).encode())


def test_completions_are_the_engines_greedy_outputs(api, engine):
    status, reply = post(api, "/v1/completions", {"prompt": PROMPTS, "max_tokens": 24, "temperature": 0})
    assert status == 200, reply
    charged = usage.totals()["flops"]
    assert [c["text"] for c in reply["choices"]] == engine.generate(PROMPTS, max_new_tokens=24)
    assert reply["object"] == "text_completion" and [c["index"] for c in reply["choices"]] == [0, 1]
    assert {c["finish_reason"] for c in reply["choices"]} <= {"stop", "length"}
    u = reply["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] > 0
    assert charged == pytest.approx(2 * engine.n_params * u["total_tokens"])  # metered here


def test_sampling_parameters_and_logprobs(api):
    body = {
        "prompt": PROMPTS[0],
        "max_tokens": 8,
        "temperature": 0.9,
        "top_k": 5,
        "top_p": 0.9,
        "n": 3,
        "seed": 7,
    }
    status, reply = post(api, "/v1/completions", {**body, "logprobs": 2})
    assert status == 200, reply
    assert len(reply["choices"]) == 3
    lp = reply["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) > 0
    assert all(v <= 0 for v in lp["token_logprobs"]) and all(len(t) == 2 for t in lp["top_logprobs"])
    again = post(api, "/v1/completions", {**body, "logprobs": 2})[1]
    assert [c["text"] for c in again["choices"]] == [c["text"] for c in reply["choices"]]  # seeded
    status, stopped = post(
        api, "/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 30, "temperature": 0, "stop": ["="]}
    )
    text = stopped["choices"][0]["text"]
    assert status == 200 and (
        text.endswith("=") and "=" not in text[:-1] or stopped["choices"][0]["finish_reason"] == "length"
    )


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "x", "max_tokens": 65}, "max_tokens"),
        ({"prompt": "x", "n": 5}, "n"),
        ({"prompt": ["x"] * 9}, "prompt"),
        ({"prompt": 3}, "prompt"),
        ({"prompt": "x", "temperature": "hot"}, "temperature"),
        ({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"prompt": "x", "stream": True}, "stream"),
        ({"prompt": "x", "logprobs": 9}, "logprobs"),
        ({"prompt": "word " * 400, "max_tokens": 8}, "prompt"),  # over the window, no truncation asked
    ],
)
def test_bad_requests_get_a_clear_api_error(api, body, param):
    status, reply = post(api, "/v1/completions", body)
    assert status == 400 and reply["error"]["param"] == param and reply["error"]["message"]


def test_a_long_prompt_is_cut_only_when_asked(api):
    status, reply = post(
        api, "/v1/completions", {"prompt": "word " * 400, "max_tokens": 4, "truncate_prompt_tokens": -1}
    )
    assert status == 200 and reply["usage"]["prompt_tokens"] < 128


def test_no_key_no_answer(api):
    for auth in (None, "Bearer wrong", KEY, f"Bearer {KEY}x"):
        status, reply = post(api, "/v1/completions", {"prompt": "x"}, auth=auth)
        assert status == 401 and "choices" not in reply
    assert api.handle("GET", "/v1/models", None, None)[0] == 401
    assert api.handle("GET", "/health", None, None)[0] == 200  # liveness only, no model in it


def test_models_tokenize_detokenize_and_chat(api, engine):
    status, models = api.handle("GET", "/v1/models", AUTH, None)
    assert status == 200 and models["data"][0]["max_model_len"] == engine.max_positions
    status, tok = post(api, "/tokenize", {"prompt": "Tom has 3 + 4 ?", "add_special_tokens": False})
    assert status == 200 and tok["count"] == len(tok["tokens"]) > 0
    status, detok = post(api, "/detokenize", {"tokens": tok["tokens"]})
    assert status == 200 and detok["prompt"].replace(" ", "") == "Tomhas3+4?"
    assert post(api, "/detokenize", {"tokens": [10**9]})[0] == 400
    status, chat = post(api, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 400 and "chat template" in chat["error"]["message"]  # the toy model has none
    assert api.handle("POST", "/v1/embeddings", AUTH, b"{}")[0] == 404


def test_the_budget_is_enforced_by_the_server(api, engine, monkeypatch, capsys):
    monkeypatch.setenv("VTB_MAX_FLOPS", str(2 * engine.n_params * 60))  # room for about one small request
    first = post(api, "/v1/completions", {"prompt": "Q:", "max_tokens": 8, "temperature": 0})
    assert first[0] == 200
    status, reply = post(api, "/v1/completions", {"prompt": PROMPTS, "max_tokens": 40, "temperature": 0})
    assert status == 429 and reply["error"]["type"] == "insufficient_quota"
    assert usage.totals()["flops"] <= 2 * engine.n_params * 60  # never past the limit
    assert '{"event": "budget"}' in capsys.readouterr().out  # what the orchestrator records


def test_concurrent_requests_share_one_engine_call(engine, monkeypatch):
    monkeypatch.delenv("VTB_MAX_FLOPS", raising=False)
    api = ModelServer(engine, KEY, window_ms=200)
    calls = []
    real = engine.complete
    monkeypatch.setattr(
        engine, "complete", lambda prompts, **kw: calls.append(len(prompts)) or real(prompts, **kw)
    )
    replies = []
    threads = [
        threading.Thread(
            target=lambda i=i: replies.append(
                post(api, "/v1/completions", {"prompt": f"Q{i}:", "max_tokens": 4, "temperature": 0})
            )
        )
        for i in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(status == 200 for status, _ in replies) and sum(calls) == 6
    assert len(calls) < 6  # requests within the window were batched together
