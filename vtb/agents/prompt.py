"""The turn prompt of LLM and CLI research agents, rendered from a template users can edit.

Templates live in conf/prompts/ (the default is research.md; `agent.prompt` picks another,
relative to conf/ or absolute) with `$name` placeholders; the task's paragraph comes from
its domain, vtb/domains/<task>/prompt.md. Everything filled in is what the agent may know: its own
feedback (past val scores, edits, budget) and the workspace it can see anyway.
"""

from __future__ import annotations

import json
import re
import string
from pathlib import Path

from vtb.agents import Feedback
from vtb.config import CONF_DIR, AgentConfig
from vtb.hashing import hash_json
from vtb.ledger import LedgerSummary
from vtb.record import edits_text

MAX_LAYOUT_LINES = 80


def template_path(cfg: AgentConfig) -> Path:
    path = Path(cfg.prompt).expanduser()
    return path if path.is_absolute() else CONF_DIR / path


def _task_path(task: str) -> Path:
    """The task's paragraph, provided by its domain (vtb/domains/<task>/prompt.md)."""
    return Path(__file__).resolve().parents[1] / "domains" / task / "prompt.md"


def load_template(cfg: AgentConfig) -> str:
    path = template_path(cfg)
    if not path.is_file():
        raise ValueError(
            f"agent.prompt={cfg.prompt!r}: no template at {path}; give a path relative to {CONF_DIR} "
            "or an absolute one (the default is prompts/research.md)"
        )
    return re.sub(r"\A\s*<!--.*?-->\s*", "", path.read_text(), flags=re.S)  # drop the header comment


def template_digest(cfg: AgentConfig, task: str) -> str:
    """Hash of the template and task text: part of a turn's cache key, so an edit re-asks the agent."""
    texts = [p.read_text() if p.is_file() else "" for p in (template_path(cfg), _task_path(task))]
    return hash_json(texts)


def layout(ws: Path) -> str:
    """The workspace's parts as `path  size` lines (hidden files and caches left out)."""
    lines = []
    for part in ("data", "trainer", "harness"):
        files = sorted(p for p in (ws / part).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        lines.append(f"{part}/" + ("" if files else "  (empty)"))
        lines += [f"  {p.relative_to(ws)}  {p.stat().st_size} bytes" for p in files]
    if len(lines) > MAX_LAYOUT_LINES:
        lines = lines[:MAX_LAYOUT_LINES] + [f"  ... {len(lines) - MAX_LAYOUT_LINES} more"]
    return "\n".join(lines)


def history_table(fb: Feedback) -> str:
    if not fb.history:
        return "(none yet)"
    rows = ["| iteration | val score | edits | notes |", "|---:|---:|---|---|"]
    for h in fb.history:
        val = "failed" if h.get("val_score") is None else f"{h['val_score']:.3f}"
        edits = edits_text(h.get("edits"))
        rows.append(f"| {h['iteration']} | {val} | {edits} | {str(h.get('notes', ''))[:120]} |")
    return "\n".join(rows)


def budget_line(budget: LedgerSummary | None) -> str:
    if budget is None:
        return "unknown"
    return (
        f"{budget.used:.3g} of {budget.limit:.3g} {budget.unit} used, {budget.left:.3g} "
        f"left; CPU-seconds {budget.cpu_seconds:.0f} of {budget.cpu_seconds_cap:.0f}"
    )


def render(cfg: AgentConfig, fb: Feedback, ws: Path, tools: str) -> str:
    task_file = _task_path(fb.task)
    values = {
        "task": fb.task,
        "task_description": task_file.read_text().strip() if task_file.is_file() else "",
        "iteration": fb.iteration,
        "max_iterations": fb.max_iterations,
        "budget": budget_line(fb.budget),
        "history": history_table(fb),
        "layout": layout(ws),
        "tools": tools.strip() + "\n" if tools else "",
        "feedback_json": json.dumps({"history": fb.history, "budget": fb.to_json()["budget"]}),
    }
    return string.Template(load_template(cfg)).safe_substitute(values)
