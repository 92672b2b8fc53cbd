"""The browser half of scripts/ui_check.sh: a finished bench's flow run as the Prefect UI shows it.

Given the server's URL and the bench's run id, it finds the flow run and its artifacts through the
Prefect API, renders the UI's pages in headless Chromium (`--dump-dom` for the checks,
`--screenshot` for a person to look at) and checks what a user must see there: the run's tags,
its task runs named by what they are, the bench's own iteration lines in the Logs tab, the budget
progress artifact at the final figure, the report rendered whole (its tables, no broken image),
one iterations table updated in place with agent text shown as written, and hostile agent text
in such a table shown as text, never made into markup, in the default (v2) and the v1 UI. Prints one line per check and exits 1 when one
fails. Pages are the default (v2) UI's.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

from flows.watch import iteration_rows
from vtb.markdown import cell_text


def dom(chromium: str, url: str, out: Path, height: int = 2400) -> str:
    """The page's DOM once its scripts have run (Chromium's virtual time lets the API calls finish)."""
    page = subprocess.run(
        [*_browser(chromium, height), "--dump-dom", url], capture_output=True, text=True, timeout=180
    ).stdout
    out.write_text(page)
    return page


def screenshot(chromium: str, url: str, out: Path, height: int = 1400) -> None:
    subprocess.run(
        [*_browser(chromium, height), f"--screenshot={out}", url], capture_output=True, timeout=180
    )


def _browser(chromium: str, height: int) -> list[str]:
    return [
        chromium,
        "--headless",
        "--no-sandbox",  # as root Chromium refuses its own sandbox; the pages are our own server's
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--window-size=1500,{height}",
        "--virtual-time-budget=30000",
    ]


class _Elements(HTMLParser):
    """Inside a page's tables, each element a cell's text could have turned into: any tag but the
    table's own, the wrappers the UIs put a cell in and plain emphasis, or an event handler, or a
    javascript: URL."""

    OWN = {"table", "thead", "tbody", "tr", "th", "td", "span", "div", "article", "p"}
    LOOKS = {"code", "strong", "em"}  # v1's markdown formatting: allowed without attributes
    URLS = {"href", "src", "action", "formaction", "xlink:href", "data"}

    def __init__(self) -> None:
        super().__init__()
        self.depth, self.found = 0, []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.depth += tag == "table"
        bad = [
            k for k, v in attrs
            if k.startswith("on") or (k in self.URLS and "javascript:" in (v or "").lower().replace(" ", ""))
        ]  # fmt: skip
        styled = tag in self.LOOKS and {k for k, _ in attrs} - {"class"}
        if self.depth and (tag not in self.OWN | self.LOOKS or bad or styled):
            self.found.append(f"<{tag}{''.join(' ' + k for k in bad)}>")

    def handle_endtag(self, tag: str) -> None:
        self.depth -= tag == "table" and self.depth > 0


def made_elements(page: str) -> list[str]:
    parser = _Elements()
    parser.feed(page)
    return parser.found


def text_of(page: str) -> str:
    """The page's visible text, whitespace collapsed (scripts and styles dropped)."""
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


# Agent text a hostile research agent could write into its notes and file names.
HOSTILE = [
    "<script>document.title='pwned'</script> tuned the lr",
    "<img src=x onerror=\"document.title='pwned'\"> see [details](javascript:alert(1))",
    "**bold** `code` a | b | c, https://evil.example/x www.evil.example a@b.example",
    "&lt;img src=x onerror=alert(1)&gt; [a]: javascript:alert(1) <javascript:alert(2)> ![i](x.png)",
]


async def _hostile_table() -> str:
    """The iterations table of a hostile history, as flows/watch.py writes it, as an artifact."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import ArtifactCreate

    from vtb.ledger import LedgerSummary
    from vtb.results import AgentUse, Candidate

    history = [
        Candidate(iteration=i, snapshot=f"s{i}", parts={}, edits={"harness": [note[:20] + ".py"]},
                  notes=note, agent=AgentUse(tokens=1), train=None, train_key=None, checkpoint=None,
                  val_score=0.5, val=None, charge={}, budget_after=LedgerSummary("flops", 1e13, 1e9, 1e13 - 1e9))
        for i, note in enumerate(HOSTILE)
    ]  # fmt: skip
    async with get_client() as client:
        made = await client.create_artifact(
            ArtifactCreate(type="table", key="ui-check-hostile", data=json.dumps(iteration_rows(history)))
        )
        return str(made.id)


async def _api(run_id: str) -> tuple:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterName,
    )

    async with get_client() as client:
        runs = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[run_id]))
        )
        run = max(runs, key=lambda r: r.created)
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
        )
        return run, artifacts


def check(ui: str, run_id: str, result: dict, chromium: str, out: Path) -> list[tuple[str, bool, str]]:
    """(what, passed, detail) for each check of the run's pages; pages and screenshots go to `out`."""
    run, artifacts = asyncio.run(_api(run_id))
    latest = {a.key: a for a in sorted(artifacts, key=lambda a: a.created)}  # a key's newest version
    key = run_id.lower()
    page = f"{ui}/v2/runs/flow-run/{run.id}"
    checks: list[tuple[str, bool, str]] = []

    def expect(what: str, text: str, needles: list[str]) -> None:
        missing = [n for n in needles if n not in text]
        checks.append((what, not missing, f"missing {missing}" if missing else "all found"))

    cfg = json.loads((Path(result["record"]) / "config.json").read_text())
    tags = [
        f"task:{cfg['task']['name']}",
        f"agent:{cfg['agent']['name']}",
        f"seed:{cfg['seed']}",
        f"model:{cfg['model']['name']}",
        f"sandbox:{cfg['sandbox']['backend']}",
    ]
    shown = text_of(dom(chromium, page, out / "flow-run.html"))
    expect("flow run page shows the tags", shown, tags)
    screenshot(chromium, page, out / "flow-run.png")

    tasks = text_of(dom(chromium, f"{page}?tab=TaskRuns", out / "task-runs.html", height=3000))
    expect(
        "task runs are named by what they are", tasks, ["provision-data", "train-it0", "val-it0", "grade-"]
    )
    screenshot(chromium, f"{page}?tab=TaskRuns", out / "task-runs.png")

    iterations = sorted(Path(result["record"]).joinpath("iterations").glob("*.json"))
    lines = [f"iteration {int(p.stem)}: val " for p in iterations]
    logs = text_of(dom(chromium, f"{page}?tab=Logs", out / "logs.html", height=9000))
    expect("Logs tab holds the bench's iteration lines", logs, [*lines, "[train]", "[play val]"])
    screenshot(chromium, f"{page}?tab=Logs", out / "logs.png", height=2400)

    listed = text_of(dom(chromium, f"{page}?tab=Artifacts", out / "artifacts.html"))
    expect(
        "Artifacts tab lists progress, report, iterations",
        listed,
        [f"budget-{key}", f"report-{key}", f"iterations-{key}"],
    )
    screenshot(chromium, f"{page}?tab=Artifacts", out / "artifacts.png")

    used, limit = result["budget"]["used"], result["budget"]["limit"]
    percent = f"Progress: {round(100 * used / limit, 1):g}%"  # flows/watch.py rounds to one decimal
    progress = f"{ui}/v2/artifacts/artifact/{latest[f'budget-{key}'].id}"
    expect(
        "progress artifact at the final budget figure",
        text_of(dom(chromium, progress, out / "progress.html")),
        [percent],
    )
    screenshot(chromium, progress, out / "progress.png", height=900)

    report = f"{ui}/v2/artifacts/artifact/{latest[f'report-{key}'].id}"
    report_dom = dom(chromium, report, out / "report.html", height=3000)
    rendered = report_dom.split("Show Raw Data")[0]  # the rendered markdown, not the raw text below it
    expect(
        "report renders its tables and figures",
        text_of(rendered),
        ["Test scores", "Iterations", " FLOPs", "UTC"],
    )
    tables, images = rendered.count("<table"), len(re.findall(r"<img\b", rendered.split("<main", 1)[-1]))
    checks.append(
        (
            "report: tables rendered, no image to break",
            tables >= 2 and images == 0,
            f"{tables} tables, {images} images",
        )
    )
    screenshot(chromium, report, out / "report.png", height=2000)

    tables = [a for a in artifacts if a.key == f"iterations-{key}"]
    data = json.loads(tables[0].data) if len(tables) == 1 else []
    checks.append(
        (
            "one iterations table, updated in place to the last iteration",
            len(tables) == 1 and [r["iteration"] for r in data] == [int(p.stem) for p in iterations],
            f"{len(tables)} iterations artifacts, rows {[r['iteration'] for r in data]}",
        )
    )
    table = f"{ui}/v2/artifacts/artifact/{latest[f'iterations-{key}'].id}"
    rows = text_of(dom(chromium, table, out / "iterations.html"))
    notes = [json.loads(p.read_text())["notes"] for p in iterations]
    expect("iterations table: formatted figures", rows, ["val_score", "budget_used", " FLOPs"])
    expect(
        "iterations table: agent notes as written (no escapes)",
        rows,
        [" ".join(n.split())[:60] for n in notes],
    )
    screenshot(chromium, table, out / "iterations.png", height=1200)

    made = asyncio.run(_hostile_table())
    for ui_name, hostile in (
        ("v2", f"{ui}/v2/artifacts/artifact/{made}"),
        ("v1", f"{ui}/artifacts/artifact/{made}"),
    ):
        page = dom(chromium, hostile, out / f"hostile-{ui_name}.html")
        # v1 formats emphasis and code and decodes entities (looks, not elements): its text is
        # compared for the notes without them
        shown = HOSTILE if ui_name == "v2" else HOSTILE[:2]
        expect(
            f"hostile agent text shown as written ({ui_name} UI)",
            text_of(page),
            [cell_text(n) for n in shown],
        )
        injected = made_elements(page)
        title = re.search(r"<title>(.*?)</title>", page, flags=re.S)
        ran = "pwned" in (title.group(1) if title else "")  # a script of the text would have set it
        checks.append(
            (
                f"hostile agent text: no element made of it ({ui_name} UI)",
                not injected and not ran,
                f"{injected or 'none'}",
            )
        )
        screenshot(chromium, hostile, out / f"hostile-{ui_name}.png", height=900)
    return checks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ui", required=True, help="the server, e.g. http://127.0.0.1:4311")
    ap.add_argument("--result", required=True, type=Path, help="the bench's result.json")
    ap.add_argument("--chromium", default="chromium")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    result = json.loads(args.result.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    checks = check(args.ui.rstrip("/"), result["run_id"], result, args.chromium, args.out)
    for what, ok, detail in checks:
        print(f"[ui-check] {'PASS' if ok else 'FAIL'}  {what}: {detail}")
    failed = [c for c in checks if not c[1]]
    print(
        f"[ui-check] {len(checks) - len(failed)}/{len(checks)} checks passed; pages and screenshots in {args.out}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
