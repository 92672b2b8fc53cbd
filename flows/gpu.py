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
from uuid import UUID

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
    """The limit names of `gpus`, each created with one slot if missing (idempotent, race-safe)."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectAlreadyExists

    names = [limit_name(g, host) for g in gpus]
    with get_client(sync_client=True) as client:
        for name in names:
            try:
                client.upsert_global_concurrency_limit_by_name(name, 1)
            except ObjectAlreadyExists:  # another bench created it first
                pass
    return names


def _take(client, name: str) -> UUID | None:
    """The lease of `name`'s one slot, or None at once when another bench holds it (HTTP 423)."""
    import httpx

    try:
        response = client.increment_concurrency_slots_with_lease(
            names=[name], slots=1, mode="concurrency", lease_duration=LEASE_SECONDS
        )
    except httpx.HTTPStatusError as e:
        if e.response.status_code == 423:
            return None
        raise
    return UUID(response.json()["lease_id"])


@contextmanager
def gpu_slot(gpus: Sequence[str], host: str | None = None, poll_s: float | None = None) -> Iterator[str]:
    """Hold the Prefect slot of one of `gpus` (this machine's) and yield its id; wait while all are taken.

    The lease is renewed in the background by Prefect's own helper (the one `concurrency()`
    uses) and released at the end, failed or not.
    """
    from prefect.client.orchestration import get_client
    from prefect.concurrency._leases import maintain_concurrency_lease

    names = ensure_limits(gpus, host)
    with get_client(sync_client=True) as client:
        while True:
            for gpu, name in zip(gpus, names, strict=True):
                lease = _take(client, name)
                if lease is None:
                    continue
                try:
                    with maintain_concurrency_lease(lease, LEASE_SECONDS):
                        yield str(gpu)
                finally:
                    client.release_concurrency_slots_with_lease(lease)
                return
            time.sleep(POLL_SECONDS if poll_s is None else poll_s)
