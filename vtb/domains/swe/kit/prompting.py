"""How SWE instances become model text, and model text becomes a patch.

Shared by the harnesses and the data tools, so a training row teaches the model exactly the
format a harness prompts it with. The harness localises the function the issue talks about
(`locate`) and shows the issue's title and the function's lines without indentation; the model answers with one edit line

    return total / len(xs) => return total / len(xs) if xs else 0.0

which the harness turns into a unified diff (`patch_for`), restoring indentation.
A small model cannot read a whole repository or write a diff; this keeps both in the harness.
"""

from __future__ import annotations

import re

from vtb.domains.swe.kit import diffs

ARROW = " => "
MAX_LINES = 14  # lines of the located function shown to the model


def _names(statement: str) -> list[str]:
    """Identifiers the issue mentions: `quoted` ones first, then calls like name(...)."""
    quoted = re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)(?:\(.*?\))?`", statement)
    called = re.findall(r"\b([A-Za-z_][A-Za-z0-9_]*)\(", statement)
    return list(dict.fromkeys(quoted + called))


def locate(statement: str, files: dict[str, str]) -> tuple[str, list[str]] | None:
    """(path, lines of the function) for the first function the issue names that a source file defines."""
    sources = {p: t for p, t in sorted(files.items()) if p.endswith(".py") and not _is_test(p)}
    for name in _names(statement):
        for path, text in sources.items():
            lines = text.splitlines()
            for i, line in enumerate(lines):
                if re.match(rf"\s*def {re.escape(name)}\(", line):
                    return path, _block(lines, i)
    return None


def _is_test(path: str) -> bool:
    return path.startswith("tests/") or "/test_" in path or path.split("/")[-1].startswith("test_")


def _block(lines: list[str], start: int) -> list[str]:
    """The def line and its body (until the next line indented no deeper than the def)."""
    indent = len(lines[start]) - len(lines[start].lstrip())
    out = [lines[start]]
    for line in lines[start + 1 :]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    return out[:MAX_LINES]


def task_prompt(observation: dict) -> tuple[str, str] | None:
    """(path, prompt) for a harness's observation (problem_statement, files), or None when the
    issue names no function that a source file defines."""
    found = locate(observation["problem_statement"], observation["files"])
    return (found[0], prompt(observation["problem_statement"], *found)) if found else None


def title(statement: str) -> str:
    """The issue's first line: what happened and what was expected (the body repeats it at length)."""
    return " ".join(statement.strip().split("\n", 1)[0].split())


def prompt(statement: str, path: str, lines: list[str]) -> str:
    body = "\n".join(line.strip() for line in lines if line.strip())
    return f"issue: {title(statement)}\nfile: {path}\n{body}\nfix: "


def sft_row(statement: str, path: str, lines: list[str], old: str, new: str) -> dict:
    return {"prompt": prompt(statement, path, lines), "completion": f"{old.strip()}{ARROW}{new.strip()}\n"}


def parse_edit(text: str) -> tuple[str, str] | None:
    """(old, new) from the model's first line, or None when it is not `old => new`."""
    line = text.strip().split("\n", 1)[0]
    if ARROW.strip() not in line:
        return None
    old, new = (part.strip() for part in line.split(ARROW.strip(), 1))
    return (old, new) if old else None


def apply_edit(text: str, old: str, new: str, fuzzy: bool = False) -> str | None:
    """The file with the line whose stripped text is `old` replaced by `new` (its indentation kept).

    Exactly one line must match. With fuzzy=True a line that does not match exactly is snapped
    to the most similar line of the file (difflib ratio >= 0.6), which repairs small copy errors.
    """
    lines = text.split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == old]
    if len(hits) != 1 and fuzzy:
        from difflib import SequenceMatcher

        scored = sorted(
            (
                (SequenceMatcher(None, line.strip(), old).ratio(), i)
                for i, line in enumerate(lines)
                if line.strip()
            ),
            reverse=True,
        )
        hits = [scored[0][1]] if scored and scored[0][0] >= 0.6 else []
    if len(hits) != 1:
        return None
    i = hits[0]
    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
    lines[i] = indent + new
    return "\n".join(lines)


def patch_for(files: dict[str, str], path: str, answer: str, fuzzy: bool = False) -> str:
    """The unified diff that the model's `answer` (an edit line) makes of `path`; "" when the
    answer is no edit, cannot be applied (apply_edit, `fuzzy` as there) or changes nothing."""
    edit = parse_edit(answer)
    before = files[path]
    after = apply_edit(before, *edit, fuzzy=fuzzy) if edit else None
    return diffs.file_diff(path, before, after) if after is not None and after != before else ""


# --- real SWE-bench instances: shell episodes (no files in the start message) -----------------
_DIFF_PATH = re.compile(r"^diff --git a/(\S+) b/", re.MULTILINE)


def shell_prompt(statement: str) -> str:
    """The prompt of a real instance's first shell command: the issue's title, then a shell prompt."""
    return f"issue: {title(statement)}\n$ "


def patched_paths(patch: str) -> list[str]:
    """The files a unified diff touches, in order (test files last)."""
    paths = list(dict.fromkeys(_DIFF_PATH.findall(patch)))
    return [p for p in paths if not _is_test(p)] + [p for p in paths if _is_test(p)]


def named_paths(statement: str) -> list[str]:
    """Source paths the issue text names (e.g. `astropy/io/fits/card.py`), in order, at most 5."""
    found = re.findall(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.py)\b", statement)
    return [p for p in dict.fromkeys(found) if ".." not in p and not p.startswith("/")][:5]
