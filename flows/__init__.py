"""The Prefect flows: `flows.bench` (one bench) and `flows.sweep` (many).

Importing this package sets, before any flow module imports Prefect, the process defaults
Prefect reads at import time: a longer start-up wait for its ephemeral server on a busy
machine, no analytics or tracking calls, and console log times that name their zone
(`22:03:11 UTC | INFO | ...`: the UI shows the browser's local time, so an unlabelled terminal
time would be ambiguous). Variables already set win.
"""

import os

os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
for _name, _format in {
    "FORMAT": "%(asctime)s | %(levelname)-7s | %(name)s - %(message)s",
    "FLOW_RUN_FMT": "%(asctime)s | %(levelname)-7s | Flow run %(flow_run_name)r - %(message)s",
    "TASK_RUN_FMT": "%(asctime)s | %(levelname)-7s | Task run %(task_run_name)r - %(message)s",
    "DATEFMT": "%H:%M:%S %Z",
}.items():
    os.environ.setdefault(f"PREFECT_LOGGING_FORMATTERS_STANDARD_{_name}", _format)
