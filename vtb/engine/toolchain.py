"""Can Triton build its launcher here? Checked before vLLM starts, so a missing compiler is named.

Triton (vLLM's kernels, and torch.compile's) compiles a small C extension the first time it
launches a kernel: it takes $CC or `gcc` or `clang` from PATH, includes `Python.h` from the
interpreter's include dir (sysconfig, the Debian `posix_local` scheme read as `posix_prefix`)
and finds libcuda.so.1 through `/sbin/ldconfig -p` unless TRITON_LIBCUDA_PATH names its dir.
Any of these missing makes vLLM fail minutes into its start with an error that does not say
what to install. Run inside the sandbox that will start vLLM (the model server), this sees
exactly what Triton will see there; with bwrap that is the host's /usr, with docker the image.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

FIX = "apt-get install gcc python3-dev (Debian/Ubuntu; python3.X-dev for this interpreter's version)"
LDCONFIG = "/sbin/ldconfig"  # the path Triton runs, not a PATH lookup
PROBE = "#include <Python.h>\nint vtb_probe(void) { return Py_IsInitialized(); }\n"


def python_include_dir() -> str:
    """Where Triton looks for Python.h (its own rule)."""
    scheme = sysconfig.get_default_scheme()
    return sysconfig.get_paths(scheme="posix_prefix" if scheme == "posix_local" else scheme)["include"]


def compiler(env: Mapping[str, str], which: Callable[[str], str | None] = shutil.which) -> str | None:
    """The C compiler Triton would use: $CC, else gcc, else clang (None: none)."""
    return env.get("CC") or which("gcc") or which("clang")


def triton_problems(
    env: Mapping[str, str] | None = None,
    which: Callable[[str], str | None] = shutil.which,
    include_dir: str | None = None,
    ldconfig: str = LDCONFIG,
    compile_probe: bool = True,
) -> list[str]:
    """What stops Triton from building its launcher here, each with its fix; [] when nothing does.

    With everything present, a probe including Python.h is compiled as Triton would (a shared
    object, -fPIC), which also catches a compiler without the C library's headers.
    """
    env = os.environ if env is None else env
    include_dir = include_dir or python_include_dir()
    problems = []
    cc = compiler(env, which)
    if cc is None:
        problems.append(f"no C compiler (no $CC, no gcc or clang on PATH): {FIX}")
    if not os.path.isfile(os.path.join(include_dir, "Python.h")):
        problems.append(f"no Python.h in {include_dir} (the interpreter's headers): {FIX}")
    if not env.get("TRITON_LIBCUDA_PATH") and not os.access(ldconfig, os.X_OK):
        problems.append(
            f"no {ldconfig} (Triton finds libcuda.so.1 with `ldconfig -p`): apt-get install libc-bin, "
            "or set TRITON_LIBCUDA_PATH to the directory holding libcuda.so.1"
        )
    if problems or not compile_probe:
        return problems
    with tempfile.TemporaryDirectory(prefix="vtb-cc-") as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text(PROBE)
        argv = [cc, str(src), f"-I{include_dir}", "-shared", "-fPIC", "-o", str(Path(tmp) / "probe.so")]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            failed = done.returncode != 0 and (done.stderr.strip()[-400:] or f"exit code {done.returncode}")
        except (OSError, subprocess.TimeoutExpired) as e:
            failed = str(e)
    if failed:
        problems.append(f"{cc} cannot compile a file including Python.h ({failed}): {FIX}")
    return problems


def triton_unavailable(**kwargs) -> str | None:
    """One line saying why Triton cannot build here (and what to install), or None when it can."""
    problems = triton_problems(**kwargs)
    if not problems:
        return None
    return "Triton (vLLM's kernel compiler) cannot build its C launcher in this sandbox: " + "; ".join(
        problems
    )
