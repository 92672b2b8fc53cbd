"""The orchestrator's side of the model service: one model server per checkpoint, in its own sandbox.

A play step starts a `ModelService` for the checkpoint its harness plays with (or for the null
model, or the base model, in grading's checks), hands the harness sandbox `harness_mounts()` and
`harness_env()`, and closes it when the play is over. The server (vtb/serve/server.py) runs with
no network, the checkpoint read-only at /model and a fresh socket folder; the harness sandbox
gets only that socket folder and never the weights. What the step used is the server's meter:
its sandbox's usage file, written by the project's engine (no agent code runs there), plus its
metered CPU and GPU seconds. Every mode looks the same from the harness's side: the same mount
point, URL and key format, a fresh random host folder and key each time.

A server may also get a persistent engine cache (`cache_dir`, mounted writable at ENGINE_CACHE):
Triton's compiled launchers and kernels, vLLM's and torch.compile's caches, which would otherwise
live in the sandbox's fresh HOME and be rebuilt at every start. Only model-server sandboxes ever
mount it, and they run only the project's engine on safetensors weights: no sandbox that runs agent
code (research, train, harness) sees it, so no agent can plant a compiled object a later server
loads. The orchestrator never reads it.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from vtb.ledger import Charge
from vtb.sandbox import runtime_mounts
from vtb.sandbox.base import Limits, Mount, Sandbox, SandboxProcess, SandboxResult
from vtb.sandbox.output import StreamStats, bounded_lines
from vtb.serve import transcript as transcripts
from vtb.serve.bridge import PORT, model_env

SOCKET_DIR = "/run/vtb-model"  # where both sandboxes see the socket folder
SOCKET = f"{SOCKET_DIR}/api.sock"
SWAP_DIR = "/run/vtb-swap"  # a provenance audit's pairs, in the model server's sandbox only
TRANSCRIPT_DIR = "/run/vtb-transcript"  # the written check's transcript, in the server's sandbox only
START_TIMEOUT_S = 300.0  # python + torch + the checkpoint (vLLM on a GPU takes longest)
ENGINE_CACHE = "/var/cache/vtb-engine"  # where a model server sees its persistent engine cache


def engine_cache_env(root: str = ENGINE_CACHE) -> dict[str, str]:
    """Point Triton, vLLM, torch.compile and CUDA's JIT caches into the mounted cache folder."""
    return {
        "TRITON_CACHE_DIR": f"{root}/triton",
        "VLLM_CACHE_ROOT": f"{root}/vllm",
        "TORCHINDUCTOR_CACHE_DIR": f"{root}/inductor",
        "CUDA_CACHE_PATH": f"{root}/nv",
        "XDG_CACHE_HOME": f"{root}/xdg",  # what else caches under ~/.cache (e.g. FlashInfer)
    }


def engine_cache_dir() -> Path:
    """The host folder of the model servers' engine cache: $VTB_ENGINE_CACHE or ~/.cache/vtb/engine."""
    return Path(os.environ.get("VTB_ENGINE_CACHE") or Path.home() / ".cache" / "vtb" / "engine")


def engine_cache_for(engine: str) -> Path | None:
    """The cache a server for `engine` gets: vLLM compiles (Triton) at start; transformers does not."""
    return engine_cache_dir() if engine == "vllm" else None


class ServiceError(RuntimeError):
    """The model server did not come up (its stderr says why)."""


@dataclass
class ModelService:
    """A model server for `model_dir`; use as a context manager (or call `start` and `close`)."""

    sandbox: Sandbox
    model_dir: Path
    limits: Limits  # the step's: its FLOPs limit is enforced by the server (HTTP 429 past it)
    env: dict[str, str] = field(default_factory=dict)  # e.g. the engine selection (vtb.engine.select)
    request_limits: dict = field(default_factory=dict)  # vtb.serve.api.Limits fields
    cache_dir: Path | None = None  # the persistent engine cache (see the module docstring), or none
    # A provenance audit's (seen, served) text pairs (vtb/serve/swap.py): in a folder of the
    # server's own, never the harness's; `swapped` = the indices of the pairs the server used.
    swap: list[tuple[str, str]] | None = None
    swapped: set[int] = field(default_factory=set)
    # The written check (vtb/serve/transcript.py): the server records prompts and completions in a
    # folder of its own; `transcript` is what close() read back, `transcript_complete` whether whole.
    record_transcript: bool = False
    transcript: list[transcripts.Exchange] = field(default_factory=list)
    transcript_complete: bool = False
    exhausted: bool = False  # the server refused a request for the budget
    engine: str = ""  # the engine that served, as the server's usage file says
    threads: int | None = None  # the CPU threads its torch ops ran on, as the server said when ready
    charge: Charge = field(default_factory=Charge)
    result: SandboxResult | None = None
    _proc: SandboxProcess | None = None
    _dir: Path | None = None
    _swap_dir: Path | None = None
    _transcript_dir: Path | None = None
    _reader: threading.Thread | None = None  # reads the server's events (stdout) till it ends
    _key: str = ""

    def start(self) -> ModelService:
        self._dir = Path(tempfile.mkdtemp(prefix="vtb-model-"))
        self._key = secrets.token_urlsafe(32)
        argv = [sys.executable, "-m", "vtb.serve.server", "--model", "/model", "--socket", SOCKET]
        argv += ["--limits", json.dumps(self.request_limits)]
        mounts = runtime_mounts() + [
            Mount(self.model_dir, "/model"),
            Mount(self._dir, SOCKET_DIR, writable=True),
        ]
        if self.swap is not None:
            self._swap_dir = Path(tempfile.mkdtemp(prefix="vtb-swap-"))
            (self._swap_dir / "pairs.json").write_text(json.dumps(self.swap))
            mounts.append(Mount(self._swap_dir, SWAP_DIR))
            argv += ["--swap", f"{SWAP_DIR}/pairs.json"]
        if self.record_transcript:
            self._transcript_dir = Path(tempfile.mkdtemp(prefix="vtb-transcript-"))
            mounts.append(Mount(self._transcript_dir, TRANSCRIPT_DIR, writable=True))
            argv += ["--transcript", f"{TRANSCRIPT_DIR}/transcript.jsonl"]
        env = {**self.env, "VTB_SERVE_KEY": self._key}
        if self.cache_dir is not None:
            Path(self.cache_dir).mkdir(parents=True, exist_ok=True)
            mounts.append(Mount(Path(self.cache_dir), ENGINE_CACHE, writable=True))
            env.update(engine_cache_env())
        self._proc = self.sandbox.start(argv, mounts=mounts, limits=self.limits, cwd="/", env=env)
        ready: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read_events, args=(ready,), daemon=True)
        self._reader.start()
        try:
            event = ready.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            event = "timeout"
        if event != "ready":
            result = self.close()
            raise ServiceError(
                f"the model server for {self.model_dir.name} did not start ({event}; killed: {result.killed}); "
                f"its stderr ends: {result.stderr[-1500:]}"
            )
        return self

    def _read_events(self, ready: queue.Queue) -> None:
        """The server's stdout: one JSON event per line (ready, budget); anything else is ignored."""
        for line in bounded_lines(self._proc.stdout, StreamStats()):
            try:
                found = json.loads(line)
                event = found.get("event")
            except (ValueError, AttributeError):
                continue
            if event == "ready":
                threads = found.get("threads")
                if isinstance(threads, int) and not isinstance(threads, bool) and 0 < threads <= 4096:
                    self.threads = threads
                ready.put("ready")
            elif event == "budget":
                self.exhausted = True
            elif event == "swapped" and self.swap is not None:
                pairs = json.loads(line).get("pairs")
                if isinstance(pairs, list):
                    n = len(self.swap)
                    self.swapped |= {i for i in pairs[:n] if isinstance(i, int) and 0 <= i < n}
        ready.put("the server exited")

    def harness_mounts(self) -> list[Mount]:
        return [Mount(self._dir, SOCKET_DIR)]

    def harness_env(self) -> dict[str, str]:
        return model_env(self._key)

    def harness_argv(self, argv: list[str]) -> list[str]:
        """`argv` started through the bridge that relays the sandbox's loopback to the server."""
        return [
            sys.executable,
            "-m",
            "vtb.serve.bridge",
            "--socket",
            SOCKET,
            "--port",
            str(PORT),
            "--",
            *argv,
        ]

    def close(self) -> SandboxResult:
        """Stop the server (its stdin closed is its signal) and book what it used."""
        if self.result is not None:
            return self.result
        proc = self._proc
        try:
            proc.stdin.close()
        except OSError:
            pass
        self.result = proc.wait(timeout=30)  # one that will not stop is killed; its meter still counts
        # Its last events (an audit's swapped pairs) may still sit in the pipe: read them all before
        # anyone reads `swapped` (on a loaded machine the reader can lag the exit by seconds).
        if self._reader is not None:
            self._reader.join(timeout=30)
        usage = self.result.usage if isinstance(self.result.usage, dict) else {}
        self.engine = str(usage.get("engine", ""))[:100]
        fallback = usage.get("engine_fallback")
        if fallback:
            self.engine += f" (fallback from {str(fallback)[:100]})"
        # A server that ended by itself has counted every token it served (our engine, the
        # usage file rewritten at each charge), so the ledger floors the harness's seconds only;
        # one killed mid-batch (cpu, wall, memory) may not have, so its seconds are floored too.
        counted = self.result.killed in (None, "closed", "flops")
        self.charge = Charge.of(
            flops=usage.get("flops", 0.0),
            cpu_seconds=self.result.cpu_seconds,
            gpu_seconds=self.result.gpu_seconds,
            served_cpu_seconds=self.result.cpu_seconds if counted else 0.0,
            served_gpu_seconds=self.result.gpu_seconds if counted else 0.0,
            wall_seconds=self.result.wall_seconds,
        )
        if self.result.killed == "flops":
            self.exhausted = True
        if self._transcript_dir is not None:
            self.transcript, self.transcript_complete = transcripts.read(
                self._transcript_dir / "transcript.jsonl"
            )
        shutil.rmtree(self._dir, ignore_errors=True)
        for extra in (self._swap_dir, self._transcript_dir):
            if extra is not None:
                shutil.rmtree(extra, ignore_errors=True)
        return self.result

    def __enter__(self) -> ModelService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
