"""Behaviour of the tau-bench retail tools on a small hand-built database."""

from __future__ import annotations

import json
import re

import pytest

from vtb.domains.tau.tools import (
    AIRLINE_SCHEMAS,
    AIRLINE_TOOLS,
    AIRLINE_WRITE_TOOLS,
    ALL_SCHEMAS,
    RETAIL_WRITE_TOOLS,
    TOOL_SCHEMAS,
    TOOLS,
    WRITE_TOOLS,
    ToolError,
    call_tool,
    hash_db,
    schemas_for,
)

LAMP, MUG = "6817146515", "1111111111"
LAMP_BLACK, LAMP_WHITE, LAMP_SILVER = "5320792178", "7624783998", "1569765161"
MUG_RED, MUG_BLUE = "2222222222", "3333333333"
CARD, PAYPAL, GIFT = "credit_card_1234567", "paypal_7654321", "gift_card_1112223"
PENDING, PENDING_GIFT, DELIVERED, PROCESSED = "#W1000001", "#W1000002", "#W1000003", "#W2000001"


def _address(street: str, zip: str) -> dict:
    return {"address1": street, "address2": "", "city": "Austin", "country": "USA", "state": "TX", "zip": zip}


def _item(product_id: str, item_id: str, db_products: dict) -> dict:
    product = db_products[product_id]
    variant = product["variants"][item_id]
    return {
        "name": product["name"],
        "product_id": product_id,
        "item_id": item_id,
        "price": variant["price"],
        "options": variant["options"],
    }


def _order(order_id: str, user_id: str, status: str, items: list[dict], method: str) -> dict:
    total = round(sum(item["price"] for item in items), 2)
    return {
        "order_id": order_id,
        "user_id": user_id,
        "address": _address("12 Oak Street", "78701"),
        "items": items,
        "fulfillments": [],
        "status": status,
        "payment_history": [{"transaction_type": "payment", "amount": total, "payment_method_id": method}],
    }


@pytest.fixture
def db() -> dict:
    def variant(item_id: str, price: float, available: bool = True, **options: str) -> dict:
        return {"item_id": item_id, "options": options, "available": available, "price": price}

    products = {
        LAMP: {
            "name": "Desk Lamp",
            "product_id": LAMP,
            "variants": {
                LAMP_BLACK: variant(LAMP_BLACK, 135.24, color="black"),
                LAMP_WHITE: variant(LAMP_WHITE, 154.17, color="white"),
                LAMP_SILVER: variant(LAMP_SILVER, 143.59, available=False, color="silver"),
            },
        },
        MUG: {
            "name": "Mug",
            "product_id": MUG,
            "variants": {
                MUG_RED: variant(MUG_RED, 12.5, color="red"),
                MUG_BLUE: variant(MUG_BLUE, 14.0, color="blue"),
            },
        },
    }
    users = {
        "mei_kim_3456": {
            "user_id": "mei_kim_3456",
            "name": {"first_name": "Mei", "last_name": "Kim"},
            "address": _address("12 Oak Street", "78701"),
            "email": "mei.kim3456@example.com",
            "payment_methods": {
                CARD: {"source": "credit_card", "brand": "visa", "last_four": "4321", "id": CARD},
                PAYPAL: {"source": "paypal", "id": PAYPAL},
                GIFT: {"source": "gift_card", "balance": 10.0, "id": GIFT},
            },
            "orders": [PENDING, PENDING_GIFT, DELIVERED],
        },
        "omar_diaz_1200": {
            "user_id": "omar_diaz_1200",
            "name": {"first_name": "Omar", "last_name": "Diaz"},
            "address": _address("9 Elm Road", "10001"),
            "email": "omar.diaz@example.com",
            "payment_methods": {
                "credit_card_5550001": {"source": "credit_card", "id": "credit_card_5550001"}
            },
            "orders": [PROCESSED],
        },
    }
    lamp_and_mug = [_item(LAMP, LAMP_BLACK, products), _item(MUG, MUG_RED, products)]
    orders = {
        PENDING: _order(PENDING, "mei_kim_3456", "pending", lamp_and_mug, CARD),
        PENDING_GIFT: _order(
            PENDING_GIFT, "mei_kim_3456", "pending", [_item(LAMP, LAMP_WHITE, products)], GIFT
        ),
        DELIVERED: _order(
            DELIVERED, "mei_kim_3456", "delivered", json.loads(json.dumps(lamp_and_mug)), PAYPAL
        ),
        PROCESSED: _order(
            PROCESSED, "omar_diaz_1200", "processed", [_item(MUG, MUG_BLUE, products)], "credit_card_5550001"
        ),
    }
    return {"users": users, "orders": orders, "products": products}


def _gift_balance(db: dict) -> float:
    return db["users"]["mei_kim_3456"]["payment_methods"][GIFT]["balance"]


# --- reads ---------------------------------------------------------------------------------------


def test_reads(db: dict) -> None:
    assert call_tool(db, "find_user_id_by_email", {"email": "MEI.kim3456@example.com"}) == "mei_kim_3456"
    args = {"first_name": "omar", "last_name": "DIAZ", "zip": "10001"}
    assert call_tool(db, "find_user_id_by_name_zip", args) == "omar_diaz_1200"
    assert json.loads(call_tool(db, "get_user_details", {"user_id": "omar_diaz_1200"}))["orders"] == [
        PROCESSED
    ]
    assert json.loads(call_tool(db, "get_order_details", {"order_id": PENDING}))["status"] == "pending"
    assert json.loads(call_tool(db, "get_product_details", {"product_id": MUG}))["name"] == "Mug"
    assert json.loads(call_tool(db, "list_all_product_types", {})) == {"Desk Lamp": LAMP, "Mug": MUG}
    assert (
        call_tool(db, "transfer_to_human_agents", {"summary": "wants a refund in cash"})
        == "Transfer successful"
    )


def test_calculate() -> None:
    assert call_tool({}, "calculate", {"expression": "2 + 2"}) == "4.0"
    assert call_tool({}, "calculate", {"expression": "(154.17 - 135.24) * 2 / 3"}) == "12.62"
    assert call_tool({}, "calculate", {"expression": "-(1.5)"}) == "-1.5"
    assert call_tool({}, "calculate", {"expression": "1 / 0"}) == "Error: division by zero"
    assert call_tool({}, "calculate", {"expression": "2 + x"}) == "Error: invalid characters in expression"
    assert call_tool({}, "calculate", {"expression": "__import__('os')"}).startswith(
        "Error: invalid characters"
    )
    assert call_tool({}, "calculate", {"expression": "9**9**9**9"}).startswith("Error: ")
    assert call_tool({}, "calculate", {"expression": "1 +"}).startswith("Error: invalid syntax")


# --- writes --------------------------------------------------------------------------------------


def test_cancel_pending_order_refunds_the_payment(db: dict) -> None:
    out = json.loads(
        call_tool(db, "cancel_pending_order", {"order_id": PENDING, "reason": "no longer needed"})
    )
    order = db["orders"][PENDING]
    assert out == order
    assert order["status"] == "cancelled" and order["cancel_reason"] == "no longer needed"
    assert order["payment_history"][-1] == {
        "transaction_type": "refund",
        "amount": 147.74,
        "payment_method_id": CARD,
    }
    assert _gift_balance(db) == 10.0


def test_cancel_credits_a_gift_card_at_once(db: dict) -> None:
    call_tool(db, "cancel_pending_order", {"order_id": PENDING_GIFT, "reason": "ordered by mistake"})
    assert db["orders"][PENDING_GIFT]["status"] == "cancelled"
    assert _gift_balance(db) == 164.17


def test_modify_pending_order_address(db: dict) -> None:
    new = _address("1 New Way", "73301")
    out = json.loads(call_tool(db, "modify_pending_order_address", {"order_id": PENDING, **new}))
    assert db["orders"][PENDING]["address"] == new == out["address"]
    assert db["orders"][PENDING]["status"] == "pending"


def test_modify_pending_order_items_pays_the_difference(db: dict) -> None:
    args = {
        "order_id": PENDING,
        "item_ids": [LAMP_BLACK],
        "new_item_ids": [LAMP_WHITE],
        "payment_method_id": PAYPAL,
    }
    json.loads(call_tool(db, "modify_pending_order_items", args))
    order = db["orders"][PENDING]
    assert order["status"] == "pending (item modified)"
    assert order["items"][0]["item_id"] == LAMP_WHITE and order["items"][0]["price"] == 154.17
    assert order["items"][0]["options"] == {"color": "white"}
    last = order["payment_history"][-1]
    assert last["transaction_type"] == "payment" and last["payment_method_id"] == PAYPAL
    assert last["amount"] == pytest.approx(18.93)


def test_modify_pending_order_items_refunds_a_gift_card(db: dict) -> None:
    args = {
        "order_id": PENDING_GIFT,
        "item_ids": [LAMP_WHITE],
        "new_item_ids": [LAMP_BLACK],
        "payment_method_id": GIFT,
    }
    call_tool(db, "modify_pending_order_items", args)
    assert db["orders"][PENDING_GIFT]["payment_history"][-1]["transaction_type"] == "refund"
    assert _gift_balance(db) == 28.93


def test_modify_pending_order_payment(db: dict) -> None:
    call_tool(db, "modify_pending_order_payment", {"order_id": PENDING_GIFT, "payment_method_id": CARD})
    history = db["orders"][PENDING_GIFT]["payment_history"]
    assert [(h["transaction_type"], h["payment_method_id"]) for h in history] == [
        ("payment", GIFT),
        ("payment", CARD),
        ("refund", GIFT),
    ]
    assert db["orders"][PENDING_GIFT]["status"] == "pending"
    assert _gift_balance(db) == 164.17


def test_modify_user_address(db: dict) -> None:
    new = _address("1 New Way", "73301")
    out = json.loads(call_tool(db, "modify_user_address", {"user_id": "mei_kim_3456", **new}))
    assert db["users"]["mei_kim_3456"]["address"] == new == out["address"]


def test_return_delivered_order_items(db: dict) -> None:
    args = {"order_id": DELIVERED, "item_ids": [MUG_RED, LAMP_BLACK], "payment_method_id": GIFT}
    call_tool(db, "return_delivered_order_items", args)
    order = db["orders"][DELIVERED]
    assert order["status"] == "return requested"
    assert (
        order["return_items"] == sorted([MUG_RED, LAMP_BLACK]) and order["return_payment_method_id"] == GIFT
    )
    assert len(order["payment_history"]) == 1 and _gift_balance(db) == 10.0


def test_exchange_delivered_order_items(db: dict) -> None:
    args = {
        "order_id": DELIVERED,
        "item_ids": [MUG_RED],
        "new_item_ids": [MUG_BLUE],
        "payment_method_id": GIFT,
    }
    call_tool(db, "exchange_delivered_order_items", args)
    order = db["orders"][DELIVERED]
    assert order["status"] == "exchange requested"
    assert order["exchange_items"] == [MUG_RED] and order["exchange_new_items"] == [MUG_BLUE]
    assert order["exchange_payment_method_id"] == GIFT and order["exchange_price_difference"] == 1.5
    assert order["items"][1]["item_id"] == MUG_RED and _gift_balance(db) == 10.0


# --- errors leave the database unchanged ---------------------------------------------------------

_SWAP = {
    "order_id": PENDING,
    "item_ids": [LAMP_BLACK],
    "new_item_ids": [LAMP_WHITE],
    "payment_method_id": PAYPAL,
}
_RETURN = {"order_id": DELIVERED, "item_ids": [MUG_RED], "payment_method_id": PAYPAL}
_EXCHANGE = {**_SWAP, "order_id": DELIVERED}
_NEW_ADDRESS = _address("1 New Way", "73301")


@pytest.mark.parametrize(
    "name, args, message",
    [
        ("find_user_id_by_email", {"email": "nobody@example.com"}, "user not found"),
        (
            "find_user_id_by_name_zip",
            {"first_name": "Mei", "last_name": "Kim", "zip": "00000"},
            "user not found",
        ),
        ("get_user_details", {"user_id": "nobody"}, "user not found"),
        ("get_order_details", {"order_id": "W1000001"}, "order not found"),
        ("get_product_details", {"product_id": LAMP_BLACK}, "product not found"),
        ("cancel_pending_order", {"order_id": "#W0", "reason": "no longer needed"}, "order not found"),
        (
            "cancel_pending_order",
            {"order_id": PROCESSED, "reason": "no longer needed"},
            "non-pending order cannot be cancelled",
        ),
        ("cancel_pending_order", {"order_id": PENDING, "reason": "too expensive"}, "invalid reason"),
        (
            "modify_pending_order_address",
            {"order_id": DELIVERED, **_NEW_ADDRESS},
            "non-pending order cannot be modified",
        ),
        ("modify_user_address", {"user_id": "nobody", **_NEW_ADDRESS}, "user not found"),
        (
            "modify_pending_order_payment",
            {"order_id": PENDING, "payment_method_id": "credit_card_5550001"},
            "payment method not found",
        ),
        (
            "modify_pending_order_payment",
            {"order_id": PENDING, "payment_method_id": CARD},
            "the new payment method should be different from the current one",
        ),
        (
            "modify_pending_order_payment",
            {"order_id": PENDING, "payment_method_id": GIFT},
            "insufficient gift card balance to pay for the order",
        ),
        (
            "modify_pending_order_items",
            {**_SWAP, "order_id": DELIVERED},
            "non-pending order cannot be modified",
        ),
        ("modify_pending_order_items", {**_SWAP, "item_ids": [MUG_BLUE]}, f"{MUG_BLUE} not found"),
        (
            "modify_pending_order_items",
            {**_SWAP, "item_ids": [LAMP_BLACK, LAMP_BLACK]},
            f"{LAMP_BLACK} not found",
        ),
        (
            "modify_pending_order_items",
            {**_SWAP, "item_ids": [LAMP_BLACK, MUG_RED]},
            "the number of items to be exchanged should match",
        ),
        (
            "modify_pending_order_items",
            {**_SWAP, "new_item_ids": [LAMP_SILVER]},
            f"new item {LAMP_SILVER} not found or available",
        ),
        (
            "modify_pending_order_items",
            {**_SWAP, "new_item_ids": [MUG_BLUE]},
            f"new item {MUG_BLUE} not found or available",
        ),
        (
            "modify_pending_order_items",
            {**_SWAP, "payment_method_id": "paypal_0"},
            "payment method not found",
        ),
        (
            "modify_pending_order_items",
            {**_SWAP, "payment_method_id": GIFT},
            "insufficient gift card balance to pay for the new item",
        ),
        (
            "return_delivered_order_items",
            {**_RETURN, "order_id": PENDING},
            "non-delivered order cannot be returned",
        ),
        (
            "return_delivered_order_items",
            {**_RETURN, "payment_method_id": "gift_card_0"},
            "payment method not found",
        ),
        (
            "return_delivered_order_items",
            {**_RETURN, "payment_method_id": CARD},
            "payment method should be either the original payment method or a gift card",
        ),
        ("return_delivered_order_items", {**_RETURN, "item_ids": [MUG_RED, MUG_RED]}, "some item not found"),
        (
            "exchange_delivered_order_items",
            {**_EXCHANGE, "order_id": PENDING},
            "non-delivered order cannot be exchanged",
        ),
        ("exchange_delivered_order_items", {**_EXCHANGE, "item_ids": [MUG_BLUE]}, f"{MUG_BLUE} not found"),
        (
            "exchange_delivered_order_items",
            {**_EXCHANGE, "new_item_ids": [LAMP_SILVER]},
            f"new item {LAMP_SILVER} not found or available",
        ),
        (
            "exchange_delivered_order_items",
            {**_EXCHANGE, "payment_method_id": GIFT},
            "insufficient gift card balance to pay for the price difference",
        ),
    ],
)
def test_errors_leave_db_unchanged(db: dict, name: str, args: dict, message: str) -> None:
    before = hash_db(db)
    assert call_tool(db, name, args) == f"Error: {message}"
    assert hash_db(db) == before
    with pytest.raises(ToolError, match=re.escape(message)):
        TOOLS[name](db, **args)


def test_a_write_tool_can_only_run_once_per_order(db: dict) -> None:
    call_tool(db, "modify_pending_order_items", _SWAP)
    assert call_tool(db, "cancel_pending_order", {"order_id": PENDING, "reason": "no longer needed"}) == (
        "Error: non-pending order cannot be cancelled"
    )
    call_tool(db, "return_delivered_order_items", _RETURN)
    assert (
        call_tool(db, "exchange_delivered_order_items", _EXCHANGE)
        == "Error: non-delivered order cannot be exchanged"
    )


def test_unexpected_failure_inside_a_write_leaves_db_unchanged(db: dict) -> None:
    del db["users"]["mei_kim_3456"]["payment_methods"][GIFT]  # the order's gift card is gone
    before = hash_db(db)
    out = call_tool(db, "cancel_pending_order", {"order_id": PENDING_GIFT, "reason": "no longer needed"})
    assert out == f"Error: KeyError: '{GIFT}'"
    assert hash_db(db) == before


# --- call_tool never raises ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, arguments, expected",
    [
        ("drop_database", {}, "Error: unknown tool drop_database"),
        (None, {}, "Error: unknown tool None"),
        (["calculate"], {}, "Error: unknown tool ['calculate']"),
        ("get_order_details", '{"order_id": "#W1000001"}', "must be a JSON object, not str"),
        ("get_order_details", None, "must be a JSON object, not NoneType"),
        ("get_order_details", [PENDING], "must be a JSON object, not list"),
        ("get_order_details", {}, "missing argument(s) for get_order_details: order_id"),
        (
            "get_order_details",
            {"order_id": PENDING, "verbose": True},
            "unexpected argument(s) for get_order_details: verbose",
        ),
        ("list_all_product_types", {"x": 1}, "unexpected argument(s)"),
        (
            "get_order_details",
            {"order_id": 1000001},
            "argument order_id of get_order_details must be a string, not int",
        ),
        ("return_delivered_order_items", {**_RETURN, "item_ids": MUG_RED}, "must be a list of strings"),
        ("return_delivered_order_items", {**_RETURN, "item_ids": [2222222222]}, "must be a list of strings"),
        ("calculate", {"expression": None}, "must be a string, not NoneType"),
    ],
)
def test_call_tool_reports_garbage(db: dict, name: object, arguments: object, expected: str) -> None:
    before = hash_db(db)
    out = call_tool(db, name, arguments)
    assert out.startswith("Error: ") and expected in out
    assert hash_db(db) == before


def test_call_tool_reports_a_broken_db() -> None:
    assert call_tool({}, "get_order_details", {"order_id": PENDING}) == "Error: KeyError: 'orders'"
    assert call_tool(None, "list_all_product_types", {}).startswith("Error: TypeError: ")


# --- registry and hashing ------------------------------------------------------------------------


def test_registry_and_schemas_agree() -> None:
    assert len(TOOLS) == 16 and [s["function"]["name"] for s in ALL_SCHEMAS] == list(TOOLS)
    assert len(TOOL_SCHEMAS) == 15 and schemas_for("tau_bench") == schemas_for("embedded") == TOOL_SCHEMAS
    assert [s["function"]["name"] for s in schemas_for("tau2")][15:] == ["get_item_details"]
    assert len(RETAIL_WRITE_TOOLS) == 7 and RETAIL_WRITE_TOOLS < set(TOOLS)
    assert len(AIRLINE_WRITE_TOOLS) == 6 and AIRLINE_WRITE_TOOLS < set(AIRLINE_TOOLS)
    assert WRITE_TOOLS == RETAIL_WRITE_TOOLS | AIRLINE_WRITE_TOOLS  # disjoint names: one set tells both
    assert not WRITE_TOOLS & {
        "calculate",
        "transfer_to_human_agents",
        "get_order_details",
        "get_user_details",
    }
    assert [s["function"]["name"] for s in AIRLINE_SCHEMAS] == list(AIRLINE_TOOLS)
    assert schemas_for("tau2", "airline") == schemas_for("tau_bench", "airline") == AIRLINE_SCHEMAS
    for schema in ALL_SCHEMAS + AIRLINE_SCHEMAS:
        assert schema["type"] == "function" and schema["function"]["description"]
        params = schema["function"]["parameters"]
        assert params["type"] == "object" and params["required"] == list(params["properties"])
    json.dumps(TOOL_SCHEMAS)


def test_get_item_details_is_tau2s_variant_lookup(db: dict) -> None:
    product = next(iter(db["products"].values()))
    item_id, variant = next(iter(product["variants"].items()))
    assert json.loads(call_tool(db, "get_item_details", {"item_id": item_id})) == variant
    assert call_tool(db, "get_item_details", {"item_id": "nope"}) == "Error: item not found"


def test_hash_db_ignores_key_order_and_sees_writes(db: dict) -> None:
    def reversed_keys(value: object) -> object:
        if isinstance(value, dict):
            return {k: reversed_keys(value[k]) for k in reversed(list(value))}
        if isinstance(value, list):
            return [reversed_keys(v) for v in value]
        return value

    before = hash_db(db)
    assert len(before) == 64 and hash_db(reversed_keys(db)) == before
    call_tool(db, "get_user_details", {"user_id": "mei_kim_3456"})
    assert hash_db(db) == before
    call_tool(db, "modify_pending_order_address", {"order_id": PENDING, **_NEW_ADDRESS})
    assert hash_db(db) != before
