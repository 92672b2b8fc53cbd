"""The model host: one sandbox per play that imports the engine once and forks a fresh server per shard.

Why: a model server's interpreter spends ~4 CPU-seconds importing torch and transformers before
it loads a ~1M-parameter checkpoint in 0.2; a grading play starts one server per val-sized shard
(issue 37), so on the CPU track most of a cheap play was imports. The host imports once; each
shard's server is a fork of it that has seen no prompt: it opens the engine, serves its own socket
with its own key, budget and CPU cap, and exits. What a harness can observe is what a fresh
`vtb.serve.server` shows it (the same API, socket path and key format), in validation and grading
alike, since both go through the host.

Only for the transformers engine on the CPU (vtb/pipeline.py decides): forking after CUDA or
vLLM's engine core has started is unsafe, so those keep one `vtb.serve.server` process per shard.

The orchestrator (vtb/service.py, `ModelHost`) writes commands to stdin, one JSON object a line:

- ``{"open": ID, "key": ..., "max_flops": F or null, "cpu_seconds": S, "swap": bool, "transcript": bool}``
  forks server ID: socket ``SOCKETS/ID/api.sock`` (the orchestrator made that folder and mounts
  only it into the shard's harness sandbox), usage file ``/run/vtb/ID.json``, the audit's pairs
  ``SWAPS/ID.json``, the transcript ``TRANSCRIPTS/ID.jsonl``; RLIMIT_CPU holds the child to S
  seconds (the kernel's count from its fork, so the host's imports are not the shard's).
- ``{"close": ID}`` ends it: its lifeline pipe is closed, it stops serving and exits.

and reads events from stdout: ``{"event": "ready"}`` (the host), then per server ``ready`` (the
server's, with its engine and threads) or ``failed`` (the host's), the server's own ``budget`` and ``swapped`` (tagged with
its id), and ``ended`` with the child's CPU-seconds from `os.wait4`, how it was killed, if it
was, and its usage file. The host is project code and runs no agent code: these figures are as
trusted as a server's usage file is today; the sandbox's own meter still counts the whole tree,
host included, and that is what the play is charged in CPU-seconds.
Stdin closed: every child is killed and the host exits.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import select
import signal
import sys
import time
import traceback

from vtb.sandbox.base import USAGE_FILE
from vtb.serve.server import ModelServer, protocol_stream, serve

ID = re.compile(r"[a-z0-9]{1,32}")
READY_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 30.0
FAILED_EXIT_S = 5.0  # a server that said why it failed exits by itself; one that hangs is killed
MAX_USAGE_BYTES = 64 << 10
MAX_WHY = 1000  # characters of a server's reason for not starting (one pipe write: atomic)


def preload(model_dir: str) -> None:
    """Import what opening the engine on model_dir imports, so that every fork starts with it."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    import vtb.engine.infer  # noqa: F401 (torch, transformers' auto classes, the decoding loop)

    try:
        MODEL_FOR_CAUSAL_LM_MAPPING[type(AutoConfig.from_pretrained(model_dir))]  # its modeling module
    except Exception:  # noqa: BLE001 (the server that opens it says what is wrong, to its shard)
        pass


class Host:
    """The children, by id: their pid, lifeline and CPU cap."""

    def __init__(self, args: argparse.Namespace, events):
        self.args, self.events = args, events
        self.children: dict[str, tuple[int, int, float]] = {}  # id -> (pid, lifeline fd, cpu cap)

    def emit(self, event: dict) -> None:
        print(json.dumps(event), file=self.events, flush=True)

    def open(self, cmd: dict) -> None:
        sid = cmd.get("open")
        if not isinstance(sid, str) or not ID.fullmatch(sid) or sid in self.children:
            return self.emit({"event": "failed", "id": str(sid)[:40], "why": "a bad or reused id"})
        cap = float(cmd.get("cpu_seconds") or 0) or 600.0
        ready_r, ready_w = os.pipe()
        life_r, life_w = os.pipe()
        self.events.flush()
        pid = os.fork()
        if pid == 0:  # the shard's server; it never returns
            os.close(ready_r)
            os.close(life_w)
            for _, fd, _ in self.children.values():
                os.close(fd)
            _child(self.args, self.events, sid, cmd, cap, ready_w, life_r)
        os.close(ready_w)
        os.close(life_r)
        self.children[sid] = (pid, life_w, cap)
        readable, _, _ = select.select([ready_r], [], [], READY_TIMEOUT_S)
        said = os.read(ready_r, MAX_WHY + 1) if readable else b""
        os.close(ready_r)
        if said[:1] != b"r":  # it failed (and said why), died or hung before serving
            why = said[1:].decode(errors="replace") or (
                "no word within the start timeout" if not readable else ""
            )
            self.close(sid, failed=True, why=why)

    def close(self, sid: object, failed: bool = False, why: str = "") -> None:
        if not isinstance(sid, str) or sid not in self.children:
            return
        pid, life_w, cap = self.children.pop(sid)
        os.close(life_w)  # its lifeline: the server stops and exits
        deadline = time.monotonic() + (FAILED_EXIT_S if failed else STOP_TIMEOUT_S)
        while True:
            done, status, rusage = os.wait4(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                _, status, rusage = os.wait4(pid, 0)
                break
            time.sleep(0.02)
        cpu = rusage.ru_utime + rusage.ru_stime
        killed = None
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            killed = "cpu" if sig in (signal.SIGXCPU, signal.SIGKILL) and cpu >= cap - 1 else f"signal {sig}"
        elif os.WEXITSTATUS(status) != 0:
            killed = f"exit {os.WEXITSTATUS(status)}"
        event = {"event": "failed" if failed else "ended", "id": sid, "cpu_seconds": cpu, "killed": killed}
        if why:
            event["why"] = why[:MAX_WHY]
        self.emit({**event, "usage": _usage(sid)})

    def shutdown(self) -> None:
        for pid, fd, _ in self.children.values():
            os.kill(pid, signal.SIGKILL)
            os.close(fd)
            os.waitpid(pid, 0)
        self.children.clear()


def _usage(sid: str) -> dict:
    """The child's usage file (written by the project's engine), bounded; {} if none or unreadable."""
    path = os.path.join(os.path.dirname(USAGE_FILE), f"{sid}.json")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            found = json.loads(f.read(MAX_USAGE_BYTES))
        return found if isinstance(found, dict) else {}
    except (OSError, ValueError):
        return {}


def _child(args, events, sid: str, cmd: dict, cap: float, ready_w: int, life_r: int) -> None:
    """One shard's server, in a fork of the host: opens the engine, serves till its lifeline closes."""
    code = 1
    try:
        whole = int(cap) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (whole, whole + 1))  # SIGXCPU, then SIGKILL
        os.environ["VTB_USAGE_FILE"] = os.path.join(os.path.dirname(USAGE_FILE), f"{sid}.json")
        max_flops = cmd.get("max_flops")
        if isinstance(max_flops, (int, float)) and not isinstance(max_flops, bool):
            os.environ["VTB_MAX_FLOPS"] = repr(float(max_flops))
        else:
            os.environ.pop("VTB_MAX_FLOPS", None)
        from vtb.engine.select import open_engine
        from vtb.serve.api import Limits
        from vtb.serve.swap import Swap
        from vtb.serve.transcript import Writer

        engine = open_engine(args.model, safetensors_only=True)
        api = ModelServer(
            engine,
            str(cmd.get("key") or ""),
            Limits(**json.loads(args.limits)),
            window_ms=args.window_ms,
            events=events,
            swap=Swap.load(f"{args.swaps}/{sid}.json") if cmd.get("swap") else None,
            transcript=Writer(f"{args.transcripts}/{sid}.jsonl") if cmd.get("transcript") else None,
            tag={"id": sid},
        )
        if not api.key:
            raise ValueError("no key")
        server = serve(api, f"{args.sockets}/{sid}/api.sock")
        torch = sys.modules.get("torch")
        threads = torch.get_num_threads() if torch is not None else None
        print(
            json.dumps({"event": "ready", "id": sid, "engine": engine.name, "threads": threads}), file=events
        )
        events.flush()
        os.write(ready_w, b"r")
        os.close(ready_w)
        ready_w = -1
        while os.read(life_r, 1024):  # till the host closes it
            pass
        server.shutdown()
        events.flush()
        code = 0
    except BaseException as e:  # noqa: BLE001 (whatever it was, this child ends here, with a reason)
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
        if ready_w >= 0:  # not serving yet: the host passes the reason on to the orchestrator
            os.write(ready_w, b"x" + f"{type(e).__name__}: {e}".encode(errors="replace")[:MAX_WHY])
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="the model host (run by the orchestrator in its own sandbox)"
    )
    parser.add_argument("--model", required=True)
    parser.add_argument("--sockets", required=True, help="the folder of the servers' socket folders")
    parser.add_argument("--swaps", default="/nonexistent", help="the audit's pairs, ID.json each")
    parser.add_argument("--transcripts", default="/nonexistent", help="the transcripts, ID.jsonl each")
    parser.add_argument("--limits", default="{}", help="JSON of vtb.serve.api.Limits fields")
    parser.add_argument("--window-ms", type=float, default=5.0)
    args = parser.parse_args(argv)
    events = protocol_stream()
    preload(args.model)
    host = Host(args, events)
    host.emit({"event": "ready"})
    for line in sys.stdin:  # till the orchestrator closes our stdin
        try:
            cmd = json.loads(line)
        except ValueError:
            continue
        if not isinstance(cmd, dict):
            continue
        if "open" in cmd:
            host.open(cmd)
        elif "close" in cmd:
            host.close(cmd["close"])
    host.shutdown()
    events.flush()
    os._exit(0)  # as the server does: skip torch's teardown


if __name__ == "__main__":
    sys.exit(main())
