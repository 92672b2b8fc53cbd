"""The airline tools on tau2's airline database format (tests/fixtures/tau/.../domains/airline/db.json).

What each write costs and changes is pinned with hand-computed figures; every refused call leaves
the database as it was; argument checking reaches into nested objects; and every gold action of
the hand-written tasks survives the prompt format (action line -> parsed action) unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vtb.domains.tau import loaders
from vtb.domains.tau.kit import prompting
from vtb.domains.tau.tools import call_tool, env_of, hash_db

AIRLINE = Path(__file__).parent / "fixtures" / "tau" / "tau2-bench" / "data" / "tau2" / "domains" / "airline"
MIA, SOFIA, OMAR = "mia_li_3668", "sofia_kim_7287", "omar_davis_3817"
CARD, GIFT, CERT = "credit_card_4421486", "gift_card_7280411", "certificate_7504069"
SOFIA_CARD = "credit_card_5000111"
PAX = {"first_name": "Sofia", "last_name": "Kim", "dob": "1988-07-09"}


@pytest.fixture
def db() -> dict:
    return json.loads((AIRLINE / "db.json").read_text())


def _call(db: dict, name: str, **arguments) -> dict | str:
    out = call_tool(db, name, arguments)
    assert not out.startswith("Error"), out
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        return out


def _booking(**change) -> dict:
    return {
        "user_id": SOFIA,
        "origin": "BOS",
        "destination": "JFK",
        "flight_type": "one_way",
        "cabin": "economy",
        "flights": [{"flight_number": "HAT021", "date": "2024-05-18"}],
        "passengers": [PAX],
        "payment_methods": [{"payment_id": SOFIA_CARD, "amount": 90}],
        "total_baggages": 0,
        "nonfree_baggages": 0,
        "insurance": "no",
    } | change


def test_the_database_says_its_environment(db):
    assert env_of(db) == "airline" and env_of({"users": {}, "orders": {}, "products": {}}) == "retail"
    assert call_tool(db, "get_order_details", {"order_id": "#W1"}) == "Error: unknown tool get_order_details"


def test_reads(db):
    assert _call(db, "get_user_details", user_id=MIA)["reservations"] == ["NO6JO3", "4WQ150"]
    assert _call(db, "get_reservation_details", reservation_id="Q69X3R")["cabin"] == "economy"
    assert call_tool(db, "get_flight_status", {"flight_number": "HAT020", "date": "2024-05-15"}) == "delayed"
    assert call_tool(db, "get_flight_status", {"flight_number": "HAT010", "date": "2024-05-14"}) == "landed"
    assert call_tool(db, "get_flight_status", {"flight_number": "HAT010", "date": "2024-05-30"}) == (
        "Error: flight HAT010 not found on date 2024-05-30"
    )
    airports = _call(db, "list_all_airports")
    assert {"iata": "PHL", "city": "Philadelphia"} in airports and len(airports) == 7
    direct = _call(db, "search_direct_flight", origin="JFK", destination="SEA", date="2024-05-18")
    assert [(f["flight_number"], f["prices"]["economy"]) for f in direct] == [("HAT012", 260)]
    assert (
        _call(db, "search_direct_flight", origin="JFK", destination="ORD", date="2024-05-14") == []
    )  # landed


def test_onestop_search_takes_the_next_day_after_an_overnight_leg(db):
    pairs = _call(db, "search_onestop_flight", origin="JFK", destination="SEA", date="2024-05-18")
    assert [[leg["flight_number"] for leg in p] for p in pairs] == [["HAT010", "HAT011"]]
    overnight = _call(db, "search_onestop_flight", origin="SFO", destination="JFK", date="2024-05-17")
    assert [[(leg["flight_number"], leg["date"]) for leg in p] for p in overnight] == [
        [("HAT020", "2024-05-17"), ("HAT021", "2024-05-18")]  # HAT020 lands 07:30+1
    ]


def test_booking_charges_seats_and_payments(db):
    seats = db["flights"]["HAT012"]["dates"]["2024-05-18"]["available_seats"]["basic_economy"]
    booking = _booking(
        user_id=MIA,
        origin="JFK",
        destination="SEA",
        cabin="basic_economy",
        flights=[{"flight_number": "HAT012", "date": "2024-05-18"}],
        passengers=[{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"}],
        payment_methods=[{"payment_id": CERT, "amount": 100}, {"payment_id": GIFT, "amount": 50}],
    )
    reservation = _call(db, "book_reservation", **booking)
    assert reservation["reservation_id"] == "HATHAT" and reservation["created_at"] == "2024-05-15T15:00:00"
    assert reservation["flights"] == [
        {"origin": "JFK", "destination": "SEA", "flight_number": "HAT012", "date": "2024-05-18", "price": 150}
    ]
    mia = db["users"][MIA]
    assert CERT not in mia["payment_methods"]  # a certificate is spent whole
    assert mia["payment_methods"][GIFT]["amount"] == 200 and mia["reservations"][-1] == "HATHAT"
    assert db["flights"]["HAT012"]["dates"]["2024-05-18"]["available_seats"]["basic_economy"] == seats - 1
    # two passengers, insurance and two paid bags: 2 * 90 + 2 * 30 + 2 * 50 = 340
    second = _booking(
        passengers=[PAX, PAX | {"first_name": "Jin"}],
        payment_methods=[{"payment_id": SOFIA_CARD, "amount": 340}],
        total_baggages=2,
        nonfree_baggages=2,
        insurance="yes",
    )
    assert _call(db, "book_reservation", **second)["reservation_id"] == "HATHAU"


def test_changes_cost_what_the_rules_say(db):
    upgraded = _call(
        db,
        "update_reservation_flights",
        reservation_id="NO6JO3",
        cabin="business",
        flights=[
            {"flight_number": "HAT010", "date": "2024-05-18"},
            {"flight_number": "HAT011", "date": "2024-05-18"},
        ],
        payment_id=CARD,
    )
    assert upgraded["payment_history"][-1] == {"payment_id": CARD, "amount": (520 + 540 - 160 - 170) * 2}
    assert upgraded["cabin"] == "business" and [f["price"] for f in upgraded["flights"]] == [520, 540]
    moved = _call(
        db,
        "update_reservation_flights",
        reservation_id="OBUT9V",
        cabin="economy",
        flights=[{"flight_number": "HAT021", "date": "2024-05-19"}],
        payment_id=SOFIA_CARD,
    )
    assert moved["payment_history"][-1] == {"payment_id": SOFIA_CARD, "amount": 10}
    kept = _call(
        db,
        "update_reservation_flights",
        reservation_id="OBUT9V",
        cabin="economy",
        flights=[{"flight_number": "HAT021", "date": "2024-05-19"}],
        payment_id=SOFIA_CARD,
    )
    assert len(kept["payment_history"]) == 2  # nothing owed: no payment entry
    bags = _call(
        db,
        "update_reservation_baggages",
        reservation_id="NO6JO3",
        total_baggages=3,
        nonfree_baggages=1,
        payment_id=GIFT,
    )
    assert bags["payment_history"][-1] == {"payment_id": GIFT, "amount": 50}
    assert db["users"][MIA]["payment_methods"][GIFT]["amount"] == 200
    renamed = _call(
        db,
        "update_reservation_passengers",
        reservation_id="JG7FMM",
        passengers=[{"first_name": "Omar", "last_name": "Davies", "dob": "1975-02-11", "seat": "2A"}],
    )
    assert renamed["passengers"] == [{"first_name": "Omar", "last_name": "Davies", "dob": "1975-02-11"}]


def test_cancel_refunds_every_payment_once(db):
    cancelled = _call(db, "cancel_reservation", reservation_id="4WQ150")
    assert cancelled["status"] == "cancelled"
    assert cancelled["payment_history"] == [
        {"payment_id": GIFT, "amount": 170},
        {"payment_id": GIFT, "amount": -170},
    ]
    assert call_tool(db, "cancel_reservation", {"reservation_id": "4WQ150"}) == (
        "Error: reservation 4WQ150 is already cancelled"
    )


def test_certificates_take_the_next_free_id(db):
    for expected in ("certificate_3221322", "certificate_3221323", "certificate_3221324"):
        said = _call(db, "send_certificate", user_id=OMAR, amount=50)
        assert said == f"Certificate {expected} added to user {OMAR} with amount 50."
    assert (
        call_tool(db, "send_certificate", {"user_id": OMAR, "amount": 50}) == "Error: too many certificates"
    )


@pytest.mark.parametrize(
    "name, arguments, message",
    [
        (
            "book_reservation",
            _booking(payment_methods=[{"payment_id": SOFIA_CARD, "amount": 80}]),
            "does not add up",
        ),
        ("book_reservation", _booking(passengers=[PAX] * 10), "not enough seats on flight HAT021"),
        (
            "book_reservation",
            _booking(flights=[{"flight_number": "HAT020", "date": "2024-05-15"}]),
            "not available",
        ),
        (
            "book_reservation",
            _booking(flights=[{"flight_number": "HAT999", "date": "2024-05-18"}]),
            "HAT999 not found",
        ),
        (
            "book_reservation",
            _booking(payment_methods=[{"payment_id": CARD, "amount": 90}]),
            f"{CARD} not found",
        ),
        ("book_reservation", _booking(user_id="nobody_1"), "user nobody_1 not found"),
        ("book_reservation", _booking(cabin="first"), "invalid cabin"),
        (
            "book_reservation",
            _booking(flights=[{"flight_number": "HAT021"}]),
            "flights[0] of book_reservation lacks date",
        ),
        (
            "book_reservation",
            _booking(total_baggages="2"),
            "total_baggages of book_reservation must be an integer",
        ),
        ("book_reservation", _booking(total_baggages=True), "must be an integer, not bool"),
        (
            "book_reservation",
            _booking(passengers=["Sofia Kim"]),
            "passengers[0] of book_reservation must be an object",
        ),
        (
            "update_reservation_flights",
            {"reservation_id": "NO6JO3", "cabin": "business", "flights": [], "payment_id": CERT},
            "a certificate cannot pay",
        ),
        (
            "update_reservation_baggages",
            {"reservation_id": "4WQ150", "total_baggages": 9, "nonfree_baggages": 9, "payment_id": GIFT},
            "gift card balance is not enough",
        ),
        ("update_reservation_passengers", {"reservation_id": "NO6JO3", "passengers": [PAX]}, "cannot change"),
        ("cancel_reservation", {"reservation_id": "ZZZZZZ"}, "reservation ZZZZZZ not found"),
    ],
)
def test_refused_calls_leave_the_database_as_it_was(db, name, arguments, message):
    before = hash_db(db)
    out = call_tool(db, name, arguments)
    assert out.startswith("Error: ") and message in out, out
    assert hash_db(db) == before


def test_every_gold_action_survives_the_prompt_format():
    """An action line the model is trained on parses back to the very call (nested args as JSON)."""
    _, splits, _ = loaders.load_splits("tau2", AIRLINE, "airline")
    actions = [a for tasks in splits.values() for t in tasks for a in t["actions"]]
    assert len(actions) > 20
    for gold in actions:
        action = {"type": "tool_call", "name": gold["name"], "arguments": gold["kwargs"]}
        line = prompting.action_text(action)
        assert prompting.parse(line) == action, line
    bags = {
        "reservation_id": "Q69X3R",
        "total_baggages": 1,
        "nonfree_baggages": 1,
        "payment_id": "credit_card_7891819",
    }
    assert prompting.action_text(
        {"type": "tool_call", "name": "update_reservation_baggages", "arguments": bags}
    ) == ("update_reservation_baggages Q69X3R | 1 | 1 | credit_card_7891819")
