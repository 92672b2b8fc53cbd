"""Unified diffs built from file contents and one-line edits (what the harnesses and data tools emit).

Pure text: applying a patch (the SWE-bench fallback chain, in a sandbox) is the orchestrator's
`vtb.domains.swe.patching`.
"""

from __future__ import annotations

import difflib


def file_diff(path: str, before: str | None, after: str | None) -> str:
    """A git-style unified diff of one file (None: the file does not exist on that side)."""
    if before == after:
        return ""
    head = [f"diff --git a/{path} b/{path}\n"]
    if before is None:
        head.append("new file mode 100644\n")
    elif after is None:
        head.append("deleted file mode 100644\n")
    old_name = f"a/{path}" if before is not None else "/dev/null"
    new_name = f"b/{path}" if after is not None else "/dev/null"
    lines = difflib.unified_diff(
        (before or "").splitlines(keepends=True), (after or "").splitlines(keepends=True), old_name, new_name
    )
    body = [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines]
    return "".join(head + body)


def diff_from_edit(files: dict[str, str], path: str, old: str, new: str) -> str:
    """The patch that replaces the single occurrence of `old` in `files[path]` by `new`.

    This is how a search/replace edit (what a small model can write reliably) becomes the unified
    diff that SWE-bench grading consumes.
    """
    if path not in files:
        raise ValueError(f"no file {path!r} in the repository")
    text = files[path]
    count = text.count(old) if old else 0
    if count != 1:
        raise ValueError(
            f"the text to replace occurs {count} times in {path}, expected exactly once: {old!r}"
        )
    return file_diff(path, text, text.replace(old, new, 1))
