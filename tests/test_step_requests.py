"""Each step's parameters are declared once: in its request (vtb/step_requests.py).

Was (issue 40): four declarations per step (the bench's call, a forwarding Prefect task in
steps/tasks.py, the pipeline function, plain_steps), `play` with 11 positional parameters, and
steps/ modules importing each other. Now the pipeline function takes its request, the Prefect
task is that very function, and every request field is read by the step or by its key: a field
added and never read, or a step reading something else, fails here.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from pathlib import Path

import pytest

from vtb import pipeline, step_requests
from vtb.config import SandboxConfig, TaskConfig
from vtb.ledger import StepLimits

STEPS = {
    "provision_data": (step_requests.DataRequest, "provision_data_step"),
    "provision_model": (step_requests.ModelRequest, "provision_model_step"),
    "train": (step_requests.TrainRequest, "train_step"),
    "play": (step_requests.PlayRequest, "play_step"),
    "agent_turn": (step_requests.TurnRequest, "agent_turn_step"),
}


def _reads(fn, names: tuple[str, ...]) -> set[str]:
    """Attributes read off any of `names` in fn's source (`request.split`, `r.limits`, `self.seed`)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names
    }


@pytest.mark.parametrize("name", sorted(STEPS))
def test_a_step_takes_its_request_and_reads_every_field_of_it(name: str) -> None:
    request_type, _ = STEPS[name]
    fn = getattr(pipeline, name)
    params = list(inspect.signature(fn).parameters.values())
    assert [p.name for p in params] == ["request"], f"pipeline.{name} takes more than its request"
    assert params[0].annotation == request_type.__name__
    fields = {f.name for f in dataclasses.fields(request_type)}
    read = _reads(fn, ("request", "r"))
    assert read - fields - {"key", "out", "audit"} == set(), f"pipeline.{name} reads what its request lacks"
    own = [  # the methods and properties written in step_requests.py (not dataclass-generated)
        getattr(m, "fget", m)
        for m in vars(request_type).values()
        if getattr(getattr(m, "fget", m), "__code__", None) is not None
        and getattr(m, "fget", m).__code__.co_filename == step_requests.__file__
    ]
    by_key = set().union(*(_reads(m, ("self",)) for m in own))
    unread = fields - read - by_key
    assert not unread, f"{request_type.__name__} fields nobody reads: {sorted(unread)}"


@pytest.mark.parametrize("name", sorted(STEPS))
def test_the_prefect_task_is_the_pipeline_function_itself(name: str) -> None:
    import steps

    _, task_name = STEPS[name]
    assert getattr(steps, task_name).fn is getattr(pipeline, name)  # no forwarding layer


def test_steps_modules_do_not_import_each_other_in_a_cycle() -> None:
    root = Path(__file__).resolve().parents[1] / "steps"
    imports = {}
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        imports[path.stem] = {
            node.module.split(".")[1]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("steps.")
        }
    assert "tasks" not in imports["common"], imports  # common is the leaf; tasks builds on it
    for mod, deps in imports.items():
        for dep in deps:
            assert mod not in imports.get(dep, set()), f"steps.{mod} <-> steps.{dep}"


def test_a_play_key_is_what_the_bench_keyed_before_and_ignores_where_the_work_happens(tmp_path) -> None:
    """The key is `keys.play_key` (+ the grading cap and shard, as bench.py added them); paths
    and limits are not in it."""
    from vtb import keys
    from vtb.config import EngineConfig
    from vtb.hashing import hash_json

    task, engine = TaskConfig(), EngineConfig()
    base = dict(
        harness_dir=tmp_path / "h",
        harness_hash="hh",
        model_dir=tmp_path / "m",
        weights_key="wk",
        split="test",
        split_hash="sh",
        data_dir=tmp_path / "d",
        task=task,
        sandbox=SandboxConfig(),
        engine=engine,
        mode="null",
    )
    plain = step_requests.PlayRequest(**base)
    assert plain.key() == keys.play_key("wk", "hh", "test", "sh", "null", task, engine, [1, True])
    # the model server's numerics are in it (sandbox.server_threads, .reproducible; not `threads`)
    for other in (SandboxConfig(server_threads=2), SandboxConfig(reproducible=False)):
        assert step_requests.PlayRequest(**{**base, "sandbox": other}).key() != plain.key()
    assert step_requests.PlayRequest(**{**base, "sandbox": SandboxConfig(threads=4)}).key() == plain.key()
    graded = step_requests.PlayRequest(**base, flops_per_episode=5.0, shard=3)
    old = hash_json([hash_json([plain.key(), "flops-per-episode", 5.0]), "shard", 3])
    assert graded.key() == old
    moved = step_requests.PlayRequest(
        **{**base, "harness_dir": tmp_path / "x", "data_dir": "/elsewhere"}, limits=StepLimits(1.0, 2.0)
    )
    assert moved.key() == plain.key() and isinstance(moved.data_dir, Path)


def test_a_train_key_holds_the_trainers_numerics_not_its_paths(tmp_path) -> None:
    """A checkpoint's last bits follow the trainer sandbox's thread count and pinned code paths
    (vtb/repro.py): a run with another `sandbox.threads` trains again rather than reusing it."""
    base = dict(
        snapshot_dir=tmp_path / "s",
        parts={"data": "d", "trainer": "t", "harness": "h"},
        base_dir=tmp_path / "b",
        base_hash="bh",
        seed=0,
        cache=tmp_path / "c",
        sandbox=SandboxConfig(threads=1),
    )
    plain = step_requests.TrainRequest(**base).key()
    for other in (SandboxConfig(threads=2), SandboxConfig(threads=1, reproducible=False)):
        assert step_requests.TrainRequest(**{**base, "sandbox": other}).key() != plain
    same = {**base, "snapshot_dir": tmp_path / "x", "parts": {**base["parts"], "harness": "other"}}
    assert step_requests.TrainRequest(**same, limits=StepLimits(1.0, 2.0)).key() == plain
