"""Attacks on the egress proxy and the sandbox's bridges from agent code inside a real sandbox,
on both backends (issue 37, points 4 and 5).

Was: one orchestrator thread per connection opened straight on the proxy's socket, no header
deadline, no bound on the log, pipelined and malformed requests unchecked; the bridge (the
CLI sandbox's pid 1) traceable by the agent, which held the turn until its wall limit.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, cli_turn_env, sandbox_backend
from vtb.agents import make_agent
from vtb.sandbox import egress

FLOOD = 300

FLOOD_AGENT = r"""#!/usr/bin/env python3
# Straight on the proxy's socket, around the bridge: smuggling, malformed heads, a trickle, a flood.
import socket, time
P, a, o = "/egress/proxy.sock", {a}, {o}
def conn():
    s = socket.socket(socket.AF_UNIX)
    s.connect(P)
    return s
def ask(raw):
    s = conn()
    s.sendall(raw)
    out = b""
    while c := s.recv(4096):
        out += c
    return out.split(b"\r\n")[0].decode()
url = lambda port, path: f"http://127.0.0.1:{{port}}{{path}}"
print("pipelined", ask((f"GET {{url(a, '/first')}} HTTP/1.1\r\n\r\n"
                        f"GET {{url(o, '/second')}} HTTP/1.1\r\n\r\n").encode()), flush=True)
print("spaced-host", ask(f"GET /x HTTP/1.1\r\nHost : 127.0.0.1:{{o}}\r\nHost: 127.0.0.1:{{a}}\r\n\r\n".encode()))
print("control-char", ask(f"GET {{url(a, '/ctl')}} HTTP/1.1\r\nX: a\x01b\r\n\r\n".encode()))
print("chunked", ask((f"POST {{url(a, '/te')}} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                      f"GET {{url(o, '/smuggled')}} HTTP/1.1\r\n\r\n").encode()), flush=True)
s, t0, reply = conn(), time.monotonic(), b""  # one byte every 0.2 s: each read is quick, the head never ends
try:
    while time.monotonic() - t0 < 8 and not reply:
        s.sendall(b"G" if time.monotonic() == t0 else b"a")
        s.settimeout(0.2)
        try:
            reply = s.recv(100)
        except TimeoutError:
            pass
except OSError:
    pass
print("trickle", reply.split(b"\r\n")[0].decode() or "never cut", round(time.monotonic() - t0), flush=True)
s.close()
time.sleep(0.5)
held, errors = [], set()
for _ in range({n}):
    c = conn()
    held.append(c)
    try:  # a connection refused (503) and closed before this send meets a broken pipe
        c.sendall(b"GET http://127.0.0.1/ HTTP/1.1\r\nHost: 12")  # never finished
    except OSError as e:
        errors.add(type(e).__name__)
time.sleep({wait})  # past the header deadline
for c in held:
    c.close()
print("flood", len(held), flush=True)
print("flood-errors", *sorted(errors), flush=True)
"""


def _peak_threads(stop: threading.Event, peak: list[int]) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], threading.active_count())
        time.sleep(0.002)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sandbox_flooding_the_proxy_costs_bounded_threads_and_every_request_is_logged(
    tmp_path, web, monkeypatch, backend
) -> None:
    monkeypatch.setattr(egress, "HEADER_TIMEOUT_S", 2.0)
    monkeypatch.setattr(egress, "MAX_LOG_ENTRIES", 100)  # the rest counted in one log-full entry
    allowed_srv, other = web
    a_port, o_port = allowed_srv.server_address[1], other.server_address[1]
    script = FLOOD_AGENT.format(a=a_port, o=o_port, n=FLOOD, wait=3.5)
    cfg, env = cli_turn_env(tmp_path, backend, script, allow_hosts=[f"127.0.0.1:{a_port}"])
    stop, peak = threading.Event(), [0]
    base = threading.active_count()
    sampler = threading.Thread(target=_peak_threads, args=(stop, peak))
    sampler.start()
    try:
        make_agent(cfg).turn(env)
    finally:
        stop.set()
        sampler.join()
    (run,) = [e for e in env.log if "agent_command" in e]
    said = {line["line"].split(" ")[0]: line["line"] for line in run["output"] if line["stream"] == "stdout"}
    assert said["pipelined"] == "pipelined HTTP/1.0 200 OK", run["output"]
    for name in ("spaced-host", "control-char", "chunked"):
        assert said[name] == f"{name} HTTP/1.1 400 Bad Request", said
    trickle = said["trickle"].split(" ")
    assert trickle[1:3] == ["HTTP/1.1", "408"] and int(trickle[-1]) <= 4, said  # cut at the deadline
    assert said["flood"] == f"flood {FLOOD}", run["output"]
    assert set(said["flood-errors"].split()[1:]) <= {"BrokenPipeError", "ConnectionResetError"}, said
    assert allowed_srv.hits == ["/first"] and other.hits == []

    listed = [e for e in env.egress if e["status"] != "log-full"]
    (full,) = [e for e in env.egress if e["status"] == "log-full"]
    assert len(listed) == 100
    counts = dict(full["counts"])
    for e in listed:
        counts[e["status"]] = counts.get(e["status"], 0) + 1
    assert counts.pop("done") == 1 and counts.pop("pipelined-refused") == 1
    assert counts.pop("bad-request") == 3
    # The held ones (and the trickle), answered 408; under load a late one may get its slot only
    # as the first ones time out, and the client hangs up before its own deadline (no-request).
    timed_out = counts.pop("header-timeout") + counts.pop("no-request", 0)
    assert timed_out >= egress.MAX_CONNECTIONS
    assert timed_out + counts.pop("too-many-connections") == FLOOD + 1  # every refused one counted
    assert counts == {}, counts
    extra = peak[0] - base
    assert extra <= egress.MAX_CONNECTIONS + 8, extra  # was one per connection (~FLOOD)
    print(f"\n{backend}: {FLOOD} half-sent requests from inside: {extra} orchestrator threads at the peak")


TRACE_AGENT = r"""#!/usr/bin/env python3
# Reach into the bridge (pid 1): its stdout, its memory, signals, ptrace.
import ctypes, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
def err(call):
    try:
        call()
        return "ok"
    except OSError as e:
        return e.strerror
print("fd1", err(lambda: open("/proc/1/fd/1", "w").write("1 forged\n")), flush=True)
print("mem", err(lambda: open("/proc/1/mem", "rb").read(1)), flush=True)
for sig in (signal.SIGSTOP, signal.SIGTSTP, signal.SIGINT):
    os.kill(1, sig)
time.sleep(0.3)
print("state", open("/proc/1/stat").read().rsplit(")", 1)[1].split()[0], flush=True)
for name, request in (("seize", 0x4206), ("attach", 16)):
    ok = libc.ptrace(request, 1, None, None) == 0
    print(name, "ok" if ok else os.strerror(ctypes.get_errno()), flush=True)
    if ok:  # pid 1 is ours: stop it and hold it (the turn hangs until its wall)
        libc.ptrace(0x4207, 1, None, None)
        time.sleep(600)
print("done", flush=True)
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_agent_code_can_neither_trace_nor_stop_the_bridge(tmp_path, backend) -> None:
    cfg, env = cli_turn_env(tmp_path, backend, TRACE_AGENT, turn_wall_s=30)
    start = time.monotonic()
    result = make_agent(cfg).turn(env)
    took = time.monotonic() - start
    (run,) = [e for e in env.log if "agent_command" in e]
    said = [line["line"] for line in run["output"] if line["stream"] == "stdout"]
    assert said == [
        "fd1 Permission denied",
        "mem Permission denied",
        "state S",
        "seize Operation not permitted",
        "attach Operation not permitted",
        "done",
    ], (said, result.notes)
    assert run["killed"] is None and run["returncode"] == 0 and run["bridge"] is None
    assert took < 15, took  # was: the bridge held stopped, the turn ended at its wall (30 s here)
    print(f"\n{backend}: the attacks on the bridge failed; the turn took {took:.1f} s")


def _host_pid(marker: str, timeout: float = 60.0) -> int:
    """The host pid of the bridge whose command line names `marker` (bwrap and docker alike)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                argv = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            is_bridge = argv[1:3] == [b"-m", b"vtb.sandbox.egress"]  # not bwrap's own command line
            if is_bridge and any(marker.encode() in a for a in argv):
                return int(d.name)
        time.sleep(0.1)
    raise AssertionError("the bridge did not start")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stopped_bridge_ends_the_turn_in_seconds_with_its_reason(tmp_path, monkeypatch, backend) -> None:
    """Stopped from outside (what agent code can no longer do): its heartbeat stops, the turn ends."""
    from vtb.agents import env as agent_env

    monkeypatch.setattr(agent_env, "BRIDGE_SILENCE_S", 3.0)
    script = "#!/bin/sh\necho ready\nexec sleep 300\n"
    cfg, env = cli_turn_env(tmp_path, backend, script, turn_wall_s=40)
    out: dict = {}
    turn = threading.Thread(target=lambda: out.update(result=make_agent(cfg).turn(env)))
    turn.start()
    pid = _host_pid(str(tmp_path / "cli" / "hostile-cli"))
    time.sleep(2.0)  # its heartbeat has begun
    os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    turn.join(timeout=60)
    took = time.monotonic() - stopped
    (run,) = [e for e in env.log if "agent_command" in e]
    assert run["killed"] == "bridge" and "no heartbeat for 3 s" in run["bridge"], run
    assert "killed (bridge): the egress bridge" in out["result"].notes
    assert took < 3.0 + 6, took  # was: until turn_wall_s (30 min by default)
    print(f"\n{backend}: a stopped bridge ended the turn {took:.1f} s after it stopped")


MODEL_BRIDGE_ATTACK = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
ok = libc.ptrace(16, 1, None, None) == 0
print("attach", "ok" if ok else os.strerror(ctypes.get_errno()), flush=True)
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_harness_cannot_trace_the_model_bridge(backend) -> None:
    from vtb.sandbox.base import Limits
    from vtb.sandbox.runtime import runtime_mounts

    sandbox = sandbox_backend(backend)
    argv = [sys.executable, "-m", "vtb.serve.bridge", "--socket", "/tmp/none.sock", "--"]
    argv += [sys.executable, "-c", MODEL_BRIDGE_ATTACK]
    done = sandbox.run(argv, mounts=runtime_mounts(), limits=Limits(wall_seconds=30, cpu_seconds=30))
    assert done.stdout.strip() == "attach Operation not permitted", (done.stdout, done.stderr[-2000:])
    assert done.killed is None and done.wall_seconds < 20
