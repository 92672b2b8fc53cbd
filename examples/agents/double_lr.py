"""A research agent in Python: each turn it doubles the trainer's learning rate.

python -m flows.bench agent=noop agent.name=double_lr +agent.module=examples.agents.double_lr
"""

import json

from vtb.agents import ResearchEnv, TurnResult, register


@register("double_lr")
class DoubleLr:
    def __init__(self, cfg):
        self.cfg = cfg  # the run's AgentConfig: options, max_iterations, ...

    def turn(self, env: ResearchEnv) -> TurnResult:
        config = json.loads(env.read_file("trainer/config.json"))
        config["lr"] = config.get("lr", 1e-3) * 2
        env.write_file("trainer/config.json", json.dumps(config, indent=1))
        return TurnResult(notes=f"lr -> {config['lr']:g}")
