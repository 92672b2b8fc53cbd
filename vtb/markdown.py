"""Agent-controlled text as inert markdown: one rule for report.md, the leaderboard and Prefect's
markdown and table artifacts (a leaf: no project imports)."""

from __future__ import annotations

import re
import unicodedata

_MD_PUNCT = re.compile(r"([\\`*_{}\[\]()#+!|~-])")


def md_text(value: object, limit: int | None = None) -> str:
    """Anything agent-controlled (notes, file names, engine strings, sandbox output) as inert markdown.

    One line of text that renders as itself in report.md and in Prefect's markdown and table
    artifacts: control and format characters dropped, whitespace collapsed (no new block, no
    table row), `& < > "` as HTML entities (no tag, no `<javascript:...>` autolink), and markdown
    punctuation backslash-escaped (no link, image, emphasis, code span or table cell break).
    `limit` cuts the raw text first (with "...").
    """
    text = "".join(c if unicodedata.category(c)[0] != "C" else " " for c in str(value))
    text = " ".join(text.split())
    if limit is not None and len(text) > limit:
        text = text[: max(0, limit - 3)] + "..."
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    return _MD_PUNCT.sub(r"\\\1", text)
