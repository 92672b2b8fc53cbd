"""The baseline research agent: changes nothing, so the initial system is submitted."""

from vtb.agents import ResearchEnv, TurnResult, register


class NoopAgent:
    def turn(self, env: ResearchEnv) -> TurnResult:
        return TurnResult(done=True, notes="noop: submit the initial system")


@register("noop")
def make(options: dict) -> NoopAgent:
    return NoopAgent()
