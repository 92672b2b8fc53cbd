"""Start a harness with the model server reachable on its own loopback.

`python -m vtb.serve.bridge --socket /run/vtb-model/api.sock -- python harness.py` listens on
the sandbox's 127.0.0.1:8000 (and ::1 where there is one), relays each connection to the model
server's Unix socket as is, and runs the harness with this process's stdin and stdout (the
harness protocol passes straight through). The harness finds the server at $OPENAI_BASE_URL
(= $VTB_MODEL_URL) with the key in $OPENAI_API_KEY (= $VTB_MODEL_KEY): any OpenAI client works.
The bridge is not dumpable (`harden_self`): the harness can neither trace it nor read its
memory. Killing the bridge only cuts the harness off: the socket is the sandbox's one door, and the
server behind it checks the key on every request.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading

from vtb.sandbox.egress import harden_self, relay_listener

PORT = 8000  # vLLM's default


def model_env(key: str, port: int = PORT) -> dict[str, str]:
    """What a harness is told: the base URL and key under OpenAI's names and ours."""
    url = f"http://127.0.0.1:{port}/v1"
    return {"OPENAI_BASE_URL": url, "VTB_MODEL_URL": url, "OPENAI_API_KEY": key, "VTB_MODEL_KEY": key}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True)
    parser.add_argument("--port", type=int, default=PORT)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    harden_self()  # the harness it starts can neither trace nor stop it
    for host, family in (("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6)):
        try:
            listener = socket.create_server((host, args.port), family=family)
        except OSError as e:  # no IPv6 here: the IPv4 listener is enough
            if family == socket.AF_INET:
                print(f"model bridge: cannot listen on {host}:{args.port}: {e}", file=sys.stderr, flush=True)
            continue
        threading.Thread(target=relay_listener, args=(listener, args.socket), daemon=True).start()
    return subprocess.call(command, env=dict(os.environ))


if __name__ == "__main__":
    sys.exit(main())
