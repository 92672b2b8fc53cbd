"""The Prefect flows: `flows.bench` (one bench) and `flows.sweep` (many).

Importing this package sets, before any flow module imports Prefect, the process defaults
Prefect reads at import time: a longer start-up wait for its ephemeral server on a busy
machine, and no analytics or tracking calls. Variables already set win.
"""

import os

os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
