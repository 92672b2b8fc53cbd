"""Grade one SWE-bench prediction on its official evaluation image, with swebench's own rules.

Why this module exists: a real SWE-bench number must come from the environment, eval script and
log parser the benchmark publishes, not from a re-implementation. So the `swebench` package
makes the test spec (the eval script, the image key, the log parser) and grades the log
(`get_eval_report`); this module only runs it inside this project's sandbox and guards the
seams where a hostile patch could lie.

How one prediction is graded: a fresh container from the instance image (DockerSandbox.with_image:
no network, no capabilities, metered limits; its root writable by design), with a read-only
folder at /vtb-eval holding the model patch and the eval script cut in three (setup, tests,
reset). A driver applies the patch in /testbed with SWE-bench's fallback chain (patching.py),
then runs the three parts in one shell, so the eval script behaves exactly as published.

The test-output markers are the weak point of swebench's log format: the code under test prints
into the same stream, so a patch can print ">>>>> End Test Output" and ">>>>> Test Exit Code: 0"
after a few PASSED lines, and swebench would grade the forged block (the first markers win).
Here the driver, not the script, prints the markers, each with a random nonce that reaches the
container only on the shell's stdin (read into an unexported variable, stdin closed again), so
nothing in the image, the environment or the files shows it. The host keeps only the block
between the nonce markers, defuses every ">>>>>" inside it, and writes test_output.txt with
plain markers and the real exit status around that block alone: that file is what swebench
grades, and re-grading it with swebench gives the same answer. What stays possible, as in any
harness, is the patched package faking its own test run from inside the test process (e.g.
printing PASSED and exiting 0); the sandbox bounds that to this instance's score.
"""

from __future__ import annotations

import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

from vtb import safefs
from vtb.domains.swe import grading
from vtb.domains.swe.patching import APPLY_FAILED, APPLY_SCRIPT, unsafe_paths
from vtb.sandbox.base import Limits, Mount

INSTALL_HINT = "pip install '.[swebench]'  (or: pip install 'swebench>=4')"
DEFAULT_LIMITS = Limits(wall_seconds=1800.0, cpu_seconds=7200.0, memory_mb=8192, max_processes=4096)
DEFAULT_NAMESPACE = "swebench"  # where the published images live on Docker Hub
MAX_TEST_LOG = 4 << 20  # characters of test output graded (head and tail kept)
EVAL_DIR = "/vtb-eval"
WORKDIR = "/testbed"
ERROR_KEY = "error"  # our addition to report.json: why an instance could not be graded
REPORT_FLAGS = ("patch_is_None", "patch_exists", "patch_successfully_applied", "resolved")
_V5_FIELDS = ("image", "eval_script", "log_parser", "eval_type")

# The driver: $1 is nothing; the nonce arrives as the first line of stdin. vtb_mark prints a
# marker with xtrace off (its own trace goes to /dev/null), so the nonce is never echoed twice.
DRIVER = f"""exec 2>&1
IFS= read -r VTB_N || exit 97
exec </dev/null
vtb_mark() {{
  {{ case $- in *x*) set +x; vtb_x=1;; *) vtb_x=0;; esac; }} 2>/dev/null
  printf '%s %s%s\\n' "$1" "$VTB_N" "${{2:+ $2}}"
  if [ "$vtb_x" = 1 ]; then set -x; fi
  return 0
}}
cd {WORKDIR} || {{ vtb_mark VTB-APPLY-FAILED; exit 1; }}
if env GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 LC_ALL=C \\
    sh {EVAL_DIR}/apply.sh {EVAL_DIR}/patch.diff /tmp/vtb-apply.index; then
  vtb_mark VTB-APPLIED
else
  vtb_mark VTB-APPLY-FAILED; exit 1
fi
set -uxo pipefail
source {EVAL_DIR}/setup.sh
vtb_mark VTB-START
source {EVAL_DIR}/tests.sh
vtb_rc=$?
vtb_mark VTB-END
vtb_mark VTB-EXIT "$vtb_rc"
source {EVAL_DIR}/reset.sh
"""


class SwebenchMissing(RuntimeError):
    """The optional `swebench` package is not installed."""


class SpecError(ValueError):
    """swebench cannot make an instance's test spec: the instance, what is wrong, and the fix."""

    def __init__(self, iid: str, what: str, fix: str):
        self.iid, self.what, self.fix = iid, what, fix
        super().__init__(f"{iid}: {what}; {fix}")


class ImageUnavailable(RuntimeError):
    """The instance's evaluation image is neither here nor pullable."""


@dataclass
class Official:
    """What swebench says about one instance: its TestSpec and the image names it may run in."""

    instance_id: str
    spec: object  # swebench's TestSpec (v4 or v5)
    images: list[str]
    setup: list[str]
    tests: list[str]
    reset: list[str]


def swebench_api() -> tuple:
    """(make_test_spec, get_eval_report, major version), imported only here, on first use."""
    try:
        import swebench
        from swebench.harness.grading import get_eval_report
    except ImportError as e:
        raise SwebenchMissing(
            f"grading on the official SWE-bench images needs the swebench package ({e}); {INSTALL_HINT}"
        ) from None
    try:  # swebench 4: the spec is built from its per-repository tables
        from swebench.harness.test_spec.test_spec import make_test_spec

        return make_test_spec, get_eval_report, 4
    except ImportError:
        from swebench.harness.utils import make_test_spec

        return make_test_spec, get_eval_report, int(str(swebench.__version__).split(".")[0])


def image_names(instance_id: str, namespace: str | None = DEFAULT_NAMESPACE) -> tuple[str, str]:
    """(local name, namespaced name) of an instance's image, as swebench's harness spells them."""
    local = f"sweb.eval.x86_64.{instance_id}:latest".lower()
    remote = f"{namespace}/{local}".replace("__", "_1776_").lower() if namespace else local
    return local, remote


def _v5_instance(instance: dict, task_repo: str | None = None) -> dict:
    """swebench 5 reads image, eval script and parser from the instance: fill what can be known.

    A record in the data set card's schema has no eval_script; swebench 5's source of truth for
    it is a task repo (tasks/<instance_id>/eval.sh, task.yaml: swebench.task.repo), so it is
    completed from `task_repo` (taskrepo.py), or refused by name with that fix.
    """
    iid = instance["instance_id"]
    if not instance.get("eval_script"):
        if not task_repo:
            raise SpecError(
                iid,
                "the record has no eval_script (the data set card's schema), and swebench 5 takes an "
                "instance's eval script, image, log_parser and eval_type from a swebench task repo "
                "(tasks/<instance_id>/eval.sh, task.yaml)",
                "set task.task_repo=<local clone of the task repo> (evaluate CLI: --task-repo), "
                "or use a data set revision that carries eval_script",
            )
        from vtb.domains.swe import taskrepo

        instance = taskrepo.complete(instance, task_repo)
    out = dict(instance)
    if not out.get("image"):
        out["image"] = image_names(iid)[1]
    if not out.get("log_parser"):
        out["log_parser"] = _parser_name(instance["repo"], iid)
    if not out.get("eval_type"):
        from swebench.harness.constants import FAIL_ONLY_REPOS

        out["eval_type"] = "fail_only" if instance["repo"] in FAIL_ONLY_REPOS else "pass_and_fail"
    for field in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        out[field] = grading.decode_test_ids(out[field])
    return out


def _parser_name(repo: str, iid: str) -> str:
    from swebench.harness import log_parsers
    from swebench.harness.log_parsers import python

    by_function = {fn: name for name, fn in log_parsers.PARSER_REGISTRY.items()}
    fn = python.MAP_REPO_TO_PARSER_PY.get(repo)
    if fn is None or fn not in by_function:
        raise SpecError(
            iid,
            f"no log_parser field, and swebench knows no log parser for repo {repo!r} "
            "(swebench.harness.log_parsers)",
            "name one in the record's log_parser field (or its task's task.yaml)",
        )
    return by_function[fn]


def official_spec(
    instance: dict, namespace: str | None = None, image: str | None = None, task_repo: str | None = None
) -> Official:
    """swebench's TestSpec of `instance`, the images to look for (in order) and its eval script in parts.

    image: an explicit image name ("{instance_id}" is filled in) instead of the spec's. namespace:
    where the published image lives ("swebench"); "" or "none" = only the locally built name.
    By default both the spec's own name and the local and namespaced official names are tried.
    task_repo: a swebench task repo that completes card-format records (no eval_script).
    Raises ValueError naming the instance when swebench cannot make its spec.
    """
    make_test_spec, _, major = swebench_api()
    iid = instance["instance_id"]
    try:
        if major >= 5:
            spec = make_test_spec(_v5_instance(instance, task_repo))
            own = spec.image
        else:  # swebench 4 builds the script from its per-repository, per-version tables
            spec = make_test_spec(instance, namespace=namespace or None)
            own = spec.instance_image_key
    except (KeyError, TypeError) as e:
        raise SpecError(
            iid,
            f"swebench {major} cannot make a test spec for repo {instance.get('repo')!r} "
            f"version {instance.get('version')!r} (missing {e}): not an instance swebench knows",
            "use a repo/version swebench knows, or a record that carries eval_script, image and log_parser",
        ) from None
    local, remote = image_names(iid, namespace if namespace is not None else DEFAULT_NAMESPACE)
    if image:
        images = [image.replace("{instance_id}", iid)]
    elif namespace is not None and namespace.lower() in ("", "none"):
        images = [local]
    elif namespace is not None:
        images = [remote]
    else:
        images = list(dict.fromkeys([own, local, remote]))
    setup, tests, reset = split_eval_script(list(spec.eval_script_list), iid)
    return Official(iid, spec, images, setup, tests, reset)


def split_eval_script(lines: list[str], iid: str = "") -> tuple[list[str], list[str], list[str]]:
    """The eval script's lines before, between and after its test-output marker lines.

    The marker lines themselves and swebench 5's exit-code bookkeeping are dropped: the driver
    prints nonce markers and records the test command's status itself.
    """
    start = next((i for i, line in enumerate(lines) if grading.START_TEST_OUTPUT in line), None)
    end = None
    if start is not None:
        end = next((i for i in range(start + 1, len(lines)) if grading.END_TEST_OUTPUT in lines[i]), None)
    if start is None or end is None:
        raise ValueError(f"{iid}: the eval script has no '{grading.START_TEST_OUTPUT}' ... end marker lines")
    tests = [line for line in lines[start + 1 : end] if not line.startswith("SWEBENCH_TEST_EXIT_CODE=")]
    reset = [line for line in lines[end + 1 :] if grading.TEST_EXIT_CODE not in line]
    return lines[:start], tests, reset


def image_howto(names: list[str], iid: str = "<instance_id>", task_repo: str | None = None) -> str:
    """How to get an instance's image here: pull, load, or build it (scripts/swe_images.py)."""
    wanted = names[0]
    repo = task_repo or "<swebench task repo>"
    return (
        f"pull it (`docker pull {wanted}`, or task.pull=true / --pull where the engine has network), or "
        f"pre-load it (elsewhere: `docker pull {wanted} && docker save {wanted} -o img.tar`, here: "
        f"`docker load -i img.tar`), or build it with swebench's own builder (online: "
        f"`python scripts/swe_images.py build --task-repo {repo} -i {iid}`); offline, a stand-in in the "
        f"official layout: `python scripts/swe_images.py stand-in --testbed <git checkout at its "
        f"base_commit> -i {iid}`"
    )


def resolve_image(
    api, names: list[str], pull: bool, iid: str = "<instance_id>", task_repo: str | None = None
) -> str:
    """The first of `names` present locally; else, with pull, the first one pulled; else a clear error."""
    import docker

    for name in names:
        try:
            api.inspect_image(name)
            return name
        except docker.errors.ImageNotFound:
            continue
    wanted = names[0]
    howto = image_howto(names, iid, task_repo)
    if not pull:
        raise ImageUnavailable(f"image {wanted} is not here (looked for {', '.join(names)}); {howto}")
    repo, _, tag = wanted.rpartition(":") if ":" in wanted.rsplit("/", 1)[-1] else (wanted, "", "latest")
    try:
        api.pull(repo, tag=tag or "latest")
        api.inspect_image(wanted)
    except Exception as e:  # noqa: BLE001 (offline, unknown image, registry error: all mean the same here)
        raise ImageUnavailable(f"image {wanted} is not here and pulling it failed ({e}); {howto}") from None
    return wanted


def empty_report(iid: str, patch: str | None) -> dict:
    return {
        iid: {
            "patch_is_None": patch is None,
            "patch_exists": False,
            "patch_successfully_applied": False,
            "resolved": False,
        }
    }


def error_report(iid: str, message: str) -> dict:
    """An instance that could not be graded: counted as an error by run_summary, as in SWE-bench."""
    report = empty_report(iid, "")
    report[iid].update(patch_exists=True, **{ERROR_KEY: message})
    return report


def defuse(text: str) -> str:
    """Container output with every '>>>>>' marker prefix made harmless (forged markers stay readable)."""
    return text.replace(">>>>>", ">>>> >")


def cut(text: str, limit: int = MAX_TEST_LOG) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[vtb: {len(text) - 2 * half} characters cut]\n{text[-half:]}"


def genuine_parts(output: str, nonce: str) -> dict:
    """Where the driver's nonce markers are in the output: applied?, the test block and its status."""
    lines = output.split("\n")
    found: dict = {"applied": None, "tests": None, "exit_code": None}
    at = {line: i for i, line in reversed(list(enumerate(lines)))}  # first occurrence of each line
    if f"VTB-APPLY-FAILED {nonce}" in at:
        found["applied"] = False
    elif f"VTB-APPLIED {nonce}" in at:
        found["applied"] = True
    start, end = at.get(f"VTB-START {nonce}"), at.get(f"VTB-END {nonce}")
    if start is not None and end is not None and end > start:
        found["tests"] = "\n".join(lines[start + 1 : end])
    prefix = f"VTB-EXIT {nonce} "
    for line in lines:
        if line.startswith(prefix) and line[len(prefix) :].lstrip("-").isdigit():
            found["exit_code"] = int(line[len(prefix) :])
            break
    return found


def graded_log(tests: str, exit_code: int) -> str:
    """test_output.txt: the genuine test block alone, between plain markers, and its real status."""
    body = cut(defuse(tests))
    return (
        f"{grading.START_TEST_OUTPUT}\n{body}\n{grading.END_TEST_OUTPUT}\n"
        f"{grading.TEST_EXIT_CODE}: {exit_code}\n"
    )


def validate_report(report: object, iid: str) -> dict:
    """swebench's report for one instance, checked: flags are booleans, test lists are strings."""
    if not isinstance(report, dict) or not isinstance(report.get(iid), dict):
        raise ValueError(f"{iid}: swebench returned no report for the instance")
    inner = report[iid]
    for key in REPORT_FLAGS:
        if type(inner.get(key)) is not bool:
            raise ValueError(f"{iid}: report field {key!r} is not a boolean: {inner.get(key)!r}")
    if inner["resolved"] and not inner["patch_successfully_applied"]:
        raise ValueError(f"{iid}: report says resolved but not applied")
    status = inner.get("tests_status")
    if status is not None:
        for part in status.values():
            for side in ("success", "failure"):
                if not all(isinstance(t, str) for t in part.get(side, [])):
                    raise ValueError(f"{iid}: tests_status holds a non-string test id")
    return {iid: inner}


def eval_folder(folder: Path, official: Official, patch: str) -> None:
    """The read-only /vtb-eval of one grading: the patch, the apply chain, the eval script's parts."""
    if not patch.endswith("\n"):
        patch += "\n"  # git apply calls a patch whose last line lacks its newline corrupt
    files = {
        "patch.diff": patch,
        "apply.sh": APPLY_SCRIPT,
        "setup.sh": "\n".join(official.setup) + "\n",
        "tests.sh": "\n".join(official.tests) + "\n",
        "reset.sh": "\n".join(official.reset) + "\n",
    }
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
        (folder / name).chmod(0o644)
    folder.chmod(0o755)


def docker_api():
    """The Docker Engine's client (vtb.sandbox.docker.engine_client), pinged, or a clear error."""
    from vtb.sandbox.docker import ENGINE_HINT, engine_client

    try:
        api = engine_client()
        api.ping()
    except Exception as e:  # noqa: BLE001 (any failure to reach the engine means the same here)
        raise RuntimeError(f"no Docker Engine answers ({e}); {ENGINE_HINT}") from None
    return api


def grade_official(
    instance: dict,
    prediction: dict,
    api,
    log_dir: Path,
    limits: Limits = DEFAULT_LIMITS,
    *,
    pull: bool = False,
    namespace: str | None = None,
    image: str | None = None,
    disk_mb: int = 4096,
    task_repo: str | None = None,
) -> dict:
    """Grade one prediction on the instance's official image; its report.json dict ({iid: {...}}).

    api: a docker APIClient (docker_api()), which resolves or pulls the image. Writes patch.diff,
    eval.sh, run_instance.log (the whole container output, defused) and test_output.txt (what
    swebench graded) into log_dir. Never raises for the instance's own failures: a patch that
    does not apply, a crash or a limit hit becomes a report whose patch did not apply, with an
    "error" field.
    """
    iid = instance["instance_id"]
    patch = prediction.get("model_patch")
    log_dir.mkdir(parents=True, exist_ok=True)
    _write(log_dir, "patch.diff", patch or "")
    if patch is None or not patch.strip():
        return empty_report(iid, patch)
    bad = unsafe_paths(patch)
    if bad:
        return error_report(iid, f"patch refused, it touches unsafe paths: {', '.join(bad)}")
    official = official_spec(instance, namespace, image, task_repo)
    _write(log_dir, "eval.sh", official.spec.eval_script)
    name = resolve_image(api, official.images, pull, iid, task_repo)
    nonce = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="vtb-eval-") as tmp:
        from vtb.sandbox.docker import DockerSandbox

        eval_folder(Path(tmp), official, patch)
        native = DockerSandbox(image=name, client=api).with_image(name, disk_mb=disk_mb)
        done = native.run(
            ["/bin/bash", "-c", DRIVER],
            mounts=[Mount(Path(tmp), EVAL_DIR)],
            limits=limits,
            cwd=WORKDIR,
            input=nonce + "\n",
        )
    output = done.stdout + (f"\n[stderr]\n{done.stderr}" if done.stderr.strip() else "")
    _write(log_dir, "run_instance.log", cut(defuse(output), 2 * MAX_TEST_LOG))
    parts = genuine_parts(done.stdout, nonce)
    if done.killed:
        return error_report(iid, f"killed: {done.killed} limit ({_limit(limits, done.killed)})")
    if parts["applied"] is not True:
        why = "did not apply" if parts["applied"] is False else "the container ended before applying it"
        return error_report(iid, f"{APPLY_FAILED}: the model patch {why}")
    if parts["tests"] is None or parts["exit_code"] is None:
        return error_report(iid, f"the eval script ended (status {done.returncode}) without its test output")
    test_log = log_dir / "test_output.txt"
    _write(log_dir, "test_output.txt", graded_log(parts["tests"], parts["exit_code"]))
    _, get_eval_report, _ = swebench_api()
    pred = {**prediction, "instance_id": iid, "model_patch": patch}
    report = get_eval_report(official.spec, pred, str(test_log), include_tests_status=True)
    return validate_report(report, iid)


def _limit(limits: Limits, kind: str) -> str:
    value = {
        "wall": limits.wall_seconds,
        "cpu": limits.cpu_seconds,
        "memory": limits.memory_mb,
        "procs": limits.max_processes,
    }.get(kind)
    unit = {"wall": " s", "cpu": " CPU-s", "memory": " MB", "procs": " tasks"}.get(kind, "")
    return f"{value:g}{unit}" if isinstance(value, float) else f"{value}{unit}" if value else kind


def _write(folder: Path, name: str, text: str) -> None:
    """Replace folder/name without following a link someone left there."""
    safefs.write_in(folder, name, text.encode("utf-8", errors="replace"))
