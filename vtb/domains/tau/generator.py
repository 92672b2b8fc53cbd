"""Retail tasks from templates, in tau-bench's `Task` schema, each checked by replaying its gold actions.

A task is `{"id", "user_id", "instruction", "actions": [{"name", "kwargs"}], "outputs", "template",
"user"}`; `user` holds the facts the scripted user simulator speaks from (identity and request),
so the simulator never has to parse the instruction text.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

from vtb.domains.common import draw_distinct
from vtb.domains.tau.db import random_address
from vtb.domains.tau.tools import WRITE_TOOLS, call_tool

REASONS = ["no longer needed", "ordered by mistake"]
TEMPLATES = """
cancel modify_payment return exchange modify_items user_address order_address order_status
""".split()
SOURCE_WORDS = {"credit_card": "credit card", "paypal": "paypal", "gift_card": "gift card"}


def _orders(db: dict, user: dict, status: str) -> list[dict]:
    return [db["orders"][o] for o in user["orders"] if db["orders"][o]["status"] == status]


def _find(user: dict) -> dict:
    return {"name": "find_user_id_by_email", "kwargs": {"email": user["email"]}}


def _get_order(oid: str) -> dict:
    return {"name": "get_order_details", "kwargs": {"order_id": oid}}


def _new_address(rng: random.Random) -> dict:
    """A fresh address in the tools' argument order (the order the user says it in)."""
    address = random_address(rng)
    return {k: address[k] for k in ("address1", "address2", "city", "state", "country", "zip")}


def _other_variant(db: dict, item: dict, rng: random.Random) -> dict | None:
    """An available variant of the same product that differs from the item."""
    variants = db["products"][item["product_id"]]["variants"].values()
    options = [v for v in variants if v["available"] and v["item_id"] != item["item_id"]]
    return rng.choice(options) if options else None


def _cancel(db, user, rng):
    orders = _orders(db, user, "pending")
    if not orders:
        return None
    order, reason = rng.choice(orders), rng.choice(REASONS)
    oid = order["order_id"]
    return (
        f"You want to cancel order {oid} because it is {reason}.",
        [_get_order(oid), {"name": "cancel_pending_order", "kwargs": {"order_id": oid, "reason": reason}}],
        [],
        {"order_id": oid, "reason": reason},
    )


def _modify_payment(db, user, rng):
    for order in rng.sample(_orders(db, user, "pending"), len(_orders(db, user, "pending"))):
        current = order["payment_history"][0]["payment_method_id"]
        total = order["payment_history"][0]["amount"]
        choices = [
            m
            for m in user["payment_methods"].values()
            if m["id"] != current and (m["source"] != "gift_card" or m["balance"] >= total)
        ]
        if choices:
            method = rng.choice(sorted(choices, key=lambda m: m["id"]))
            oid, word = order["order_id"], SOURCE_WORDS[method["source"]]
            return (
                f"You want to pay for order {oid} with your {word} instead.",
                [
                    _get_order(oid),
                    {"name": "get_user_details", "kwargs": {"user_id": user["user_id"]}},
                    {
                        "name": "modify_pending_order_payment",
                        "kwargs": {"order_id": oid, "payment_method_id": method["id"]},
                    },
                ],
                [],
                {"order_id": oid, "payment": word},
            )
    return None


def _return(db, user, rng):
    orders = _orders(db, user, "delivered")
    if not orders:
        return None
    order = rng.choice(orders)
    item = rng.choice(order["items"])
    oid, pay = order["order_id"], order["payment_history"][0]["payment_method_id"]
    kwargs = {"order_id": oid, "item_ids": [item["item_id"]], "payment_method_id": pay}
    return (
        f"You want to return the {item['name']} from order {oid}, refunded to the original payment method.",
        [_get_order(oid), {"name": "return_delivered_order_items", "kwargs": kwargs}],
        [],
        {"order_id": oid, "item": item["name"]},
    )


def _swap(db, user, rng, status: str, tool: str, verb: str):
    orders = _orders(db, user, status)
    if not orders:
        return None
    order = rng.choice(orders)
    item = rng.choice(order["items"])
    new = _other_variant(db, item, rng)
    if new is None:
        return None
    oid, pay = order["order_id"], order["payment_history"][0]["payment_method_id"]
    wanted = " ".join(new["options"].values())
    kwargs = {
        "order_id": oid,
        "item_ids": [item["item_id"]],
        "new_item_ids": [new["item_id"]],
        "payment_method_id": pay,
    }
    return (
        f"You want to {verb} the {item['name']} in order {oid} for the {wanted} one, paying any difference"
        " with the original payment method.",
        [
            _get_order(oid),
            {"name": "get_product_details", "kwargs": {"product_id": item["product_id"]}},
            {"name": tool, "kwargs": kwargs},
        ],
        [],
        {"order_id": oid, "item": item["name"], "wanted": wanted},
    )


def _exchange(db, user, rng):
    return _swap(db, user, rng, "delivered", "exchange_delivered_order_items", "exchange")


def _modify_items(db, user, rng):
    return _swap(db, user, rng, "pending", "modify_pending_order_items", "change")


def _user_address(db, user, rng):
    address = _new_address(rng)
    return (
        "You moved: you want your default address changed to " + ", ".join(address.values()) + ".",
        [{"name": "modify_user_address", "kwargs": {"user_id": user["user_id"], **address}}],
        [],
        {"address": address},
    )


def _order_address(db, user, rng):
    orders = _orders(db, user, "pending")
    if not orders:
        return None
    oid = rng.choice(orders)["order_id"]
    address = _new_address(rng)
    return (
        f"You want order {oid} shipped to " + ", ".join(address.values()) + " instead.",
        [_get_order(oid), {"name": "modify_pending_order_address", "kwargs": {"order_id": oid, **address}}],
        [],
        {"order_id": oid, "address": address},
    )


def _order_status(db, user, rng):
    orders = [db["orders"][o] for o in user["orders"]]
    order = rng.choice(orders)
    oid = order["order_id"]
    return (
        f"You want to know the status of order {oid}.",
        [_get_order(oid)],
        [order["status"]],
        {"order_id": oid},
    )


BUILDERS: dict[str, Callable] = {
    "cancel": _cancel,
    "modify_payment": _modify_payment,
    "return": _return,
    "exchange": _exchange,
    "modify_items": _modify_items,
    "user_address": _user_address,
    "order_address": _order_address,
    "order_status": _order_status,
}


def replay(db: dict, actions: list[dict]) -> dict:
    """The database after the gold actions, on a copy; raises if any action errs."""
    out = json.loads(json.dumps(db))  # a deep copy, several times faster than copy.deepcopy
    for action in actions:
        result = call_tool(out, action["name"], action["kwargs"])
        if result.startswith("Error"):
            raise ValueError(f"gold action {action['name']}({action['kwargs']}) fails: {result}")
    return out


def make_task(db: dict, user_id: str, template: str, rng: random.Random, task_id: str) -> dict | None:
    user = db["users"][user_id]
    built = BUILDERS[template](db, user, rng)
    if built is None:
        return None
    goal, actions, outputs, request = built
    name = user["name"]
    identity = (
        f"Your name is {name['first_name']} {name['last_name']}, your zip code is {user['address']['zip']} "
        f"and your email is {user['email']}."
    )
    task = {
        "id": task_id,
        "user_id": user_id,
        "instruction": f"{identity} {goal}",
        "actions": [_find(user), *actions],
        "outputs": outputs,
        "template": template,
        "user": {
            "first_name": name["first_name"],
            "last_name": name["last_name"],
            "zip": user["address"]["zip"],
            "email": user["email"],
            "kind": template,
            **request,
        },
    }
    replay(db, task["actions"])
    return task


def make_tasks(db: dict, seed: int, n: int, prefix: str, exclude: set[tuple] | None = None) -> list[dict]:
    """n tasks cycling over the templates; a (template, user, target) already in `exclude` is skipped.

    `exclude` is updated in place, so successive calls give disjoint task sets. A template the
    database has no new task for drops out of the cycle (small databases run out of pending orders).
    """
    exclude = set() if exclude is None else exclude
    rng = random.Random(seed)
    users = sorted(db["users"])

    def draw(template: str, i: int) -> tuple | None:
        task = make_task(db, rng.choice(users), template, rng, f"{prefix}-{i:04d}")
        if task is None:
            return None
        writes = [a for a in task["actions"] if a["name"] in WRITE_TOOLS]
        return (
            template,
            task["user_id"],
            repr(writes),
            repr(task["outputs"]),
            task["user"].get("order_id"),
        ), task

    ran_out = f"cannot make {n} distinct {prefix} tasks from this database; raise task.n_users or lower the split sizes"
    return draw_distinct(n, list(TEMPLATES), draw, exclude, 50 * len(users), ran_out)
