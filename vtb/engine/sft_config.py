"""The SFT trainer's config: defaults, and validation that names what is wrong.

The research agent edits trainer/config.json by hand; a typo such as "learning_rate" must
fail loudly instead of silently training with the default.
"""

from __future__ import annotations

import copy

DEFAULTS: dict = {
    "method": "full",  # full | lora
    "lr": 1e-3,
    "epochs": 1,
    "max_steps": None,  # caps the number of optimiser steps
    "batch_size": 32,
    "weight_decay": 0.0,
    "warmup_steps": 0,
    "lr_schedule": "constant",  # constant | linear | cosine
    "max_length": 256,
    # Prompts wrapped in the base model's chat template (one user turn; the completion is the
    # assistant's): true | false | "auto" (wrap when the tokenizer has a template). A harness must
    # prompt the same way (vtb.serve.client ModelClient.user_prompts).
    "chat_template": False,
    "seed": 0,
    "lora": {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": None},
    "deepspeed": None,  # or {"stage": 2|3, "gpus": N, "precision": ..., "offload_optimizer": ...}
}
DEEPSPEED_DEFAULTS: dict = {
    "stage": 2,
    "gpus": 1,
    "precision": "bf16",
    "offload_optimizer": False,
    "cpu": False,
}
PRECISIONS = ("bf16", "fp16", "fp32")
METHODS = ("full", "lora")
SCHEDULES = ("constant", "linear", "cosine")


class ConfigError(ValueError):
    """A trainer config the trainer cannot run; the message says which key and what is allowed."""


def _check_keys(given: dict, allowed: dict, where: str) -> None:
    for key in given:
        if key not in allowed:
            raise ConfigError(f"unknown {where} key {key!r}; allowed keys: {', '.join(sorted(allowed))}")


def _number(cfg: dict, key: str, kind: type, minimum: float) -> None:
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and value != int(value)):
        raise ConfigError(f"{key} must be a{'n integer' if kind is int else ' number'}, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{key} must be >= {minimum}, got {value!r}")
    cfg[key] = kind(value)


def resolve_config(config: dict | None) -> dict:
    """Defaults filled in, types checked; raises ConfigError naming the offending key."""
    config = dict(config or {})
    _check_keys(config, DEFAULTS, "trainer config")
    cfg = copy.deepcopy(DEFAULTS)
    deepspeed = config.pop("deepspeed", None)
    lora = config.pop("lora", None) or {}
    if not isinstance(lora, dict):
        raise ConfigError(f"lora must be an object with keys {', '.join(sorted(DEFAULTS['lora']))}")
    _check_keys(lora, DEFAULTS["lora"], "lora")
    cfg.update(config)
    cfg["lora"].update(lora)
    cfg["deepspeed"] = _deepspeed(deepspeed)
    if cfg["method"] not in METHODS:
        raise ConfigError(f"method must be one of {', '.join(METHODS)}, got {cfg['method']!r}")
    if cfg["lr_schedule"] not in SCHEDULES:
        raise ConfigError(f"lr_schedule must be one of {', '.join(SCHEDULES)}, got {cfg['lr_schedule']!r}")
    for key, kind, minimum in [
        ("lr", float, 0.0),
        ("epochs", int, 1),
        ("batch_size", int, 1),
        ("weight_decay", float, 0.0),
        ("warmup_steps", int, 0),
        ("max_length", int, 2),
        ("seed", int, 0),
    ]:
        _number(cfg, key, kind, minimum)
    if cfg["max_steps"] is not None:
        _number(cfg, "max_steps", int, 1)
    if not (isinstance(cfg["chat_template"], bool) or cfg["chat_template"] == "auto"):
        raise ConfigError(f'chat_template must be true, false or "auto", got {cfg["chat_template"]!r}')
    for key, kind, minimum in [("r", int, 1), ("alpha", float, 0.0), ("dropout", float, 0.0)]:
        _number(cfg["lora"], key, kind, minimum)
    targets = cfg["lora"]["target_modules"]
    if targets is not None and not (isinstance(targets, list) and all(isinstance(t, str) for t in targets)):
        raise ConfigError(f"lora.target_modules must be null or a list of module names, got {targets!r}")
    return cfg


def _deepspeed(given: dict | None) -> dict | None:
    if given is None:
        return None
    if not isinstance(given, dict):
        raise ConfigError(f"deepspeed must be null or an object with keys {', '.join(DEEPSPEED_DEFAULTS)}")
    _check_keys(given, DEEPSPEED_DEFAULTS, "deepspeed")
    ds = {**DEEPSPEED_DEFAULTS, **given}
    if ds["stage"] not in (2, 3):
        raise ConfigError(f"deepspeed.stage must be 2 or 3 (ZeRO-2 or ZeRO-3), got {ds['stage']!r}")
    _number(ds, "gpus", int, 1)
    if ds["precision"] not in PRECISIONS:
        raise ConfigError(
            f"deepspeed.precision must be one of {', '.join(PRECISIONS)}, got {ds['precision']!r}"
        )
    for key in ("offload_optimizer", "cpu"):
        if not isinstance(ds[key], bool):
            raise ConfigError(f"deepspeed.{key} must be true or false, got {ds[key]!r}")
    return ds
