"""Seeded generator of Terminal-Bench-style tasks: small, real shell chores with hidden pytest checks.

A tiny language model learns to write each task's solution from its instruction, so within a
template the solution always has the same one-line shape and only the seeded values change,
and every value it needs (paths, words, numbers) appears literally in the instruction::

    Count the lines in /app/server.log that contain ERROR and write the number to /app/count.txt.
    grep -c 'ERROR' /app/server.log > /app/count.txt

The hidden tests (tests/test_outputs.py) check only the final state under /app, with the
standard library and pytest; they fail on the untouched /app and on a near miss (each builder
also returns such a `wrong` solution, which `check_task` proves fails). Task dicts follow
loaders.py's schema, so generated and published tasks share one grading path.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from pathlib import Path

from vtb.sandbox.base import Limits, Sandbox

NAMES = ["anna", "ben", "carl", "dora", "emma", "finn", "gina", "hugo"]
WORDS = """
apple river stone cloud maple tiger lemon piano robot ocean pepper violet copper falcon garden
silver
""".split()
FILLER = ["the", "big", "small", "red", "blue", "is", "near", "and", "on", "my"]
DIRS = """
data docs notes files logs reports drafts music photos backup images videos inbox outbox shared work
""".split()
OUTS = """
out.txt result.txt answer.txt count.txt total.txt list.txt output.txt summary.txt found.txt
names.txt report.txt values.txt lines.txt sum.txt top.txt paths.txt
""".split()
EXTS = ["txt", "md", "log", "csv", "dat", "bak", "json", "cfg", "yml", "ini", "xml", "tsv"]
LEVELS = ["ERROR", "WARN", "FAIL", "DENIED", "TIMEOUT", "CRITICAL", "ALERT", "PANIC"]
LOGS = """
server.log app.log access.log system.log events.log jobs.log auth.log mail.log db.log cron.log
web.log net.log
""".split()
CSVS = """
people.csv orders.csv pets.csv cities.csv items.csv staff.csv sales.csv teams.csv users.csv
stock.csv games.csv trips.csv
""".split()
SCRIPTS = ["report.sh", "hello.sh", "build.sh", "greet.sh", "stats.sh", "show.sh", "repeat.sh", "say.sh"]
SCRIPT_DIRS = ["bin", "tools", "scripts", "jobs"]
ARCHIVES = ["backup", "archive", "bundle", "pack", "snapshot", "export", "save", "store", "dump", "copy"]
SUBDIRS = ["old", "new", "misc", "temp", "extra"]
COLUMNS = {
    "name": NAMES,
    "city": ["paris", "rome", "oslo", "lima", "cairo", "delhi", "tokyo"],
    "color": ["red", "blue", "green", "black", "white", "pink"],
    "fruit": ["apple", "pear", "plum", "kiwi", "mango", "grape"],
    "pet": ["cat", "dog", "fish", "bird", "frog"],
    "team": ["north", "south", "east", "west"],
    "size": ["tiny", "small", "large", "huge"],
    "day": ["monday", "tuesday", "friday", "sunday"],
}
NUMBER_COLUMNS = ["price", "qty", "score", "age", "points", "weight", "height", "cost"]

TEST_HEADER = '''"""Hidden tests: they check the final state under /app."""

import os
import stat
import tarfile
from pathlib import Path
'''


# -- test snippets: each returns the source of one test function ---------------------------------


def _t_text(name: str, path: str, expected: str) -> str:
    return f"""

def test_{name}():
    path = Path({path!r})
    assert path.is_file(), "{path} is missing"
    assert path.read_text().strip() == {expected!r}
"""


def _t_lines(name: str, path: str, lines: list[str]) -> str:
    return f"""

def test_{name}():
    path = Path({path!r})
    assert path.is_file(), "{path} is missing"
    assert path.read_text().splitlines() == {lines!r}
"""


def _t_same(name: str, files: dict[str, str]) -> str:
    """Files that must hold exactly this text (untouched inputs, or the fixed result)."""
    return f"""

def test_{name}():
    for path, text in {files!r}.items():
        assert Path(path).is_file(), path + " is missing"
        assert Path(path).read_text() == text, path + " has the wrong content"
"""


def _t_listing(name: str, folder: str, names: list[str]) -> str:
    return f"""

def test_{name}():
    folder = Path({folder!r})
    assert folder.is_dir(), "{folder} is missing"
    assert sorted(p.name for p in folder.iterdir()) == {sorted(names)!r}
"""


def _file(content: str, mode: int = 0o644) -> dict:
    return {"content": content, "mode": mode}


def _task(instruction, files, solution, wrong, tests, category, tags) -> dict:
    return {
        "instruction": instruction,
        "files": files,
        "solution": solution,
        "wrong": wrong,
        "tests": TEST_HEADER + "".join(tests),
        "category": category,
        "tags": tags,
    }


def _text_lines(rng: random.Random, n: int, words: list[str] = FILLER) -> str:
    return "".join(" ".join(rng.choice(words) for _ in range(rng.randint(3, 6))) + "\n" for _ in range(n))


# -- templates --------------------------------------------------------------------------------------


def _count_matches(rng: random.Random) -> dict:
    log, word, out = rng.choice(LOGS), rng.choice(LEVELS), rng.choice(OUTS)
    levels = [word] * rng.randint(2, 9) + ["INFO"] * rng.randint(10, 20) + ["DEBUG"] * rng.randint(3, 8)
    levels += rng.sample([w for w in LEVELS if w != word], 2) * rng.randint(1, 3)
    rng.shuffle(levels)
    lines = [
        f"2024-05-{1 + i // 24:02d} {i % 24:02d}:{rng.randint(0, 59):02d} {lvl} {rng.choice(NAMES)} {rng.choice(WORDS)}\n"
        for i, lvl in enumerate(levels)
    ]
    content = "".join(lines)
    return _task(
        f"Count the lines in /app/{log} that contain {word} and write the number to /app/{out}.",
        {log: _file(content)},
        f"grep -c '{word}' /app/{log} > /app/{out}",
        f"grep -c 'INFO' /app/{log} > /app/{out}",
        [
            _t_text("count", f"/app/{out}", str(levels.count(word))),
            _t_same("log_unchanged", {f"/app/{log}": content}),
        ],
        "text-processing",
        ["grep", "logs"],
    )


def _sort_unique(rng: random.Random) -> dict:
    csv, out = rng.choice(CSVS), rng.choice(OUTS)
    columns = rng.sample(sorted(COLUMNS), rng.randint(3, 6))
    rows = [[rng.choice(COLUMNS[c]) for c in columns] for _ in range(rng.randint(8, 16))]
    k, other = rng.sample(range(1, len(columns) + 1), 2)
    content = ",".join(columns) + "\n" + "".join(",".join(r) + "\n" for r in rows)
    return _task(
        f"Write the unique values of column {k} of /app/{csv} to /app/{out}, sorted, one per line, without the header.",
        {csv: _file(content)},
        f"tail -n +2 /app/{csv} | cut -d, -f{k} | sort -u > /app/{out}",
        f"tail -n +2 /app/{csv} | cut -d, -f{other} | sort -u > /app/{out}",
        [_t_lines("unique_sorted", f"/app/{out}", sorted({r[k - 1] for r in rows}))],
        "data-processing",
        ["csv", "sort"],
    )


def _rename_ext(rng: random.Random) -> dict:
    folder = rng.choice(DIRS)
    a, b, keep, miss = rng.sample(EXTS, 4)
    words = rng.sample(WORDS, rng.randint(4, 7))
    n_keep = rng.randint(1, 2)
    renamed = {w: _text_lines(rng, 2) for w in words[n_keep:]}
    kept = {f"{w}.{keep}": _text_lines(rng, 2) for w in words[:n_keep]}
    files = {f"{folder}/{w}.{a}": _file(t) for w, t in renamed.items()}
    files |= {f"{folder}/{name}": _file(t) for name, t in kept.items()}
    after = {f"/app/{folder}/{w}.{b}": t for w, t in renamed.items()} | {
        f"/app/{folder}/{n}": t for n, t in kept.items()
    }
    return _task(
        f"In /app/{folder}, rename every .{a} file so that it ends in .{b} instead. Leave other files alone.",
        files,
        f'cd /app/{folder} && for f in *.{a}; do mv "$f" "${{f%.{a}}}.{b}"; done',
        f'cd /app/{folder} && for f in *.{a}; do mv "$f" "${{f%.{a}}}.{miss}"; done',
        [_t_listing("names", f"/app/{folder}", [Path(p).name for p in after]), _t_same("contents", after)],
        "file-operations",
        ["mv", "loop"],
    )


def _run_script(rng: random.Random) -> dict:
    path = f"{rng.choice(SCRIPT_DIRS)}/{rng.choice(SCRIPTS)}"
    out, n = rng.choice(OUTS), rng.randint(2, 6)
    word, miss = rng.sample(WORDS, 2)
    script = f'#!/bin/bash\n# prints its first argument with a line number\nfor i in $(seq 1 {n}); do\n  echo "$1 $i"\ndone\n'
    executable = f"""

def test_executable():
    mode = os.stat("/app/{path}").st_mode
    assert mode & stat.S_IXUSR, "/app/{path} is not executable"
"""
    return _task(
        f"Make /app/{path} executable, then run it with the argument {word} and write its output to /app/{out}.",
        {path: _file(script)},
        f"chmod +x /app/{path} && /app/{path} {word} > /app/{out}",
        f"chmod +x /app/{path} && /app/{path} {miss} > /app/{out}",
        [executable, _t_lines("output", f"/app/{out}", [f"{word} {i}" for i in range(1, n + 1)])],
        "scripting",
        ["chmod", "bash"],
    )


def _fix_script(rng: random.Random) -> dict:
    name, out = rng.choice(SCRIPTS), rng.choice(OUTS)
    if rng.random() < 0.5:  # a wrong count
        bad, good, miss = (str(v) for v in rng.sample(range(2, 10), 3))
        word = rng.choice(WORDS)
        broken = f"#!/bin/bash\nfor i in $(seq 1 {bad}); do\n  echo {word}\ndone\n"
        output = [word] * int(good)
    else:  # a wrong word
        bad, good, miss = rng.sample(WORDS, 3)
        n = rng.randint(2, 5)
        broken = f"#!/bin/bash\nfor i in $(seq 1 {n}); do\n  echo {bad}\ndone\n"
        output = [good] * n
    assert broken.count(bad) == 1, broken  # the one-line sed fix replaces exactly the bug
    return _task(
        f"/app/{name} has a bug: it uses {bad} where it should use {good}. "
        f"Fix it, then run it with bash and write its output to /app/{out}.",
        {name: _file(broken)},
        f"sed -i 's/{bad}/{good}/' /app/{name} && bash /app/{name} > /app/{out}",
        f"sed -i 's/{bad}/{miss}/' /app/{name} && bash /app/{name} > /app/{out}",
        [
            _t_same("script_fixed", {f"/app/{name}": broken.replace(bad, good)}),
            _t_lines("output", f"/app/{out}", output),
        ],
        "debugging",
        ["sed", "bash"],
    )


def _archive(rng: random.Random) -> dict:
    folder, other = rng.sample(DIRS, 2)
    name = f"{rng.choice(ARCHIVES)}_{rng.randint(1, 9)}"
    inside = {
        f"{folder}/{w}.{rng.choice(EXTS)}": _text_lines(rng, 3) for w in rng.sample(WORDS, rng.randint(2, 4))
    }
    inside[f"{folder}/{rng.choice(SUBDIRS)}/{rng.choice(WORDS)}.txt"] = _text_lines(rng, 2)
    outside = {f"{other}/{w}.txt": _text_lines(rng, 2) for w in rng.sample(WORDS, 2)}
    check = f"""

def test_archive():
    path = Path("/app/{name}.tar.gz")
    assert path.is_file(), "/app/{name}.tar.gz is missing"
    with tarfile.open(path, "r:gz") as tar:
        files = {{}}
        for member in tar.getmembers():
            name = member.name.removeprefix("./")
            assert name == {folder!r} or name.startswith({folder + "/"!r}), "unexpected member " + name
            if member.isfile():
                files[name] = tar.extractfile(member).read().decode()
    assert files == {inside!r}
"""
    return _task(
        f"Pack the folder /app/{folder} into the gzip tar archive /app/{name}.tar.gz, with {folder}/ at the top of the archive.",
        {rel: _file(t) for rel, t in (inside | outside).items()},
        f"tar -czf /app/{name}.tar.gz -C /app {folder}",
        f"tar -czf /app/{name}.tar.gz -C /app {other}",
        [check],
        "file-operations",
        ["tar", "gzip"],
    )


def _largest_file(rng: random.Random) -> dict:
    folder, out = rng.choice(DIRS), rng.choice(OUTS)
    ext, miss = rng.sample(EXTS, 2)
    words = rng.sample(WORDS, rng.randint(4, 7))
    names = [f"{w}.{ext}" for w in words[:-2]] + [f"{w}.{miss}" for w in words[-2:]]
    rng.shuffle(names)
    names.remove(top := next(n for n in names if n.endswith(f".{miss}")))
    order = [top, *names]  # the largest of all is a .miss file, so the extension matters
    sizes = sorted(rng.sample(range(40, 1500, 10), len(order)), reverse=True)
    files = {
        f"{folder}/{n}": _file(("abcdefghij" * 200)[: s - 1] + "\n")
        for n, s in zip(order, sizes, strict=True)
    }
    largest = next(n for n in order if n.endswith(f".{ext}"))
    return _task(
        f"Find the largest .{ext} file in /app/{folder} and write its name to /app/{out}.",
        files,
        f"cd /app/{folder} && ls -S *.{ext} | head -n 1 > /app/{out}",
        f"cd /app/{folder} && ls -S *.{miss} | head -n 1 > /app/{out}",
        [_t_text("largest", f"/app/{out}", largest)],
        "file-operations",
        ["ls", "sizes"],
    )


def _replace_text(rng: random.Random) -> dict:
    folder = rng.choice(DIRS)
    ext, keep = rng.sample(EXTS, 2)
    old, new, miss = rng.sample(WORDS, 3)
    vocab = FILLER + [old]
    changed = {
        f"{folder}/{w}.{ext}": _text_lines(rng, 4, vocab) + f"{old}\n"
        for w in rng.sample(NAMES, rng.randint(2, 4))
    }
    kept = {f"{folder}/{rng.choice(NAMES)}.{keep}": _text_lines(rng, 2, vocab) + f"{old}\n"}
    after = {f"/app/{p}": t.replace(old, new) for p, t in changed.items()} | {
        f"/app/{p}": t for p, t in kept.items()
    }
    return _task(
        f"Replace every {old} with {new} in all .{ext} files in /app/{folder}. Leave other files alone.",
        {p: _file(t) for p, t in (changed | kept).items()},
        f"sed -i 's/{old}/{new}/g' /app/{folder}/*.{ext}",
        f"sed -i 's/{old}/{miss}/g' /app/{folder}/*.{ext}",
        [_t_same("contents", after)],
        "text-processing",
        ["sed", "replace"],
    )


def _find_files(rng: random.Random) -> dict:
    folder, other = rng.sample(DIRS, 2)
    out = rng.choice(OUTS)
    ext, miss = rng.sample(EXTS, 2)
    paths = []
    for w in rng.sample(WORDS, rng.randint(5, 8)):
        depth = rng.sample(SUBDIRS, rng.randint(0, 2))
        paths.append("/".join([folder, *depth, f"{w}.{rng.choice([ext, ext, miss])}"]))
    paths.append(f"{folder}/{rng.choice(SUBDIRS)}/{rng.choice(NAMES)}.{ext}")  # one below the top, at least
    paths.append(f"{other}/{rng.choice(NAMES)}.{ext}")  # outside the folder: not listed
    files = {p: _file(_text_lines(rng, 1)) for p in paths}
    return _task(
        f"Write the full paths of all .{ext} files under /app/{folder}, at any depth, sorted, one per line, to /app/{out}.",
        files,
        f"find /app/{folder} -name '*.{ext}' | sort > /app/{out}",
        f"find /app/{folder} -name '*.{miss}' | sort > /app/{out}",
        [
            _t_lines(
                "paths",
                f"/app/{out}",
                sorted(f"/app/{p}" for p in files if p.startswith(folder + "/") and p.endswith(f".{ext}")),
            )
        ],
        "file-operations",
        ["find", "sort"],
    )


def _sum_column(rng: random.Random) -> dict:
    csv, out = rng.choice(CSVS), rng.choice(OUTS)
    columns = rng.sample(NUMBER_COLUMNS, rng.randint(2, 5))
    k, other = rng.sample(range(2, len(columns) + 2), 2)
    rows: list[list] = []
    while not rows or sum(r[k - 1] for r in rows) == sum(r[other - 1] for r in rows):
        rows = [
            [rng.choice(NAMES)] + [rng.randint(1, 500) for _ in columns] for _ in range(rng.randint(5, 12))
        ]
    content = "name," + ",".join(columns) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows)
    return _task(
        f"Add up the numbers in column {k} of /app/{csv}, skipping the header line, and write the sum to /app/{out}.",
        {csv: _file(content)},
        f"awk -F, 'NR>1 {{s+=${k}}} END {{print s}}' /app/{csv} > /app/{out}",
        f"awk -F, 'NR>1 {{s+=${other}}} END {{print s}}' /app/{csv} > /app/{out}",
        [_t_text("sum", f"/app/{out}", str(sum(r[k - 1] for r in rows)))],
        "data-processing",
        ["awk", "csv"],
    )


def _copy_files(rng: random.Random) -> dict:
    src, dst = rng.sample(DIRS, 2)
    ext, miss = rng.sample(EXTS, 2)
    words = rng.sample(WORDS, rng.randint(4, 6))
    n_copy = rng.randint(2, len(words) - 2)
    copied = {f"{w}.{ext}": _text_lines(rng, 2) for w in words[:n_copy]}
    others = {f"{w}.{miss}": _text_lines(rng, 2) for w in words[n_copy:]}
    files = {f"{src}/{n}": _file(t) for n, t in (copied | others).items()}
    return _task(
        f"Copy every .{ext} file from /app/{src} into a new folder /app/{dst}.",
        files,
        f"mkdir -p /app/{dst} && cp /app/{src}/*.{ext} /app/{dst}/",
        f"mkdir -p /app/{dst} && cp /app/{src}/*.{miss} /app/{dst}/",
        [
            _t_listing("copied", f"/app/{dst}", list(copied)),
            _t_same("contents", {f"/app/{dst}/{n}": t for n, t in copied.items()}),
            _t_same("source_kept", {f"/app/{src}/{n}": t for n, t in (copied | others).items()}),
        ],
        "file-operations",
        ["cp", "mkdir"],
    )


BUILDERS: dict[str, Callable[[random.Random], dict]] = {
    "count_matches": _count_matches,
    "sort_unique": _sort_unique,
    "rename_ext": _rename_ext,
    "run_script": _run_script,
    "fix_script": _fix_script,
    "archive": _archive,
    "largest_file": _largest_file,
    "replace_text": _replace_text,
    "find_files": _find_files,
    "sum_column": _sum_column,
    "copy_files": _copy_files,
}
TEMPLATES: list[str] = list(BUILDERS)


# -- tasks ------------------------------------------------------------------------------------------


def make_task_and_wrong(rng: random.Random, template: str, task_id: str) -> tuple[dict, str]:
    """A task and a near-miss solution (one seeded value changed) that its tests must reject."""
    built = BUILDERS[template](rng)
    task = {
        "id": task_id,
        "template": template,
        "instruction": built["instruction"],
        "files": built["files"],
        "solution": built["solution"],
        "tests": {"test_outputs.py": built["tests"]},
        "difficulty": "easy",
        "category": built["category"],
        "tags": built["tags"],
        "parser_name": "pytest",
        "max_agent_timeout_sec": 60,
        "max_test_timeout_sec": 30,
    }
    return task, built["wrong"]


def make_task(rng: random.Random, template: str, id: str) -> dict:
    """One task of `template`, its values drawn from `rng`."""
    return make_task_and_wrong(rng, template, id)[0]


def task_key(task: dict) -> tuple[str, str]:
    """What two tasks must not share across splits: the instruction fixes the expected solution."""
    return (task["template"], task["instruction"])


def make_tasks(seed: int, n: int, prefix: str, exclude: set) -> list[dict]:
    """n tasks cycling over TEMPLATES; a task whose key is already in `exclude` is drawn again.

    `exclude` is updated in place, so calls sharing it (train, val, test) give disjoint tasks.
    """
    rng = random.Random(seed)
    tasks: list[dict] = []
    misses = 0
    while len(tasks) < n:
        template = TEMPLATES[len(tasks) % len(TEMPLATES)]
        task = make_task(rng, template, f"{prefix}-{len(tasks):04d}")
        key = task_key(task)
        if key in exclude:
            misses += 1
            if misses > 10_000:
                raise ValueError(f"cannot draw {n} distinct {prefix} tasks: template {template} ran out")
            continue
        misses = 0
        exclude.add(key)
        tasks.append(task)
    return tasks


def check_task(task: dict, sandbox: Sandbox, wrong: str | None = None) -> None:
    """Prove a task through the real episode and grading path; AssertionError with the log if not.

    The solution must exit 0 and resolve; the untouched /app (the empty action) and, if given,
    the `wrong` solution must not.
    """
    from vtb.domains.shell import ShellSession
    from vtb.domains.terminal.grading import resolved, run_tests
    from vtb.domains.terminal.loaders import write_app

    limits = Limits(wall_seconds=60, cpu_seconds=60)
    cases = [("solution", task["solution"], True), ("empty action", None, False)]
    if wrong is not None:
        cases.append(("wrong solution", wrong, False))
    with tempfile.TemporaryDirectory(prefix="vtb-check-") as tmp:
        for i, (label, command, should_pass) in enumerate(cases):
            app = Path(tmp) / str(i)
            write_app(task, app)
            if command is not None:
                with ShellSession(sandbox, app, limits) as shell:
                    ran = shell.run(command, timeout=task["max_agent_timeout_sec"])
                assert label != "solution" or ran["exit_code"] == 0, (
                    f"{task['id']}: the solution fails: {ran}"
                )
            statuses, log = run_tests(sandbox, app, task, limits)
            assert resolved(statuses) == should_pass, (
                f"{task['id']} ({task['template']}): the {label} {'fails' if should_pass else 'passes'} "
                f"the tests:\n{log}"
            )
