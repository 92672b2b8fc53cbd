"""The data step's cache: its key names its folder, so a generator change never serves old splits."""

from __future__ import annotations

from vtb import keys, pipeline
from vtb.domains.math.domain import MathConfig, MathDomain


def test_a_generator_change_serves_new_splits_not_the_cached_ones(tmp_path, monkeypatch) -> None:
    """Before the fix the folder was named by the task config alone: once DONE it was reused, so
    a changed generator (a new step cache key) still got the old splits."""
    task = MathConfig(name="math", n_pool=60, n_val=10, n_test=10, initial_data_size=20)
    first = pipeline.provision_data(task, tmp_path)
    assert pipeline.provision_data(task, tmp_path) == first  # unchanged code: served from the folder

    original = MathDomain.provision

    def changed_generator(self, task_cfg, out):  # a generator edit: other pool rows
        counts = original(self, task_cfg, out)
        pool = out / "research" / "pool.jsonl"
        pool.write_text("".join(reversed(pool.read_text().splitlines(keepends=True))))
        return counts

    monkeypatch.setattr(MathDomain, "provision", changed_generator)
    for module in (pipeline, keys):  # where the key is made (keys; the pipeline before)
        monkeypatch.setattr(module, "code_version", lambda *parts: "edited-domains-code", raising=False)
    second = pipeline.provision_data(task, tmp_path)
    assert second.data_dir != first.data_dir
    assert second.hashes["pool"] != first.hashes["pool"]
    assert keys.data_key(task) != "" and second.data_dir.endswith(keys.data_key(task)[:16])


def test_domains_come_from_a_registry() -> None:
    """A domain registers itself by name; `get_domain` imports `vtb/domains/<name>/domain.py` to
    find a built-in one, and names the known ones for a wrong name."""
    import pytest

    from vtb.domains import registry

    @registry.register_domain("throwaway")
    class Throwaway:
        name = "throwaway"

    try:
        assert isinstance(registry.get_domain("throwaway"), Throwaway)
        assert type(registry.get_domain("swe")).__name__ == "SweDomain"
        with pytest.raises(ValueError, match="unknown task 'no-such'.*math.*throwaway"):
            registry.get_domain("no-such")
    finally:
        registry._REGISTRY.pop("throwaway")


def test_only_the_tiny_models_key_follows_the_data():
    """The tiny model is pre-trained on the pool; a converted SmolLM2 is the same for any split."""
    from vtb.config import ModelConfig
    from vtb.keys import model_key

    one, two = {"pool": "a", "val": "b"}, {"pool": "a", "val": "c"}
    assert model_key(ModelConfig(), one) != model_key(ModelConfig(), two)
    smol = ModelConfig(name="smollm2", kind="smollm2")
    assert model_key(smol, one) == model_key(smol, two)
