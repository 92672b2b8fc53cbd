"""The inference engine: batching never changes greedy output; FLOPs are charged exactly."""

from __future__ import annotations

import json
import random

import pytest
import torch

from vtb.engine import usage
from vtb.engine.infer import BATCH_TOKENS, Engine, batches
from vtb.engine.sampling import choose, make_generators
from vtb.models.toy import toy_example


@pytest.fixture(scope="module")
def model_dir(toy_model_dir):
    return toy_model_dir


@pytest.fixture(scope="module")
def engine(model_dir):
    return Engine(model_dir, threads=2)


@pytest.fixture
def no_eos(engine):
    """Make every sequence run to max_new_tokens, so token counts are known in advance."""
    saved = engine.eos_ids
    engine.eos_ids = set()
    yield engine
    engine.eos_ids = saved


def prompts(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    out = [f"Q: {toy_example(rng)[0]}\nA:" for _ in range(n)]
    if n >= 3:
        out[1] = "Q: How many?\nA:"  # a short one, so batches need padding
        out[2] = f"Q: {toy_example(rng)[0]} {toy_example(rng)[0]}\nA:"  # a long one
    return out


def test_batched_equals_single_greedy(engine):
    batch = prompts(9)
    alone = [engine.generate([p], max_new_tokens=16)[0] for p in batch]
    assert any(alone)
    assert engine.generate(batch, max_new_tokens=16) == alone
    assert engine.generate(batch, max_new_tokens=16, batch_size=4) == alone


def test_decode_batches_hold_at_most_their_rows_and_tokens():
    lengths = [10, 20, 30, 200, 400]
    assert batches(lengths, [4, 0, 1, 2, 3], 100, 256) == [[4, 0, 1, 2, 3]]
    assert batches(lengths, list(range(5)), 100, 2) == [[0, 1], [2, 3], [4]]
    tight = batches([500] * 70, list(range(70)), 12, 256)  # (500 + 12) tokens a row: 64 rows at most
    assert [len(b) for b in tight] == [BATCH_TOKENS // 512, 70 - BATCH_TOKENS // 512]
    assert batches([BATCH_TOKENS + 1], [0], 5, 256) == [[0]]  # a row over the bound still runs, alone


def test_sampled_tokens_do_not_depend_on_the_thread_count(model_dir):
    """sandbox.server_threads=1 (one thread per model server) was measured to give the same tokens
    as two; each is still keyed apart (vtb/step_requests.py), in case a library sums otherwise."""
    batch = prompts(40)
    runs = {}
    try:
        for threads in (1, 2):
            one = Engine(model_dir, threads=threads)
            runs[threads] = one.generate(batch, max_new_tokens=24, temperature=0.9, seed=5)
    finally:
        torch.set_num_threads(2)
    assert runs[1] == runs[2]


def test_model_writes_annotations(engine):
    out = engine.generate(prompts(4), max_new_tokens=30)
    assert sum("<<" in o for o in out) >= 2


def test_stop_strings(no_eos):
    batch = prompts(6)
    full = no_eos.generate(batch, max_new_tokens=16)
    stopped = no_eos.generate(batch, max_new_tokens=16, stop=["="])
    assert any("=" in f for f in full)
    for f, s in zip(full, stopped, strict=True):
        assert s == (f[: f.index("=") + 1] if "=" in f else f)
    two = no_eos.generate(batch, max_new_tokens=16, stop=[">>", "<<"])
    assert all(t.endswith("<<") or t.endswith(">>") for t, f in zip(two, full, strict=True) if "<<" in f)


def test_one_character_stops_cut_where_decoding_every_step_cuts(engine, monkeypatch):
    """With one-character stops the engine decodes a continuation only at the step a token whose
    own text holds one arrives (`_stop_marks`): the same texts, finish reasons and token counts
    as decoding every step, greedy and sampled."""
    batch = prompts(24)
    for temperature in (0.0, 0.9):
        for stop in (["="], ["=", ">"]):
            kw = dict(max_new_tokens=24, temperature=temperature, seed=5, stop=stop)
            fast = engine.complete(batch, **kw)
            with monkeypatch.context() as m:
                m.setattr(engine, "_stop_marks", lambda stop: None)  # decode at every step
                slow = engine.complete(batch, **kw)
            assert [c.finish_reason for c in fast].count("stop") >= 6, (temperature, stop)
            assert [(c.text, c.finish_reason, c.completion_tokens) for c in fast] == [
                (c.text, c.finish_reason, c.completion_tokens) for c in slow
            ], (temperature, stop)


def test_flops_are_two_params_per_token(no_eos):
    batch = prompts(5)
    prompt_tokens = sum(len(ids) for ids in no_eos.tokenizer(batch).input_ids)
    before = usage.totals()
    no_eos.generate(batch, max_new_tokens=7, batch_size=2)
    after = usage.totals()
    tokens = prompt_tokens + 5 * 7
    assert after["infer_tokens"] - before["infer_tokens"] == tokens
    assert after["flops"] - before["flops"] == 2 * no_eos.n_params * tokens
    assert no_eos.last_usage == {
        "prompt_tokens": prompt_tokens,
        "generated_tokens": 35,
        "flops": 2.0 * no_eos.n_params * tokens,
    }


def test_n_params_matches_model_info(engine, model_dir):
    assert engine.n_params == json.loads((model_dir / "vtb_model.json").read_text())["n_params"]


def test_usage_file_written(engine, tmp_path, monkeypatch):
    path = tmp_path / "usage.json"
    monkeypatch.setenv("VTB_USAGE_FILE", str(path))
    engine.generate(prompts(2), max_new_tokens=3)
    written = json.loads(path.read_text())
    assert {k: written[k] for k in usage.totals()} == usage.totals() and written["flops"] > 0


def test_budget_exhausted_before_spending(engine, monkeypatch):
    monkeypatch.setenv("VTB_MAX_FLOPS", str(usage.totals()["flops"] + 1000.0))
    before = usage.totals()
    with pytest.raises(usage.BudgetExhausted):
        engine.generate(prompts(2), max_new_tokens=3)
    assert usage.totals() == before


def test_engine_has_no_null_mode_a_harness_could_detect(engine, monkeypatch):
    """The null-model check swaps the checkpoint folder (vtb/blind.py); the old switch does nothing."""
    batch = prompts(3)
    plain = engine.generate(batch, max_new_tokens=5)
    monkeypatch.setenv("VTB_NULL_MODEL", "1")
    before = usage.totals()["flops"]
    assert engine.generate(batch, max_new_tokens=5) == plain
    assert usage.totals()["flops"] > before


def test_sampling_is_seeded_and_batch_independent(engine):
    batch = prompts(6)
    a = engine.generate(batch, max_new_tokens=20, temperature=1.0, seed=3)
    assert engine.generate(batch, max_new_tokens=20, temperature=1.0, seed=3) == a
    assert engine.generate([batch[4]], max_new_tokens=20, temperature=1.0, seed=3) == [a[4]]
    assert engine.generate(batch, max_new_tokens=20, temperature=1.0, seed=4) != a
    votes = engine.generate([batch[0]] * 4, max_new_tokens=20, temperature=1.5, seed=3)
    assert len(set(votes)) > 1  # repeated prompts get different samples


def test_a_draw_follows_the_distribution_and_never_picks_a_token_without_mass():
    """Two tokens of mass 1/4 and 3/4 among 50: 4000 seeded draws give those two only, in about
    those shares; top_k=1 and a nucleus of 0.5 keep the likelier one. (Without a nucleus the draw
    runs in vocabulary order, with one in likelihood order.)"""
    rows = 4000
    logits = torch.full((rows, 50), float("-inf"))
    logits[:, 7], logits[:, 31] = 0.0, float(torch.log(torch.tensor(3.0)))
    picked = choose(logits, 1.0, 1.0, make_generators(list(range(rows)))).tolist()
    assert set(picked) == {7, 31} and abs(picked.count(31) / rows - 0.75) < 0.03
    assert choose(logits, 1.0, 0.9999, make_generators(list(range(rows)))).tolist().count(31) / rows > 0.72
    assert set(choose(logits, 1.0, 1.0, make_generators(list(range(rows))), top_k=1).tolist()) == {31}
    assert set(choose(logits, 1.0, 0.5, make_generators(list(range(rows)))).tolist()) == {31}


def test_top_p_tiny_is_greedy(engine):
    batch = prompts(4)
    greedy = engine.generate(batch, max_new_tokens=15)
    assert engine.generate(batch, max_new_tokens=15, temperature=0.8, top_p=1e-6, seed=9) == greedy


def test_long_prompt_is_left_truncated(engine):
    long = " ".join(f"Q: {toy_example(random.Random(i))[0]}" for i in range(20)) + "\nA:"
    assert len(engine.tokenizer(long).input_ids) > 128
    out = engine.generate([long, "Q: How many?\nA:"], max_new_tokens=10)
    assert len(out) == 2
    assert engine.last_usage["prompt_tokens"] <= 128 - 10 + len(
        engine.tokenizer("Q: How many?\nA:").input_ids
    )
