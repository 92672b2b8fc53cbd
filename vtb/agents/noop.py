"""The baseline research agent: changes nothing, so the initial system is submitted."""

from vtb.agents import ResearchEnv, TurnResult, register
from vtb.config import AgentConfig


class NoopAgent:
    def turn(self, env: ResearchEnv) -> TurnResult:
        return TurnResult(done=True, notes="noop: submit the initial system")


@register("noop")
def make(cfg: AgentConfig) -> NoopAgent:
    return NoopAgent()
