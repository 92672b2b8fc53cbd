from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf.errors import ConfigKeyError, ValidationError

from vtb.build import default_run_id
from vtb.compose import to_config
from vtb.config import CONF_DIR, BenchConfig


def _compose(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="bench", overrides=list(overrides))


def test_defaults_convert_to_typed_dataclasses():
    cfg = to_config(_compose())
    assert isinstance(cfg, BenchConfig)
    assert (cfg.task.name, cfg.agent.name, cfg.model.name, cfg.sandbox.backend) == (
        "math",
        "greedy",
        "tiny",
        "bwrap",
    )
    assert cfg.budget.unit == "flops" and cfg.budget.limit > 0


def test_overrides_and_paths():
    cfg = to_config(_compose("agent=noop", "seed=1", "runs_dir=/some/dir", "trainer=lora"))
    assert cfg.agent.name == "noop" and cfg.seed == 1 and cfg.trainer.method == "lora"
    runs, cache = cfg.paths()
    assert runs == Path("/some/dir") and cache.is_absolute()
    assert default_run_id(cfg).startswith("math-noop-s1-")
    assert default_run_id(cfg) != default_run_id(to_config(_compose("agent=noop", "seed=2")))


def test_unknown_or_mistyped_keys_are_errors():
    with pytest.raises((ConfigKeyError, ValidationError)):
        to_config(_compose("+task.nonsense=1"))
    with pytest.raises(ValidationError):
        to_config(_compose("seed=abc"))


@pytest.mark.parametrize("name", sorted(p.stem for p in (Path(CONF_DIR) / "agent").glob("*.yaml")))
def test_every_agent_config_composes(name: str) -> None:
    """Each ready-made agent config is valid against AgentConfig; CLI ones name their key, their
    vendor's endpoint (the allowlist), a usage parser and the install command."""
    from vtb.agents.cli import endpoint

    agent = to_config(_compose(f"agent={name}")).agent
    assert agent.max_iterations >= 1
    if (agent.factory or agent.name) == "cli" and name != "cli":
        assert agent.command and "{prompt_file}" in agent.command
        assert endpoint(agent.base_url).endswith(":443") and agent.base_url.startswith("https://")
        assert agent.env and agent.usage != "none" and "install_agents.sh" in agent.install_hint


def test_sweep_composes_its_benches_also_inside_hydra_main():
    """`python -m flows.sweep` composes each bench while @hydra.main holds Hydra's global state."""
    from flows.sweep import SweepConfig, bench_configs

    sweep = SweepConfig(agents=["noop"], seeds=[3, 4], overrides=["budget.limit=5e12"])
    outside = bench_configs(sweep)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):  # as under @hydra.main
        inside = bench_configs(sweep)
    assert [(c.agent.name, c.seed, c.budget.limit) for c in inside] == [("noop", 3, 5e12), ("noop", 4, 5e12)]
    assert inside == outside


@pytest.mark.parametrize("name", sorted(p.stem for p in (Path(CONF_DIR) / "budget").glob("*.yaml")))
def test_every_budget_config_composes(name: str) -> None:
    """Each budget preset is valid against BudgetConfig and names a unit the ledger enforces."""
    from vtb.ledger import UNITS, Ledger

    budget = to_config(_compose(f"budget={name}")).budget
    assert budget.name == name and budget.unit in UNITS and budget.limit > 0 and budget.cpu_seconds > 0
    Ledger(budget.unit, budget.limit, budget.cpu_seconds)


def test_the_h100_preset_budgets_gpu_seconds_and_composes_with_sandbox_gpus() -> None:
    for sandbox in ("bwrap", "docker"):
        cfg = to_config(_compose("budget=h100_10h", f"sandbox={sandbox}", 'sandbox.gpus="0,1"'))
        assert (cfg.budget.unit, cfg.budget.limit, cfg.sandbox.gpus) == ("gpu_seconds", 36000, "0,1")


def test_gpu_presets_fail_before_any_work_without_a_gpu():
    from vtb.build import check_gpu_settings

    for overrides, match in [
        (["model=qwen3_1p7b"], "needs a GPU"),
        (["model=smollm3_3b"], "needs a GPU"),
        (["trainer=deepspeed_zero2"], "launches DeepSpeed"),
        (["trainer=deepspeed_zero3"], "launches DeepSpeed"),
    ]:
        cfg = to_config(_compose(*overrides))
        with pytest.raises(ValueError, match=match):
            check_gpu_settings(cfg)
        check_gpu_settings(to_config(_compose(*overrides, "sandbox.gpus=0")))  # with a GPU: fine
    check_gpu_settings(to_config(_compose("trainer=deepspeed_zero2", "trainer.deepspeed.cpu=true")))
    check_gpu_settings(to_config(_compose("engine=vllm")))  # falls back to transformers on a CPU
    with pytest.raises(ValueError, match="engine='vlm'"):
        check_gpu_settings(to_config(_compose("engine=vllm", "engine.name=vlm")))


def test_instruct_reference_presets_provision_from_the_hub_or_a_local_dir(tmp_path):
    from vtb import pipeline
    from vtb.build import reference_model_config
    from vtb.config import SandboxConfig, TaskConfig
    from vtb.models.toy import build_toy_model
    from vtb.step_requests import ModelRequest

    cfg = to_config(_compose("model=qwen3_1p7b"))
    ref = reference_model_config(cfg.model)
    assert (ref.kind, ref.hub_id, ref.reference_hub_id) == ("hub", "Qwen/Qwen3-1.7B", None)
    assert ref.name == "qwen3_1p7b-reference" and cfg.model.hub_id == "Qwen/Qwen3-1.7B-Base"
    # offline, a local model directory stands in for the hub id
    local = build_toy_model(
        tmp_path / "instruct",
        steps=2,
        n_texts=50,
        progress=lambda s: None,
        n_layer=1,
        n_embd=32,
        n_head=2,
        n_positions=64,
    )
    tiny = to_config(_compose("model=tiny")).model
    tiny.reference_hub_id = str(local)
    out = pipeline.provision_model(
        ModelRequest(
            reference_model_config(tiny), TaskConfig(), tmp_path, {}, tmp_path / "ref", SandboxConfig()
        )
    )
    from transformers import AutoModelForCausalLM

    from vtb.models.meta import count_params, read_model_info

    assert read_model_info(Path(out.base_dir))["hub_id"] == str(local)
    assert out.n_params == count_params(AutoModelForCausalLM.from_pretrained(local))
