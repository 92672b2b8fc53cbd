"""The orchestrator's side of the model service: one model server per checkpoint, in its own sandbox.

(On the CPU, one model host per play forking a server per shard: `ModelHost`, at the end.)

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

import dataclasses
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


def bridged(argv: list[str]) -> list[str]:
    """`argv` started through the bridge that relays the harness sandbox's loopback to the server."""
    return [sys.executable, "-m", "vtb.serve.bridge", "--socket", SOCKET, "--port", str(PORT), "--", *argv]


class ServiceError(RuntimeError):
    """The model server did not come up (its stderr says why)."""


def _await_ready(service, what: str) -> None:
    """Read `service`'s events in a thread till its ready event; close it and raise ServiceError
    (with its stderr's end) if it exits or stays silent for START_TIMEOUT_S."""
    ready: queue.Queue[str] = queue.Queue()
    service._reader = threading.Thread(target=service._read_events, args=(ready,), daemon=True)
    service._reader.start()
    try:
        event = ready.get(timeout=START_TIMEOUT_S)
    except queue.Empty:
        event = "timeout"
    if event != "ready":
        result = service.close()
        raise ServiceError(
            f"the {what} for {service.model_dir.name} did not start ({event}; killed: {result.killed}); "
            f"its stderr ends: {result.stderr[-1500:]}"
        )


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
        _await_ready(self, "model server")
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
        return bridged(argv)

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


# -- the model host -------------------------------------------------------------------------------
# With the transformers engine on the CPU, `pipeline.play` starts one `ModelHost` per play instead:
# `vtb.serve.host` in the same kind of sandbox (no network, the checkpoint read-only at /model,
# the project's code only) imports torch and transformers once (~4 CPU-seconds) and forks a fresh
# server per shard (`server()`, ~0.2 CPU-seconds), one that has seen no prompt, with its own
# socket folder, key, FLOPs limit and CPU cap. A `HostedServer` looks to the play as a
# `ModelService` does and to the harness as a fresh server does.
# Charges: each server's FLOPs from its usage file; CPU, GPU and wall seconds once, from the host
# sandbox's own meter (the whole tree, imports included) when the host closes. A server killed at
# its CPU cap is not counted as served (the ledger floors its seconds, as for a killed ModelService).

HOST_SOCKETS = "/run/vtb-model-host"  # the servers' socket folders, in the host's sandbox only
HOST_SWAPS = "/run/vtb-swap"
HOST_TRANSCRIPTS = "/run/vtb-transcript"
STOP_TIMEOUT_S = 60.0


@dataclass
class HostedServer:
    """One shard's server on a `ModelHost`; the same face as `vtb.service.ModelService`."""

    host: ModelHost
    limits: Limits  # the shard's: its FLOPs limit and CPU cap hold for this server
    swap: list[tuple[str, str]] | None = None
    record_transcript: bool = False
    swapped: set[int] = field(default_factory=set)
    transcript: list[transcripts.Exchange] = field(default_factory=list)
    transcript_complete: bool = False
    exhausted: bool = False
    engine: str = ""
    threads: int | None = None
    charge: Charge = field(default_factory=Charge)
    killed: str | None = None
    id: str = field(default_factory=lambda: secrets.token_hex(8))
    _key: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    _events: queue.Queue = field(default_factory=queue.Queue)
    _ended: dict | None = None
    _closed: bool = False

    def start(self) -> HostedServer:
        host = self.host
        (host.sockets / self.id).mkdir()
        if self.swap is not None:
            (host.swaps / f"{self.id}.json").write_text(json.dumps(self.swap))
        host.servers[self.id] = self
        host.send(
            {
                "open": self.id,
                "key": self._key,
                "max_flops": self.limits.max_flops,
                "cpu_seconds": self.limits.cpu_seconds,
                "swap": self.swap is not None,
                "transcript": self.record_transcript,
            }
        )
        try:
            event = self._events.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            event = {"event": "timeout"}
        if event.get("event") != "ready":
            self.close()
            why = str(event.get("why") or "")[:1000] or f"the host's stderr ends: {host.stderr_tail()}"
            raise ServiceError(
                f"the model server for {host.model_dir.name} did not start ({event.get('event')}; "
                f"killed: {self.killed}): {why}"
            )
        return self

    def on_event(self, event: dict) -> None:
        """An event of this server's, from the host's reader thread."""
        kind = event.get("event")
        if kind == "ready":
            threads = event.get("threads")
            if isinstance(threads, int) and not isinstance(threads, bool) and 0 < threads <= 4096:
                self.threads = threads
            self._events.put(event)
        elif kind == "budget":
            self.exhausted = True
        elif kind == "swapped" and self.swap is not None:
            pairs = event.get("pairs")
            if isinstance(pairs, list):
                n = len(self.swap)
                self.swapped |= {i for i in pairs[:n] if isinstance(i, int) and 0 <= i < n}
        elif kind in ("ended", "failed", "gone"):
            self._ended = event
            self._events.put(event)

    def close(self) -> None:
        """Stop this server and book its FLOPs (its seconds are the host's, booked at the host's close)."""
        if self._closed:
            return
        self._closed = True
        host = self.host
        if self._ended is None:
            host.send({"close": self.id})
        while self._ended is None:
            try:
                self._events.get(timeout=STOP_TIMEOUT_S)
            except queue.Empty:
                self._ended = {"event": "gone"}
        ended = self._ended
        usage = ended.get("usage") if isinstance(ended.get("usage"), dict) else {}
        killed = ended.get("killed")
        self.killed = str(killed)[:40] if killed is not None else None
        if ended.get("event") == "gone":
            self.killed = "host"
        self.engine = str(usage.get("engine", ""))[:100]
        fallback = usage.get("engine_fallback")
        if fallback:
            self.engine += f" (fallback from {str(fallback)[:100]})"
        self.charge = Charge.of(flops=usage.get("flops", 0.0))
        if self.killed is not None:  # killed mid-batch: it may not have counted every token it served
            host.unserved.append(ended.get("cpu_seconds"))
        if self.record_transcript:
            self.transcript, self.transcript_complete = transcripts.read(
                host.transcripts / f"{self.id}.jsonl"
            )
        host.servers.pop(self.id, None)
        shutil.rmtree(host.sockets / self.id, ignore_errors=True)
        for leftover in (host.swaps / f"{self.id}.json", host.transcripts / f"{self.id}.jsonl"):
            leftover.unlink(missing_ok=True)

    def harness_mounts(self) -> list[Mount]:
        return [Mount(self.host.sockets / self.id, SOCKET_DIR)]

    def harness_env(self) -> dict[str, str]:
        return model_env(self._key)

    def harness_argv(self, argv: list[str]) -> list[str]:
        return bridged(argv)

    def __enter__(self) -> HostedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class ModelHost:
    """`vtb.serve.host` for `model_dir` in its own sandbox; `server(limits)` gives a shard its server."""

    sandbox: Sandbox
    model_dir: Path
    limits: Limits  # the host sandbox's: the whole play's (every shard's seconds, summed)
    env: dict[str, str] = field(default_factory=dict)
    request_limits: dict = field(default_factory=dict)  # vtb.serve.api.Limits fields
    servers: dict[str, HostedServer] = field(default_factory=dict)
    unserved: list = field(default_factory=list)  # CPU-seconds of servers killed mid-batch
    charge: Charge = field(default_factory=Charge)
    result: SandboxResult | None = None
    _proc: SandboxProcess | None = None
    _root: Path | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _reader: threading.Thread | None = None

    @property
    def sockets(self) -> Path:
        return self._root / "sockets"

    @property
    def swaps(self) -> Path:
        return self._root / "swaps"

    @property
    def transcripts(self) -> Path:
        return self._root / "transcripts"

    def start(self) -> ModelHost:
        self._root = Path(tempfile.mkdtemp(prefix="vtb-model-host-"))
        for folder in (self.sockets, self.swaps, self.transcripts):
            folder.mkdir()
        argv = [sys.executable, "-m", "vtb.serve.host", "--model", "/model", "--sockets", HOST_SOCKETS]
        argv += ["--swaps", HOST_SWAPS, "--transcripts", HOST_TRANSCRIPTS]
        argv += ["--limits", json.dumps(self.request_limits)]
        mounts = runtime_mounts() + [
            Mount(self.model_dir, "/model"),
            Mount(self.sockets, HOST_SOCKETS, writable=True),
            Mount(self.swaps, HOST_SWAPS),
            Mount(self.transcripts, HOST_TRANSCRIPTS, writable=True),
        ]
        limits = dataclasses.replace(self.limits, max_flops=None)  # each server holds its own
        self._proc = self.sandbox.start(argv, mounts=mounts, limits=limits, cwd="/", env=dict(self.env))
        _await_ready(self, "model host")
        return self

    def server(self, limits: Limits, swap=None, record_transcript: bool = False) -> HostedServer:
        """A shard's server (use as a context manager): a fresh fork with the shard's limits."""
        if self.result is not None or self._reader is None or not self._reader.is_alive():
            raise ServiceError(f"the model host for {self.model_dir.name} has exited")
        return HostedServer(self, limits, swap=swap, record_transcript=record_transcript)

    def send(self, command: dict) -> None:
        with self._lock:
            try:
                self._proc.stdin.write(json.dumps(command) + "\n")
                self._proc.stdin.flush()
            except (OSError, ValueError):
                pass  # the host is gone: the reader tells each server

    def _read_events(self, ready: queue.Queue) -> None:
        """The host's stdout: one JSON event per line, the host's or a server's (by its id)."""
        for line in bounded_lines(self._proc.stdout, StreamStats()):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            sid = event.get("id")
            if sid is None and event.get("event") == "ready":
                ready.put("ready")
            elif isinstance(sid, str) and sid in self.servers:
                self.servers[sid].on_event(event)
        ready.put("the host exited")
        for server in list(self.servers.values()):
            server.on_event({"event": "gone"})

    def stderr_tail(self) -> str:
        return "" if self.result is None else self.result.stderr[-1500:]

    def close(self) -> SandboxResult:
        """Stop the host (its stdin closed kills what still runs) and book the tree's seconds."""
        if self.result is not None:
            return self.result
        for server in list(self.servers.values()):
            server.close()
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        self.result = self._proc.wait(timeout=30)
        if self._reader is not None:
            self._reader.join(timeout=30)
        counted = self.result.killed in (None, "closed")
        unserved = sum(s for s in self.unserved if isinstance(s, (int, float)) and s >= 0)
        served = max(0.0, self.result.cpu_seconds - unserved) if counted else 0.0
        self.charge = Charge.of(
            cpu_seconds=self.result.cpu_seconds,
            gpu_seconds=self.result.gpu_seconds,
            served_cpu_seconds=served,
            served_gpu_seconds=self.result.gpu_seconds if counted else 0.0,
            wall_seconds=self.result.wall_seconds,
        )
        shutil.rmtree(self._root, ignore_errors=True)
        return self.result

    def __enter__(self) -> ModelHost:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
