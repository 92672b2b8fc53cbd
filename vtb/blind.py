"""What a harness can learn about the play it is in: nothing about the split or the null-model check.

A harness that can tell a null-model check from a normal grading (or a test play from a
validation play) can behave honestly exactly when it is checked. Three things a sandbox used to
see are made the same in every mode here, all derived from a key that exists only in the
orchestrator (`secret`):

- **episode ids and order** (`blind`): each episode is renamed to an opaque id
  hmac(key, split + item id) and the episodes are played in the order of those ids, so ids and
  order carry no split or item information; rewards map back to the real ids in the orchestrator,
  and the run record keeps the real ids;
- **the model folder** (`null_model`): the null model is a real checkpoint folder, the
  candidate's own with every weight tensor's elements shuffled by a keyed seed: the same file
  names, sizes, modes and mtimes, config and tokenizer, weight headers, dtypes, shapes and even
  each tensor's multiset of values, but no learned structure left, so it emits nothing useful.
  Only safetensors are weights here: a checkpoint holds model files only (vtb/runner.py
  MODEL_SUFFIXES; torch pickles are never taken in, so never unpickled), and the shuffle works in
  place on a memory map of the copy, within the checkpoint's caps (a small multiple of the base
  model's size, vtb/pipeline.py checkpoint_caps). Built once per checkpoint hash under
  <cache>/null-models;
- **the model itself**: the harness never sees weights; it reaches a model server through the
  same socket mount, URL and key format in every mode (vtb/service.py), and only the
  orchestrator knows which checkpoint that server loaded: the trained one, its null model, or
  the untrained base model (grading's base-model check).

What stays visible: the inputs and the answers themselves (a harness can probe the model's
behaviour through the API, as it could any model). The number of episodes and the batch sizes
are the same in grading as in validation: grading plays in val-sized shards (vtb/pipeline.py play).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
from pathlib import Path

from vtb import safefs, salt
from vtb.config import TaskConfig
from vtb.hashing import file_digests, hash_dir

ID_CHARS = 16


def secret_of(task: TaskConfig) -> bytes:
    """The key ids, order, staging paths and the null model's shuffle derive from.

    Derived from the task's test salt (vtb.salt: inline, file, environment or the
    default), which no sandbox can read; never from its recorded hash.
    """
    return hashlib.sha256(b"vtb-blind\0" + salt.resolve(task).encode()).digest()


def keyed(secret: bytes, *parts: str) -> str:
    """hmac-sha256 hex of the parts (NUL-separated): opaque without the secret."""
    return hmac.new(secret, "\0".join(parts).encode(), hashlib.sha256).hexdigest()


# --- episode ids and order ---------------------------------------------------------------------


class Blind:
    """An episode as the harness sees it: an opaque id, messages that carry it instead of the real one."""

    def __init__(self, inner, opaque: str):
        self.inner, self.id = inner, opaque

    @property
    def over(self) -> bool:  # runner.play skips episodes already over (e.g. their user failed)
        return bool(getattr(self.inner, "over", False))

    def message(self, fresh: bool) -> dict:
        msg = dict(self.inner.message(fresh))
        msg["episode"] = self.id
        return msg

    def step(self, action: dict) -> bool:
        return self.inner.step(action)

    def fail(self, reason: str) -> None:
        self.inner.fail(reason)


def blind(episodes: list, secret: bytes, split: str) -> list[Blind]:
    """The episodes renamed to opaque ids, in the (keyed, so unpredictable) order of those ids."""
    out = [Blind(ep, keyed(secret, "episode", split, str(ep.id))[:ID_CHARS]) for ep in episodes]
    if len({b.id for b in out}) != len(out):
        raise ValueError(f"duplicate episode ids in the {split} split")
    return sorted(out, key=lambda b: b.id)


def real_ids(blinded: list[Blind], by_opaque: dict) -> dict:
    """A dict keyed by opaque ids (runner.play's actions, failures) re-keyed by the real episode ids."""
    real = {b.id: b.inner.id for b in blinded}
    return {real.get(k, k): v for k, v in by_opaque.items()}


# --- the null model ----------------------------------------------------------------------------

# A model's safetensors header is a few KB (one short entry per tensor; a thousand-tensor shard
# ~100 KB). Past this it is not shuffled (the engines may still load it: the null model then
# keeps the weights and scores, so a harness relying on it is flagged); json.loads of the 100 MB
# the format allows took the orchestrator to 1 GB RSS for a 16 KB model.
MAX_HEADER = 4 << 20


def null_model(checkpoint: Path, cache: Path, secret: bytes) -> Path:
    """The null model of a checkpoint: its folder with every weight tensor shuffled (cached by its hash)."""
    digest = hash_dir(checkpoint)
    home = cache / "null-models" / digest[:24]
    out = home / checkpoint.name
    if (home / "done.json").exists() and out.is_dir():
        return out
    tmp = cache / "null-models" / f".{digest[:24]}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    seed = int(keyed(secret, "null-model", weights_digest(checkpoint))[:16], 16)
    _copy_shuffled(checkpoint, tmp / checkpoint.name, seed)
    (tmp / "done.json").write_text(json.dumps({"checkpoint_hash": digest}) + "\n")
    shutil.rmtree(home, ignore_errors=True)
    home.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(home)
    return out


def weights_digest(checkpoint: Path) -> str:
    """Hash of a checkpoint's weight files alone: the null model's shuffle is drawn from it, so the
    same weights get the same null model whatever else the folder holds (train_summary.json
    records the training's wall time, which differs from run to run)."""
    h = hashlib.sha256()
    for rel, digest in sorted(file_digests(checkpoint).items()):
        if rel.endswith(".safetensors"):
            h.update(rel.encode() + b"\0" + digest.encode() + b"\0")
    return h.hexdigest()


def _copy_shuffled(src: Path, dst: Path, seed: int) -> None:
    """Copy a tree (regular files and folders only, never following a link), shuffling weight files."""
    import numpy as np

    rng = np.random.default_rng(seed)
    safefs.copy_tree(src, dst)  # checkpoints taken in by the orchestrator have no links anyway
    for e in safefs.walk(dst):
        if e.kind == "file" and e.name.endswith(".safetensors"):
            _shuffle_safetensors(dst / e.rel, rng)
    _mirror_stats(src, dst)


def _mirror_stats(src: Path, dst: Path) -> None:
    """Give every entry of dst (a copy of the host-written tree src) its source's mode and times.

    Folders come after their contents (which would touch their mtime), so names, sizes, modes
    and times of the copy are the source's: nothing there tells a null model from the real one.
    """
    for e in reversed(list(safefs.walk(dst))):
        shutil.copystat(src / e.rel, dst / e.rel, follow_symlinks=False)
    shutil.copystat(src, dst, follow_symlinks=False)


_ITEMSIZE = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U64": 8,
    "U32": 4,
    "U16": 2,
    "U8": 1,
    "BOOL": 1,
}


def _shuffle_safetensors(path: Path, rng) -> None:
    """Shuffle each tensor's elements in place; the header (names, dtypes, shapes, offsets) is untouched.

    A file that is not valid safetensors (bad or oversized header, tensors that overlap or leave
    gaps) is left as it is: the engines refuse it too. Valid tensors tile the data, so the work
    is one pass over the file, whatever the header says.
    """
    import numpy as np

    size = path.stat().st_size
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if not 0 < n <= min(MAX_HEADER, size - 8):
            return
        try:
            header = json.loads(f.read(n))
        except (ValueError, RecursionError):  # RecursionError: a deeply nested header
            return
    spans = _tensor_spans(header, size - 8 - n)
    if spans is None:
        return
    data = np.memmap(path, dtype=np.uint8, mode="r+", offset=8 + n, shape=(size - 8 - n,))
    for begin, end, item in spans:
        count = (end - begin) // item
        if count > 1:
            elems = data[begin : begin + count * item].view(np.dtype((np.void, item)))
            # A plain ndarray view of the same bytes: numpy shuffles an ndarray subclass (the memmap)
            # element by element in Python, ~9 s per million elements; this is the same permutation.
            rng.shuffle(elems.view(np.ndarray))
    data.flush()
    del data


def _tensor_spans(header, data_len: int) -> list[tuple[int, int, int]] | None:
    """(begin, end, itemsize) of each tensor in data order, or None unless they tile [0, data_len)."""
    if not isinstance(header, dict):
        return None
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            return None
        item = _ITEMSIZE.get(info.get("dtype"))
        offsets = info.get("data_offsets")
        if not item or not isinstance(offsets, list) or len(offsets) != 2:
            return None
        begin, end = offsets
        if not (type(begin) is int and type(end) is int and 0 <= begin <= end <= data_len):
            return None
        spans.append((begin, end, item))
    spans.sort()
    at = 0
    for begin, end, _ in spans:
        if begin != at:  # an overlap or a gap
            return None
        at = end
    return spans if at == data_len else None


# --- one mount path in every mode --------------------------------------------------------------
