"""The reproducibility probe: `python -m vtb.engine.probe` prints a hash of a short, fixed training.

Run in a sandbox at the start of every bench (vtb/repro.py), with the environment every step
of the bench gets. It goes through the code paths the tiny models' training does (MKL matrix
products, PyTorch's vectorised softmax, layer norm, GELU and AdamW kernels, the sandbox's
thread count), so two machines whose probes agree compute those bit for bit alike; a different
CPU code path changes the last bits of the losses, and the hash.
"""

from __future__ import annotations

import hashlib
import json
import os

import torch

STEPS = 20


def run() -> dict:
    torch.manual_seed(0)
    torch.set_num_threads(int(os.environ.get("VTB_THREADS") or 1))
    vocab, width, seq, batch = 256, 64, 32, 8
    emb = torch.nn.Embedding(vocab, width)
    attn = torch.nn.Linear(width, 3 * width)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)
    )
    norm = torch.nn.LayerNorm(width)
    params = [*emb.parameters(), *attn.parameters(), *mlp.parameters(), *norm.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-2)
    data = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        ids = torch.randint(0, vocab, (batch, seq), generator=data)
        x = emb(ids)
        q, k, v = attn(x).chunk(3, dim=-1)
        mask = torch.full((seq, seq), float("-inf")).triu(1)
        x = x + torch.softmax(q @ k.transpose(1, 2) / width**0.5 + mask, dim=-1) @ v
        x = norm(x + mlp(x))
        logits = x @ emb.weight.T
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
    digest = hashlib.sha256()
    for p in params:
        digest.update(p.detach().contiguous().numpy().tobytes())
    return {
        "probe": digest.hexdigest()[:16],
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


if __name__ == "__main__":
    print(json.dumps(run()))
