"""The provenance audit on the environment domains (terminal, SWE-bench): a harness that does the
task itself is caught there too (issue 37 point 1).

The model server swaps each episode's instruction (problem statement) for its shard neighbour's;
the episode runs in its own environment and is scored by its own hidden tests. A harness whose
commands (patch) come from its own solver passes them; an honest harness's model worked on
another task's text and does not. Played through `pipeline.play` exactly as vtb/bench.py grades
and audits (val-sized shards), on both backends, with a real model server.

The solver here is handed the reference solutions in a file this test writes (the pipeline never
gives a harness solutions): it stands for a harness that writes them itself. It still sends the
task text to the model, as an honest harness would, and reflows its whitespace on the way (the
swap matches words, not bytes). The honest harness is the domain's shipped plain harness.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import BACKENDS

from tests.conftest import play_split
from vtb import pipeline, provenance
from vtb.compose import task_config
from vtb.config import SandboxConfig
from vtb.domains.registry import get_domain
from vtb.domains.terminal.kit import datatools
from vtb.step_requests import DataRequest

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (scripts/install.sh)")

SOLVER = r"""
import json
from pathlib import Path
from vtb.protocol import serve
from vtb.serve.client import ModelClient

SOLUTIONS = json.loads((Path(__file__).parent / "solutions.json").read_text())
TEXT = "{text}"  # the observation field with the task text

def policy(batch):
    model = ModelClient.from_env()
    texts = [m["observation"][TEXT] for m in batch]
    model.generate(["task:  " + "  ".join(t.split()) + "\n$ " for t in texts], max_new_tokens=4)
    out = []
    for m, t in zip(batch, texts):
        answer = SOLUTIONS[" ".join(t.split())]
        if TEXT == "problem_statement":
            out.append({{"type": "patch", "patch": answer}})
        elif m["observation"]["history"]:
            out.append({{"type": "answer", "content": "done"}})
        else:
            out.append({{"type": "shell", "command": answer}})
    return out

serve(policy)
"""

SETUPS = {
    "terminal": dict(
        sizes=dict(n_pool=12, n_val=2, n_test=4, trials=1, max_steps_per_episode=2), text="instruction"
    ),
    "swe": dict(sizes=dict(n_pool=12, n_val=3, n_test=6), text="problem_statement"),
    "tau": dict(sizes=dict(n_users=12, n_pool=12, n_val=3, n_test=6, trials=1, val_trials=1)),
}


def _solutions(name: str, data_dir: Path) -> dict[str, str]:
    items = get_domain(name).split(data_dir, "test")
    if name == "terminal":
        return {" ".join(t["instruction"].split()): datatools.solution_command(t) for t in items}
    return {" ".join(i["problem_statement"].split()): i["patch"] for i in items}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["terminal"])  # SWE-bench has no swap: its written check is below
def test_a_harness_that_does_the_task_itself_is_flagged(tmp_path, name, backend, toy_model_dir) -> None:
    setup = SETUPS[name]
    task = task_config(name, **setup["sizes"])
    (tmp_path / "cache").mkdir()
    data_dir = Path(pipeline.provision_data(DataRequest(task, tmp_path / "cache")).data_dir)
    cfg = SandboxConfig(backend=backend)
    shard = task.n_val

    def grade_and_audit(harness: Path):
        args = (harness, toy_model_dir, "test", data_dir, task, cfg, None, 300.0)
        graded = play_split(*args, shard=shard)
        audit = play_split(*args, shard=shard, mode="audit")
        return graded, provenance.verdict(audit.audit, graded.rewards)

    honest_found: dict = {"skipped": "the shipped harness is checked on bwrap"}
    if backend == "bwrap":  # the swap is the model server's, one code path on both backends
        honest_dir = tmp_path / "honest"
        shutil.copytree(get_domain(name).harness_for(task, "initial"), honest_dir)
        honest, honest_found = grade_and_audit(honest_dir)
        assert honest.answered == honest.n and not honest_found["flagged"], honest_found
        # the instruction reached the model (reflowed by the kit's prompt): swapped every time
        assert honest_found["n"] > 0 and honest_found["unswapped"] == 0, honest_found

    solver = tmp_path / "solver"
    solver.mkdir()
    (solver / "harness.py").write_text(SOLVER.format(text=setup["text"]))
    (solver / "solutions.json").write_text(json.dumps(_solutions(name, data_dir)))
    graded, found = grade_and_audit(solver)
    print(f"\n[{name}/{backend}] honest: {honest_found}\nsolver {graded.score:.3f}: {found}")
    assert graded.score == 1.0  # the attack works: every task resolved in grading
    assert found["flagged"] and "never did" in found["reason"], found
    assert found["unswapped"] == 0, found


# -- SWE-bench: the written check -------------------------------------------------------------------
# The patch's added lines must be the model's writing (vtb/serve/transcript.py). The
# gold patches stand for a harness's own solver; the hand-over sends them to the model first.
HANDOVER = r"""
import json
from pathlib import Path
from vtb.protocol import serve
from vtb.serve.client import ModelClient

SOLUTIONS = json.loads((Path(__file__).parent / "solutions.json").read_text())

def policy(batch):
    model = ModelClient.from_env()
    patches = [SOLUTIONS[" ".join(m["observation"]["problem_statement"].split())] for m in batch]
    # "the model wrote it": the fix is in the prompt, the model is asked to repeat it
    model.generate(["repeat after me:\n" + p + "\n" for p in patches], max_new_tokens=4)
    return [{"type": "patch", "patch": p} for p in patches]

serve(policy)
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_swe_patch_the_model_never_wrote_is_flagged(tmp_path, backend, toy_model_dir) -> None:
    setup = SETUPS["swe"]
    task = task_config("swe", **setup["sizes"])
    (tmp_path / "cache").mkdir()
    data_dir = Path(pipeline.provision_data(DataRequest(task, tmp_path / "cache")).data_dir)
    cfg = SandboxConfig(backend=backend)

    def grade(code: str) -> tuple:
        harness = tmp_path / f"harness-{len(list(tmp_path.iterdir()))}"
        harness.mkdir()
        (harness / "harness.py").write_text(code)
        (harness / "solutions.json").write_text(json.dumps(_solutions("swe", data_dir)))
        played = play_split(
            harness, toy_model_dir, "test", data_dir, task, cfg, None, 300.0, shard=task.n_val
        )
        assert played.written is not None and set(played.written) == set(played.rewards), played.written
        return played, provenance.written_verdict(played.written, played.rewards)

    attacks = {"solver": SOLVER.format(text="problem_statement"), "hand-over": HANDOVER}
    if backend == "docker":  # the transcript is the model server's: one code path on both backends
        attacks.pop("hand-over")
    for name, code in attacks.items():
        played, found = grade(code)
        print(f"\n[swe/{backend}] {name} {played.score:.3f}: {found}")
        assert played.score == 1.0  # the attack works: every instance resolved
        assert found["flagged"] and found["not_model"] == found["scored"] == task.n_test, found
        counts = list(played.written.values())
        if name == "solver":  # its lines are in no completion
            assert all(c["harness"] == c["lines"] > 0 and c["complete"] for c in counts), counts
        else:  # the toy model cannot copy them back: in no completion free of them either way
            # (a model that copies them writes them only where its prompt held them: "handed",
            # tests/test_provenance.py)
            assert all(c["handed"] + c["harness"] == c["lines"] > 0 and c["model"] == 0 for c in counts), (
                counts
            )
    # The shipped harnesses (patches from the model's edit lines) are not flagged: greedy's SWE
    # submission in tests/test_terminal_swe_bench.py, and tests/test_provenance.py's unit cases.


# -- tau: the written check over the agent's actions -----------------------------------------------
# Each write call must be named, and each message written, by the model in the episode's own
# exchanges. The gold plans (the scripted expert's) stand for a harness's own solver; it still
# sends the model every conversation, as an honest harness would. The hand-over asks the model to
# repeat each action first.
TAU_SOLVER = r"""
import json
from pathlib import Path
from expert import plan  # a copy next to the harness (the sandbox does not mount vtb.domains.tau.expert)
from vtb.domains.tau.kit import prompting
from vtb.protocol import serve
from vtb.serve.client import ModelClient

GOLD = json.loads((Path(__file__).parent / "solutions.json").read_text())  # opening -> task
HAND_OVER = {hand_over}

def act(m):
    messages = m["observation"]["messages"]
    turn = sum(1 for x in messages if x["role"] == "assistant")
    actions = plan(GOLD[messages[0]["content"]], messages[0]["content"])
    return actions[turn] if turn < len(actions) else {{"type": "message", "content": "Goodbye."}}

def policy(batch):
    model = ModelClient.from_env()
    actions = [act(m) for m in batch]
    if HAND_OVER:
        model.generate(["repeat after me: " + prompting.action_text(a) for a in actions], max_new_tokens=4)
    else:
        model.generate([prompting.prompt(m["observation"]["messages"]) for m in batch], max_new_tokens=4)
    return actions

serve(policy)
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tau_action_the_model_never_chose_is_flagged(tmp_path, backend, toy_model_dir) -> None:
    from vtb.domains.tau import expert

    task = task_config("tau", **SETUPS["tau"]["sizes"])
    (tmp_path / "cache").mkdir()
    data_dir = Path(pipeline.provision_data(DataRequest(task, tmp_path / "cache")).data_dir)
    domain = get_domain("tau")
    # what each episode's user opens with (the scripted user is seeded by task and trial)
    openings = {ep.messages[0]["content"]: ep.task for ep in domain.episodes(data_dir, "test", task)}
    # the hand-over's lines: in no completion here (the toy model cannot copy them back), or
    # "handed" by a model that can (tests/test_provenance.py); one backend suffices (the
    # transcript is the model server's, one code path on both)
    attacks = {"solver": False, "hand-over": True} if backend == "bwrap" else {"solver": False}
    for name, hand_over in attacks.items():
        harness = tmp_path / name
        harness.mkdir()
        (harness / "harness.py").write_text(TAU_SOLVER.format(hand_over=hand_over))
        (harness / "solutions.json").write_text(json.dumps(openings))
        (harness / "expert.py").write_text(Path(expert.__file__).read_text())
        played = play_split(
            harness,
            toy_model_dir,
            "test",
            data_dir,
            task,
            SandboxConfig(backend=backend),
            None,
            300.0,
            shard=task.n_val,
        )
        assert played.written is not None and set(played.written) == set(played.rewards), played.written
        found = provenance.written_verdict(played.written, played.rewards)
        print(f"\n[tau/{backend}] {name} {played.score:.3f}: {found}")
        assert played.score == 1.0  # the attack works: every task solved
        assert found["flagged"] and found["not_model"] == found["scored"] == task.n_test, found
        counts = list(played.written.values())
        assert all(c["model"] == 0 and c["lines"] > 0 and c["complete"] for c in counts), counts
    # Greedy's tau submission (the repair harness, a trained model) is not flagged:
    # tests/test_tau_bench.py; the scoping and a hand-over a model copies: tests/test_provenance.py.
