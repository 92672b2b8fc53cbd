"""Typed configs from Hydra's: the one place a DictConfig becomes dataclasses (vtb/config.py).

The task node is typed by its domain's own config class (a `TaskConfig` subclass, the `config`
of the registered domain), so conf/task/<name>.yaml and `task.<field>=` overrides are checked
against that domain's fields: a field another domain has is an error that names it.
"""

from __future__ import annotations

from typing import Any

from vtb.config import CONF_DIR, BenchConfig, TaskConfig
from vtb.domains.registry import domain_config


def to_config(cfg: Any) -> BenchConfig:
    """A composed config (a DictConfig or a plain dict) as typed dataclasses, validated."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(cfg) if isinstance(cfg, dict) else cfg
    schema = OmegaConf.structured(BenchConfig)
    schema.task = OmegaConf.structured(domain_config(OmegaConf.select(cfg, "task.name", default="math")))
    return OmegaConf.to_object(OmegaConf.merge(schema, cfg))


def compose_config(overrides: list[str] = (), name: str = "bench") -> BenchConfig:
    """conf/<name>.yaml with Hydra overrides, as `python -m flows.bench <overrides>` would see it."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():  # inside @hydra.main or an outer compose
        return to_config(compose(config_name=name, overrides=list(overrides)))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return to_config(compose(config_name=name, overrides=list(overrides)))


def task_config(name: str, **fields: Any) -> TaskConfig:
    """The task config of domain `name` (its own class) from plain values."""
    return domain_config(name)(name=name, **fields)
