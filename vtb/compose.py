"""Typed configs from Hydra's: the one place a DictConfig becomes dataclasses (vtb/config.py).

The task node is typed by its domain's own config class (a `TaskConfig` subclass, the `config`
of the registered domain), so conf/task/<name>.yaml and `task.<field>=` overrides are checked
against that domain's fields: a field another domain has is an error that names it.
"""

from __future__ import annotations

from typing import Any

from vtb.config import CONF_DIR, BenchConfig, TaskConfig
from vtb.domains.registry import domain_config


def typed(schema: type, cfg: Any) -> Any:
    """A composed config as the dataclass `schema` (every key checked against its fields)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), cfg))


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


QUOTING = "a value with spaces, `=`, braces or brackets is quoted twice, for the shell and for Hydra: \"key='a b {c}'\""
# Hydra's own command-line flags: a command line with one is left to Hydra
HYDRA_FLAGS = {
    "--help", "-h", "--hydra-help", "--version", "--cfg", "-c", "--resolve", "--package", "-p",
    "--run", "-r", "--shell-completion", "-sc", "--config-path", "-cp", "--config-name", "-cn",
    "--config-dir", "-cd", "--info", "-i", "--experimental-rerun",
}  # fmt: skip


def check_command_line(args: list[str], name: str = "bench") -> None:
    """Compose `python -m flows.<name> <args>` once before Hydra does, and raise a ValueError that
    names a mistyped key or option with the closest valid ones, instead of Hydra's hint to add
    it with `+` (which then fails on the typed config) or a traceback.

    A multirun (`-m`) is checked on each sweep's first value; Hydra's own flags and hydra.* keys
    are left to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    if any(a.split("=", 1)[0] in HYDRA_FLAGS for a in args):
        return  # --help, --cfg, --info ...: Hydra's
    stray = [a for a in args if a.startswith("-") and a not in ("-m", "--multirun")]
    if stray:
        raise ValueError(f"{stray[0]} is neither an override (key=value) nor a Hydra flag: {QUOTING}")
    overrides = [a for a in args if a not in ("-m", "--multirun")]
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as e:
        raise ValueError(f"{_first_line(e)}: {QUOTING}") from None
    firsts = []
    for o in parsed:
        key = o.get_key_element()
        if key.lstrip("+~").startswith("hydra"):
            continue
        value = next(iter(o.sweep_iterator())) if o.is_sweep_override() else o.value()
        firsts.append(o.input_line if not o.is_sweep_override() else f"{key}={_as_override(value)}")
    try:
        if name == "bench":
            _no_booleans_as_text(parsed, compose_config(firsts))
            inner = []
        else:
            sweep = _compose_other(name, firsts)
            inner = list(sweep.get("overrides") or [])
            if inner:  # each bench is composed with its task and agent first (flows/sweep.py)
                inner = [f"task={sweep.tasks[0]}", f"agent={sweep.agents[0]}", *inner]
    except (HydraException, OmegaConfBaseException, ValueError, TypeError) as e:
        raise ValueError(_explain(e, firsts, name)) from None
    if inner:  # a sweep's overrides for every bench: checked as a bench's command line
        try:
            check_command_line([str(o) for o in inner], "bench")
        except ValueError as e:
            raise ValueError(f"in overrides: {e}") from None


def _no_booleans_as_text(parsed: list, cfg: BenchConfig) -> None:
    """Refuse a bare `true`/`false` given to a text setting: Hydra reads it as a boolean and the
    typed config then holds 'True' or 'False' (`agent.command=false` ran a command `False`)."""
    for o in parsed:
        value = None if o.is_sweep_override() else o.value()
        if not isinstance(value, bool):
            continue
        key = o.get_key_element().lstrip("+~")
        node: Any = cfg
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else getattr(node, part, None)
        if isinstance(node, str):
            raw = o.input_line.split("=", 1)[1]
            raise ValueError(
                f"{key}={raw} is read as a boolean, but {key} is text (it would hold {node!r}): "
                f"quote the value for Hydra, \"{key}='{raw}'\""
            )


def _compose_other(name: str, overrides: list[str]) -> Any:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return compose(config_name=name, overrides=overrides)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name=name, overrides=overrides)


def _explain(error: Exception, overrides: list[str], name: str) -> str:
    """The composition error as one line: the key or option, and the closest valid ones."""
    import difflib
    import re

    text = str(error)
    key = getattr(error, "full_key", None)
    found = re.search(r"Could not override '([^']+)'|Key '([^']+)' is not in struct", text)
    if not key and found:
        key = found.group(1) or found.group(2)
    if key:
        parent, _, leaf = key.rpartition(".")
        valid = _keys_under(parent, overrides) if name == "bench" else _top_keys(name) if not parent else []
        if leaf in valid:  # typed, but the chosen config (say, agent=greedy's) does not set it
            return f"{key} is not set by the configs chosen here: add it as +{key}=... (or pick the config that has it)"
        near = difflib.get_close_matches(leaf, valid, n=3, cutoff=0.6)
        where = f" of {parent}" if parent else ""
        hint = f"; did you mean {', '.join(f'{parent}.{k}' if parent else k for k in near)}?" if near else ""
        listing = f" (the keys{where}: {', '.join(valid)})" if valid and not near else ""
        return f"unknown config key {key}{hint}{listing}"
    group = re.search(r"Could not find '([^']+)/([^']+)'", text)
    if group:
        options = re.findall(r"^\s+(\S+)\s*$", text.split("Available options:", 1)[-1], flags=re.M)
        near = difflib.get_close_matches(group.group(2), options, n=3, cutoff=0.5)
        hint = f"; did you mean {group.group(1)}={near[0]}?" if near else ""
        return f"no {group.group(1)} named {group.group(2)!r}{hint} (options: {', '.join(options)})"
    return _first_line(error)


def _keys_under(parent: str, overrides: list[str]) -> list[str]:
    """The keys of the typed bench config at `parent` (the task node typed by its domain)."""
    from omegaconf import DictConfig, OmegaConf

    task = next((o.split("=", 1)[1] for o in overrides if o.startswith("task=")), "math")
    try:
        schema = OmegaConf.structured(BenchConfig)
        schema.task = OmegaConf.structured(domain_config(task))
        node = OmegaConf.select(schema, parent) if parent else schema
    except Exception:  # an unknown domain: no listing, the error stands alone
        return []
    return sorted(str(k) for k in node.keys()) if isinstance(node, DictConfig) else []


def _top_keys(name: str) -> list[str]:
    """The keys conf/<name>.yaml sets (a sweep's: those of its SweepConfig)."""
    from omegaconf import OmegaConf

    return sorted(str(k) for k in OmegaConf.load(CONF_DIR / f"{name}.yaml") if k not in ("defaults", "hydra"))


def _first_line(error: Exception) -> str:
    return next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)


def _as_override(value: Any) -> str:
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list):
        return "[" + ",".join(_as_override(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_as_override(v)}" for k, v in value.items()) + "}"
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
