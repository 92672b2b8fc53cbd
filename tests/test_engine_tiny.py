"""The embedded tiny model: word-level tokenizer round trips, deterministic seeded pre-training."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from vtb.models.tiny import build_tiny_model, build_tokenizer
from vtb.models.toy import TOY_NUMBER_MAX, TOY_WORDS, toy_texts

SMALL = {"n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": 64}


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(TOY_WORDS, TOY_NUMBER_MAX)


def test_vocab_has_numbers_words_and_symbols(tokenizer):
    vocab = tokenizer.get_vocab()
    for token in ["[PAD]", "[UNK]", "[BOS]", "[EOS]", "0", "17", str(TOY_NUMBER_MAX), "apples", "tom", "Tom"]:
        assert token in vocab
    for token in [".", ",", "?", "$", "%", "=", "<<", ">>", "####", "'", "\n", "(", ")"]:
        assert token in vocab
    assert str(TOY_NUMBER_MAX + 1) not in vocab


@pytest.mark.parametrize(
    "text, normalised",
    [
        ("Tom has 5 apples.", "Tom has 5 apples ."),
        ("<<12+5=17>>17", "<< 12 + 5 = 17 >> 17"),
        ("A: <<3*4=12>>12\n#### 12", "A : << 3 * 4 = 12 >> 12\n#### 12"),
        ("Q: How many?\n\nA: 7\n", "Q : How many ?\n\nA : 7\n"),
        ("  Ann  gives\t2   away\r\n", "Ann gives 2 away\n"),
    ],
)
def test_round_trip(tokenizer, text, normalised):
    ids = tokenizer(text).input_ids
    assert ids[0] == tokenizer.bos_token_id
    assert tokenizer.unk_token_id not in ids
    decoded = tokenizer.decode(ids, skip_special_tokens=True)
    assert decoded == normalised
    assert tokenizer(decoded).input_ids == ids


def test_unknown_pieces_become_unk(tokenizer):
    ids = tokenizer("zebra 99999", add_special_tokens=False).input_ids
    assert ids == [tokenizer.unk_token_id, tokenizer.unk_token_id]


def test_tokenizer_survives_save_and_load(tokenizer, tmp_path):
    from transformers import AutoTokenizer

    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "Tom has <<2+3=5>>5\n#### 5"
    assert loaded(text).input_ids == tokenizer(text).input_ids
    assert (
        loaded.decode(loaded(text).input_ids, skip_special_tokens=True) == "Tom has << 2 + 3 = 5 >> 5\n#### 5"
    )


def test_build_is_deterministic(tokenizer, tmp_path):
    texts = toy_texts(64, seed=3)
    a = build_tiny_model(
        tmp_path / "a", texts, tokenizer, steps=4, batch_size=8, progress=lambda s: None, **SMALL
    )
    b = build_tiny_model(
        tmp_path / "b", texts, tokenizer, steps=4, batch_size=8, progress=lambda s: None, **SMALL
    )
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys()
    assert all(wa[k].equal(wb[k]) for k in wa)
    c = build_tiny_model(
        tmp_path / "c", texts, tokenizer, steps=4, batch_size=8, seed=1, progress=lambda s: None, **SMALL
    )
    wc = load_file(c / "model.safetensors")
    assert not all(wa[k].equal(wc[k]) for k in wa)


def test_pretraining_lowers_loss(tokenizer, tmp_path):
    lines = []
    out = build_tiny_model(
        tmp_path / "m", toy_texts(256), tokenizer, steps=50, batch_size=16, progress=lines.append, **SMALL
    )
    info = json.loads((out / "vtb_model.json").read_text())
    assert info["kind"] == "tiny" and info["n_params"] > 0
    assert info["final_loss"] < 0.6 * info["first_loss"]
    assert [line.split()[2] for line in lines] == ["25/50", "50/50"]
    assert (out / "config.json").exists() and (out / "tokenizer.json").exists()


def test_exact_mode_keeps_whitespace_and_folds_one_leading_space_into_pieces():
    corpus = ["grep -c ERROR /app/server.log > /app/count.txt", "def mean(xs):\n    return sum(xs) / len(xs)"]
    tok = build_tokenizer(corpus, 99, mode="exact")
    for text in [
        "grep -c  ERROR /app/server.log > /app/count.txt",
        "def mean(xs):\n\treturn sum(xs) / len(xs)\n",
    ]:
        ids = tok(text, add_special_tokens=False).input_ids
        assert tok.backend_tokenizer.decode(ids) == text
    pieces = tok.convert_ids_to_tokens(tok("grep -c ERROR", add_special_tokens=False).input_ids)
    assert pieces == ["grep", " -", "c", " ERROR"]
