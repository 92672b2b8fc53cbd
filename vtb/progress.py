"""The bench's progress lines, through one logger that both the console and Prefect's run log read.

Why a logger rather than print: the flow layer (flows/bench.py) adds a handler to `LOGGER` that
sends each line to the Prefect run's log, so the UI's Logs tab reads like the terminal from the
same call, while the core stays free of Prefect. The console handler prints through `sys.stdout`
as it is when the line is written (pytest's capture, a redirected stream), as `print` did.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable

LOGGER = logging.getLogger("vtb.progress")


class _Console(logging.Handler):
    """Each line to the current `sys.stdout`, unformatted: the terminal shows what it showed before."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(record.getMessage(), file=sys.stdout, flush=True)
        except Exception:  # noqa: BLE001 (a closed stream must not fail the bench)
            self.handleError(record)


if not any(isinstance(h, _Console) for h in LOGGER.handlers):
    LOGGER.addHandler(_Console())
LOGGER.setLevel(logging.INFO)
LOGGER.propagate = False  # not also through the root logger's handlers (Hydra's, Prefect's)


def say(line: str) -> None:
    """One progress line: to the console, and to every handler the flow layer added (Prefect's run log)."""
    LOGGER.info(line)


EVERY_SECONDS = 10.0  # the rate of repeated progress lines (episodes over): the Logs tab stays readable


def every(line: Callable[[int, int], str], seconds: float = EVERY_SECONDS) -> Callable[[int, int], None]:
    """A progress callback `(done, total)` that says `line(done, total)` at most every `seconds`,
    and always once when done reaches total: the end is never left out."""
    last = [float("-inf")]

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if done >= total or now - last[0] >= seconds:
            last[0] = now
            say(line(done, total))

    return report
