"""GPUs as Prefect global concurrency limits: one limit of one slot per GPU of each machine.

A bench that needs a GPU holds the slot of one GPU of its machine while it runs, so however many
workers (and sweeps) start benches on a machine, no two run on one GPU at once; the server keeps
the count, not a queue of ours, and the UI shows it (Concurrency → Global). The slot is a lease
that the holder renews: a machine that dies gives its GPUs back when the lease runs out
(`LEASE_SECONDS`), so a bench retried elsewhere is not blocked by a dead holder.

The limit of GPU `g` on machine `host` is `vtb-gpu-<host>-<g>` (created on first use with one
slot). A machine's GPUs come from its worker's environment: `VTB_GPUS` ("0,1" or "0,1;2,3" for
benches of two GPUs each), else `CUDA_VISIBLE_DEVICES`; the machine's name from `VTB_HOST`, else
the host name.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

LEASE_SECONDS = 60.0  # a dead holder's slot is freed this long after its last renewal
POLL_SECONDS = 2.0  # between rounds of tries while every GPU of the machine is busy


def machine() -> str:
    """This machine's name in limit names: VTB_HOST, else the host name."""
    return os.environ.get("VTB_HOST") or socket.gethostname()


def worker_gpus(env: dict[str, str] | None = None) -> list[str]:
    """The GPU slots this worker's benches share: VTB_GPUS, else CUDA_VISIBLE_DEVICES, else none.

    VTB_GPUS separates slots by ';' when a bench takes several GPUs ("0,1;2,3"), else by ','.
    """
    env = os.environ if env is None else env
    spec = env.get("VTB_GPUS") or env.get("CUDA_VISIBLE_DEVICES") or ""
    sep = ";" if ";" in spec else ","
    return [s.strip() for s in spec.split(sep) if s.strip() and s.strip() != "-1"]


def limit_name(gpu: str, host: str | None = None) -> str:
    """`vtb-gpu-<host>-<gpu>`, lower case, with anything but [a-z0-9-] made '-'."""
    raw = f"vtb-gpu-{host or machine()}-{gpu}".lower()
    return re.sub(r"[^a-z0-9-]+", "-", raw)


def ensure_limits(gpus: Sequence[str], host: str | None = None) -> list[str]:
    """The limit names of `gpus`, each created with one slot if missing (idempotent)."""
    from prefect.client.orchestration import get_client

    names = [limit_name(g, host) for g in gpus]
    with get_client(sync_client=True) as client:
        for name in names:
            client.upsert_global_concurrency_limit_by_name(name, 1)
    return names


def _try(name: str, holder: dict | None):
    """The entered `concurrency` context of `name`, or None at once when its slot is taken."""
    import httpx
    from prefect.concurrency.sync import concurrency

    cm = concurrency(name, occupy=1, max_retries=0, lease_duration=LEASE_SECONDS, strict=True, holder=holder)
    try:
        cm.__enter__()
    except httpx.HTTPStatusError as e:
        if e.response.status_code == 423:  # locked: another bench holds this GPU
            return None
        raise
    return cm


@contextmanager
def gpu_slot(
    gpus: Sequence[str], host: str | None = None, poll_s: float = POLL_SECONDS, holder: dict | None = None
) -> Iterator[str]:
    """Hold the Prefect slot of one of `gpus` (this machine's) and yield its id; wait while all are taken."""
    names = ensure_limits(gpus, host)
    while True:
        for gpu, name in zip(gpus, names, strict=True):
            cm = _try(name, holder)
            if cm is None:
                continue
            try:
                yield str(gpu)
            finally:
                cm.__exit__(None, None, None)
            return
        time.sleep(poll_s)
