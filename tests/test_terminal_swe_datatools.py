"""The terminal and swe data tools: rows from gold answers, a flawed share, and check/clean finding it."""

from __future__ import annotations

import pytest

from vtb.domains.kit.jsonl import read_jsonl, write_jsonl
from vtb.domains.swe import generator as swe_gen
from vtb.domains.swe.kit import datatools as swe_tools
from vtb.domains.swe.kit import prompting as swe_prompting
from vtb.domains.terminal import generator as term_gen
from vtb.domains.terminal.kit import datatools as term_tools


@pytest.fixture(scope="module")
def pools():
    return {
        "terminal": (term_tools, term_gen.make_tasks(7, 60, "train", set())),
        "swe": (swe_tools, swe_gen.make_instances(7, 30, "train", set())),
    }


@pytest.mark.parametrize("domain", ["terminal", "swe"])
def test_flawed_rows_are_found_by_check_and_dropped_by_clean(pools, domain, tmp_path, capsys):
    tools, pool = pools[domain]
    rows = tools.make_rows(pool, 40, seed=3, flawed=0.25)
    index = tools.index(pool)
    assert sum(tools.is_correct(r, index) for r in rows) == 30  # exactly the flawed share is wrong
    assert tools.make_rows(pool, 40, seed=3, flawed=0.25) == rows  # seeded
    write_jsonl(tmp_path / "pool.jsonl", pool)
    write_jsonl(tmp_path / "rows.jsonl", rows)
    assert tools.main(["check", str(tmp_path / "rows.jsonl"), "--pool", str(tmp_path / "pool.jsonl")]) == 0
    assert "30/40 rows" in capsys.readouterr().out
    tools.main(
        [
            "clean",
            str(tmp_path / "rows.jsonl"),
            str(tmp_path / "clean.jsonl"),
            "--pool",
            str(tmp_path / "pool.jsonl"),
        ]
    )
    clean = read_jsonl(tmp_path / "clean.jsonl")
    assert len(clean) == 30 and all(tools.is_correct(r, index) for r in clean)
    tools.main(["from-pool", str(tmp_path / "pool.jsonl"), str(tmp_path / "gold.jsonl"), "--n", "20"])
    assert all(tools.is_correct(r, index) for r in read_jsonl(tmp_path / "gold.jsonl"))


def test_swe_rows_show_the_function_the_issue_names_and_the_fix_applies(pools):
    tools, pool = pools["swe"]
    for inst in pool:
        path, lines = tools.view(inst)
        assert path == inst["fix"]["path"] and inst["fix"]["old"] in lines
        old, new = tools.gold_edit(inst)
        after = swe_prompting.apply_edit(inst["files"][path], old, new)
        assert after == inst["files"][path].replace(inst["fix"]["old"], inst["fix"]["new"])


def test_swe_fuzzy_edit_repairs_a_mis_copied_line_and_plain_does_not():
    text = "def f(xs):\n    total = sum(xs)\n    return total / len(xs)\n"
    assert swe_prompting.apply_edit(text, "return total / len(x)", "return 0") is None
    fixed = swe_prompting.apply_edit(text, "return total / len(x)", "return 0", fuzzy=True)
    assert fixed == "def f(xs):\n    total = sum(xs)\n    return 0\n"
    assert (
        swe_prompting.parse_edit("a => b\nmore") == ("a", "b")
        and swe_prompting.parse_edit("no arrow") is None
    )


def test_terminal_grounding_snaps_unnamed_paths_to_the_instructions_and_leaves_named_ones():
    from vtb.domains.terminal.kit.prompting import ground_paths

    instruction = "Count the lines in /app/db.log that contain PANIC and write the number to /app/paths.txt."
    assert ground_paths("grep -c 'PANIC' /app/server.log > /app/names.txt", instruction) == (
        "grep -c 'PANIC' /app/db.log > /app/paths.txt"
    )
    assert ground_paths("grep -c 'PANIC' /app/db.log > /app/paths.txt", instruction) == (
        "grep -c 'PANIC' /app/db.log > /app/paths.txt"
    )
    folder = "Replace every copper with pepper in all .json files in /app/notes."
    assert ground_paths("sed -i 's/copper/pepper/g' /app/notes/*.json", folder).endswith("/app/notes/*.json")
    assert ground_paths("", instruction) == ""
