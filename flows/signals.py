"""SIGTERM ends a bench or a sweep the way Ctrl-C does.

Schedulers stop jobs with SIGTERM (`kill`, Slurm's `scancel`, `docker stop`, a CI timeout).
Python's default action for it ends the process on the spot: no `finally`, no `atexit`. Prefect's
temporary API server is then left running (one per killed run, measured), the flow run stays
Running on a real server, and docker sandboxes wait for the next run to remove them. As a
KeyboardInterrupt, Prefect marks the runs Crashed and stops its server, and the steps' `finally`
blocks stop their sandboxes, as after Ctrl-C. Nothing cached is lost either way: a rerun resumes.
"""

from __future__ import annotations

import signal


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"stopped by signal {signum}")


def stop_on_sigterm() -> None:
    """Make SIGTERM raise KeyboardInterrupt in the main thread (call it from `__main__` only)."""
    signal.signal(signal.SIGTERM, _interrupt)
