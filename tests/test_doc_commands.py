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


def test_the_docs_show_commands_to_check() -> None:
    """The collector finds the commands (else the test below checks nothing)."""
    found = _all()
    assert len(found) >= 30, found
    assert any("flows.sweep" in c for _, c in found) and any(" -m agent=" in c for _, c in found)


@pytest.mark.parametrize("where,command", _all(), ids=lambda x: x if ":" in x else "")
def test_every_documented_command_composes(where, command) -> None:
    """As `python -m flows.<entry>` checks its command line before Hydra runs (a sweep's
    `overrides` as a bench's too)."""
    from vtb.compose import check_command_line

    entry, args = _args(command)
    check_command_line(args, entry)
