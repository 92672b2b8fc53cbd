"""Report injection (issue 14, hole 7): agent notes and file names render as text, never as markup.

A hostile history (notes and edited file names with `<script>`, `javascript:` links, an
`<img onerror>` file name, table breakers and a code-fence breaker) goes through the real
writers: vtb/record.py write_report and flows/bench.py publish_artifacts (Prefect's artifact
calls captured). The markdown is rendered with a CommonMark renderer and the HTML checked.
"""

from __future__ import annotations

from dataclasses import replace
from html.parser import HTMLParser

import pytest
from markdown_it import MarkdownIt

from vtb.bench_result import BenchResult
from vtb.ledger import LedgerSummary
from vtb.record import write_report
from vtb.results import AgentUse, Candidate, Grade

HOSTILE_NOTES = [
    "<script>alert(document.cookie)</script> tuned the lr",
    "see [details](javascript:alert(1)) and <javascript:alert(2)> and ![x](javascript:alert(3))",
    "a | b | c\n| injected | row |\n\n# Heading\n```\nfence break",
    "&lt;script&gt; entity-encoded, `code`, **bold**, <a href='javascript:x'>link</a>\u202e\x00\x1b[31m",
]
HOSTILE_FILES = [
    "<img src=x onerror=alert(1)>.py",
    "[x](javascript:alert(1)).jsonl",
    "a|b|c.py",
    "```.md",
]


def _history() -> list[Candidate]:
    return [
        Candidate(
            iteration=i,
            snapshot=f"s{i}",
            parts={},
            edits={"harness": [HOSTILE_FILES[i]], "data": ["train.jsonl"]},
            notes=note,
            agent=AgentUse(tokens=10 * i),
            train=None,
            train_key=None,
            checkpoint=None,
            val_score=0.1 * i,
            val=None,
            charge={},
            budget_after=LedgerSummary("flops", 1e13, 1e9 * i, 1e13 - 1e9 * i),
        )
        for i, note in enumerate(HOSTILE_NOTES)
    ]


def _result(run_dir) -> BenchResult:
    entry = {"test_score": 0.5}
    return BenchResult.from_json(
        {
            "run_id": "run-1",
            "task": "math",
            "agent": "greedy",
            "model": "tiny",
            "seed": 0,
            "initial": entry,
            "submitted": {**entry, "iteration": 1},
            "reference": None,
            "gains_by_part": {"harness": 0.1},
            "budget": {"used": 1.0, "limit": 2.0, "unit": "flops", "cpu_seconds": 3.0},
            "record": str(run_dir),
        }
    )


def _grades() -> dict[str, Grade]:
    metrics = {"by_template": {"<img src=x onerror=alert(1)>": 1.0}, "<b>k</b>": "<script>x</script>"}
    return {"initial": Grade(0.5), "submitted": Grade(0.5, metrics=metrics)}


def _html(markdown: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(markdown)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs)))


# What the report itself produces; anything else (script, img, a, strong, em, extra code) came from agent text.
ALLOWED = {"h1", "h2", "p", "pre", "code", "table", "thead", "tbody", "tr", "th", "td", "ul", "li", "img"}


def _assert_inert(markdown: str) -> None:
    html = _html(markdown)
    parser = _Tags()
    parser.feed(html)
    tags = parser.tags
    assert {t for t, _ in tags} <= ALLOWED, (sorted({t for t, _ in tags} - ALLOWED), html)
    assert [a for t, a in tags if t == "img"] in (
        [],
        [{"src": "scores.png", "alt": "scores"}],
    )  # its own plot
    assert sum(t == "code" for t, _ in tags) <= 1 and sum(t == "h1" for t, _ in tags) <= 1, html
    assert all(set(a) <= {"src", "alt", "style"} for t, a in tags if t != "img") and "javascript" not in str(
        tags
    )
    assert "\u202e" not in html and "\x1b" not in html and "\x00" not in html
    for bad in ("<script", "<img", "](javascript:", "<javascript:"):
        assert bad not in markdown, bad


def test_write_report_escapes_notes_file_names_and_metrics(tmp_path):
    history = _history()
    write_report(tmp_path, _result(tmp_path), history, _grades())
    report = (tmp_path / "report.md").read_text()
    _assert_inert(report)
    html = _html(report)
    scores, iterations = html.split("<h2>Iterations")[0], html.split("<h2>Iterations")[1].split("<h2>")[0]
    assert scores.count("<tr>") == 1 + 2  # the plot's test scores: initial, submitted (no reference)
    assert iterations.count("<tr>") == 1 + len(history)  # one row per iteration: no row injected, none lost
    assert all(row.count("<td") == 7 for row in iterations.split("<tr>")[2:])  # no cell injected
    assert "&lt;script&gt;alert(document.cookie)&lt;/script&gt; tuned the lr" in html  # shown as text
    assert "&lt;img src=x onerror=alert(1)&gt;.py" in html
    assert "[x](javascript:alert(1)).jsonl" in html  # the name as written, not a link
    assert html.count("<pre>") == 1  # the summary table's fence is not closed early


@pytest.fixture
def captured(monkeypatch):
    import flows.bench as bench

    seen: dict = {}
    monkeypatch.setattr(
        bench, "create_markdown_artifact", lambda markdown, **kw: seen.update(markdown=markdown)
    )
    return bench, seen


def test_prefect_artifacts_escape_agent_text(tmp_path, captured):
    bench, seen = captured
    history = _history()
    write_report(tmp_path, _result(tmp_path), history, _grades())
    bench.publish_artifacts("run-1", tmp_path)
    _assert_inert(seen["markdown"])
    assert "<img" not in _html(seen["markdown"])  # the UI cannot load a relative image: the file is named
    assert f"{tmp_path}/scores.png".replace("-", "\\-").replace("_", "\\_") in seen["markdown"]


def test_the_iterations_table_holds_agent_text_as_one_inert_line():
    """A table artifact's cell is shown as text by the default (v2) UI and rendered as markdown
    with HTML by the v1 UI (both seen in a browser by scripts/ui_check.sh): the cell is the text on
    one line as written (no backslash escapes or entities: they would show in v2), control and
    format characters dropped, with an invisible word joiner wherever v1 would make an element."""
    from flows.watch import iteration_rows
    from vtb.markdown import cell_text

    history = _history()
    history[0].notes += " https://evil.example/x www.evil.example a@b.example &lt;b&gt;x&lt;/b&gt;"
    history[1].notes += " [a]: javascript:alert(1) [a] <javascript:alert(2)> [b](<javascript:x>)"
    rows = iteration_rows(history)
    assert [r["iteration"] for r in rows] == [h.iteration for h in history]
    for row in rows:
        for cell in (row["notes"], row["edits"]):
            assert "\n" not in cell and not {"\u202e", "\x1b", "\x00"} & set(cell)
            html = _html(cell)  # as the v1 UI renders a cell
            parser = _Tags()
            parser.feed(html)
            tags = [t for t, _ in parser.tags]  # v1 may format (emphasis, code): looks, nothing that acts
            assert tags[0] == "p" and set(tags[1:]) <= {"code", "strong", "em"}, html
            assert not [a for _, a in parser.tags if a], html  # no attribute: no link, image or handler
    shown = [r["notes"].replace("\u2060", "") for r in rows]  # as the v2 UI shows them, as written
    assert shown[0].startswith("<script>alert(document.cookie)</script> tuned the lr")
    assert (
        rows[0]["edits"].replace("\u2060", "")
        == "harness: <img src=x onerror=alert(1)>.py; data: train.jsonl"
    )
    assert (
        cell_text("clean-data (data): lr 3e-3, +2 epochs! a_b")
        == "clean-data (data): lr 3e-3, +2 epochs! a_b"
    )
    assert iteration_rows([replace(history[1], notes="x" * 2000)])[0]["notes"] == "x" * 497 + "..."


def test_md_text_renders_as_the_text_itself():
    from vtb.record import md_text

    for raw in [*HOSTILE_NOTES, *HOSTILE_FILES, "plain words: trainer/config.json, lr 3e-3"]:
        html = _html(md_text(raw))
        assert html.startswith("<p>") and html.count("<p>") == 1, html  # one paragraph, no other block
        _assert_inert(md_text(raw))
    assert _html(md_text("trainer: config.json")) == "<p>trainer: config.json</p>\n"
    assert md_text("x" * 50, 10) == "xxxxxxx..."
