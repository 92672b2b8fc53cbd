"""Every `python -m flows.bench` / `flows.sweep` command the docs and the configs' comments show
is parsed as a shell and Hydra would parse it, and composed into a typed config: a command a new
user copies cannot fail on its quoting or name a key that does not exist (issue 39).

Commands are read from README.md, docs/ and conf/ (comments): code blocks (with `\\` continuation
lines) and inline code spans. A placeholder (`<kind>`, `a|b`, `...`) marks a template, not a
command, and is skipped; everything else must compose.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMMAND = re.compile(r"python -m flows\.(bench|sweep)\b")
PLACEHOLDER = re.compile(r"<[a-z_ -]+>|\.\.\.|\w\|\w")


def _sources() -> list[Path]:
    docs = sorted((ROOT / "docs").rglob("*.md")) if (ROOT / "docs").is_dir() else []
    return [ROOT / "README.md", *docs, *sorted((ROOT / "conf").rglob("*.yaml"))]


def _commands(path: Path) -> list[tuple[str, str]]:
    """(where, command text from `python -m flows.X` on) for each command in a file."""
    text = path.read_text()
    out: list[tuple[str, str]] = []
    if path.suffix == ".yaml":  # comments: `# Launch: python -m flows.bench ...`, `\` continues
        comments = [
            line.split("#", 1)[1] if line.lstrip().startswith("#") else "" for line in text.splitlines()
        ]
        for n, line in enumerate(comments, 1):
            if COMMAND.search(line):
                command, k = line, n
                while command.rstrip().endswith("\\") and k < len(comments):
                    command = command.rstrip()[:-1] + " " + comments[k]
                    k += 1
                out.append((f"{path.name}:{n}", command))
        return out
    fenced = False
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced and COMMAND.search(line):
            command, k = line, n
            while command.rstrip().endswith("\\") and k < len(lines):
                command = command.rstrip()[:-1] + " " + lines[k]
                k += 1
            out.append((f"{path.name}:{n}", command))
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    for m in re.finditer(r"`([^`]+)`", prose):
        if COMMAND.search(m.group(1)):
            n = text.count("\n", 0, text.find(m.group(0))) + 1
            out.append((f"{path.name}:{n}", m.group(1).replace("\n", " ")))
    return out


def _all() -> list[tuple[str, str]]:
    found = [c for path in _sources() for c in _commands(path)]
    return [
        (where, cmd) for where, cmd in found if not PLACEHOLDER.search(cmd[COMMAND.search(cmd).start() :])
    ]


def _args(command: str) -> tuple[str, list[str]]:
    """The entry point and its arguments, split as bash would (quotes removed, # comments dropped)."""
    m = COMMAND.search(command)
    words = shlex.split(command[m.start() :], comments=True)
    return m.group(1), words[3:]


def _first_of_sweeps(overrides: list[str]) -> list[str]:
    """A multirun's overrides with each sweep (`a,b`, `range(...)`) reduced to its first value."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    out = []
    for parsed in OverridesParser.create().parse_overrides(overrides):
        value = parsed.value()
        if parsed.is_sweep_override():
            value = next(iter(parsed.sweep_iterator()))
        key = parsed.get_key_element()
        out.append(f"{key}={_hydra_value(value)}")
    return out


def _hydra_value(value) -> str:
    """A parsed value written back as a Hydra override value."""
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in value.items()) + "}"
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_the_docs_show_commands_to_check() -> None:
    """The collector finds the commands (else the test below checks nothing)."""
    found = _all()
    assert len(found) >= 30, found
    assert any("flows.sweep" in c for _, c in found) and any(" -m agent=" in c for _, c in found)


@pytest.mark.parametrize("where,command", _all(), ids=lambda x: x if ":" in x else "")
def test_every_documented_command_composes(where, command, monkeypatch) -> None:
    from flows.sweep import bench_configs, to_sweep_config
    from vtb.compose import compose_config
    from vtb.domains import salt

    monkeypatch.setenv(salt.ENV_VAR, "doc-commands-test")  # no installation salt file is made
    entry, args = _args(command)
    multirun = "-m" in args or "--multirun" in args
    overrides = [a for a in args if a not in ("-m", "--multirun")]
    assert not [a for a in overrides if a.startswith("-")], f"{where}: {command}"
    if multirun:
        overrides = _first_of_sweeps(overrides)
    if entry == "bench":
        compose_config(overrides)
        return
    from hydra import compose, initialize_config_dir

    from vtb.config import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        sweep = to_sweep_config(compose(config_name="sweep", overrides=overrides))
        assert bench_configs(sweep), f"{where}: no bench"
