"""The test-split secret: the salt the hidden test split is drawn with (orchestrator only).

Pool and val are pure functions of the public `task.data_seed` (anyone can rebuild them, as
they can read them). The embedded test split, and the hidden part of a real data set that has
no official held-out split, are drawn with a seed derived from sha256(salt, data_seed), so the
generator code and the public seed alone cannot rebuild it. This module is not in the sandbox
layout (vtb.sandbox.runtime.SANDBOX_CODE), so no sandbox can read the default either.

Where the salt comes from, first one set wins:
  task.test_salt        inline; replaced at config load by "sha256:<hex>" (TaskConfig.__post_init__),
                        the value kept only in this process's memory, so config.json, cache keys
                        and logs hold the hash. Handy for a one-off; a file or the env var is
                        better for a leaderboard (nothing in the command line or shell history).
  task.test_salt_file   a file holding it (first line); the path is recorded, never the content.
  $VTB_TEST_SALT        the orchestrator's environment (sandboxes never inherit it).
  DEFAULT_TEST_SALT     below: the PUBLIC test split.

Why a fixed, published default: the README figures must reproduce on any machine from a clean
clone, which needs every machine to draw the same test split. But anyone who reads this
repository (a person, or a model trained on it) can rebuild that split with its answers, so a
run on it is recorded as a "public" test split (`test_split` in result.json, the summary and the
leaderboard, which never ranks it with hidden-split runs). Where scores are compared (sweeps,
the nightly deployment) the test split is hidden by default: drawn with this installation's own
salt (`installation_salt`: random, created on first use in the user's state folder, mode 0600,
outside the checkout and outside every sandbox), unless one is given above. A leaderboard's owner
sets their own salt and publishes only its sha256 (`test_salt_sha256` in the manifest).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import random
import secrets
from pathlib import Path

DEFAULT_TEST_SALT = "vtb-default-test-salt:7f3c1e0a9b5d4c2e8a6f"
ENV_VAR = "VTB_TEST_SALT"
SEALED = "sha256:"
MAX_SALT_BYTES = 4096

# "sha256:<hex>" -> an inline salt given in this process (never written anywhere).
_INLINE: dict[str, str] = {}


def sha256(salt: str) -> str:
    return hashlib.sha256(salt.encode()).hexdigest()


def seal(value: str | None) -> str | None:
    """An inline salt as "sha256:<hex>", remembered in memory; None and sealed values pass through."""
    if value is None or value.startswith(SEALED):
        return value
    if not value:
        raise ValueError("task.test_salt must not be empty (leave it null for the default)")
    sealed = SEALED + sha256(value)
    _INLINE[sealed] = value
    return sealed


def resolve(task) -> str:
    """The salt for `task` (a TaskConfig): inline, file, environment, default; never logged."""
    inline = getattr(task, "test_salt", None)
    if inline:
        if inline not in _INLINE:
            raise ValueError(
                "task.test_salt holds only the hash of a salt given inline in another process; give the "
                f"salt again (task.test_salt=..., task.test_salt_file=... or ${ENV_VAR})"
            )
        return _INLINE[inline]
    path = getattr(task, "test_salt_file", None)
    if path:
        if not Path(path).expanduser().is_file():
            raise ValueError(
                f"task.test_salt_file={path} does not exist on this machine: copy the salt file there "
                f"(every machine of a sweep needs the same one), or set ${ENV_VAR}"
            )
        raw = Path(path).expanduser().read_bytes()[:MAX_SALT_BYTES]
        salt = raw.decode("utf-8", "strict").splitlines()[0].strip() if raw.strip() else ""
        if not salt:
            raise ValueError(f"task.test_salt_file={path} holds no salt")
        return salt
    return os.environ.get(ENV_VAR) or DEFAULT_TEST_SALT


def salt_sha256(task) -> str:
    """The sha256 of the task's salt: what the run record and the data cache key hold."""
    return sha256(resolve(task))


PUBLIC_SHA256 = sha256(DEFAULT_TEST_SALT)


def split_kind(salt_hash: str) -> str:
    """ "public" for the published default salt (anyone can rebuild that split), else "hidden"."""
    return "public" if salt_hash == PUBLIC_SHA256 else "hidden"


def given(task) -> bool:
    """Whether the task names a salt of its own (inline, file or $VTB_TEST_SALT)."""
    return bool(
        getattr(task, "test_salt", None) or getattr(task, "test_salt_file", None) or os.environ.get(ENV_VAR)
    )


def state_dir() -> Path:
    """This installation's private state: $VTB_STATE_DIR, else $XDG_STATE_HOME/vtb, else ~/.local/state/vtb."""
    if os.environ.get("VTB_STATE_DIR"):
        return Path(os.environ["VTB_STATE_DIR"]).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base).expanduser() / "vtb"


def installation_salt() -> Path:
    """The file of this installation's test salt, made on first use (256 random bits, mode 0600).

    Never inside the checkout (a research sandbox mounts the project's code) and never mounted
    into a sandbox; only its sha256 is recorded. Two machines of one sweep must share it (copy
    the file, or set $VTB_TEST_SALT on both): the sweep checks every bench's salt hash.
    """
    path = state_dir() / "test_salt"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first: use theirs
            return path
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
    return path


def seed_for(salt: str, data_seed: int, scope: str = "test") -> int:
    """sha256(salt, data_seed, scope) as a 64-bit integer: the seed of a hidden split."""
    text = f"{salt}\0{data_seed}\0{scope}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def hidden_seed(task, scope: str = "test") -> int:
    """The seed of the task's hidden split (its salt and its public data_seed)."""
    return seed_for(resolve(task), task.data_seed, scope)


def cut_records(records: list, task) -> tuple[list, list, list]:
    """(test, val, pool) of a real data set cut three ways (no official held-out split used).

    Val is the first n_val records of the public `data_seed` shuffle; the test split is n_test
    records of the rest drawn with the salted seed; the pool is what is left, so it depends on
    the salt too (a partition of one set cannot keep pool and test independent of each other).
    """
    records = list(records)
    random.Random(task.data_seed).shuffle(records)
    val, rest = records[: task.n_val], records[task.n_val :]
    random.Random(hidden_seed(task)).shuffle(rest)
    return rest[: task.n_test], val, rest[task.n_test :]


# --- canaries ----------------------------------------------------------------------------------
# A canary is a random-looking string carried in every item of a split (a field the graders never
# read), derived from the salt: a research sandbox cannot compute it, and it cannot copy it
# without having the split's items. Its appearance anywhere in a submission is therefore a
# certain sign that the submission was made from those items (vtb/contamination.py).

CANARY_FIELD = "canary"
CANARY_PREFIX = "VTB-CANARY-"
CANARY_HEX = 32  # 128 bits: no chance collision


def canary(salt: str, data_seed: int, task_name: str, split: str) -> str:
    """The split's canary: "VTB-CANARY-" + hmac-sha256(salt, task, data_seed, split), 32 hex digits.

    Keyed by the salt (which no sandbox sees), so neither the public seed nor the code gives it,
    and each split's differs: the public val canary of a domain that shows val in full tells
    nothing of the test canary.
    """
    text = f"vtb-canary\0{task_name}\0{data_seed}\0{split}"
    digest = hmac.new(salt.encode(), text.encode(), hashlib.sha256).hexdigest()
    return CANARY_PREFIX + digest[:CANARY_HEX]


def canary_of(task, split: str) -> str:
    """The canary of `split` ("test" or "val") for a task config."""
    return canary(resolve(task), task.data_seed, task.name, split)


def full_split_file(data_dir: Path, split: str) -> Path | None:
    """Where a data dir keeps `split` in full (the layout of vtb/domains/common.py), if it does.

    test: hidden/test.jsonl. val: hidden/val.jsonl where the research side sees only ids and
    templates (tau, terminal, swe), else research/val.jsonl (math shows val in full).
    """
    if split == "test":
        candidates = [data_dir / "hidden" / "test.jsonl"]
    else:
        candidates = [data_dir / "hidden" / f"{split}.jsonl", data_dir / "research" / f"{split}.jsonl"]
    return next((p for p in candidates if p.is_file()), None)


def plant_canaries(data_dir: Path, task) -> dict[str, str]:
    """Add the canary field to every item of the hidden test and val splits under data_dir (in place).

    Called once on a freshly provisioned data dir (vtb/pipeline.py), before anything reads it.
    Graders and start messages read named fields, so what is graded is unchanged; only a copy
    of the items themselves carries the field. A split the research side reads in full (math's
    val, in research/) gets none: a canary there would prove nothing, and pool and val stay pure
    functions of the public seed. Returns {split: file relative to data_dir}.
    """
    planted = {}
    for split in ("test", "val"):
        path = full_split_file(data_dir, split)
        if path is None or path.parent.name != "hidden":
            continue
        mark = canary_of(task, split)
        lines = []
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            if isinstance(item, dict):
                item[CANARY_FIELD] = mark
            lines.append(json.dumps(item))
        path.write_text("".join(f"{line}\n" for line in lines))
        planted[split] = str(path.relative_to(data_dir))
    return planted
