"""The measured figures the docs quote come from one generated table (docs/measured.md, issue 39).

The page is the rendering of docs/measured.json, whose rows scripts/measured.py reads off run
records; the README's headline figures (the default run's time, scores, FLOPs and fingerprint)
must be that table's, so a figure cannot be hand-copied out of date."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("measured", ROOT / "scripts" / "measured.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_is_the_rendering_of_the_rows() -> None:
    measured = _script()
    assert (ROOT / "docs" / "measured.md").read_text() == measured.render(measured.rows())


def test_the_readme_quotes_the_default_run_row() -> None:
    (row,) = [r for r in _script().rows() if r["what"] == "default run"]
    readme = (ROOT / "README.md").read_text()
    head = readme.splitlines()[3]  # the first command's line
    assert f"{row['process_seconds']:.0f} s measured" in head, head
    (second,) = [r for r in _script().rows() if r["what"] == "default run, second on the machine"]
    assert f"{second['process_seconds']:.0f} s once it has made its base model" in head, head
    (install,) = [r for r in _script().rows() if r["what"] == "install"]
    assert f"install {install['process_seconds'] / 60:.0f} min with a warm pip cache" in head, head
    assert re.search(rf"initial system \(test\) +{row['initial']:.3f}\n", readme)
    assert re.search(rf"submitted by greedy \(test\) +{row['submitted']:.3f}\n", readme)
    assert re.search(rf"reference system \(test\) +{row['reference']:.3f}\n", readme)
    assert (
        f"({row['flops']} to the unit)" in readme
        and f"reproducibility             {row['fingerprint']} " in readme
    )


def test_the_readme_quotes_the_test_suite_row() -> None:
    (row,) = [r for r in _script().rows() if r["what"] == "test suite"]
    line = (ROOT / "README.md").read_text().splitlines()[4]  # the second command's line
    assert f"{row['bench_seconds'] / 60:.0f} min on 2 cores" in line, line


def test_a_row_is_read_off_a_record(tmp_path) -> None:
    """`add` reads the figures from the record (rewards file and all), not from its caller."""
    measured = _script()
    record = tmp_path / "math-greedy-s0-x"
    record.mkdir()
    result = {
        "schema_version": 3,
        "run_id": "math-greedy-s0-x",
        "git": {"commit": "0123456789abcdef", "dirty": False},
        "ended_at": "2026-12-06T10:00:00+00:00",
        "initial": {"test_score": 0.03},
        "submitted": {"test_score": 0.17},
        "reference": None,
        "budget": {"flops": 4083092797952.0},
        "reproducibility": {"id": "82a38ef15b4c"},
    }
    (record / "result.json").write_text(json.dumps(result))
    (record / "timings.json").write_text(json.dumps({"wall_seconds": 403.56}))
    row = measured.row_of(record, "default run", "python -m flows.bench", "fresh machine", 418.0)
    assert (row["commit"], row["bench_seconds"], row["reference"], row["flops"]) == (
        "0123456",
        403.56,
        None,
        4083092797952,
    )
    line = measured.render([row]).splitlines()[-1]
    assert "| 418.0 s | 403.6 s | 0.030 | 0.170 | - | 4083092797952 | 82a38ef15b4c |" in line
