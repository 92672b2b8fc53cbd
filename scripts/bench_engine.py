"""Benchmark vtb.engine.infer on the tiny model: batched vs one-prompt-at-a-time generation.

Validation-style episodes: a one-shot prompt of ~40 tokens and up to 60 new tokens. With
--full-length, EOS is ignored so every episode generates all 60 tokens (the worst case).
Timings are best of --repeats, since a shared machine makes single runs noisy.
Usage: python scripts/bench_engine.py [--model DIR] [--episodes 64] [--threads 2] [--full-length]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from vtb.engine.infer import Engine
from vtb.models.toy import build_toy_model, toy_example


def prompts(n: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    shot_q, shot_a = toy_example(rng)
    return [f"Q: {shot_q}\nA: {shot_a}\nQ: {toy_example(rng)[0]}\nA:" for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, help="model dir (default: build a toy tiny model)")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=60)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--single-episodes", type=int, default=32, help="episodes timed one at a time")
    parser.add_argument("--repeats", type=int, default=3, help="best of N timings")
    parser.add_argument(
        "--full-length", action="store_true", help="ignore EOS: always generate max-new-tokens"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model or build_toy_model(Path(tmp) / "toy", steps=100, progress=lambda s: None)
        engine = Engine(model_dir, threads=args.threads)
        if args.full_length:
            engine.eos_ids = set()
        batch = prompts(args.episodes)
        lengths = [len(ids) for ids in engine.encode(batch, args.max_new_tokens)]
        print(f"model {engine.n_params} params; prompt tokens mean {sum(lengths) / len(lengths):.1f}")
        engine.generate(batch[:4], max_new_tokens=4)  # warm-up
        n_single = min(args.single_episodes, len(batch))
        t_batch = t_single = float("inf")
        for _ in range(args.repeats):  # best of N: the machine may be shared
            start = time.perf_counter()
            batched = engine.generate(batch, max_new_tokens=args.max_new_tokens, batch_size=64)
            t_batch = min(t_batch, (time.perf_counter() - start) / len(batch))
            gen_batch = engine.last_usage["generated_tokens"]
            start = time.perf_counter()
            single = [engine.generate([p], max_new_tokens=args.max_new_tokens)[0] for p in batch[:n_single]]
            t_single = min(t_single, (time.perf_counter() - start) / n_single)
        print(
            f"batched (64): {1 / t_batch:.1f} episodes/s, {gen_batch / len(batch) / t_batch:.0f} new tokens/s"
        )
        print(f"single:       {1 / t_single:.1f} episodes/s")
        same = batched[:n_single] == single
        print(f"speed-up {t_single / t_batch:.1f}x per episode; identical greedy outputs: {same}")


if __name__ == "__main__":
    main()
