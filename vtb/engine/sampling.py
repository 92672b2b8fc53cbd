"""Token choice for the inference engine: greedy, or seeded temperature / top-p sampling.

Each sequence draws from its own generator, seeded from (call seed, prompt text, how many
times that prompt already occurred in the call). A sample therefore does not depend on
which other prompts share its batch, and repeated prompts (self-consistency votes) still
get different samples.
"""

from __future__ import annotations

import hashlib

import torch


def sequence_seeds(prompts: list[str], seed: int) -> list[int]:
    """One 63-bit seed per prompt, independent of the other prompts in the call."""
    seen: dict[str, int] = {}
    seeds = []
    for prompt in prompts:
        k = seen.get(prompt, 0)
        seen[prompt] = k + 1
        digest = hashlib.sha256(f"{seed}\x00{k}\x00{prompt}".encode()).digest()
        seeds.append(int.from_bytes(digest[:8], "little") >> 1)
    return seeds


def make_generators(seeds: list[int]) -> list[torch.Generator]:
    gens = []
    for s in seeds:
        g = torch.Generator()
        g.manual_seed(s)
        gens.append(g)
    return gens


def choose(
    logits: torch.Tensor,
    temperature: float,
    top_p: float,
    generators: list[torch.Generator] | None,
    top_k: int = 0,
) -> torch.Tensor:
    """Next token per row of `logits` (rows, vocab): argmax, or one draw per row's generator.

    Sampling keeps the `top_k` most likely tokens (0: all), then the top-p nucleus of those.
    """
    if temperature <= 0.0:
        return logits.argmax(dim=-1)
    logits = logits.float()
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits / temperature, dim=-1)
    order = None
    if top_p < 1.0:
        # Keep the smallest prefix whose mass reaches top_p (always at least the top token). Only
        # the nucleus needs the tokens by likelihood: without it a draw is the same distribution in
        # vocabulary order, and sorting every row of the vocabulary was a quarter of a sampled play.
        probs, order = probs.sort(dim=-1, descending=True)
        before = probs.cumsum(dim=-1) - probs
        probs = probs.masked_fill(before >= top_p, 0.0)
    cdf = probs.cumsum(dim=-1)
    assert generators is not None and len(generators) == logits.shape[0]
    # u in (0, total]: the first token whose cumulative mass reaches u has a mass of its own, so a
    # token of probability 0 (past top_k or the nucleus) is never drawn, and u never runs past the end.
    u = (1.0 - torch.cat([torch.rand(1, generator=g) for g in generators])) * cdf[:, -1]
    pick = torch.searchsorted(cdf, u.unsqueeze(-1))
    return (pick if order is None else order.gather(-1, pick)).squeeze(-1)
