"""tau-bench / tau2-bench loaders on small checkouts written here in the projects' own file schemas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vtb.domains.tau import loaders

ADDRESS = {
    "address1": "1 Elm St",
    "address2": "Suite 1",
    "city": "Austin",
    "country": "USA",
    "state": "TX",
    "zip": "78701",
}
USERS = {
    "yusuf_rossi_9620": {
        "name": {"first_name": "Yusuf", "last_name": "Rossi"},
        "address": ADDRESS,
        "email": "yusuf.rossi7301@example.com",
        "payment_methods": {
            "credit_card_9513926": {
                "source": "credit_card",
                "brand": "mastercard",
                "last_four": "2478",
                "id": "credit_card_9513926",
            }
        },
        "orders": ["#W2378156"],
    },
    "mei_kovacs_8020": {
        "name": {"first_name": "Mei", "last_name": "Kovacs"},
        "address": {**ADDRESS, "zip": "28236"},
        "email": "mei.kovacs8232@example.com",
        "payment_methods": {"paypal_7644869": {"source": "paypal", "id": "paypal_7644869"}},
        "orders": ["#W6390527"],
    },
}
PRODUCTS = {
    "8310926033": {
        "name": "Water Bottle",
        "product_id": "8310926033",
        "variants": {
            "6469567736": {
                "item_id": "6469567736",
                "options": {"capacity": "1000ml", "color": "blue"},
                "available": True,
                "price": 47.84,
            },
            "8538875209": {
                "item_id": "8538875209",
                "options": {"capacity": "500ml", "color": "black"},
                "available": True,
                "price": 45.13,
            },
        },
    }
}


def _order(order_id: str, user_id: str, item_id: str, status: str, payment: str) -> dict:
    return {
        "order_id": order_id,
        "user_id": user_id,
        "address": ADDRESS,
        "items": [
            {
                "name": "Water Bottle",
                "product_id": "8310926033",
                "item_id": item_id,
                "price": 47.84,
                "options": {"capacity": "1000ml"},
            }
        ],
        "fulfillments": [],
        "status": status,
        "payment_history": [{"transaction_type": "payment", "amount": 47.84, "payment_method_id": payment}],
    }


ORDERS = {
    "#W2378156": _order("#W2378156", "yusuf_rossi_9620", "6469567736", "delivered", "credit_card_9513926"),
    "#W6390527": _order("#W6390527", "mei_kovacs_8020", "8538875209", "pending", "paypal_7644869"),
}
TASKS_PY = """from tau_bench.types import Action, Task

TASKS_TEST = [
    Task(
        annotator="0",
        user_id="yusuf_rossi_9620",
        instruction="You are Yusuf Rossi in 19122. You want to return the water bottle "
        "from order #W2378156.",
        actions=[
            Action(
                name="find_user_id_by_name_zip",
                kwargs={"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"},
            ),
            Action(
                name="return_delivered_order_items",
                kwargs={
                    "order_id": "#W2378156",
                    "item_ids": ["6469567736"],
                    "payment_method_id": "credit_card_9513926",
                },
            ),
        ],
        outputs=["47.84"],
    ),
    Task(
        annotator="1",
        user_id="mei_kovacs_8020",
        instruction="You are mei_kovacs_8020 and want to cancel order #W6390527.",
        actions=[
            Action(
                name="cancel_pending_order", kwargs={"order_id": "#W6390527", "reason": "no longer needed"}
            )
        ],
        outputs=[],
    ),
]
"""
TAU2_TASKS = [
    {
        "id": "0",
        "description": {"purpose": None, "relevant_policies": None, "notes": None},
        "user_scenario": {
            "persona": None,
            "instructions": {
                "task_instructions": "You are detail-oriented.",
                "domain": "retail",
                "reason_for_call": "You want to return the water bottle from order #W2378156.",
                "known_info": "You are Yusuf Rossi in zip code 19122.",
                "unknown_info": "You do not remember your email address.",
            },
        },
        "initial_state": None,
        "evaluation_criteria": {
            "actions": [
                {
                    "action_id": "0_0",
                    "name": "get_user_details",
                    "arguments": {"user_id": "yusuf_rossi_9620"},
                    "info": None,
                },
                {
                    "action_id": "0_1",
                    "name": "return_delivered_order_items",
                    "arguments": {
                        "order_id": "#W2378156",
                        "item_ids": ["6469567736"],
                        "payment_method_id": "credit_card_9513926",
                    },
                    "info": None,
                },
            ],
            "communicate_info": ["47.84"],
            "nl_assertions": None,
            "reward_basis": ["DB", "COMMUNICATE"],
        },
    },
    {
        "id": "1",
        "user_scenario": {
            "persona": None,
            "instructions": "You are mei_kovacs_8020. Cancel order #W6390527.",
        },
        "evaluation_criteria": {
            "actions": [
                {
                    "action_id": "1_0",
                    "name": "cancel_pending_order",
                    "arguments": {"order_id": "#W6390527", "reason": "no longer needed"},
                }
            ],
            "communicate_info": None,
            "reward_basis": ["DB"],
        },
    },
    {
        "id": "2",
        "user_scenario": {
            "instructions": {"domain": "retail", "reason_for_call": "Just asking.", "task_instructions": "."}
        },
        "evaluation_criteria": {"actions": [], "communicate_info": []},
    },
]


def _write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))


@pytest.fixture
def tau_bench_root(tmp_path: Path) -> Path:
    env = tmp_path / "tau-bench" / "tau_bench" / "envs" / "retail"
    for name, table in (("users", USERS), ("orders", ORDERS), ("products", PRODUCTS)):
        _write_json(env / "data" / f"{name}.json", table)
    (env / "wiki.md").write_text("# Retail agent policy\n\nAuthenticate the user first.\n")
    (env / "tasks_test.py").write_text(TASKS_PY)
    return tmp_path / "tau-bench"


@pytest.fixture
def tau2_root(tmp_path: Path) -> Path:
    domain = tmp_path / "tau2-bench" / "data" / "tau2" / "domains" / "retail"
    _write_json(domain / "db.json", {"products": PRODUCTS, "users": USERS, "orders": ORDERS})
    _write_json(domain / "tasks.json", TAU2_TASKS)
    _write_json(domain / "split_tasks.json", {"train": ["1"], "test": ["0", "2"], "base": ["0", "1", "2"]})
    (domain / "policy.md").write_text("# Retail agent policy (tau2)\n")
    return tmp_path / "tau2-bench"


def test_tau_bench_checkout(tau_bench_root: Path) -> None:
    db, tasks, policy = loaders.load_tau_bench(tau_bench_root)
    assert db == {"users": USERS, "orders": ORDERS, "products": PRODUCTS}
    assert policy.startswith("# Retail agent policy")
    assert [t["id"] for t in tasks] == ["test-0000", "test-0001"]
    first = tasks[0]
    assert first["user_id"] == "yusuf_rossi_9620"
    assert (
        first["instruction"]
        == "You are Yusuf Rossi in 19122. You want to return the water bottle from order #W2378156."
    )
    assert first["actions"][1] == {
        "name": "return_delivered_order_items",
        "kwargs": {
            "order_id": "#W2378156",
            "item_ids": ["6469567736"],
            "payment_method_id": "credit_card_9513926",
        },
    }
    assert first["outputs"] == ["47.84"] and first["annotator"] == "0"
    assert tasks[1]["actions"] == [
        {"name": "cancel_pending_order", "kwargs": {"order_id": "#W6390527", "reason": "no longer needed"}}
    ]
    # the env folder itself is accepted too, and load() dispatches the same way
    env_dir = tau_bench_root / "tau_bench" / "envs" / "retail"
    assert loaders.load_tau_bench(env_dir)[1] == tasks
    assert loaders.load("tau_bench", str(tau_bench_root), "test")[1] == tasks


def test_tau_bench_json_tasks_win_over_python(tau_bench_root: Path) -> None:
    env = tau_bench_root / "tau_bench" / "envs" / "retail"
    raw = [
        {
            "user_id": "mei_kovacs_8020",
            "instruction": "Cancel #W6390527.",
            "actions": [{"name": "cancel_pending_order", "kwargs": {"order_id": "#W6390527"}}],
            "outputs": [],
        }
    ]
    _write_json(env / "tasks_test.json", raw)
    _, tasks, _ = loaders.load_tau_bench(tau_bench_root)
    assert tasks == [
        {
            "id": "test-0000",
            "user_id": "mei_kovacs_8020",
            "instruction": "Cancel #W6390527.",
            "actions": raw[0]["actions"],
            "outputs": [],
        }
    ]


def test_tasks_file_with_foreign_call_is_refused_not_run(tau_bench_root: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    env = tau_bench_root / "tau_bench" / "envs" / "retail"
    (env / "tasks_test.py").write_text(
        "import os\nfrom tau_bench.types import Action, Task\n\nTASKS_TEST = [\n"
        f"    Task(user_id='u', instruction=os.system('touch {marker}'), actions=[], outputs=[]),\n]\n"
    )
    with pytest.raises(ValueError, match=r"tasks_test\.py:5: .*os\.system.* not a literal"):
        loaders.load_tau_bench(tau_bench_root)
    assert not marker.exists()


def test_tau_bench_bad_inputs(tau_bench_root: Path, tmp_path: Path) -> None:
    env = tau_bench_root / "tau_bench" / "envs" / "retail"
    with pytest.raises(ValueError, match="no tau-bench env 'airline'.*tau_bench/envs/<env>"):
        loaders.load_tau_bench(tau_bench_root, env="airline")
    with pytest.raises(ValueError, match=r"no tasks for split 'dev'.*tasks_test\.py"):
        loaders.load_tau_bench(tau_bench_root, split="dev")
    (env / "tasks_test.py").write_text("TASKS_TEST = [Task(user_id='u', instruction='x', outputs=[])]\n")
    with pytest.raises(ValueError, match="has no 'actions'"):
        loaders.load_tau_bench(tau_bench_root)
    (env / "tasks_test.py").write_text("TASKS_TEST = [Task('u', instruction='x', actions=[])]\n")
    with pytest.raises(ValueError, match="plain keyword arguments"):
        loaders.load_tau_bench(tau_bench_root)
    (env / "data" / "products.json").unlink()
    with pytest.raises(ValueError, match=r"missing file .*products\.json \(expected a tau-bench checkout"):
        loaders.load_tau_bench(tau_bench_root)


def test_tau2_checkout(tau2_root: Path) -> None:
    db, tasks, policy = loaders.load_tau2(tau2_root)
    assert set(db) == {"users", "orders", "products"} and db["orders"] == ORDERS
    assert policy == "# Retail agent policy (tau2)\n"
    assert [t["id"] for t in tasks] == ["0", "2"]
    first = tasks[0]
    assert first["instruction"] == (
        "Reason for call: You want to return the water bottle from order #W2378156.\n"
        "Known info: You are Yusuf Rossi in zip code 19122.\n"
        "Unknown info: You do not remember your email address.\n"
        "Task instructions: You are detail-oriented."
    )
    assert first["user_id"] == "yusuf_rossi_9620"  # not in the scenario text: from the reference actions
    assert first["actions"] == [
        {"name": "get_user_details", "kwargs": {"user_id": "yusuf_rossi_9620"}},
        {
            "name": "return_delivered_order_items",
            "kwargs": TAU2_TASKS[0]["evaluation_criteria"]["actions"][1]["arguments"],
        },
    ]
    assert first["outputs"] == ["47.84"] and first["reward_basis"] == ["DB", "COMMUNICATE"]
    assert tasks[1] == {
        "id": "2",
        "user_id": "",
        "instruction": "Reason for call: Just asking.",
        "actions": [],
        "outputs": [],
    }

    _, train, _ = loaders.load("tau2", tau2_root / "data" / "tau2" / "domains" / "retail", "train")
    assert train == [
        {
            "id": "1",
            "user_id": "mei_kovacs_8020",  # named in the plain-text instructions
            "instruction": "Instructions: You are mei_kovacs_8020. Cancel order #W6390527.",
            "actions": [
                {
                    "name": "cancel_pending_order",
                    "kwargs": {"order_id": "#W6390527", "reason": "no longer needed"},
                }
            ],
            "outputs": [],
            "reward_basis": ["DB"],
        }
    ]


def test_tau2_splits_and_bad_inputs(tau2_root: Path) -> None:
    domain = tau2_root / "data" / "tau2" / "domains" / "retail"
    with pytest.raises(
        ValueError, match=r"unknown split 'dev'; available splits: \['base', 'test', 'train'\]"
    ):
        loaders.load_tau2(tau2_root, split="dev")
    (domain / "split_tasks.json").unlink()
    assert [t["id"] for t in loaders.load_tau2(tau2_root, split="anything")[1]] == ["0", "1", "2"]

    broken = [dict(TAU2_TASKS[1], evaluation_criteria={"communicate_info": []})]
    _write_json(domain / "tasks.json", broken)
    with pytest.raises(ValueError, match=r"tasks\.json: task 1 has no evaluation_criteria\.actions"):
        loaders.load_tau2(tau2_root)
    _write_json(domain / "db.json", {"users": USERS, "orders": ORDERS})
    with pytest.raises(ValueError, match=r"db\.json: retail db needs a 'products' table"):
        loaders.load_tau2(tau2_root)
    with pytest.raises(ValueError, match="no tau2 domain 'airline'.*data/tau2/domains/<domain>"):
        loaders.load_tau2(tau2_root, domain="airline")
    with pytest.raises(ValueError, match="unknown tau data source 'tau3'"):
        loaders.load("tau3", tau2_root, "test")
