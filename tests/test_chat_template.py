"""Chat-template prompts: the trainer's `chat_template` and the harness's `user_prompts` agree.

A model without a template (the tiny and toy models) keeps plain prompts under "auto", so the
default benches are unchanged; `true` without a template is an error that names the fix. The
same check on a real template (SmolLM2's) is in tests/test_smollm2.py.
"""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from vtb.engine.infer import Engine
from vtb.engine.sft_config import ConfigError, resolve_config
from vtb.engine.sft_data import chat_prompts, encode_rows
from vtb.serve.api import Limits
from vtb.serve.client import ModelClient, ModelError
from vtb.serve.server import ModelServer

KEY = "k-chat"
ROWS = [{"prompt": "Question: What is 3+4?\nAnswer:", "completion": " 3+4=7\n#### 7"}]


class InProcessClient(ModelClient):
    """The real client's calls, answered by a ModelServer in this process (no socket)."""

    def __init__(self, api: ModelServer):
        super().__init__("http://model.invalid/v1", KEY)
        self.api = api

    def post(self, path: str, payload: dict) -> dict:
        path = path if path in ("/tokenize", "/detokenize") else "/v1" + path
        status, body = self.api.handle("POST", path, f"Bearer {KEY}", json.dumps(payload).encode())
        if status != 200:
            raise ModelError(status, body["error"]["message"])
        return body


@pytest.fixture(scope="module")
def toy_client(toy_model_dir):
    engine = Engine(toy_model_dir, threads=1, safetensors_only=True)
    return InProcessClient(ModelServer(engine, KEY, Limits()))


def test_trainer_config_takes_true_false_or_auto():
    assert resolve_config({})["chat_template"] is False
    for value in (True, False, "auto"):
        assert resolve_config({"chat_template": value})["chat_template"] == value
    for bad in ("yes", 1, None):
        with pytest.raises(ConfigError, match="chat_template"):
            resolve_config({"chat_template": bad})


def test_a_model_without_a_template_keeps_plain_prompts(toy_model_dir, toy_client):
    tokenizer = AutoTokenizer.from_pretrained(toy_model_dir)
    texts = [r["prompt"] for r in ROWS]
    assert not toy_client.has_chat_template
    assert toy_client.user_prompts(texts, "auto") == texts == toy_client.user_prompts(texts, False)
    assert chat_prompts(texts, tokenizer, "auto") == texts
    assert encode_rows(ROWS, tokenizer, 64, "auto") == encode_rows(ROWS, tokenizer, 64, False)
    with pytest.raises(ValueError, match='set it to false or "auto"'):
        chat_prompts(texts, tokenizer, True)
    with pytest.raises(ModelError, match="chat template"):
        toy_client.user_prompts(texts, True)


def test_the_math_systems_follow_the_models_template():
    from vtb.domains.math.domain import CHAT, HARNESSES, REFERENCE_TRAINER

    for harness in ("initial", "calculator"):
        assert json.loads((HARNESSES / harness / "config.json").read_text())["chat"] == CHAT == "auto"
    assert REFERENCE_TRAINER["chat_template"] == CHAT
