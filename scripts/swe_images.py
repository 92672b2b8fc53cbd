"""Build SWE-bench instance images in the official layout (sweb.eval.x86_64.<instance_id>:latest).

    # online: swebench's own builder, from its task repo (a local clone or GitHub "owner/name");
    # needs network and `docker buildx`
    python scripts/swe_images.py build --task-repo <task repo> [-i <instance_id> ...] [-j 4]

    # offline: a stand-in in the same layout from a git checkout at the instances' base_commit
    # (FROM vtb/hostroot; /testbed; a conda stand-in with pytest): what the tests grade on
    python scripts/swe_images.py stand-in --testbed <checkout> -i <instance_id> ... [--dataset D]

With --dataset (a .json/.jsonl/.parquet of SWE-bench records) the stand-in is tagged for the
dataset's instances (or the -i ones among them), each checked to have base_commit == the
checkout's HEAD. Exit codes: 0 built, 1 an image could not be built (the message says why and
what to do), 2 a usage error. The code is vtb/domains/swe/images.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's vtb, not an installed one

from vtb.domains.swe import images  # noqa: E402


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python scripts/swe_images.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="online: swebench's own image builder, from its task repo")
    build.add_argument("--task-repo", required=True, help="local task repo or GitHub owner/name")
    build.add_argument("-i", "--instance-ids", nargs="+", default=None)
    build.add_argument("-j", "--workers", type=int, default=4)
    stand = sub.add_parser("stand-in", help="offline: a stand-in image in the official layout")
    stand.add_argument("--testbed", required=True, type=Path, help="git checkout at the base_commit")
    stand.add_argument("-i", "--instance-ids", nargs="+", default=None)
    stand.add_argument("--dataset", default=None, help="SWE-bench records: tag their ids, check base_commit")
    stand.add_argument(
        "--base", default=images.HOSTROOT, help="base image (scripts/build_images.sh hostroot)"
    )
    return p


def stand_in_ids(args: argparse.Namespace) -> list[str]:
    """The ids to tag; with --dataset, each checked against the checkout's HEAD."""
    if not args.dataset:
        if not args.instance_ids:
            raise ValueError("stand-in needs -i <instance_id> ... or --dataset")
        return args.instance_ids
    from vtb.domains.swe import loaders

    records = {r["instance_id"]: r for r in loaders.load_instances(args.dataset)}
    ids = args.instance_ids or list(records)
    unknown = [i for i in ids if i not in records]
    if unknown:
        raise ValueError(f"not in {args.dataset}: {' '.join(unknown)}")
    head = images.head_commit(args.testbed)
    other = [f"{i} ({records[i]['base_commit'][:12]})" for i in ids if records[i]["base_commit"] != head]
    if other:
        raise ValueError(f"{args.testbed} is at {head[:12]}, not at the base_commit of {', '.join(other)}")
    return ids


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "build":
            names = images.build_official(args.task_repo, args.instance_ids, args.workers)
        else:
            names = images.build_stand_in(args.testbed, stand_in_ids(args), args.base)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except images.BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for name in names:
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
