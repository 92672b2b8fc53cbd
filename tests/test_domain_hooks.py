"""A domain's optional methods are declared once (`vtb.domains.registry.Hooks`) and looked up
in one place (`hooks`): was (issue 40) `getattr`/`hasattr` probes in the pipeline, the bench
and the provenance check, each with its own idea of what a missing method means."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import pytest

from vtb.domains.registry import Hooks, get_domain, hooks

ROOT = Path(__file__).resolve().parents[1]
HAS = {  # what each built-in domain provides, as the provenance checks and the record expect
    "math": {"audit_text", "reward_as"},
    "terminal": {"audit_text"},
    "swe": {"written_lines", "artifacts"},
    "tau": {"written_lines", "written_scopes"},
}


@pytest.mark.parametrize("name", sorted(HAS))
def test_each_builtin_domain_has_the_hooks_it_declares(name: str) -> None:
    found = hooks(get_domain(name))
    assert {f.name for f in fields(Hooks) if getattr(found, f.name) is not None} == HAS[name]


def test_a_domain_with_no_optional_method_has_every_hook_none() -> None:
    class Bare:
        name = "bare"

    assert hooks(Bare()) == Hooks()


def test_no_module_probes_a_domain_for_a_hook_by_name() -> None:
    """`getattr(x, "audit_text")` and the like outside registry.hooks: a second place deciding
    what a missing hook means."""
    names = {f.name for f in fields(Hooks)}  # (a domain's own checks: vtb.preflight.DomainCheck)
    found = []
    for path in [
        *(ROOT / "vtb").rglob("*.py"),
        *(ROOT / "flows").rglob("*.py"),
        *(ROOT / "steps").rglob("*.py"),
    ]:
        if path == ROOT / "vtb" / "domains" / "registry.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in names
            ):
                found.append(
                    f"{path.relative_to(ROOT)}:{node.lineno} {node.func.id}(..., {node.args[1].value!r})"
                )
    assert not found, found
