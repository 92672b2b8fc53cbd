"""The `from-pool` / `check` / `clean` command line shared by data tools whose rows come from gold answers.

A domain supplies how to make n rows from its train pool, how to index the pool by prompt and
when a row is correct (its completion is the gold one); this module does the arguments and I/O.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import ModuleType

from vtb.domains.kit.jsonl import read_jsonl, write_jsonl


def parser(tool: ModuleType) -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """A kit tool's `python -m <module>` parser (its docstring as the help) and its subcommands."""
    module = tool.__spec__.name if tool.__spec__ else tool.__name__  # the real name under -m too
    ap = argparse.ArgumentParser(
        prog=f"python -m {module}",
        description=tool.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return ap, ap.add_subparsers(dest="cmd", required=True)


def run_cli(argv: list[str] | None, tool: ModuleType, *, default_n: int, gold: str) -> int:
    """The CLI of the data tool module `tool`, which defines `make_rows(pool, n, seed)`,
    `index(pool) -> {prompt: item}` and `is_correct(row, by_prompt)`; `gold` names the gold part
    in messages ("reference command", "gold edit")."""
    make_rows, index, is_correct = tool.make_rows, tool.index, tool.is_correct
    ap, sub = parser(tool)
    p = sub.add_parser("from-pool", help=f"SFT rows with the {gold} of train pool items")
    p.add_argument("pool"), p.add_argument("out")
    p.add_argument("--n", type=int, default=default_n), p.add_argument("--seed", type=int, default=0)
    for name, text in (
        ("check", f"count rows with the {gold}"),
        ("clean", f"keep only rows with the {gold}"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("rows")
        if name == "clean":
            p.add_argument("out")
        p.add_argument("--pool", default="/data/pool.jsonl")
    args = ap.parse_args(argv)
    if args.cmd == "from-pool":
        rows = make_rows(read_jsonl(Path(args.pool)), args.n, args.seed)
        write_jsonl(Path(args.out), rows)
        print(f"wrote {len(rows)} rows to {args.out}")
        return 0
    by_prompt = index(read_jsonl(Path(args.pool)))
    rows = read_jsonl(Path(args.rows))
    good = [r for r in rows if is_correct(r, by_prompt)]
    print(f"{len(good)}/{len(rows)} rows have the {gold}")
    if args.cmd == "clean":
        write_jsonl(Path(args.out), good)
        print(f"wrote {len(good)} rows to {args.out}")
    return 0
