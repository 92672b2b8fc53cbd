"""The model service in sandboxes, attacked from the harness's side (both backends).

A harness gets an endpoint and a key, never weights: these harnesses try to find the weights,
see the server's process, talk to it without the key, spend past the step's FLOPs and forge
their own usage, and one probes everything it can to tell the null and base-model swaps from a
normal play. An off-the-shelf OpenAI client works unchanged. Each runs against both ways a play
serves a model: a server process of its own (`ModelService`: vLLM, GPUs) and a fork of the play's
model host (`ModelHost`: the transformers engine on the CPU); the host's own attacks are last.
"""

from __future__ import annotations

import json
import re
from contextlib import contextmanager

import pytest
from conftest import BACKENDS, sandbox_backend

from tests.conftest import play_split
from vtb import runner
from vtb.blind import null_model
from vtb.engine.infer import Engine
from vtb.ledger import Charge
from vtb.sandbox.base import Limits
from vtb.sandbox.runtime import thread_env
from vtb.service import ModelHost, ModelService, ServiceError

SERVED = ("process", "host")

LIMITS = Limits(wall_seconds=120, cpu_seconds=120)
QUESTION = "Question: Tom has 5 apples and eats 2. How many?\nAnswer:"

ATTACK = r"""
import json, os, socket, sys, urllib.request, urllib.error
from vtb.protocol import serve

def weights(size):
    # every file of exactly the served weight file's size, anywhere this sandbox can look
    hits = []
    for top in os.listdir("/"):
        if top in ("proc", "sys", "dev"):
            continue
        for root, dirs, files in os.walk("/" + top):
            for f in files:
                try:
                    if os.lstat(os.path.join(root, f)).st_size == size:
                        hits.append(os.path.join(root, f))
                except OSError:
                    pass
    return hits

def server_processes():
    seen = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "vtb.serve.server" in cmd or "--model" in cmd:
                seen.append(cmd)
    return seen

def status(path, body, key):
    base = os.environ["OPENAI_BASE_URL"]
    headers = {"Content-Type": "application/json", **({"Authorization": "Bearer " + key} if key is not None else {})}
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code

def raw_socket_without_key():
    s = socket.socket(socket.AF_UNIX)
    s.connect("/run/vtb-model/api.sock")
    s.sendall(b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 13\r\n\r\n{"prompt":"x"}')
    return s.recv(100).split(b"\r\n")[0].decode()

def policy(batch):
    open(os.environ["VTB_USAGE_FILE"], "w").write(json.dumps({"flops": 1.0, "engine": "forged"}))
    key = os.environ["OPENAI_API_KEY"]
    found = {
        "weights": weights(batch[0]["observation"]["size"]),
        "model_dir": os.path.exists("/model"),
        "server_processes": server_processes(),
        "no_key": status("/completions", {"prompt": "x"}, None),
        "wrong_key": status("/completions", {"prompt": "x"}, key + "x"),
        "raw_socket": raw_socket_without_key(),
        "with_key": status("/completions", {"prompt": "x", "max_tokens": 1}, key),
        "over_budget": [status("/completions", {"prompt": ["Tom has"] * 8, "max_tokens": 64}, key) for _ in range(3)],
    }
    return [{"type": "answer", "content": json.dumps(found)} for _ in batch]

serve(policy)
"""

PROBE = r"""
import json, os, urllib.request
from vtb.protocol import serve

def get(path, body=None, root=False):
    base = os.environ["OPENAI_BASE_URL"].removesuffix("/v1") if root else os.environ["OPENAI_BASE_URL"]
    req = urllib.request.Request(base + path, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())

def policy(batch):
    st = os.stat("/run/vtb-model/api.sock")
    seen = {
        "env": {k: (len(v) if "KEY" in k else v) for k, v in sorted(os.environ.items())},
        "mounts": open("/proc/self/mountinfo").read(),
        "socket_dir": sorted(os.listdir("/run/vtb-model")),
        "socket": [st.st_mode, st.st_size, st.st_uid],
        "models": get("/models"),
        "tokenize": get("/tokenize", {"prompt": "Tom has 5 apples"}, root=True),
        "files": sorted(os.listdir("/")),
    }
    return [{"type": "answer", "content": json.dumps(seen)} for _ in batch]

serve(policy)
"""

OPENAI_CLIENT = r"""
import json
from openai import OpenAI
from vtb.protocol import serve

client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment

def policy(batch):
    ids = [m.id for m in client.models.list().data]
    out = client.completions.create(model=ids[0], prompt=[m["observation"]["q"] for m in batch], max_tokens=16, temperature=0)
    texts = [c.text for c in sorted(out.choices, key=lambda c: c.index)]
    return [{"type": "answer", "content": json.dumps({"text": t, "models": ids, "tokens": out.usage.total_tokens})} for t in texts]

serve(policy)
"""


def _play(tmp_path, backend, code, model_dir, limits=LIMITS, n=1, observation=None, served="process"):
    harness = tmp_path / f"harness-{len(list(tmp_path.iterdir()))}"
    harness.mkdir()
    (harness / "harness.py").write_text(code)
    sandbox = sandbox_backend(backend)
    episodes = [
        {"type": "start", "episode": f"e{i}", "domain": "math", "observation": observation or {}}
        for i in range(n)
    ]
    with _served(served, sandbox, model_dir, limits) as (service, charged):
        out = runner.play(
            sandbox, harness, service, episodes, limits=LIMITS, round_timeout_s=90, per_episode_timeout_s=1
        )
    return out, service, charged[0]


@contextmanager
def _served(served, sandbox, model_dir, limits, env=None):
    """A server for one play, as a process of its own or a fork of a host; then its whole charge."""
    charged = [Charge()]
    if served == "process":
        with ModelService(sandbox, model_dir, limits, env=env or {}) as service:
            yield service, charged
        charged[0] = service.charge
        return
    with ModelHost(sandbox, model_dir, limits, env=env or {}) as host:
        with host.server(limits) as service:
            yield service, charged
    charged[0] = service.charge + host.charge


@pytest.mark.parametrize("served", SERVED)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_harness_reaches_the_model_only_through_the_api_with_its_key(
    tmp_path, backend, served, toy_model_dir
):
    n_params = Engine(toy_model_dir, threads=1).n_params
    budget = Limits(wall_seconds=120, cpu_seconds=120, max_flops=2.0 * n_params * 400)  # ~400 tokens
    size = (toy_model_dir / "model.safetensors").stat().st_size
    out, service, charge = _play(
        tmp_path, backend, ATTACK, toy_model_dir, limits=budget, observation={"size": size}, served=served
    )
    found = json.loads(out.actions["e0"]["content"])
    assert found["weights"] == [] and found["model_dir"] is False  # no weights anywhere it can look
    assert found["server_processes"] == []  # the server's process is in another sandbox
    assert found["no_key"] == found["wrong_key"] == 401 and found["raw_socket"].endswith("401 Unauthorized")
    assert found["with_key"] == 200
    assert 429 in found["over_budget"]  # the server refuses past the step's FLOPs
    assert service.exhausted
    # The charge is the server's meter: the forged usage file of the harness is not read.
    assert 0 < charge.flops <= 2.0 * n_params * 400
    assert out.charge.flops == 0 and service.engine == "transformers"
    # The server's seconds are marked as its own (not floored: it counted its tokens); the harness's are not.
    assert charge.served_cpu_seconds == charge.cpu_seconds > 0
    assert out.charge.served_cpu_seconds == 0 and out.charge.cpu_seconds > 0


@pytest.mark.parametrize("served", SERVED)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_model_server_runs_on_the_threads_it_is_given(backend, served, toy_model_dir):
    """The server's torch threads are the sandbox's unless its env sets them (sandbox.server_threads:
    pipeline.play sets one), and it says which it ran on."""
    sandbox = sandbox_backend(backend, threads=2)
    with _served(served, sandbox, toy_model_dir, LIMITS) as (service, _):
        pass
    with _served(served, sandbox, toy_model_dir, LIMITS, env=thread_env(1)) as (alone, _):
        pass
    assert (service.threads, alone.threads) == (2, 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_killed_servers_seconds_are_floored_like_any_sandboxs(tmp_path, backend, toy_model_dir):
    """A server stopped by its CPU cap may not have counted its last batch: its seconds lose the exemption."""
    service = ModelService(sandbox_backend(backend), toy_model_dir, Limits(wall_seconds=60, cpu_seconds=1))
    with pytest.raises(ServiceError, match="did not start"):
        service.start()
    assert service.result.killed == "cpu"
    assert service.charge.cpu_seconds >= 1 and service.charge.served_cpu_seconds == 0


@pytest.mark.parametrize("served", SERVED)
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_null_and_base_model_swaps_look_the_same_from_inside(tmp_path, backend, served, toy_model_dir):
    """Everything the harness can see but the model's answers is the same whichever weights serve it."""
    null = null_model(toy_model_dir, tmp_path / "cache", b"k" * 32)
    seen = []
    for weights in (toy_model_dir, null, toy_model_dir):
        out, _, _ = _play(tmp_path, backend, PROBE, weights, served=served)
        probe = json.loads(out.actions["e0"]["content"])
        # Random in every play, whatever the mode: the socket folder's host name (mount table):
        # vtb-model-<random> for a server of its own, vtb-model-host-<random>/sockets/<random> on a host.
        probe["mounts"] = re.sub(r"vtb-model-(host-\w+/sockets/)?\w+", "vtb-model-X", probe["mounts"])
        probe["mounts"] = re.sub(
            r"/var/lib/docker/overlay2/[^,\s]+", "LAYER", probe["mounts"]
        )  # docker: per container
        # docker: its root is a slave of the container layer's own peer group, whose id the host
        # kernel hands out (the lowest free one): host state, not the model's (bwrap's and docker's
        # binds show none, tests/test_sandbox_isolation.py).
        probe["mounts"] = re.sub(r" master:\d+ ", " master:N ", probe["mounts"])
        probe["mounts"] = sorted(
            line.split(" ", 4)[4] for line in probe["mounts"].splitlines()
        )  # no mount ids
        seen.append(probe)
    assert "OPENAI_BASE_URL" in seen[0]["env"] and seen[0]["socket_dir"] == ["api.sock"]
    assert not any("/model" == line.split()[0] for line in seen[0]["mounts"])
    assert seen[0] == seen[1] == seen[2]


@pytest.mark.parametrize("served", SERVED)
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_off_the_shelf_openai_client_works(tmp_path, backend, served, toy_model_dir):
    out, service, _ = _play(
        tmp_path, backend, OPENAI_CLIENT, toy_model_dir, n=2, observation={"q": QUESTION}, served=served
    )
    assert out.crashes == 0, out.stderr_tail
    got = [json.loads(out.actions[e]["content"]) for e in ("e0", "e1")]
    assert got[0]["text"] == Engine(toy_model_dir, threads=1).generate([QUESTION], max_new_tokens=16)[0]
    assert got[0]["models"] == ["vtb-model"] and got[0]["tokens"] > 0
    assert service.charge.flops > 0


SPENDER = r"""
from vtb.protocol import serve
from vtb.serve.client import ModelClient

engine = ModelClient.from_env()

def policy(batch):
    spent = 0
    for _ in range(15):  # far more model calls per episode than any validation play made
        try:
            engine.generate(["Tom has 3 apples."] * len(batch), max_new_tokens=24)
            spent += 1
        except Exception:  # refused: past the play's FLOPs cap
            break
    return [{"type": "answer", "content": f"#### {spent}"} for _ in batch]

serve(policy)
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_play_spends_at_most_its_flops_per_episode(tmp_path, backend, toy_model_dir):
    """Grading's cap (vtb/bench.py grading_allowance): the server refuses past flops_per_episode x
    episodes, and the play says so (killed "flops"), whatever the harness tries."""
    from vtb import pipeline
    from vtb.compose import task_config
    from vtb.config import SandboxConfig
    from vtb.step_requests import DataRequest

    task = task_config("math", n_pool=20, n_val=4, n_test=6)
    (tmp_path / "cache").mkdir()
    data = pipeline.provision_data(DataRequest(task, tmp_path / "cache"))
    harness = tmp_path / "spender"
    harness.mkdir()
    (harness / "harness.py").write_text(SPENDER)
    n_params = Engine(toy_model_dir, threads=1).n_params
    per_episode = 2.0 * n_params * 100  # about 100 tokens per episode
    cfg = SandboxConfig(backend=backend)
    capped = play_split(
        harness, toy_model_dir, "test", data.data_dir, task, cfg, None, 120.0, flops_per_episode=per_episode
    )
    assert "flops" in capped.killed and capped.charge.flops <= per_episode * 6
    free = play_split(harness, toy_model_dir, "test", data.data_dir, task, cfg, None, 120.0)
    assert "flops" not in free.killed and free.charge.flops > 3 * per_episode * 6  # what it spends uncapped
    print(f"\n[{backend}] grading FLOPs capped {capped.charge.flops:.3g}, uncapped {free.charge.flops:.3g}")


HOG = r"""
import json
from vtb.protocol import serve
from vtb.serve.client import ModelClient

engine = ModelClient.from_env()

def policy(batch):
    calls = 0
    while calls < 10000:  # till its server is gone
        try:
            engine.generate(["Tom has 3 apples."] * 64, max_new_tokens=64)
            calls += 1
        except Exception as e:
            return [{"type": "answer", "content": json.dumps({"calls": calls, "error": type(e).__name__})} for _ in batch]
    return [{"type": "answer", "content": json.dumps({"calls": calls})} for _ in batch]

serve(policy)
"""

SNOOP = r"""
import json, os, socket
from vtb.protocol import serve

def sockets():
    found = []
    for top in os.listdir("/"):
        if top in ("proc", "sys", "dev"):
            continue
        for root, dirs, files in os.walk("/" + top):
            for f in files + dirs:
                path = os.path.join(root, f)
                if f.endswith(".sock") or "vtb-model-host" in path or f == "sockets":
                    found.append(path)
    return found

def policy(batch):
    seen = {"sockets": sockets(), "own": sorted(os.listdir("/run/vtb-model"))}
    return [{"type": "answer", "content": json.dumps(seen)} for _ in batch]

serve(policy)
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_harness_that_spends_its_servers_cpu_cap_kills_only_that_server(tmp_path, backend, toy_model_dir):
    """On a host, a shard's server is held to the shard's CPU cap (RLIMIT_CPU in the fork): a harness
    that drives it past the cap kills that server only. The host and the next shard's server live
    on, and the killed server's seconds lose the served exemption (the ledger floors them)."""
    sandbox = sandbox_backend(backend)
    harness = tmp_path / "hog"
    harness.mkdir()
    (harness / "harness.py").write_text(HOG)
    start = [{"type": "start", "episode": "e0", "domain": "math", "observation": {}}]
    with ModelHost(sandbox, toy_model_dir, LIMITS) as host:
        with host.server(Limits(wall_seconds=120, cpu_seconds=3)) as hogged:
            out = runner.play(
                sandbox, harness, hogged, start, limits=LIMITS, round_timeout_s=90, per_episode_timeout_s=60
            )
        with host.server(LIMITS) as fresh:
            probe = _answer(sandbox, tmp_path, fresh, OPENAI_CLIENT, {"q": QUESTION})
    found = json.loads(out.actions["e0"]["content"])
    assert found.get("error") and hogged.killed == "cpu", (found, hogged.killed)
    assert probe["text"] == Engine(toy_model_dir, threads=1).generate([QUESTION], max_new_tokens=16)[0]
    assert fresh.killed is None and host.result.killed in (None, "closed")
    assert hogged.charge.flops > 0 and fresh.charge.flops > 0
    assert host.charge.cpu_seconds >= 3 and host.charge.served_cpu_seconds <= host.charge.cpu_seconds - 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_harness_sees_only_its_own_servers_socket(tmp_path, backend, toy_model_dir):
    """Two servers of one host at once: each shard's harness sandbox holds its own socket folder
    (one api.sock) and nothing of the host's (its socket root, the other server's socket)."""
    sandbox = sandbox_backend(backend)
    with ModelHost(sandbox, toy_model_dir, LIMITS) as host:
        with host.server(LIMITS) as one, host.server(LIMITS) as other:
            seen = _answer(sandbox, tmp_path, one, SNOOP, {})
            assert one.harness_env()["OPENAI_API_KEY"] != other.harness_env()["OPENAI_API_KEY"]
    assert seen["own"] == ["api.sock"]
    assert seen["sockets"] == ["/run/vtb-model/api.sock"], seen["sockets"]


def _answer(sandbox, tmp_path, service, code, observation) -> dict:
    """The one episode's answer of harness `code` played against `service`."""
    harness = tmp_path / f"harness-{len(list(tmp_path.iterdir()))}"
    harness.mkdir()
    (harness / "harness.py").write_text(code)
    start = [{"type": "start", "episode": "e0", "domain": "math", "observation": observation}]
    out = runner.play(
        sandbox, harness, service, start, limits=LIMITS, round_timeout_s=90, per_episode_timeout_s=60
    )
    assert out.crashes == 0, out.stderr_tail
    return json.loads(out.actions["e0"]["content"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_checkpoint_no_server_can_open_fails_each_shard_not_the_host(tmp_path, backend, toy_model_dir):
    """Weights that do not load (junk where the safetensors should be): the host starts, each
    shard's fork fails at its start with the reason (ServiceError, which a play turns into failed
    episodes), and the host stays up for the next shard and ends cleanly."""
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(toy_model_dir, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file" * 100)
    with ModelHost(sandbox_backend(backend), broken, LIMITS) as host:
        for _ in range(2):
            with pytest.raises(ServiceError, match="did not start") as failed:
                host.server(LIMITS).start()
            assert "killed: exit 1): SafetensorError" in str(failed.value), failed.value
    assert host.result.killed in (None, "closed")
