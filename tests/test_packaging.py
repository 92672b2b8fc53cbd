"""A non-editable install (`pip install .`, a wheel) runs benches from anywhere (issue 39).

The wheel holds everything the code reads, not only its .py files: setuptools packs .py files by
default; the kits' harness configs and proposals, the domains' prompts and Hydra's conf/ folder
are data. Installed into an environment of a user's own, the package sits in site-packages, which
every sandbox mounts as the runtime: a sandbox must still see only the sandbox's code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, TINY_OVERRIDES, sandbox_backend

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """This checkout as a wheel, as `pip install .` would build it."""
    out = tmp_path_factory.mktemp("wheel")
    args = ["wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), "."]
    subprocess.run(
        [sys.executable, "-m", "pip", *args], cwd=ROOT, check=True, capture_output=True, timeout=300
    )
    (built,) = out.glob("*.whl")
    return built


def test_the_wheel_holds_every_tracked_file_the_code_reads(wheel) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(
        ["git", "ls-files", "vtb", "flows", "steps", "conf"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    data = "vibetraining_bench-0.1.0.data/data/share/vibetraining-bench/"
    missing = [f for f in tracked if f not in names and data + f not in names]
    assert not missing, missing
    assert any(n.endswith("share/vibetraining-bench/conf/bench.yaml") for n in names)


def _prefix_python(root: Path) -> Path:
    """A conda-like prefix made from this interpreter's base: `<root>/bin/python3.X` with its
    standard library in `<root>/lib/python3.X` and an empty `site-packages` there, no venv (no
    pyvenv.cfg: `sys.prefix` is the prefix itself), and its libpython found relative to itself
    (`$ORIGIN/../lib`, as conda builds it). Hard links where the file system allows."""
    base = Path(sys.base_prefix)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    exe = Path(sys._base_executable).resolve()
    (root / "bin").mkdir(parents=True)
    lib = root / "lib"
    lib.mkdir()

    def link(src: str, dst: str) -> str:
        try:
            os.link(src, dst)
            return dst
        except OSError:  # another file system
            return shutil.copy2(src, dst)

    shutil.copytree(
        base / "lib" / version,
        lib / version,
        copy_function=link,
        ignore=lambda d, names: (
            (["site-packages"] if Path(d) == base / "lib" / version else [])
            + [n for n in names if n == "test"]  # the standard library's own tests
        ),
    )
    (lib / version / "site-packages").mkdir()
    for so in base.glob("lib/libpython*.so*"):
        link(str(so), str(lib / so.name))
    binary = exe.read_bytes()
    old = str(base / "lib").encode() + b"\0"  # an absolute RUNPATH (pyenv's) would point back at the base
    if old in binary:
        new = b"$ORIGIN/../lib"
        binary = binary.replace(old, new + b"\0" * (len(old) - len(new)))
    python = root / "bin" / version
    python.write_bytes(binary)
    python.chmod(0o755)
    return python


def _uv() -> str:
    """The real uv (a dev dependency, from PyPI), beside this environment's python."""
    uv = Path(sys.executable).parent / "uv"
    assert uv.is_file(), "uv is a dev dependency: pip install -e '.[dev]'"
    return str(uv)


@pytest.fixture(scope="module", params=["venv", "uv", "conda-like"])
def installed(request, tmp_path_factory, wheel) -> Path:
    """The python of a new user's environment with the wheel installed (`pip install .`, not
    editable): a venv of its own, one made and filled by the real uv (`uv venv`, `uv pip
    install`), or a conda-like prefix (the interpreter and its packages in one prefix, no venv).
    Its dependencies reused from this environment by a `.pth` path line (no network; a path line,
    not a site dir, so this environment's editable vtb stays out)."""
    root = tmp_path_factory.mktemp(request.param) / "env"
    if request.param == "venv":
        subprocess.run(
            [sys._base_executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120
        )
        python = root / "bin" / "python"
    elif request.param == "uv":
        made = [_uv(), "venv", "-q", "--no-config", "--python", sys._base_executable, str(root)]
        subprocess.run(made, check=True, capture_output=True, timeout=120)
        python = root / "bin" / "python"
        assert "uv = " in (root / "pyvenv.cfg").read_text()  # uv's own layout, not venv's
    else:
        python = _prefix_python(root)
        probe = [str(python), "-c", "import sys; print(sys.prefix == sys.base_prefix, sys.prefix)"]
        assert subprocess.run(probe, capture_output=True, text=True, timeout=60).stdout.split() == [
            "True",
            str(root),
        ]
    ours = sorted(Path(sysconfig.get_paths()["purelib"]).glob("vibetraining_bench-*.dist-info"))
    install = (
        [_uv(), "pip", "install", "--no-config", "--offline", "--python", str(python)]
        if request.param == "uv"
        else [sys.executable, "-m", "pip", "--python", str(python), "install"]
    )
    subprocess.run(
        [*install, "-q", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert sorted(Path(sysconfig.get_paths()["purelib"]).glob("vibetraining_bench-*.dist-info")) == ours
    # only now: pip in an environment that is not a venv takes every installed copy it can see for
    # its own, and would uninstall this checkout's editable install through the path line
    (site,) = root.glob("lib/python*/site-packages")
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


VIEW = """
import json, os, sys
from vtb.sandbox import make_sandbox, runtime_mounts
from vtb.sandbox.runtime import sandbox_code
from vtb.sandbox.base import Limits
import vtb
pkg = os.path.dirname(vtb.__file__)
code = '''
import json, os, sys, torch, vtb.protocol
pkg = %r
seen = sorted(os.path.relpath(os.path.join(d, f), pkg) for d, _, fs in os.walk(pkg) for f in fs)
print(json.dumps({"seen": seen, "flows": os.listdir(pkg + "/../flows"), "steps": os.listdir(pkg + "/../steps")}))
''' % pkg
out = make_sandbox(sys.argv[1]).run([sys.executable, "-c", code], mounts=runtime_mounts(), limits=Limits(wall_seconds=120))
allowed = sorted(
    os.path.relpath(os.path.join(d, f), pkg)
    for p in sandbox_code()
    for d, _, fs in (os.walk(p) if os.path.isdir(p) else [(os.path.dirname(p), [], [os.path.basename(p)])])
    for f in fs
)
print(json.dumps({"rc": out.returncode, "stderr": out.stderr[-1000:], "inside": out.stdout, "allowed": allowed, "pkg": pkg}))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_non_editable_install_shows_a_sandbox_only_the_kit(installed, tmp_path, backend) -> None:
    """`pip install .` puts the whole package in site-packages, which every sandbox mounts (the
    runtime): a sandboxed command still sees only the sandbox's code (the kits and the protocol),
    never the generators, scorers or the orchestrator (flows/, steps/ are empty stand-ins).
    This refused to run at all before (issue 39)."""
    sandbox_backend(backend)
    out = subprocess.run(
        [str(installed), "-c", VIEW, backend], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    view = json.loads(out.stdout.strip().splitlines()[-1])
    assert view["pkg"].startswith(str(installed.parents[1])), view[
        "pkg"
    ]  # the installed copy, not the checkout
    assert view["rc"] == 0, view["stderr"]
    inside = json.loads(view["inside"])
    seen = [p for p in inside["seen"] if "__pycache__" not in p]
    assert seen and set(seen) <= set(view["allowed"]), sorted(set(seen) - set(view["allowed"]))
    assert not {"bench.py", "domains/math/generator.py", "domains/math/grading.py"} & set(inside["seen"])
    assert inside["flows"] == [] and inside["steps"] == []


@pytest.mark.slow
def test_a_non_editable_install_runs_a_bench_from_another_folder(installed, tmp_path) -> None:
    """The README's command from a non-editable install, run outside any checkout: its configs
    come with the package, its sandboxes mount what its interpreter uses (bwrap, the default)."""
    work = tmp_path / "elsewhere"
    work.mkdir()
    argv = [str(installed), "-m", "flows.bench", *TINY_OVERRIDES, "agent.max_iterations=1"]
    argv += ["cache_dir=cache", "runs_dir=runs"]
    out = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    (result,) = (work / "runs").glob("*/result.json")
    data = json.loads(result.read_text())
    assert data["submitted"]["test_score"] is not None and data["iterations"] == 1
    assert (result.parent / "iterations" / "01.json").is_file()  # the agent's turn ran in its sandbox
