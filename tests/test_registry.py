"""One registry idiom (vtb/registry.py): a research agent, a sandbox backend and a domain added by a
throwaway package outside the repository, through its entry points alone, each then used (issue 40)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import bare_research_env, needs_bwrap

PACKAGE = {
    "outside_pkg/__init__.py": "",
    "outside_pkg/agent.py": """
        import json
        from vtb.agents import TurnResult

        class HalveLr:  # registered by the entry point alone: no decorator, no edit to vtb
            def __init__(self, cfg):
                self.cfg = cfg

            def turn(self, env):
                config = json.loads(env.read_file("trainer/config.json"))
                config["lr"] = config["lr"] / 2
                env.write_file("trainer/config.json", json.dumps(config))
                return TurnResult(notes="halved")
    """,
    "outside_pkg/sandbox.py": """
        from vtb.sandbox.bwrap import BwrapSandbox

        class TaggedSandbox(BwrapSandbox):
            tag = "outside"
    """,
    "outside_pkg/domain.py": """
        from vtb.domains.math.domain import MathDomain
        from vtb.domains.registry import register_domain

        @register_domain("outside_math")  # a module that registers itself on import
        class OutsideMath(MathDomain):
            pass
    """,
    "outside_pkg-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: outside-pkg\nVersion: 0.1\n",
    "outside_pkg-0.1.dist-info/entry_points.txt": """
        [vtb.agents]
        halve_lr = outside_pkg.agent:HalveLr

        [vtb.sandboxes]
        tagged = outside_pkg.sandbox:TaggedSandbox

        [vtb.domains]
        outside_math = outside_pkg.domain
    """,
}


@pytest.fixture
def outside_package(tmp_path, monkeypatch):
    root = tmp_path / "site"
    for rel, text in PACKAGE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text).lstrip())
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in [m for m in sys.modules if m.startswith("outside_pkg")]:
        del sys.modules[name]


@needs_bwrap()
def test_an_outside_package_adds_an_agent_a_sandbox_and_a_domain_by_entry_point(
    tmp_path, outside_package
) -> None:
    from vtb import pipeline
    from vtb.agents import AGENTS, make_agent
    from vtb.compose import task_config
    from vtb.config import AgentConfig
    from vtb.domains.registry import DOMAINS, get_domain
    from vtb.sandbox import SANDBOXES, make_sandbox, runtime_mounts
    from vtb.sandbox.base import Limits
    from vtb.step_requests import DataRequest

    try:
        assert {"halve_lr"} <= set(AGENTS.names()) and "tagged" in SANDBOXES.names()
        env, ws = bare_research_env(tmp_path, "bwrap", trainer={"lr": 0.002})
        assert make_agent(AgentConfig(name="halve_lr")).turn(env).notes == "halved"
        assert json.loads((ws / "trainer" / "config.json").read_text())["lr"] == pytest.approx(0.001)

        sandbox = make_sandbox("tagged", threads=1)
        assert sandbox.tag == "outside"
        ran = sandbox.run(["/bin/echo", "inside"], mounts=runtime_mounts(), limits=Limits(wall_seconds=30))
        assert ran.returncode == 0 and ran.stdout.strip() == "inside"

        assert type(get_domain("outside_math")).__name__ == "OutsideMath"
        task = task_config("outside_math", n_pool=40, n_val=5, n_test=5, initial_data_size=10)
        (tmp_path / "cache").mkdir()
        data = pipeline.provision_data(DataRequest(task, tmp_path / "cache"))
        assert data.counts == {"pool": 40, "val": 5, "test": 5}, data.counts
        with pytest.raises(ValueError, match="unknown agent 'no_such'.*halve_lr"):
            AGENTS.get("no_such")
    finally:
        AGENTS._items.pop("halve_lr", None)
        SANDBOXES._items.pop("tagged", None)
        DOMAINS._items.pop("outside_math", None)


OUTSIDE_KINDS = {
    "kinds_pkg/__init__.py": "",
    "kinds_pkg/engine.py": """
        from vtb.engine.infer import Engine

        class Loud(Engine):  # an outside engine: the project's decoder, upper-casing what it writes
            name = "loud"

            def generate(self, prompts, **kw):
                return [t.upper() for t in super().generate(prompts, **kw)]

        def make(model_dir, *, options, threads, safetensors_only):
            return Loud(model_dir, threads=threads, safetensors_only=safetensors_only)
    """,
    "kinds_pkg/model.py": """
        import shutil
        from vtb.pipeline import MODEL_KINDS, ModelKind

        SOURCE = None  # set by the test: a Hugging Face model folder on disk

        def copy(model, task, data_dir, dest, sandbox_cfg, echo):
            shutil.copytree(SOURCE, dest)  # a model kind of one's own: here, a local folder

        MODEL_KINDS.register("local_copy")(ModelKind(copy, deterministic=False))
    """,
    "kinds_pkg-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: kinds-pkg\nVersion: 0.1\n",
    "kinds_pkg-0.1.dist-info/entry_points.txt": """
        [vtb.engines]
        loud = kinds_pkg.engine:make

        [vtb.models]
        local_copy = kinds_pkg.model
    """,
}


def test_an_outside_package_adds_an_engine_and_a_model_kind_by_entry_point(
    tmp_path, monkeypatch, toy_model_dir
) -> None:
    """The two other named kinds, `engine=` and `model.kind=`, come through the same registry:
    an outside package's entry points alone add them, and the engine selection and the model
    step then use them (issue 40: one registry idiom for all five kinds)."""
    from vtb import pipeline
    from vtb.config import ModelConfig, SandboxConfig
    from vtb.engine.select import ENGINES, engine_env, open_engine
    from vtb.step_requests import ModelRequest

    root = tmp_path / "site"
    for rel, text in OUTSIDE_KINDS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text).lstrip())
    monkeypatch.syspath_prepend(str(root))
    try:
        assert "loud" in ENGINES.names() and "local_copy" in pipeline.MODEL_KINDS.names()
        env = engine_env("loud")
        monkeypatch.setenv("VTB_ENGINE", env["VTB_ENGINE"])
        engine = open_engine(toy_model_dir, threads=1)
        assert type(engine).__name__ == "Loud"
        (text,) = engine.generate(["Q: 1 + 1 =\nA:"], max_new_tokens=4)
        assert text == text.upper()

        import kinds_pkg.model

        kinds_pkg.model.SOURCE = toy_model_dir
        model = ModelConfig(name="copied", kind="local_copy")
        request = ModelRequest(model, None, tmp_path, {}, tmp_path / "cache", SandboxConfig())
        made = pipeline.provision_model(request)
        assert (Path(made.base_dir) / "config.json").is_file() and made.n_params > 0
        with pytest.raises(ValueError, match="model.kind='no_such'.*local_copy"):
            pipeline.model_kind("no_such")
    finally:
        ENGINES._items.pop("loud", None)
        pipeline.MODEL_KINDS._items.pop("local_copy", None)
        for name in [m for m in sys.modules if m.startswith("kinds_pkg")]:
            del sys.modules[name]
