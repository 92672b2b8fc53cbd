"""Adding a domain is one folder plus one config file, with nothing else edited.

The throwaway domain in tests/throwaway_domain/ (reverse a word) is copied to vtb/domains/<name>/
and its task.yaml to conf/task/<name>.yaml, as a contributor would add them; then a whole bench
runs on it with the real steps (sandboxed base-model build, training, play, grading, the null-model
check, the report) and the greedy agent working from the domain's own proposals and prompt.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import vtb
from tests.conftest import needs_bwrap
from vtb.config import CONF_DIR

NAME = "vtbtest_reverse"
TEMPLATE = Path(__file__).parent / "throwaway_domain"


@pytest.fixture
def new_domain():
    folder, conf = Path(vtb.__file__).parent / "domains" / NAME, CONF_DIR / "task" / f"{NAME}.yaml"
    assert not folder.exists() and not conf.exists()
    try:
        shutil.copytree(TEMPLATE, folder, ignore=shutil.ignore_patterns("task.yaml", "__pycache__"))
        conf.write_text((TEMPLATE / "task.yaml").read_text().replace("name: NAME", f"name: {NAME}"))
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        conf.unlink(missing_ok=True)


@needs_bwrap()
@pytest.mark.slow  # a whole bench with the real steps on a 1-layer model (~40 s)
def test_a_new_domain_is_one_folder_and_one_config(tmp_path, new_domain) -> None:
    from vtb.agents.prompt import template_digest
    from vtb.bench import Bench, plain_steps
    from vtb.compose import compose_config
    from vtb.config import AgentConfig
    from vtb.domains.registry import get_domain

    cfg = compose_config(
        [
            f"task={NAME}",
            "agent=greedy",
            "agent.max_iterations=2",
            "model.n_layer=1",
            "model.n_embd=32",
            "model.pretrain_steps=5",
            "model.pretrain_texts=60",
            "+budget.flops_per_cpu_second=1e9",
            "base_model_check=false",
            "analysis.grid=false",  # domain-blind: checked on the math e2e run
            "analysis.path=false",
            f"runs_dir={tmp_path / 'runs'}",
            f"cache_dir={tmp_path / 'cache'}",
        ]
    )
    assert get_domain(NAME).name == NAME and type(cfg.task).__name__ == "ReverseConfig"
    assert cfg.task.word_length == 5  # its own field, from its conf/task file
    assert template_digest(AgentConfig(), NAME) != template_digest(
        AgentConfig(), "no-such-task"
    )  # its prompt
    result = Bench(cfg, plain_steps()).run().to_json()
    assert result["initial"]["test_score"] < 0.5  # the tiny model cannot reverse words ...
    assert (
        result["submitted"]["iteration"] == 1 and result["submitted"]["test_score"] == 1.0
    )  # ... its rule can
    assert result["submitted"]["flagged_by_null_model"] is True  # and the null model scores as well
    assert result["reference"]["test_score"] == 1.0
    record = Path(result["record"])
    notes = [json.loads((record / "iterations" / f"0{i}.json").read_text())["notes"] for i in (1, 2)]
    assert notes[0].startswith("greedy: rule (harness)") and notes[1].startswith("greedy: train-longer")
    grading = json.loads((record / "grading.json").read_text())
    assert grading["submitted"]["metrics"] == {"reversed": 8.0}
    samples = json.loads((record / "private" / "samples.json").read_text())["submitted"]
    assert all(len(s["action"]["content"]) == 5 for s in samples)


@pytest.mark.parametrize("domain", ["math", "tau", "terminal", "swe"])
def test_every_domain_provides_the_greedy_agents_proposals_and_the_task_prompt(domain) -> None:
    from vtb.agents.greedy import DOMAINS, proposals_of

    plan = proposals_of(domain)
    assert {p.part for p in plan} == {"data", "trainer", "harness"}  # co-design: every part
    for p in plan:
        assert [p.run is not None, p.harness is not None, p.trainer is not None].count(True) == 1, p
        if p.harness:
            assert (DOMAINS / domain / "kit" / "harnesses" / p.harness / "harness.py").is_file()
        if p.run:
            assert f"vtb.domains.{domain}.kit." in p.run and "{seed}" in p.run
    assert (DOMAINS / domain / "prompt.md").read_text().strip()
    assert proposals_of("no-such-domain") == [] and proposals_of("../math") == []
