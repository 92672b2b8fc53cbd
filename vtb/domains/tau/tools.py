"""The tau-bench retail tools, over an in-memory database dict, and the one entry point of every tau tool.

Why: tau-bench scores a conversation by comparing the final database with the one the ground-truth
actions produce, so these tools keep tau-bench's names, arguments, error messages and in-place
mutations. Each tool validates everything before it mutates, so a failed write leaves the db as it
was. `call_tool` is the one entry point for an agent loop, for either environment (the database's
tables say which: airline's are flights and reservations, vtb/domains/tau/airline.py): it checks
the arguments against the tool's schema and turns every failure into "Error: ..." text instead
of raising.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

from vtb.domains.tau import airline
from vtb.domains.tau.kit.schemas import (  # noqa: F401  (re-exported)
    AIRLINE_SCHEMAS,
    AIRLINE_WRITE_TOOLS,
    ALL_SCHEMAS,
    CANCEL_REASONS,
    PARAMETERS,
    RETAIL_WRITE_TOOLS,
    TAU2_EXTRA_SCHEMAS,
    TOOL_SCHEMAS,
    WRITE_TOOLS,
    schemas_of,
)
from vtb.domains.tau.toolbase import (  # noqa: F401  (re-exported)
    ToolError,
    calculate,
    check_arguments,
    transfer_to_human_agents,
)

AIRLINE_TABLES = ("flights", "reservations")


# --- lookups -------------------------------------------------------------------------------------


def _user(db: dict, user_id: str) -> dict:
    if user_id not in db["users"]:
        raise ToolError("user not found")
    return db["users"][user_id]


def _order(db: dict, order_id: str, status: str, verb: str) -> dict:
    """The order, which must have `status` (else "non-<status> order cannot be <verb>")."""
    if order_id not in db["orders"]:
        raise ToolError("order not found")
    order = db["orders"][order_id]
    if order["status"] != status:
        raise ToolError(f"non-{status} order cannot be {verb}")
    return order


def _payment_method(db: dict, order: dict, payment_method_id: str) -> dict:
    methods = db["users"][order["user_id"]]["payment_methods"]
    if payment_method_id not in methods:
        raise ToolError("payment method not found")
    return methods[payment_method_id]


def _missing_item(order: dict, item_ids: list[str]) -> str | None:
    """The first id asked for more often than the order holds it (lists may repeat ids)."""
    held = [item["item_id"] for item in order["items"]]
    return next((i for i in item_ids if item_ids.count(i) > held.count(i)), None)


def _first_item(order: dict, item_id: str) -> dict:
    return next(item for item in order["items"] if item["item_id"] == item_id)


def _swap_price_difference(db: dict, order: dict, item_ids: list[str], new_item_ids: list[str]) -> float:
    """Check each old item maps to an available variant of the same product; return new - old total."""
    if len(item_ids) != len(new_item_ids):
        raise ToolError("the number of items to be exchanged should match")
    diff = 0
    for item_id, new_item_id in zip(item_ids, new_item_ids, strict=True):
        item = _first_item(order, item_id)
        variant = db["products"][item["product_id"]]["variants"].get(new_item_id)
        if variant is None or not variant["available"]:
            raise ToolError(f"new item {new_item_id} not found or available")
        diff += variant["price"] - item["price"]
    return diff


def _address(address1: str, address2: str, city: str, state: str, country: str, zip: str) -> dict:
    return {
        "address1": address1,
        "address2": address2,
        "city": city,
        "state": state,
        "country": country,
        "zip": zip,
    }


# --- read tools ----------------------------------------------------------------------------------


def find_user_id_by_email(db: dict, email: str) -> str:
    for user_id, user in db["users"].items():
        if user["email"].lower() == email.lower():
            return user_id
    raise ToolError("user not found")


def find_user_id_by_name_zip(db: dict, first_name: str, last_name: str, zip: str) -> str:
    for user_id, user in db["users"].items():
        name = user["name"]
        if (
            name["first_name"].lower() == first_name.lower()
            and name["last_name"].lower() == last_name.lower()
            and user["address"]["zip"] == zip
        ):
            return user_id
    raise ToolError("user not found")


def get_user_details(db: dict, user_id: str) -> str:
    return json.dumps(_user(db, user_id))


def get_order_details(db: dict, order_id: str) -> str:
    if order_id not in db["orders"]:
        raise ToolError("order not found")
    return json.dumps(db["orders"][order_id])


def get_product_details(db: dict, product_id: str) -> str:
    if product_id not in db["products"]:
        raise ToolError("product not found")
    return json.dumps(db["products"][product_id])


def get_item_details(db: dict, item_id: str) -> str:
    """tau2's lookup of one variant by item id (a product's variants are keyed by item id)."""
    for product in db["products"].values():
        if item_id in product["variants"]:
            return json.dumps(product["variants"][item_id])
    raise ToolError("item not found")


def list_all_product_types(db: dict) -> str:
    by_name = {product["name"]: product["product_id"] for product in db["products"].values()}
    return json.dumps(dict(sorted(by_name.items())))


# --- write tools ---------------------------------------------------------------------------------


def cancel_pending_order(db: dict, order_id: str, reason: str) -> str:
    order = _order(db, order_id, "pending", "cancelled")
    if reason not in CANCEL_REASONS:
        raise ToolError("invalid reason")
    # Like tau-bench, every payment_history entry is refunded; gift cards are credited at once.
    refunds = [
        {"transaction_type": "refund", "amount": p["amount"], "payment_method_id": p["payment_method_id"]}
        for p in order["payment_history"]
    ]
    methods = db["users"][order["user_id"]]["payment_methods"]
    credits = [
        (methods[r["payment_method_id"]], r["amount"])
        for r in refunds
        if "gift_card" in r["payment_method_id"]
    ]
    for card, amount in credits:
        card["balance"] = round(card["balance"] + amount, 2)
    order["status"] = "cancelled"
    order["cancel_reason"] = reason
    order["payment_history"].extend(refunds)
    return json.dumps(order)


def modify_pending_order_address(
    db: dict, order_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
) -> str:
    order = _order(db, order_id, "pending", "modified")
    order["address"] = _address(address1, address2, city, state, country, zip)
    return json.dumps(order)


def _priced_swap(
    db: dict,
    order: dict,
    item_ids: list[str],
    new_item_ids: list[str],
    payment_method_id: str,
    what: str,
    ndigits: int | None = None,
) -> tuple[float, dict]:
    """The checks of an item swap (the items are in the order, the payment method covers the
    difference), then its price difference (rounded to ndigits, as tau-bench does for exchanges)
    and the payment method."""
    missing = _missing_item(order, item_ids)
    if missing is not None:
        raise ToolError(f"{missing} not found")
    diff = _swap_price_difference(db, order, item_ids, new_item_ids)
    diff = diff if ndigits is None else round(diff, ndigits)
    method = _payment_method(db, order, payment_method_id)
    if method["source"] == "gift_card" and method["balance"] < diff:
        raise ToolError(f"insufficient gift card balance to pay for {what}")
    return diff, method


def modify_pending_order_items(
    db: dict, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
) -> str:
    order = _order(db, order_id, "pending", "modified")
    diff, method = _priced_swap(db, order, item_ids, new_item_ids, payment_method_id, "the new item")

    # tau-bench records the unrounded difference; a zero difference is logged as a refund of 0.
    order["payment_history"].append(
        {
            "transaction_type": "payment" if diff > 0 else "refund",
            "amount": abs(diff),
            "payment_method_id": payment_method_id,
        }
    )
    if method["source"] == "gift_card":
        method["balance"] = round(method["balance"] - diff, 2)
    for item_id, new_item_id in zip(item_ids, new_item_ids, strict=True):
        item = _first_item(order, item_id)
        variant = db["products"][item["product_id"]]["variants"][new_item_id]
        item["item_id"] = new_item_id
        item["price"] = variant["price"]
        item["options"] = variant["options"]
    order["status"] = "pending (item modified)"
    return json.dumps(order)


def modify_pending_order_payment(db: dict, order_id: str, payment_method_id: str) -> str:
    order = _order(db, order_id, "pending", "modified")
    method = _payment_method(db, order, payment_method_id)
    history = order["payment_history"]
    if len(history) != 1 or history[0]["transaction_type"] != "payment":
        raise ToolError("there should be exactly one payment for a pending order")
    old_id, amount = history[0]["payment_method_id"], history[0]["amount"]
    if old_id == payment_method_id:
        raise ToolError("the new payment method should be different from the current one")
    if method["source"] == "gift_card" and method["balance"] < amount:
        raise ToolError("insufficient gift card balance to pay for the order")
    old_method = db["users"][order["user_id"]]["payment_methods"][old_id] if "gift_card" in old_id else None

    history.append({"transaction_type": "payment", "amount": amount, "payment_method_id": payment_method_id})
    history.append({"transaction_type": "refund", "amount": amount, "payment_method_id": old_id})
    if method["source"] == "gift_card":
        method["balance"] = round(method["balance"] - amount, 2)
    if old_method is not None:
        old_method["balance"] = round(old_method["balance"] + amount, 2)
    return json.dumps(order)


def modify_user_address(
    db: dict, user_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
) -> str:
    user = _user(db, user_id)
    user["address"] = _address(address1, address2, city, state, country, zip)
    return json.dumps(user)


def return_delivered_order_items(db: dict, order_id: str, item_ids: list[str], payment_method_id: str) -> str:
    order = _order(db, order_id, "delivered", "returned")
    _payment_method(db, order, payment_method_id)
    if (
        "gift_card" not in payment_method_id
        and payment_method_id != order["payment_history"][0]["payment_method_id"]
    ):
        raise ToolError("payment method should be either the original payment method or a gift card")
    if _missing_item(order, item_ids) is not None:
        raise ToolError("some item not found")
    order["status"] = "return requested"
    order["return_items"] = sorted(item_ids)
    order["return_payment_method_id"] = payment_method_id
    return json.dumps(order)


def exchange_delivered_order_items(
    db: dict, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
) -> str:
    order = _order(db, order_id, "delivered", "exchanged")
    diff, _ = _priced_swap(db, order, item_ids, new_item_ids, payment_method_id, "the price difference", 2)
    order["status"] = "exchange requested"
    order["exchange_items"] = sorted(item_ids)
    order["exchange_new_items"] = sorted(new_item_ids)
    order["exchange_payment_method_id"] = payment_method_id
    order["exchange_price_difference"] = diff
    return json.dumps(order)


# --- registry, schemas and the safe entry point --------------------------------------------------

TOOLS: dict[str, Callable[..., str]] = {
    f.__name__: f
    for f in (
        find_user_id_by_email,
        find_user_id_by_name_zip,
        get_user_details,
        get_order_details,
        get_product_details,
        list_all_product_types,
        cancel_pending_order,
        modify_pending_order_address,
        modify_pending_order_items,
        modify_pending_order_payment,
        modify_user_address,
        return_delivered_order_items,
        exchange_delivered_order_items,
        calculate,
        transfer_to_human_agents,
        get_item_details,  # tau2 only (TAU2_EXTRA_SCHEMAS): last, in ALL_SCHEMAS' order
    )
}

AIRLINE_TOOLS = airline.TOOLS


def env_of(db: object) -> str:
    """Which environment a database is: "airline" when it has airline's tables, else "retail"."""
    return "airline" if isinstance(db, dict) and all(t in db for t in AIRLINE_TABLES) else "retail"


def schemas_for(source: str, env: str = "retail") -> list[dict]:
    """The tool schemas a source's tasks are played with (tau2's retail has get_item_details too)."""
    return schemas_of(env, tau2=source == "tau2")


def call_tool(db: dict, name: str, arguments: object) -> str:
    """Run tool `name` on `db`; never raises: every failure comes back as "Error: ..." text."""
    tools = AIRLINE_TOOLS if env_of(db) == "airline" else TOOLS
    try:
        if not isinstance(name, str) or name not in tools:
            return f"Error: unknown tool {name}"
        problem = check_arguments(name, PARAMETERS[name], arguments)
        if problem is not None:
            return f"Error: {problem}"
        return tools[name](db, **arguments)
    except ToolError as e:
        return f"Error: {e}"
    except Exception as e:
        return f"Error: {type(e).__name__}: {e}"


def hash_db(db: dict) -> str:
    """sha256 hex of the canonical JSON of `db`, for tau-bench's database-state reward."""
    return hashlib.sha256(json.dumps(db, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
