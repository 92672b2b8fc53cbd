"""Agent-controlled text as inert markdown (report.md, the leaderboard, Prefect's markdown
artifacts) or as an inert plain line (Prefect's table artifacts). A leaf: no project imports."""

from __future__ import annotations

import re
import unicodedata

_MD_PUNCT = re.compile(r"([\\`*_{}\[\]()#+!|~-])")


def plain_text(value: object, limit: int | None = None) -> str:
    """Any text as one line: control and format characters dropped (no terminal escapes, no
    right-to-left override), whitespace collapsed, `limit` cutting it (with "...")."""
    text = "".join(c if unicodedata.category(c)[0] != "C" else " " for c in str(value))
    text = " ".join(text.split())
    if limit is not None and len(text) > limit:
        text = text[: max(0, limit - 3)] + "..."
    return text


# Where markdown or HTML would make an element of a line, a WORD JOINER (U+2060: zero width,
# invisible) is put in: after each `<` (no tag, no `<scheme:...>` autolink), between `]` and
# `(` (no link, no image), and in the starts of the links GFM makes of bare text (`://`, `www.`,
# `@`).
_WJ = "\u2060"
_BREAKS = re.compile(r"<|\](?=\()|(?<=:)(?=//)|(?<=\bwww)(?=\.)|(?<=@)", re.IGNORECASE)


def cell_text(value: object, limit: int | None = None) -> str:
    """Agent-controlled text for a Prefect table artifact's cell: one line that reads as written
    and makes no element in either Prefect UI.

    The default (v2) UI puts a cell in the page as text, so markdown's backslash escapes or HTML
    entities would show there as written; the v1 UI renders a cell as markdown with HTML, where
    an `<img onerror>` or a `[link](javascript:...)` would be live. So the text stays as it is
    (`plain_text`) but for an invisible word joiner wherever markdown or HTML would start a tag,
    a link or an image (`_BREAKS`). Emphasis marks (`*`, `_`, backticks) still format in v1:
    looks, not elements that act."""
    return _BREAKS.sub(lambda m: m.group(0) + _WJ, plain_text(value, limit))


def md_text(value: object, limit: int | None = None) -> str:
    """Anything agent-controlled (notes, file names, engine strings, sandbox output) as inert markdown.

    One line of text that renders as itself in report.md and in Prefect's markdown artifacts
    (`cell_text` for table artifacts): control and format characters dropped, whitespace collapsed (no new block, no
    table row), `& < > "` as HTML entities (no tag, no `<javascript:...>` autolink), and markdown
    punctuation backslash-escaped (no link, image, emphasis, code span or table cell break).
    `limit` cuts the raw text first (with "...").
    """
    text = plain_text(value, limit)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    return _MD_PUNCT.sub(r"\\\1", text)
