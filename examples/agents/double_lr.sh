#!/bin/bash
# A research agent as a command: each turn it doubles the trainer's learning rate. It runs in the
# research sandbox, the workspace as its cwd, the turn's prompt file as $1 (read it for feedback).
#   python -m flows.bench agent=cli "agent.command='$PWD/examples/agents/double_lr.sh {prompt_file}'" \
#     "agent.mounts=[$PWD/examples/agents]"
python3 - <<'PY'
import json
config = json.load(open("trainer/config.json"))
config["lr"] = config.get("lr", 1e-3) * 2
json.dump(config, open("trainer/config.json", "w"), indent=1)
print("lr ->", config["lr"])
PY
