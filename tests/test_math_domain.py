import json

from vtb.config import TrainerConfig
from vtb.domains.math.domain import MathConfig, MathDomain
from vtb.domains.math.kit.datatools import verify
from vtb.hashing import hash_dir


def test_real_gsm8k_file_is_split_without_overlap(tmp_path):
    src = tmp_path / "gsm8k.jsonl"
    rows = [
        {"question": f"Tom has {i} apples. How many?", "answer": f"He has {i}.\n#### {i}"} for i in range(30)
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = MathConfig(source="gsm8k", path=str(src), n_test=10, n_val=5)
    counts = MathDomain().provision(task, tmp_path / "data")
    assert counts == {"test": 10, "val": 5, "pool": 15}
    test_qs = {r["question"] for r in MathDomain().split(tmp_path / "data", "test")}
    seen = (tmp_path / "data" / "research" / "pool.jsonl").read_text() + (
        tmp_path / "data" / "research" / "val.jsonl"
    ).read_text()
    assert not any(q in seen for q in test_qs)


def test_initial_system_is_deterministic_and_partly_noisy(tmp_path):
    domain, task = MathDomain(), MathConfig(n_pool=500, n_val=20, n_test=20)
    domain.provision(task, tmp_path / "data")
    for ws in ("a", "b"):
        domain.write_initial_system(tmp_path / ws, task, TrainerConfig(), tmp_path / "data")
    assert hash_dir(tmp_path / "a") == hash_dir(tmp_path / "b")
    rows = [json.loads(line) for line in (tmp_path / "a" / "data" / "train.jsonl").read_text().splitlines()]
    bad = sum(verify(r["completion"]) != "ok" for r in rows)
    assert len(rows) == task.initial_data_size and 0.15 < bad / len(rows) < 0.45
