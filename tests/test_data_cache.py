"""The data step's cache: its key names its folder, so a generator change never serves old splits."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from vtb import keys, pipeline
from vtb.domains.math.domain import MathConfig, MathDomain
from vtb.step_requests import DataRequest, ModelRequest


def test_a_generator_change_serves_new_splits_not_the_cached_ones(tmp_path, monkeypatch) -> None:
    """Before the fix the folder was named by the task config alone: once DONE it was reused, so
    a changed generator (a new step cache key) still got the old splits."""
    task = MathConfig(name="math", n_pool=60, n_val=10, n_test=10, initial_data_size=20)
    first = pipeline.provision_data(DataRequest(task, tmp_path))
    assert (
        pipeline.provision_data(DataRequest(task, tmp_path)) == first
    )  # unchanged code: served from the folder

    original = MathDomain.provision

    def changed_generator(self, task_cfg, out):  # a generator edit: other pool rows
        counts = original(self, task_cfg, out)
        pool = out / "research" / "pool.jsonl"
        pool.write_text("".join(reversed(pool.read_text().splitlines(keepends=True))))
        return counts

    monkeypatch.setattr(MathDomain, "provision", changed_generator)
    for module in (pipeline, keys):  # where the key is made (keys; the pipeline before)
        monkeypatch.setattr(module, "code_version", lambda *parts: "edited-domains-code", raising=False)
    second = pipeline.provision_data(DataRequest(task, tmp_path))
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
        registry.DOMAINS._items.pop("throwaway")


def test_only_the_tiny_models_key_follows_the_data_and_the_numerics():
    """The tiny model is pre-trained on the pool, in a sandbox whose thread count and code paths
    set its last bits; a converted SmolLM2 is the same for any split and sandbox."""
    from vtb.config import ModelConfig
    from vtb.keys import model_key

    one, two = {"pool": "a", "val": "b"}, {"pool": "a", "val": "c"}
    assert model_key(ModelConfig(), one, [1, True]) != model_key(ModelConfig(), two, [1, True])
    assert model_key(ModelConfig(), one, [1, True]) != model_key(ModelConfig(), one, [2, True])
    assert model_key(ModelConfig(), one, [1, True]) != model_key(ModelConfig(), one, [1, False])
    smol = ModelConfig(name="smollm2", kind="smollm2")
    assert model_key(smol, one, [1, True]) == model_key(smol, two, [2, False])


def test_a_made_base_model_is_kept_for_the_machine_and_copied_into_a_fresh_cache(
    tmp_path, monkeypatch, capsys
) -> None:
    """Issue 38: every fresh cache_dir (a new run folder, a test, a sweep) pre-trained the tiny
    model again (~50 s for the default one). It is kept machine-wide by its step key and sandbox
    shape, and a fresh cache gets the same bits without a sandbox run; a partial copy (no mark)
    is never used."""
    from vtb.config import ModelConfig, SandboxConfig
    from vtb.models.meta import read_model_info

    monkeypatch.setenv("VTB_MODEL_CACHE_DIR", str(tmp_path / "machine"))
    task = MathConfig(name="math", n_pool=60, n_val=10, n_test=10, initial_data_size=20)
    (tmp_path / "a").mkdir()
    data = pipeline.provision_data(DataRequest(task, tmp_path / "a"))
    model = ModelConfig(name="tiny", kind="tiny", n_layer=1, n_embd=32, pretrain_steps=2, pretrain_texts=50)
    key = keys.model_key(model, data.hashes, SandboxConfig().numerics(model.pretrain_threads))

    def request(cache: str) -> ModelRequest:
        return ModelRequest(model, task, data.data_dir, data.hashes, tmp_path / cache, SandboxConfig())

    first = pipeline.provision_model(request("a"))
    assert first.charge is not None and first.charge.cpu_seconds > 0  # made in a sandbox
    # pre-trained at model.pretrain_threads (2), not at the sandbox's one thread; so a run with
    # another sandbox.threads stands on the same base model (the same key, the kept copy)
    assert SandboxConfig().threads == 1 and read_model_info(Path(first.base_dir))["threads"] == 2
    wider = ModelRequest(model, task, data.data_dir, data.hashes, tmp_path / "x", SandboxConfig(threads=3))
    assert wider.key() == request("a").key() == key
    assert (
        ModelRequest(
            replace(model, pretrain_threads=1),
            task,
            data.data_dir,
            data.hashes,
            tmp_path / "x",
            SandboxConfig(),
        ).key()
        != key
    )
    [kept] = list((tmp_path / "machine").iterdir())
    assert (kept / pipeline.KEPT_MARK).is_file()
    capsys.readouterr()
    second = pipeline.provision_model(request("b"))
    said = capsys.readouterr().out
    assert second.hash == first.hash and second.charge is None and "made earlier on this machine" in said
    assert not (tmp_path / "b" / "models" / f"tiny-{key[:16]}" / pipeline.KEPT_MARK).exists()
    (kept / pipeline.KEPT_MARK).unlink()  # as if a copy had been cut short: made again
    third = pipeline.provision_model(request("c"))
    assert third.charge is not None and third.hash == first.hash
    assert (kept / pipeline.KEPT_MARK).is_file()  # the partial copy replaced by a whole one


def test_a_model_folders_stated_parameter_count_is_read_bounded_and_checked(tmp_path) -> None:
    """vtb_model.json is written in the model step's sandbox: a link, a huge file or a count
    that is not a positive integer gives no count, never an error or a bogus figure."""
    import json
    import os

    from vtb.pipeline import model_params

    def folder(name: str, content: object) -> Path:
        d = tmp_path / name
        d.mkdir()
        (d / "vtb_model.json").write_text(json.dumps(content))
        return d

    assert model_params(folder("sound", {"n_params": 1234})) == 1234
    for name, bad in [
        ("text", {"n_params": "1e9"}),
        ("neg", {"n_params": -5}),
        ("flag", {"n_params": True}),
        ("float", {"n_params": 1.5}),
        ("list", [1]),
        ("huge_n", {"n_params": 10**30}),
    ]:
        assert model_params(folder(name, bad)) is None, name
    big = tmp_path / "big"
    big.mkdir()
    (big / "vtb_model.json").write_text('{"n_params": 7, "pad": "' + "x" * (1 << 20) + '"}')
    assert model_params(big) is None
    linked = tmp_path / "linked"
    linked.mkdir()
    os.symlink(folder("target", {"n_params": 99}) / "vtb_model.json", linked / "vtb_model.json")
    assert model_params(linked) is None
    assert model_params(tmp_path / "missing") is None
