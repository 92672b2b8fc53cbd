"""The model server: one checkpoint behind an OpenAI-compatible HTTP API on a Unix socket.

Started by the orchestrator (vtb/service.py) in a sandbox of its own: no network, the checkpoint
read-only at /model, only the project's code. A harness reaches it through `vtb.serve.bridge`
with the step's key. It serves

- ``POST /v1/completions`` (a prompt or a list of prompts) and ``POST /v1/chat/completions``
  (the checkpoint's chat template applied here), with max_tokens, temperature, top_p, top_k, n,
  stop, seed, logprobs and vLLM's truncate_prompt_tokens;
- ``POST /tokenize``, ``POST /detokenize`` (vLLM's), ``GET /v1/models``, ``GET /health``.

Requests arriving within `window_ms` of each other with the same sampling settings share one
engine call (dynamic micro-batching), so concurrent episodes share a batch. FLOPs are charged
here, by the engine, to the usage file of this sandbox (2·params·tokens, prompt + completion);
a request that could pass the step's FLOPs limit ($VTB_MAX_FLOPS) gets HTTP 429 and the server
prints ``{"event": "budget"}`` so the orchestrator records the step as stopped by budget.
In a provenance audit (`--swap`, vtb/serve/swap.py) each prompt's task texts are swapped for
other episodes' before the model sees them, invisibly to the harness; the server prints
``{"event": "swapped", "pairs": [...]}`` for the pairs it used. With `--transcript` it appends
each prompt with the completions returned for it to that file (vtb/serve/transcript.py), for the
orchestrator's check that scored answers are the model's writing.
Stdin is the lifeline: when the orchestrator closes it, the server exits. Stdout carries only
those events (`protocol_stream`): everything else written to it, by vLLM's logging, a library's
print or a child process, lands on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import hmac
import json
import os
import queue
import socketserver
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import TextIO

from vtb.engine import usage
from vtb.serve.api import ApiError, Limits, Request, completion_reply, messages, models_reply, parse
from vtb.serve.swap import Swap
from vtb.serve.transcript import Writer

KEY_ENV = "VTB_SERVE_KEY"
MAX_CONNECTIONS = 64  # open connections at once; more are refused (503) rather than queued


@dataclass
class _Job:
    req: Request
    prompts: list[str | list[int]]  # one per completion (each prompt n times)
    bound: int  # the most tokens it can cost: prompt tokens + n·max_tokens
    done: threading.Event = field(default_factory=threading.Event)
    reply: dict | None = None
    error: ApiError | None = None


class ModelServer:
    """The API over one engine: request checks, the key, micro-batching and the budget."""

    def __init__(
        self,
        engine,
        key: str,
        limits: Limits | None = None,
        window_ms: float = 5.0,
        max_batch: int = 128,
        events: TextIO | None = None,
        swap: Swap | None = None,
        transcript: Writer | None = None,
        tag: dict | None = None,
    ):
        self.engine, self.key, self.limits = engine, key, limits or Limits()
        self.tag = tag or {}  # added to each event: a hosted server's id (vtb/serve/host.py)
        self.transcript = transcript  # prompts as the harness sent them, completions as it got them
        self.events = events  # where {"event": ...} lines go: main's protocol stream (None: sys.stdout)
        self.window_s, self.max_batch = window_ms / 1000.0, max_batch
        self.tokenizer = engine.tokenizer
        # The engine's serving window: with vLLM the smaller of the model's and max_model_len.
        self.window = int(engine.max_positions)
        self._token_lock = threading.Lock()  # HF tokenizers are not safe across threads
        self._jobs: queue.Queue[_Job] = queue.Queue()
        self.budget_refusals = 0
        self.swap, self._swapped = swap, set()  # a provenance audit's swap, and the pairs it used
        threading.Thread(target=self._batcher, daemon=True).start()

    def _event(self, event: dict) -> None:
        print(json.dumps({**event, **self.tag}), file=self.events or sys.stdout, flush=True)

    # -- requests --------------------------------------------------------------------------------
    def handle(self, method: str, path: str, auth: str | None, body: bytes | None) -> tuple[int, dict]:
        """(status, JSON body) for one HTTP request."""
        try:
            if path == "/health" and method == "GET":
                return 200, {"status": "ok"}
            if not hmac.compare_digest((auth or "").encode(), f"Bearer {self.key}".encode()):
                raise ApiError(
                    401,
                    "missing or wrong API key (send Authorization: Bearer $OPENAI_API_KEY)",
                    "authentication_error",
                )
            routes = {
                ("GET", "/v1/models"): lambda _: models_reply(self.window),
                ("POST", "/v1/completions"): lambda b: self._generate("completions", b),
                ("POST", "/v1/chat/completions"): lambda b: self._generate("chat", b),
                ("POST", "/tokenize"): self._tokenize,
                ("POST", "/detokenize"): self._detokenize,
            }
            route = routes.get((method, path.split("?", 1)[0]))
            if route is None:
                raise ApiError(
                    404,
                    f"no route {method} {path[:100]}; see /v1/models, /v1/completions, /v1/chat/completions, /tokenize, /detokenize",
                )
            data = None
            if method == "POST":
                try:
                    data = json.loads(body or b"")
                except (ValueError, UnicodeDecodeError) as e:
                    raise ApiError(400, f"the body is not JSON: {e}") from None
            return 200, route(data)
        except ApiError as e:
            return e.status, e.body()

    def _encode(self, text: str, add_special: bool = True) -> list[int]:
        with self._token_lock:
            return self.tokenizer(text, add_special_tokens=add_special).input_ids

    def _render(self, messages: list[dict]) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            raise ApiError(
                400,
                "this checkpoint has no chat template; use /v1/completions with your own prompt format",
                param="messages",
            )
        with self._token_lock:
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _generate(self, kind: str, body: object) -> dict:
        req = parse(kind, body, self.limits)
        texts = req.prompts if kind == "completions" else [self._render(req.messages)]
        served = texts if self.swap is None else self._swap_texts(kind, req, texts)
        keep = self.window - min(req.max_tokens, self.window // 2)  # the engines' own left-truncation
        prompts: list[str | list[int]] = []
        bound = shown = 0
        for text, serve_text in zip(texts, served, strict=True):
            ids = self._encode(text, add_special=kind == "completions")
            if req.truncate is not None and req.truncate > 0:
                ids = ids[-min(req.truncate, keep) :]  # never past the serving window (vLLM would refuse)
                prompt: str | list[int] = ids
            elif len(ids) > keep and req.truncate is None:
                raise ApiError(
                    400,
                    f"a prompt is {len(ids)} tokens; with max_tokens={req.max_tokens} this model's window of "
                    f"{self.window} leaves {keep}: shorten it, or set truncate_prompt_tokens (-1 keeps the last {keep})",
                    param="prompt",
                )
            else:
                prompt = text
            shown += min(len(ids), keep)
            if serve_text is not text:  # an audit's swapped prompt: checked and counted as sent
                served_ids = self._encode(serve_text, add_special=kind == "completions")
                keep_ids = keep if req.truncate is None or req.truncate < 0 else min(req.truncate, keep)
                prompt = served_ids[-keep_ids:] if len(served_ids) > keep_ids else serve_text
                ids = served_ids
            bound += req.n * (min(len(ids), keep) + req.max_tokens)
            prompts += [prompt] * req.n
        job = _Job(req, prompts, bound)
        self._jobs.put(job)
        job.done.wait()
        if job.error is not None:
            raise job.error
        if self.transcript is not None:  # each prompt as the model saw it (chat: rendered), its n completions
            written = [_text_of(c) for c in job.reply.get("choices", [])]
            for i, text in enumerate(texts):
                self.transcript.add(text, written[i * req.n : (i + 1) * req.n])
        if self.swap is not None:  # the usage the harness would have seen without the swap
            usage = job.reply["usage"]
            usage["prompt_tokens"] = shown
            usage["total_tokens"] = shown + usage["completion_tokens"]
        return job.reply

    def _swap_texts(self, kind: str, req: Request, texts: list[str]) -> list[str]:
        """The prompts the model gets in an audit (the same objects where no pair applied)."""
        hits: set[int] = set()
        if kind == "completions":
            out = []
            for text in req.prompts:
                swapped, used = self.swap.apply(text)
                hits |= used
                out.append(swapped if used else text)
        else:
            msgs = []
            for m in req.messages:
                content, used = self.swap.apply(m["content"])
                hits |= used
                msgs.append({**m, "content": content})
            out = [self._render(msgs) if hits else texts[0]]
        new = sorted(hits - self._swapped)
        if new:
            self._swapped |= hits
            self._event({"event": "swapped", "pairs": new})
        return out

    def _tokenize(self, body: object) -> dict:
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object")
        if "messages" in body:
            ids = self._encode(self._render(messages(body["messages"])), add_special=False)
        elif isinstance(body.get("prompt"), str):
            ids = self._encode(body["prompt"], add_special=body.get("add_special_tokens", True) is not False)
        else:
            raise ApiError(400, "send prompt (a string) or messages", param="prompt")
        return {"count": len(ids), "max_model_len": self.window, "tokens": ids}

    def _detokenize(self, body: object) -> dict:
        tokens = body.get("tokens") if isinstance(body, dict) else None
        vocab = len(self.tokenizer)
        if (
            not isinstance(tokens, list)
            or len(tokens) > 1 << 20
            or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in tokens)
        ):
            raise ApiError(400, f"tokens must be a list of token ids in [0, {vocab})", param="tokens")
        with self._token_lock:
            return {"prompt": self.tokenizer.backend_tokenizer.decode(tokens, skip_special_tokens=False)}

    # -- the batcher -----------------------------------------------------------------------------
    def _batcher(self) -> None:
        while True:
            jobs = [self._jobs.get()]
            deadline = time.monotonic() + self.window_s
            while sum(len(j.prompts) for j in jobs) < self.max_batch:
                try:
                    jobs.append(self._jobs.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            groups: dict[tuple, list[_Job]] = {}
            for job in jobs:
                groups.setdefault(job.req.sampling_key(), []).append(job)
            for group in groups.values():
                self._run(group)

    def _run(self, group: list[_Job]) -> None:
        admitted, bound = [], 0
        n_params = self.engine.n_params
        for job in group:
            if usage.would_exceed(usage.infer_flops(n_params, bound + job.bound)):
                self._refuse(job)
            else:
                admitted.append(job)
                bound += job.bound
        if not admitted:
            return
        req = admitted[0].req
        prompts = [p for job in admitted for p in job.prompts]
        try:
            out = self.engine.complete(
                prompts,
                max_new_tokens=req.max_tokens,
                temperature=req.temperature,
                top_p=req.top_p,
                top_k=req.top_k,
                seed=req.seed,
                stop=req.stop,
                logprobs=req.logprobs,
            )
        except usage.BudgetExhausted:
            for job in admitted:
                self._refuse(job)
            return
        except Exception as e:  # noqa: BLE001 (the engine's failure is this request's, not the server's)
            for job in admitted:
                job.error = ApiError(
                    500, f"generation failed: {type(e).__name__}: {str(e)[:300]}", "server_error"
                )
                job.done.set()
            return
        if self.swap is not None:  # what the model echoed of a served text goes back as the harness's
            out = [dataclasses.replace(c, text=self.swap.restore(c.text)) for c in out]
        at = 0
        for job in admitted:
            job.reply = completion_reply(job.req, out[at : at + len(job.prompts)], job.req.kind)
            at += len(job.prompts)
            job.done.set()

    def _refuse(self, job: _Job) -> None:
        self.budget_refusals += 1
        if self.budget_refusals == 1:
            self._event({"event": "budget"})
        used, limit = usage.totals()["flops"], usage.max_flops()
        job.error = ApiError(
            429,
            f"this step's FLOPs budget is spent: {used:.4g} of {limit:.4g} used, and this request could use "
            f"{usage.infer_flops(self.engine.n_params, job.bound):.4g} more",
            "insufficient_quota",
        )
        job.done.set()


# -- HTTP ----------------------------------------------------------------------------------------
def _text_of(choice: dict) -> str:
    """A reply choice's text: a completion's `text` or a chat message's `content`."""
    if "text" in choice:
        return str(choice["text"] or "")
    return str((choice.get("message") or {}).get("content") or "")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as OpenAI clients expect
    timeout = 600  # an idle connection is closed after this
    server: _HttpServer

    def _serve(self, method: str) -> None:
        body = None
        if method == "POST":
            if self.headers.get("Transfer-Encoding"):
                return self._send(
                    411, ApiError(411, "send a Content-Length (chunked bodies are not read)").body()
                )
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if not 0 <= length <= self.server.api.limits.max_body_bytes:
                self.close_connection = True
                return self._send(
                    413,
                    ApiError(
                        413, f"the body must be 0..{self.server.api.limits.max_body_bytes} bytes"
                    ).body(),
                )
            body = self.rfile.read(length)
        status, reply = self.server.api.handle(method, self.path, self.headers.get("Authorization"), body)
        self._send(status, reply)

    def _send(self, status: int, reply: dict) -> None:
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (a request log is not kept)
        pass

    def address_string(self) -> str:  # a Unix socket's peer has no address
        return "unix"


class _HttpServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, api: ModelServer):
        self.api = api
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(path, _Handler)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
            finally:
                self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def serve(api: ModelServer, path: str) -> _HttpServer:
    """Listen on the Unix socket `path` (in a thread); returns the server (call .shutdown())."""
    if os.path.lexists(path):
        os.unlink(path)
    server = _HttpServer(path, api)
    # a short poll: shutdown() waits for it, at every server's end
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


def protocol_stream() -> TextIO:
    """A private handle on this process's stdout for the events; fd 1 itself then points at stderr.

    Done before any engine is imported, so whatever else writes to stdout (vLLM's logging if its
    settings were lost, a library's print, NCCL or Triton from C, an engine-core child process,
    which inherits fd 1) goes to stderr and cannot fake or garble an event.
    """
    sys.stdout.flush()
    events = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    return events


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="the model server (run by the orchestrator in its own sandbox)"
    )
    parser.add_argument("--model", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--limits", default="{}", help="JSON of vtb.serve.api.Limits fields")
    parser.add_argument("--window-ms", type=float, default=5.0)
    parser.add_argument("--swap", default=None, help="a provenance audit's pairs (vtb/serve/swap.py)")
    parser.add_argument(
        "--transcript", default=None, help="append prompts and completions here (transcript.py)"
    )
    args = parser.parse_args(argv)
    key = os.environ.pop(KEY_ENV, "")
    if not key:
        print(f"model server: ${KEY_ENV} is not set", file=sys.stderr)
        return 2
    events = protocol_stream()
    from vtb.engine.select import open_engine

    engine = open_engine(args.model, safetensors_only=True)
    swap = Swap.load(args.swap) if args.swap else None
    api = ModelServer(
        engine,
        key,
        Limits(**json.loads(args.limits)),
        window_ms=args.window_ms,
        events=events,
        swap=swap,
        transcript=Writer(args.transcript) if args.transcript else None,
    )
    server = serve(api, args.socket)
    torch = sys.modules.get("torch")  # the threads its CPU ops use (sandbox.server_threads)
    threads = torch.get_num_threads() if torch is not None else None
    print(json.dumps({"event": "ready", "engine": engine.name, "threads": threads}), file=events, flush=True)
    sys.stdin.read()  # until the orchestrator closes our stdin
    server.shutdown()
    if engine.name == "transformers":
        # Everything is on disk already (the usage file is rewritten at each charge, the
        # transcript flushed at each line, the events line-buffered): skip the interpreter's
        # teardown of torch and transformers, half a CPU-second a server, 24+ servers a run.
        # (vLLM keeps its own exit: its engine-core process and GPU memory are released there.)
        events.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
