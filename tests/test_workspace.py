from vtb.record import attribute_gains
from vtb.results import AgentUse, Candidate
from vtb.workspace import changed_files, part_hashes, restore, snapshot


def _ws(root, data="a", harness="h"):
    for part, text in (("data", data), ("trainer", "t"), ("harness", harness)):
        (root / part).mkdir(parents=True, exist_ok=True)
        (root / part / "f.txt").write_text(text)
    return root


def test_snapshots_are_content_addressed_and_restorable(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    ws = _ws(tmp_path / "ws")
    a = snapshot(ws, store)
    assert snapshot(ws, store) == a
    (ws / "data" / "f.txt").write_text("b")
    (ws / "harness" / "new.py").write_text("x")
    b = snapshot(ws, store)
    assert b != a
    assert changed_files(store, a, b) == {"data": ["f.txt"], "harness": ["new.py"]}
    restore(store, a, ws)
    assert part_hashes(ws) == part_hashes(store / a)
    assert not (ws / "harness" / "new.py").exists()


def _candidate(iteration: int, val_score: float, edits: dict) -> Candidate:
    return Candidate(
        iteration, f"s{iteration}", {}, edits, "", AgentUse(), None, None, None, val_score, None, {}, {}
    )


def test_gains_are_credited_to_the_parts_of_kept_edits():
    history = [
        _candidate(0, 0.1, {}),
        _candidate(1, 0.3, {"data": ["x"]}),
        _candidate(2, 0.2, {"harness": ["y"]}),  # rejected: worse
        _candidate(3, 0.7, {"harness": ["y"], "trainer": ["z"]}),
    ]
    gains = attribute_gains(history, history[3])
    assert gains == {"data": 0.2, "harness": 0.2, "trainer": 0.2}
