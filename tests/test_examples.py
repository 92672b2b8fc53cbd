"""The examples of bringing your own research agent (examples/agents/, docs): each launch line
composes as documented, and each agent takes a real turn in a research sandbox (issue 39)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, bare_research_env
from vtb.agents import make_agent
from vtb.compose import check_command_line, compose_config

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "agents"


def _launch(path: Path) -> list[str]:
    """The example's documented `python -m flows.bench ...` line (with its `\\` continuation), as
    bash would split it in the checkout ($PWD = the checkout)."""
    text = re.sub(r"\\\n#?\s*", " ", path.read_text())
    line = next(x for x in text.splitlines() if "python -m flows.bench" in x)
    line = line.split("python -m flows.bench", 1)[1].replace("$PWD", str(ROOT))
    return shlex.split(line)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("example", ["double_lr.py", "double_lr.sh"])
def test_an_example_agent_composes_and_edits_the_workspace_in_a_turn(tmp_path, backend, example) -> None:
    from tests.conftest import sandbox_backend

    sandbox_backend(backend)
    args = _launch(EXAMPLES / example)
    check_command_line(args)  # as `python -m flows.bench` checks it before Hydra
    agent = compose_config(args).agent
    env, ws = bare_research_env(tmp_path, backend, trainer={"lr": 0.001})
    result = make_agent(agent).turn(env)
    assert json.loads((ws / "trainer" / "config.json").read_text())["lr"] == pytest.approx(0.002), result
    assert result.error is None
