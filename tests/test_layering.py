"""The layering of ARCHITECTURE.md, read from the code's own imports: a test that fails on an
import that breaks it (a lower layer importing a higher one, or sandbox-side code importing
orchestrator-only code, which would fail inside a sandbox)."""

from __future__ import annotations

import ast
from pathlib import Path

from vtb.sandbox.runtime import SANDBOX_CODE

ROOT = Path(__file__).resolve().parents[1]

# Units by layer, lowest first (ARCHITECTURE.md). A module may import its own unit and any unit
# of a lower layer; `vtb` alone is the package's face.
LAYERS: list[tuple[str, ...]] = [
    ("vtb.result_parts",),
    (
        "vtb",
        "vtb.protocol",
        "vtb.safefs",
        "vtb.ledger",
        "vtb.chat",
        "vtb.noise",
        "vtb.codesign",
        "vtb.progress",
        "vtb.models",
        "vtb.salt",
        "vtb.plots",
        "vtb.markdown",
        "vtb.registry",
        "vtb.result_files",
    ),
    (
        "vtb.hashing",
        "vtb.config",
        "vtb.engine",
        "vtb.sandbox",
        "vtb.results",
        "vtb.bench_result",
    ),
    (
        "vtb.result_check",
        "vtb.runner",
        "vtb.workspace",
        "vtb.record",
        "vtb.leaderboard",
        "vtb.blind",
        "vtb.serve",
        "vtb.contamination",
        "vtb.preflight",
    ),
    (
        "vtb.domains",
        "vtb.agents",
        "vtb.calibrate",
        "vtb.service",
        "vtb.repro",
        "vtb.provenance",
    ),
    ("vtb.keys", "vtb.compose"),
    ("vtb.step_requests",),
    ("vtb.pipeline", "vtb.analysis"),
    ("vtb.build",),
    ("vtb.bench",),
    ("steps",),
    ("flows",),
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of(module: str) -> str:
    """The longest LAYERS entry that the module is, or lies under."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in RANK:
            return ".".join(parts[:n])
    raise AssertionError(
        f"{module} is in no layer of tests/test_layering.py: add it (and to ARCHITECTURE.md)"
    )


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def project_imports(path: Path, top_level_only: bool = False) -> list[str]:
    """The project modules a file imports (`from pkg import mod` counts as pkg.mod). With
    top_level_only, the imports that run when the module is imported (not those in a function)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out = []
    for node in nodes:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [
                f"{node.module}.{a.name}" if _is_module(f"{node.module}.{a.name}") else node.module
                for a in node.names
            ]
        else:
            continue
        out += [n for n in names if n.split(".")[0] in ("vtb", "steps", "flows")]
    return out


def sources() -> list[Path]:
    return [p for base in ("vtb", "steps", "flows") for p in sorted((ROOT / base).rglob("*.py"))]


def test_no_import_runs_up_a_layer() -> None:
    wrong = []
    for path in sources():
        here = unit_of(module_of(path))
        for target in project_imports(path):
            there = unit_of(target)
            if RANK[there] > RANK[here] or (RANK[there] == RANK[here] and there != here):
                wrong.append(f"{path.relative_to(ROOT)} imports {target} ({here} -> {there})")
    assert wrong == [], "\n".join(wrong)


def _sandbox_side(module: str) -> bool:
    rel = module.split(".")[1:]  # relative to the vtb package
    for entry in SANDBOX_CODE:
        layout = entry.removesuffix(".py").removesuffix("/__init__").split("/")
        if entry == "__init__.py":
            layout = []
        if rel[: len(layout)] == layout and (not entry.endswith(".py") or rel == layout):
            return True
    return False


def test_sandbox_side_code_imports_only_sandbox_side_code() -> None:
    """What a sandbox mounts (SANDBOX_CODE) must import there: at import time it imports nothing
    left outside (a lazy import in a function the sandbox never calls, like make_sandbox's, is not
    counted)."""
    sandboxed = [p for p in (ROOT / "vtb").rglob("*.py") if _sandbox_side(module_of(p))]
    assert any(p.name == "egress.py" for p in sandboxed) and any("kit" in p.parts for p in sandboxed)
    wrong = [
        f"{p.relative_to(ROOT)} imports {t}"
        for p in sandboxed
        for t in project_imports(p, top_level_only=True)
        if not _sandbox_side(t)
    ]
    assert wrong == [], "\n".join(wrong)


def test_architecture_md_lists_the_same_layers() -> None:
    """ARCHITECTURE.md's table is this file's LAYERS (highest first there), so the doc stays true."""
    import re

    rows = [
        line for line in (ROOT / "ARCHITECTURE.md").read_text().splitlines() if re.match(r"\| \d+ \|", line)
    ]
    documented = []
    for row in reversed(rows):
        paths = re.findall(r"`([\w/.]+)`", row.split("|")[2])
        documented.append(sorted(p.removesuffix("/").removesuffix(".py").replace("/", ".") for p in paths))
    assert documented == [sorted(u for u in units if u != "vtb") for units in LAYERS]
