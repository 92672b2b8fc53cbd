"""Apply unified diffs the way SWE-bench does, and build them from one-line edits.

SWE-bench counts a model patch as applied if any step of a fallback chain takes it: `git apply`,
then `git apply --reject`, then GNU `patch` with fuzz, so slightly-off line numbers or context still
apply. Between steps the tree goes back to how it was before the first one (a failed `--reject`
leaves half a patch behind), and a patch that applies nowhere leaves the tree untouched.

Model patches are untrusted. They are applied inside the sandbox with only the repository
writable, and a patch that names a path in `.git`, outside the repository, or creates a symlink is
refused before anything runs: GNU `patch` would happily write `.git/hooks/*` or `.git/config`, and
git commands run later on the same repository would then execute it.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

from vtb.domains.swe.kit.diffs import diff_from_edit, file_diff  # noqa: F401  (re-exported)
from vtb.sandbox.base import Limits, Mount, Sandbox
from vtb.sandbox.runtime import runtime_mounts

# SWE-bench's chain (harness/run_evaluation.py). --forward stops `patch --batch` from reverse-applying
# a patch that looks already applied (current SWE-bench passes it too); --no-backup-if-mismatch
# keeps `*.orig` files out of the tree after a fuzzy apply.
APPLY_CMDS = (
    "git apply --verbose",
    "git apply --verbose --reject",
    "patch --batch --forward --fuzz=5 -p1 --no-backup-if-mismatch -i",
)
APPLIED, APPLY_FAILED = ">>>>> Applied Patch", ">>>>> Patch Apply Failed"  # SWE-bench's log markers
DEFAULT_LIMITS = Limits(wall_seconds=60.0, cpu_seconds=60.0)
# The environment for git, local or sandboxed: no user or system config (hooks, autocrlf, signing).
GIT_ENV = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"}

# $1 = patch file, $2 = a scratch index file. The pre-apply state is saved as a tree object through
# the scratch index (the repository's own index is never touched) and restored after a failed step;
# only when the folder is the top of a git work tree, so an enclosing repository is never reset.
_SCRIPT = """exec 2>&1
patch_file=$1 index=$2
git() { command git -c core.hooksPath=/dev/null -c core.fsmonitor=false "$@"; }
snap() { env GIT_INDEX_FILE="$index" git -c core.hooksPath=/dev/null -c core.fsmonitor=false "$@"; }
tree=""
if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$(pwd -P)" ]; then
  tree=$(snap add -A . && snap write-tree) || tree=""
fi
for cmd in CMDS; do
  if $cmd "$patch_file"; then echo "APPLIED ($cmd)"; exit 0; fi
  echo "Failed to apply patch: $cmd"
  if [ -n "$tree" ]; then snap read-tree --reset -u "$tree" && snap clean -fdq; fi
done
echo "FAILED"
exit 1
"""
APPLY_SCRIPT = (
    _SCRIPT.replace("CMDS", " ".join(f"'{c}'" for c in APPLY_CMDS))
    .replace("APPLIED", APPLIED)
    .replace("FAILED", APPLY_FAILED)
)

_PATH_LINE = re.compile(
    r"^(?:diff --git |--- |\+\+\+ |rename from |rename to |copy from |copy to |Index: )(.*)$"
)
_SYMLINK = re.compile(r"^(?:new file mode|new mode|old mode|deleted file mode) 120000\b")


def unsafe_paths(patch: str) -> list[str]:
    """Paths in the patch's file headers that point into `.git`, outside the tree, or are symlinks."""
    bad = []
    for line in patch.splitlines():
        if _SYMLINK.match(line):
            bad.append(f"symlink ({line.strip()})")
            continue
        m = _PATH_LINE.match(line)
        if not m:
            continue
        for token in m.group(1).split("\t")[0].split():
            path = token.strip('"')
            if path == "/dev/null":
                continue
            parts = [p.lower() for p in path.split("/")]
            if path.startswith("/") or ".." in parts or ".git" in parts:
                bad.append(path)
    return bad


def apply_patch(
    repo_dir: Path, patch: str, sandbox: Sandbox | None = None, limits: Limits | None = None
) -> tuple[bool, str]:
    """Apply `patch` to `repo_dir` with SWE-bench's fallback chain; (applied, log).

    With a sandbox the chain runs inside it, the repository at /repo (the only writable path) and
    the patch in a private read-only folder. Without one it runs locally: trusted patches only.
    """
    if not patch or not patch.strip():
        return False, "empty patch"
    bad = unsafe_paths(patch)
    if bad:
        return False, f"{APPLY_FAILED}: refused, the patch touches unsafe paths: {', '.join(bad)}"
    if not patch.endswith("\n"):
        patch += "\n"  # git apply calls a patch whose last line lacks its newline corrupt
    limits = limits or DEFAULT_LIMITS
    repo_dir = Path(repo_dir).resolve()
    with tempfile.TemporaryDirectory(prefix="vtb-patch-") as tmp:
        (Path(tmp) / "patch.diff").write_text(patch, encoding="utf-8")
        if sandbox is None:
            return _run_local(repo_dir, Path(tmp), limits)
        mounts = [*runtime_mounts(), Mount(repo_dir, "/repo", writable=True), Mount(Path(tmp), "/patch")]
        argv = ["/bin/sh", "-c", APPLY_SCRIPT, "vtb-apply", "/patch/patch.diff", "/tmp/vtb-apply.index"]
        result = sandbox.run(argv, mounts=mounts, limits=limits, cwd="/repo", env=GIT_ENV)
    log = result.stdout + result.stderr
    if result.killed:
        return False, f"{log}\n{APPLY_FAILED}: killed ({result.killed} limit)"
    return result.returncode == 0, log


def _run_local(repo_dir: Path, tmp: Path, limits: Limits) -> tuple[bool, str]:
    argv = ["/bin/sh", "-c", APPLY_SCRIPT, "vtb-apply", str(tmp / "patch.diff"), str(tmp / "apply.index")]
    try:
        done = subprocess.run(
            argv,
            cwd=repo_dir,
            env={**os.environ, **GIT_ENV},
            capture_output=True,
            text=True,
            timeout=limits.wall_seconds,
        )
    except subprocess.TimeoutExpired:
        return False, f"{APPLY_FAILED}: timed out after {limits.wall_seconds:g} s"
    return done.returncode == 0, done.stdout + done.stderr
