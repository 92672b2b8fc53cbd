"""SIGTERM ends a bench or a sweep the way Ctrl-C does, and Ctrl-C ends it now.

Schedulers stop jobs with SIGTERM (`kill`, Slurm's `scancel`, `docker stop`, a CI timeout).
Python's default action for it ends the process on the spot: no `finally`, no `atexit`. Prefect's
temporary API server was then left running (one per stopped run, measured) and docker sandboxes
waited for the next run to remove them. As a KeyboardInterrupt, Prefect marks the run Crashed and
the exit hooks run: Prefect stops its server, vtb.sandbox.docker removes this process's containers.

Steps and an inline sweep's benches run in worker threads, which Python joins at exit: a stopped
sweep would wait for its running benches to end. So after the interrupt the exit hooks run here
and the process leaves at once; bwrap sandboxes die with it (--die-with-parent). Nothing cached
is lost: a rerun resumes from the finished steps.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
from collections.abc import Callable

INTERRUPTED = 130  # the shell's code for a process ended by SIGINT
REFUSED = 2  # a run refused before any work (preflight): the config or the data must change
ERRORED = 3  # a run that could not do what it was asked (vtb.bench.RunError): no score, its record says why


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"stopped by signal {signum}")


def stop_on_sigterm() -> None:
    """Make SIGTERM raise KeyboardInterrupt in the main thread (call it from `__main__` only)."""
    signal.signal(signal.SIGTERM, _interrupt)


def run_main(main: Callable[[], object]) -> None:
    """Run a command-line entry point; stopped by Ctrl-C or SIGTERM, clean up and exit now."""
    stop_on_sigterm()
    try:
        main()
    except KeyboardInterrupt as e:
        print(f"interrupted ({e or 'Ctrl-C'}): cleaning up and exiting; a rerun resumes", file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
        atexit._run_exitfuncs()  # Prefect's temporary server, docker sandboxes: not the worker threads
        os._exit(INTERRUPTED)


def refuse(reason: BaseException) -> None:
    """End a command refused before any work: its reason (which names the fix) once, exit REFUSED.

    A SystemExit, so Hydra and Prefect print no traceback over it; nothing was spent."""
    print(f"refused: {reason}", file=sys.stderr)
    sys.stderr.flush()
    raise SystemExit(REFUSED)
