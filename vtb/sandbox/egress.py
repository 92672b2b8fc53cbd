"""Network for a sandboxed CLI agent: an allowlisting HTTP proxy, reached through a Unix socket.

A research sandbox has no network but its own loopback, so nothing inside can open a
connection to the outside world. A CLI agent still needs its LLM API; it gets exactly that:

    agent (HTTPS_PROXY=http://127.0.0.1:3128)
      -> bridge (inside the sandbox: 127.0.0.1:3128 -> /egress/proxy.sock)
      -> EgressProxy (orchestrator: checks the allowlist, logs, connects upstream)

The Unix socket is the sandbox's only way out, and it ends in the orchestrator's proxy, so the
allowlist cannot be bypassed from inside (killing the bridge only cuts the agent off). The
proxy speaks HTTP CONNECT (what HTTPS clients use), plain absolute-URI HTTP requests, and plain
origin-form requests whose `Host` header names the target (what a client sends to a forwarded
port, below). What it logs, one entry each: time, method, host, port, allowed or refused,
bytes each way, and

- for plain HTTP, one entry per request: the proxy forwards exactly one request per connection
  (its body sized by Content-Length) with `Connection: close`, so a client's next request comes
  on a new connection and is checked and logged on its own; bytes sent after that request (a
  pipelined one) are never forwarded, and logged as `pipelined-refused`;
- for a CONNECT tunnel, one entry per tunnel: the requests inside are encrypted, so how many
  there were is unknown (`requests: null`), only the bytes are counted.

An endpoint on the orchestrator's own loopback (a user's vLLM server, a test's API server) is
not reachable inside, where 127.0.0.1 is the sandbox's own. For each such port (`--forward`)
the bridge also listens on the sandbox's 127.0.0.1:<port> and sends what arrives to the proxy,
which checks the `Host` header against the allowlist like any other request: a client that
skips proxies for loopback addresses (many do) still reaches it, through the same door.

Whatever a sandbox sends, the proxy's cost is bounded: at most MAX_CONNECTIONS open connections
(one thread each; more are refused with 503 in the accepting thread, and logged), a request head
must arrive within HEADER_TIMEOUT_S (else 408, logged), a connection idles out after
IDLE_TIMEOUT_S, and a head with a malformed header line (`Host : x`, a folded line) is refused.

The bridge also runs the agent's command and relays its stdout and stderr as tagged lines
("1 ..." / "2 ..."), so the orchestrator can timestamp both streams as they arrive.
"""

from __future__ import annotations

import argparse
import os
import re
import select
import socket
import socketserver
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

BRIDGE_PORT = 3128  # where the agent finds its proxy inside the sandbox
SOCKET_DIR = "/egress"  # the orchestrator's socket dir, mounted here
SOCKET_NAME = "proxy.sock"
IDLE_TIMEOUT_S = 300.0
HEADER_TIMEOUT_S = 10.0  # a request's head must arrive within this, or the connection is closed
MAX_CONNECTIONS = 32  # open connections per proxy (one proxy per sandbox); past it: 503 at accept
MAX_HEADER_BYTES = 64 << 10
MAX_LOG_ENTRIES = 5000  # requests logged one by one per proxy; past it they are counted in one entry
MAX_HOST_CHARS = 253  # a DNS name's longest
# RFC 9112: a method, a target, a version, one space apart; a field: a token, ':' with no space
# before it, and a value without control characters (tab allowed).
REQUEST_LINE = re.compile(r"[A-Z]{1,20} [!-~]{1,8192} HTTP/1\.[01]")
HEADER_LINE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+:[^\x00-\x08\x0a-\x1f\x7f]*")
HEARTBEAT_S = 1.0  # the bridge says "0 alive" this often (tag 0: the bridge's own lines)
RELAY_GRACE_S = 2.0  # output still relayed after the command exits (a leftover process's pipe)
PR_SET_DUMPABLE = 4
MAX_LOGGED_PATH = 200  # characters of a plain request's path kept in its log entry
DEFAULT_PORTS = (443, 80)  # an allowlist entry without a port allows these


def parse_allow(entries: list[str]) -> list[tuple[str, int | None]]:
    """'api.openai.com', 'api.openai.com:443', '*.example.com', '127.0.0.1:8000' -> (host, port)."""
    out = []
    for entry in entries:
        entry = entry.strip().lower()
        if not entry or "/" in entry:
            raise ValueError(
                f"egress allowlist entry {entry!r}: use host or host:port (no scheme, no path), "
                "e.g. api.anthropic.com or 127.0.0.1:8000"
            )
        host, sep, port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        out.append((host, int(port)) if sep else (entry, None))
    return out


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def loopback_ports(entries: list[str]) -> list[int]:
    """Ports of allowlisted endpoints on the orchestrator's loopback: the bridge relays these."""
    ports = []
    for host, port in parse_allow(entries):
        if port is not None and (host.strip("[]") in LOOPBACK_NAMES or host.startswith("127.")):
            ports.append(port)
    return sorted(set(ports) - {BRIDGE_PORT})


def allowed(rules: list[tuple[str, int | None]], host: str, port: int) -> bool:
    host = host.lower().strip("[]")
    for rule_host, rule_port in rules:
        port_ok = port in DEFAULT_PORTS if rule_port is None else port == rule_port
        host_ok = rule_host == host or (rule_host.startswith("*.") and host.endswith(rule_host[1:]))
        if port_ok and host_ok:
            return True
    return False


def _pipe(a: socket.socket, b: socket.socket) -> tuple[int, int]:
    """Copy both ways; (a->b, b->a) bytes. Ends when b (the far side) closes or both idle too long.

    When a closes first its half-close is passed on and b's answer still flows back; when b
    closes there is nobody left to talk to, so a client that keeps its socket open (an HTTP
    client before garbage collection) does not hold the connection, or its log entry, open.
    """
    sent = {a: 0, b: 0}
    peer = {a: b, b: a}
    open_ = [a, b]
    while b in open_:
        ready, _, _ = select.select(open_, [], [], IDLE_TIMEOUT_S)
        if not ready:
            break
        for s in ready:
            try:
                chunk = s.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                open_.remove(s)
                try:
                    peer[s].shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                continue
            try:
                peer[s].sendall(chunk)
            except OSError:
                return sent[a], sent[b]
            sent[s] += len(chunk)
    return sent[a], sent[b]


@dataclass
class EgressProxy:
    """The orchestrator's end: listens on `<dir>/proxy.sock` until `close()`; `log` lists requests."""

    allow: list[str]
    dir: Path
    connect_timeout_s: float = 10.0
    max_connections: int = MAX_CONNECTIONS
    log: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rules = parse_allow(self.allow)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / SOCKET_NAME
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                try:
                    proxy._handle(self.request)
                finally:
                    proxy._slots.release()

        class Server(socketserver.ThreadingUnixStreamServer):
            daemon_threads = True

            def process_request(self, request, client_address) -> None:
                # Decided in the accepting thread, before any thread is made for it: a flood of
                # connections costs the orchestrator MAX_CONNECTIONS threads at most.
                if not proxy._slots.acquire(blocking=False):
                    proxy._refuse_busy(request)
                    self.shutdown_request(request)
                    return
                super().process_request(request, client_address)

        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._overflow: dict | None = None  # the log-full entry, once there is one
        self._server = Server(str(self.path), Handler)
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._server.serve_forever, name="vtb-egress", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> EgressProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _record(self, **entry) -> dict:
        """Log a request when it is decided (so the log is in request order); returns the entry.

        Past MAX_LOG_ENTRIES a request is not listed but counted, by status and bytes, in one
        `log-full` entry: however many connections a sandbox opens, the log's memory is bounded.
        """
        with self._lock:
            if len(self.log) < MAX_LOG_ENTRIES:
                self.log.append(entry)
                return entry
            if self._overflow is None:
                self._overflow = {
                    "time": entry["time"],
                    "method": "(more requests than the log lists)",
                    "host": None,
                    "port": None,
                    "path": None,
                    "requests": 0,
                    "allowed": False,
                    "status": "log-full",
                    "counts": {},
                    "bytes_up": 0,
                    "bytes_down": 0,
                }
                self.log.append(self._overflow)
            self._overflow["requests"] += 1
            counts = self._overflow["counts"]
            counts[entry["status"]] = counts.get(entry["status"], 0) + 1
        return {**entry, "counted_in": self._overflow}

    def _finish(self, logged: dict, **update) -> None:
        """A request's last figures (status, bytes), on its own entry or on the log-full count."""
        with self._lock:
            total = logged.get("counted_in")
            if total is None:
                logged.update(update)
                return
            total["bytes_up"] += update.get("bytes_up", 0)
            total["bytes_down"] += update.get("bytes_down", 0)
            if update.get("status") and update["status"] != logged["status"]:
                counts = total["counts"]
                counts[logged["status"]] -= 1
                counts[update["status"]] = counts.get(update["status"], 0) + 1
                logged["status"] = update["status"]

    def _refuse_busy(self, client: socket.socket) -> None:
        self._bad(
            client,
            time.time(),
            "(not read)",
            "too-many-connections",
            503,
            f"the egress proxy holds {self.max_connections} connections of this sandbox at most",
        )

    def _bad(
        self, client: socket.socket, started: float, first: str, status: str, code: int, text: str
    ) -> None:
        """Log a request refused before it was understood, and answer it."""
        self._record(
            time=started,
            method=first[:60],
            host=None,
            port=None,
            path=None,
            requests=None,
            allowed=False,
            status=status,
            bytes_up=0,
            bytes_down=0,
        )
        if code:
            try:
                client.settimeout(1.0)
                _reply(client, code, text)
            except OSError:
                pass

    def _handle(self, client: socket.socket) -> None:
        started = time.time()
        try:  # the whole head within HEADER_TIMEOUT_S, however slowly it trickles in
            got = _read_head(client, b"", time.monotonic() + HEADER_TIMEOUT_S)
        except OSError:
            got = "timeout"
        if got == "timeout":
            return self._bad(
                client,
                started,
                "(head not sent in time)",
                "header-timeout",
                408,
                f"the request head did not arrive within {HEADER_TIMEOUT_S:g} s",
            )
        if got is None:  # hung up before a whole head: logged, nobody to answer
            return self._bad(client, started, "(closed before a request)", "no-request", 0, "")
        if got == "too-large":
            return self._bad(
                client,
                started,
                "(head too large)",
                "bad-request",
                431,
                f"the request head is over {MAX_HEADER_BYTES} bytes",
            )
        client.settimeout(None)
        lines, rest = got
        problem = _malformed(lines)
        if problem:
            return self._bad(client, started, lines[0], "bad-request", 400, problem)
        try:
            method, target, version = lines[0].split(" ", 2)
            if method == "CONNECT":
                host, _, port_s = target.rpartition(":")
                port, path = int(port_s), ""
            else:
                if target.startswith("/"):  # origin form (a forwarded port): the Host header names it
                    host_header = [
                        h.split(":", 1)[1].strip() for h in lines[1:] if h.lower().startswith("host:")
                    ]
                    if len(host_header) != 1:
                        raise ValueError(target)
                    target = f"http://{host_header[0]}{target}"
                url = urlsplit(target)
                if url.scheme != "http" or not url.hostname:
                    raise ValueError(target)
                host, port = url.hostname, url.port or 80
                path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            if not host or len(host) > MAX_HOST_CHARS or not 0 < port < 65536:
                raise ValueError(target)
        except ValueError:
            return self._bad(
                client,
                started,
                lines[0],
                "bad-request",
                400,
                "the egress proxy takes CONNECT host:port, an absolute http:// URL, "
                "or a path with one Host header",
            )
        entry = {
            "time": started,
            "method": method,
            "host": host,
            "port": port,
            "path": path[:MAX_LOGGED_PATH] if path else None,
            "requests": None if method == "CONNECT" else 1,
        }
        if not allowed(self.rules, host, port):
            self._record(**entry, allowed=False, status="refused", bytes_up=0, bytes_down=0)
            _reply(client, 403, f"egress to {host}:{port} is not in the allowlist (agent.allow_hosts)")
            return
        try:
            upstream = socket.create_connection((host.strip("[]"), port), timeout=self.connect_timeout_s)
        except OSError as err:
            status = f"upstream-error: {str(err)[:200]}"
            self._record(**entry, allowed=True, status=status, bytes_up=0, bytes_down=0)
            _reply(client, 502, f"could not connect to {host}:{port}: {err}")
            return
        logged = self._record(**entry, allowed=True, status="open", bytes_up=0, bytes_down=0)
        extra = b""
        with upstream:
            upstream.settimeout(None)
            if method == "CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                first, plain = self._inside_tunnel(client, upstream, rest, logged, host, port)
            else:
                first, plain = _one_request(lines, path, rest, host, port)
            if first:
                upstream.sendall(first)
            if plain is None:  # an opaque (TLS) tunnel: both ways until it ends
                up, down = _pipe(client, upstream) if first is not None else (0, 0)
            else:  # exactly one plain request: its body, then only the answer flows
                up, down, extra = _answer_only(client, upstream, *plain)
        self._finish(  # the byte counts once the connection has ended
            logged,
            status="done" if first is not None else "bad-request",
            bytes_up=up + len(first or b""),
            bytes_down=down,
            seconds=round(time.time() - started, 3),
        )
        if extra.strip():  # a pipelined request after the first: logged, never forwarded
            self._record(
                time=time.time(),
                method=extra.split(b"\r\n", 1)[0].decode("latin-1")[:60],
                host=host,
                port=port,
                path=None,
                requests=None,
                allowed=False,
                status="pipelined-refused",
                bytes_up=0,
                bytes_down=0,
            )

    def _inside_tunnel(
        self, client: socket.socket, upstream: socket.socket, rest: bytes, logged: dict, host: str, port: int
    ) -> tuple[bytes | None, tuple[int, bytes] | None]:
        """The tunnel's first bytes, to send upstream, and for plain HTTP what `_one_request`
        says of it. Plain HTTP inside a CONNECT (Node's proxy agents tunnel http:// too) is
        handled like any plain request: one per tunnel, logged with its method and path, its head
        checked like any other (a malformed one: (None, None), the tunnel closed with a 400).
        Anything else (TLS) passes through unread."""
        if not rest:
            ready, _, _ = select.select([client, upstream], [], [], IDLE_TIMEOUT_S)
            if client not in ready:  # the far side speaks first (or nobody does): opaque
                return b"", None
            try:
                rest = client.recv(65536)
            except OSError:
                return b"", None
        if not PLAIN_REQUEST.match(rest):
            return rest, None
        try:
            got = _read_head(client, rest, time.monotonic() + HEADER_TIMEOUT_S)
        except OSError:
            got = None
        client.settimeout(None)
        problem = "the request head was not sent whole in time" if not isinstance(got, tuple) else None
        if got is not None and not problem:
            problem = _malformed(got[0])
        if problem:
            _reply(client, 400, problem)
            return None, None
        lines, body = got
        method, path = lines[0].split(" ", 2)[:2]
        with self._lock:
            logged.update(method=method, path=path[:MAX_LOGGED_PATH], requests=1, tunnel=True)
        return _one_request(lines, path, body, host, port)


PLAIN_REQUEST = re.compile(rb"^[A-Z]{3,10} /[^ ]* HTTP/1\.[01]\r\n")


def _read_head(sock: socket.socket, head: bytes, deadline: float) -> tuple[list[str], bytes] | str | None:
    """(request line and header lines, the bytes after them); None if the client hung up first,
    "too-large" past MAX_HEADER_BYTES. The head must be whole by `deadline` (monotonic), however
    it trickles in (a per-read timeout would let one byte every few seconds hold a connection);
    past it a TimeoutError."""
    while b"\r\n\r\n" not in head:
        if len(head) >= MAX_HEADER_BYTES:
            return "too-large"
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request head not sent in time")
        sock.settimeout(left)
        chunk = sock.recv(4096)
        if not chunk:
            return None
        head += chunk
    header, _, rest = head.partition(b"\r\n\r\n")
    if len(header) > MAX_HEADER_BYTES:
        return "too-large"
    return header.decode("latin-1").split("\r\n"), rest


def _malformed(lines: list[str]) -> str | None:
    """What is wrong with a request head, or None. Refused: a request line that is not
    `METHOD target HTTP/1.x`, a header line with a space before its ':' (`Host : x`, which
    some servers read as Host and others skip), a folded line or a control character, and a
    body framed other than by one Content-Length (chunked bodies, conflicting lengths: what
    request smuggling rests on)."""
    if not REQUEST_LINE.fullmatch(lines[0]):
        return "malformed request line: send METHOD TARGET HTTP/1.1"
    if not all(HEADER_LINE.fullmatch(h) for h in lines[1:]):
        return "malformed request head (a header needs a name, then ':' with no space before it)"
    names = [h.split(":", 1)[0].lower() for h in lines[1:]]
    sizes = [h.split(":", 1)[1].strip() for h in lines[1:] if h.lower().startswith("content-length:")]
    if "transfer-encoding" in names:
        return "chunked or encoded request bodies are not forwarded: send a Content-Length"
    if len(sizes) > 1 or (sizes and not (sizes[0].isdigit() and len(sizes[0]) <= 15)):
        return "a request body needs exactly one Content-Length with a number"
    return None


def _one_request(
    lines: list[str], path: str, rest: bytes, host: str, port: int
) -> tuple[bytes, tuple[int, bytes]]:
    """(the request in origin form with `Connection: close` and the body bytes already read,
    (body bytes still to come, bytes after the body)). Exactly one request per connection is
    forwarded: the next comes on a new connection, so the proxy checks and logs each on its
    own; bytes after the body (a pipelined one) are never sent upstream. The Host header sent
    is the host the allowlist checked and the log names (RFC 9112: a proxy replaces it), so a
    request cannot name another site behind the same address. A body is sized by its one
    Content-Length (`_malformed` refused anything else)."""
    method, _, version = lines[0].split(" ", 2)
    skip = ("proxy-", "connection:", "transfer-encoding:", "host:", "keep-alive:")
    keep = [h for h in lines[1:] if not h.lower().startswith(skip)]
    sizes = [h.split(":", 1)[1].strip() for h in lines[1:] if h.lower().startswith("content-length:")]
    length = int(sizes[0]) if sizes else 0
    name = f"[{host.strip('[]')}]" if ":" in host else host
    host_line = f"Host: {name}" + ("" if port == 80 else f":{port}")
    head = "\r\n".join([f"{method} {path} {version}", host_line, *keep, "Connection: close", "", ""])
    return head.encode("latin-1") + rest[:length], (max(0, length - len(rest)), rest[length:])


def _answer_only(
    client: socket.socket, upstream: socket.socket, remaining: int, extra: bytes
) -> tuple[int, int, bytes]:
    """The rest of one request's body up, then only the answer down; (up, down, what the client
    sent after the request: never forwarded). Ends when the far side closes or idles out."""
    up = down = 0
    watched = [client, upstream]
    while True:
        ready, _, _ = select.select(watched, [], [], IDLE_TIMEOUT_S)
        if not ready:
            break
        if upstream in ready:
            try:
                chunk = upstream.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            try:
                client.sendall(chunk)
            except OSError:
                break
            down += len(chunk)
        if client in ready:
            try:
                chunk = client.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                if remaining:
                    break  # the client gave up mid-body
                watched.remove(client)  # half-closed: its answer still flows back
                continue
            body, chunk = chunk[:remaining], chunk[remaining:]
            if body:
                upstream.sendall(body)
                up += len(body)
                remaining -= len(body)
            if chunk and len(extra) < MAX_HEADER_BYTES:
                extra += chunk[: MAX_HEADER_BYTES - len(extra)]
    return up, down, extra


def _reply(sock: socket.socket, status: int, text: str) -> None:
    reason = {
        400: "Bad Request",
        403: "Forbidden",
        408: "Request Timeout",
        502: "Bad Gateway",
        503: "Service Unavailable",
    }[status]
    body = (text + "\n").encode()
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
    try:
        sock.sendall(head.encode() + b"Connection: close\r\n\r\n" + body)
    except OSError:
        pass


def proxy_env(port: int = BRIDGE_PORT) -> dict[str, str]:
    """The environment that points HTTP clients (curl, Python, Node, Rust) at the bridge."""
    url = f"http://127.0.0.1:{port}"
    names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
    return {**dict.fromkeys(names, url), "NO_PROXY": "", "no_proxy": ""}


# -- inside the sandbox ------------------------------------------------------------------------


def relay_listener(listener: socket.socket, path: str) -> None:
    """Relay each connection to the sandbox's listener to the orchestrator's proxy socket, as is."""
    while True:
        conn, _ = listener.accept()

        def serve(conn: socket.socket = conn) -> None:
            with conn:
                try:
                    out = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    out.connect(path)
                except OSError:
                    return
                with out:
                    _pipe(conn, out)

        threading.Thread(target=serve, daemon=True).start()


def _relay(stream, tag: str, lock: threading.Lock) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        _say(tag, line, lock)


def _say(tag: str, line: str, lock: threading.Lock) -> None:
    with lock:
        try:
            sys.stdout.write(f"{tag} {line}\n")
            sys.stdout.flush()
        except (OSError, ValueError):  # the orchestrator stopped reading: nothing left to tell
            pass


def _heartbeat(lock: threading.Lock) -> None:
    while True:
        time.sleep(HEARTBEAT_S)
        _say("0", "alive", lock)


def harden_self() -> None:
    """Keep the sandbox's own code out of reach of the agent code it starts (same uid, same
    namespaces): not dumpable, so without CAP_SYS_PTRACE (every sandbox drops it) nothing can
    ptrace it, read its memory or open its /proc/<pid>/fd (its stdout to the orchestrator);
    the children it execs are dumpable again (the kernel resets it at exec). As the sandbox's
    pid 1 it receives from inside only the signals it has a handler for, so Python's SIGINT
    handler goes back to the default. Both hold on bwrap and docker (tests/test_egress.py)."""
    import ctypes
    import signal

    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        print("sandbox bridge: could not make itself non-dumpable", file=sys.stderr, flush=True)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def main(argv: list[str] | None = None) -> int:
    """`python -m vtb.sandbox.egress [--socket S] [--port P] -- CMD...`: bridge, run CMD, relay output."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", help="the orchestrator's proxy socket (no network without it)")
    parser.add_argument("--port", type=int, default=BRIDGE_PORT)
    parser.add_argument(
        "--forward",
        type=int,
        action="append",
        default=[],
        help="also relay the sandbox's 127.0.0.1:PORT to the proxy (an endpoint on the host's loopback)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    harden_self()
    lock = threading.Lock()
    _say("0", "start", lock)  # the orchestrator watches for the bridge's heartbeat from here on
    threading.Thread(target=_heartbeat, args=(lock,), daemon=True).start()
    env = dict(os.environ)
    if args.socket:
        # A forwarded port listens on ::1 too where the sandbox has it: `localhost` may resolve there.
        addresses = [("127.0.0.1", args.port)] + [(a, p) for p in args.forward for a in ("127.0.0.1", "::1")]
        for address in addresses:
            try:
                listener = socket.create_server(
                    address, family=socket.AF_INET6 if ":" in address[0] else socket.AF_INET
                )
            except OSError as e:  # no IPv6, or a port below 1024 without the right: the rest still works
                if address[0] == "127.0.0.1":
                    print(f"egress bridge: cannot listen on {address}: {e}", file=sys.stderr, flush=True)
                continue
            threading.Thread(target=relay_listener, args=(listener, args.socket), daemon=True).start()
        env.update(proxy_env(args.port))
    child = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    relays = [
        threading.Thread(target=_relay, args=(s, t, lock), daemon=True)
        for s, t in ((child.stdout, "1"), (child.stderr, "2"))
    ]
    for t in relays:
        t.start()
    code = child.wait()
    # A process the command left behind may hold its pipes open: its output gets a short grace,
    # then this pid 1 exits and the kernel ends everything else in the sandbox.
    deadline = time.monotonic() + RELAY_GRACE_S
    for t in relays:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    _say("0", f"exit {code}", lock)
    return code


if __name__ == "__main__":
    sys.exit(main())
