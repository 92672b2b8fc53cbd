"""The airline tools (tau-bench's second environment, tau2's "airline" domain) over a database dict.

The database is the public task format's: `{"flights", "reservations", "users"}` keyed by flight
number, reservation id and user id. A flight's `dates` map each date to its status; an
"available" date carries `available_seats` and `prices` per cabin. A reservation's
`payment_history` lists `{"payment_id", "amount"}` entries (a refund is a negative amount).

Why these semantics: the reward compares the final database with the one the gold actions
produce, so the tools follow the public environment's visible rules, written here from its task
format and tool documentation: prices per passenger and segment, 30 per passenger for insurance,
50 per non-free bag, certificates spent whole at booking and never for changes, gift cards
debited, new ids from a fixed sequence and a fixed clock (so the gold replay and the agent's
episode write the same ids). As in the public environment, seats are taken at booking and not
given back by a change or a cancellation. Each tool checks everything before it writes, so a
failed call leaves the database as it was.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable

from vtb.domains.tau.toolbase import ToolError, calculate, transfer_to_human_agents

NOW = "2024-05-15T15:00:00"  # the environment's clock: every booking is made at this time
NEW_RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")
NEW_CERTIFICATE_IDS = ("certificate_3221322", "certificate_3221323", "certificate_3221324")
INSURANCE_FEE, BAG_FEE = 30, 50
AIRPORTS = {  # IATA code -> city, for list_all_airports (codes only seen in the flights get "")
    "ATL": "Atlanta", "BOS": "Boston", "CLT": "Charlotte", "DEN": "Denver", "DFW": "Dallas",
    "DTW": "Detroit", "EWR": "Newark", "IAH": "Houston", "JFK": "New York", "LAS": "Las Vegas",
    "LAX": "Los Angeles", "LGA": "LaGuardia", "MCO": "Orlando", "MIA": "Miami", "MSP": "Minneapolis",
    "ORD": "Chicago", "PHL": "Philadelphia", "PHX": "Phoenix", "SEA": "Seattle", "SFO": "San Francisco",
}  # fmt: skip


# --- lookups -------------------------------------------------------------------------------------


def _user(db: dict, user_id: str) -> dict:
    if user_id not in db["users"]:
        raise ToolError(f"user {user_id} not found")
    return db["users"][user_id]


def _reservation(db: dict, reservation_id: str) -> dict:
    if reservation_id not in db["reservations"]:
        raise ToolError(f"reservation {reservation_id} not found")
    return db["reservations"][reservation_id]


def _flight(db: dict, flight_number: str) -> dict:
    if flight_number not in db["flights"]:
        raise ToolError(f"flight {flight_number} not found")
    return db["flights"][flight_number]


def _on_date(db: dict, flight_number: str, date: str) -> dict:
    flight = _flight(db, flight_number)
    if date not in flight["dates"]:
        raise ToolError(f"flight {flight_number} not found on date {date}")
    return flight["dates"][date]


def _bookable(db: dict, flight_number: str, date: str, cabin: str, seats: int) -> tuple[dict, dict]:
    """(flight, its date record) when `seats` seats of `cabin` can be sold on it, else ToolError."""
    day = _on_date(db, flight_number, date)
    if day.get("status") != "available":
        raise ToolError(f"flight {flight_number} not available on date {date}")
    if day["available_seats"][cabin] < seats:
        raise ToolError(f"not enough seats on flight {flight_number}")
    return _flight(db, flight_number), day


def _segment(flight: dict, date: str, price: float) -> dict:
    return {
        "origin": flight["origin"],
        "destination": flight["destination"],
        "flight_number": flight["flight_number"],
        "date": date,
        "price": price,
    }


def _passengers(passengers: list[dict]) -> list[dict]:
    return [{k: p[k] for k in ("first_name", "last_name", "dob")} for p in passengers]


def _charge_for_change(user: dict, payment_id: str, amount: float) -> tuple[dict, dict | None]:
    """Check a change's payment: (the method, the history entry or None when nothing is owed)."""
    if payment_id not in user["payment_methods"]:
        raise ToolError("payment method not found")
    method = user["payment_methods"][payment_id]
    if method["source"] == "certificate":
        raise ToolError("a certificate cannot pay for a change to a reservation")
    if method["source"] == "gift_card" and method["amount"] < amount:
        raise ToolError("gift card balance is not enough")
    return method, ({"payment_id": payment_id, "amount": amount} if amount != 0 else None)


def _pay(method: dict, entry: dict | None, reservation: dict) -> None:
    if entry is None:
        return
    if method["source"] == "gift_card":
        method["amount"] = method["amount"] - entry["amount"]
    reservation["payment_history"].append(entry)


# --- read tools ----------------------------------------------------------------------------------


def get_user_details(db: dict, user_id: str) -> str:
    return json.dumps(_user(db, user_id))


def get_reservation_details(db: dict, reservation_id: str) -> str:
    return json.dumps(_reservation(db, reservation_id))


def get_flight_status(db: dict, flight_number: str, date: str) -> str:
    return str(_on_date(db, flight_number, date).get("status"))


def list_all_airports(db: dict) -> str:
    codes = {f[k] for f in db["flights"].values() for k in ("origin", "destination")}
    return json.dumps([{"iata": code, "city": AIRPORTS.get(code, "")} for code in sorted(codes)])


def _direct(db: dict, date: str, origin: str | None, destination: str | None, after: str = "") -> list[dict]:
    found = []
    for flight in db["flights"].values():
        day = flight["dates"].get(date)
        if (
            day is not None
            and day.get("status") == "available"
            and origin in (None, flight["origin"])
            and destination in (None, flight["destination"])
            and flight["scheduled_departure_time_est"] >= after
        ):
            found.append(
                {
                    "flight_number": flight["flight_number"],
                    "origin": flight["origin"],
                    "destination": flight["destination"],
                    "status": "available",
                    "scheduled_departure_time_est": flight["scheduled_departure_time_est"],
                    "scheduled_arrival_time_est": flight["scheduled_arrival_time_est"],
                    "available_seats": day["available_seats"],
                    "prices": day["prices"],
                }
            )
    return found


def _day_after(date: str) -> str:
    try:
        return (dt.date.fromisoformat(date) + dt.timedelta(days=1)).isoformat()
    except ValueError:
        raise ToolError(f"invalid date {date!r}; use YYYY-MM-DD") from None


def search_direct_flight(db: dict, origin: str, destination: str, date: str) -> str:
    return json.dumps(_direct(db, date, origin, destination))


def search_onestop_flight(db: dict, origin: str, destination: str, date: str) -> str:
    """Pairs of legs: the second leaves the stop after the first lands (the next day on "+1")."""
    pairs = []
    for first in _direct(db, date, origin, None):
        arrival = first["scheduled_arrival_time_est"]
        second_date = _day_after(date) if "+1" in arrival else date
        after = "" if "+1" in arrival else arrival
        for second in _direct(db, second_date, first["destination"], destination, after):
            pairs.append([first | {"date": date}, second | {"date": second_date}])
    return json.dumps(pairs)


# --- write tools ---------------------------------------------------------------------------------


def book_reservation(
    db: dict,
    user_id: str,
    origin: str,
    destination: str,
    flight_type: str,
    cabin: str,
    flights: list[dict],
    passengers: list[dict],
    payment_methods: list[dict],
    total_baggages: int,
    nonfree_baggages: int,
    insurance: str,
) -> str:
    user = _user(db, user_id)
    reservation_id = next((r for r in NEW_RESERVATION_IDS if r not in db["reservations"]), None)
    if reservation_id is None:
        raise ToolError("too many reservations")
    segments, days, total = [], [], 0
    for leg in flights:
        flight, day = _bookable(db, leg["flight_number"], leg["date"], cabin, len(passengers))
        price = day["prices"][cabin]
        segments.append(_segment(flight, leg["date"], price))
        days.append(day)
        total += price * len(passengers)
    total += (INSURANCE_FEE * len(passengers) if insurance == "yes" else 0) + BAG_FEE * nonfree_baggages
    for payment in payment_methods:
        method = user["payment_methods"].get(payment["payment_id"])
        if method is None:
            raise ToolError(f"payment method {payment['payment_id']} not found")
        if method["source"] in ("gift_card", "certificate") and method["amount"] < payment["amount"]:
            raise ToolError(f"not enough balance in payment method {payment['payment_id']}")
    paid = sum(p["amount"] for p in payment_methods)
    if round(paid, 2) != round(total, 2):
        raise ToolError(f"payment amount does not add up, total price is {total}, but paid {paid}")

    history = [{"payment_id": p["payment_id"], "amount": p["amount"]} for p in payment_methods]
    for payment in history:
        method = user["payment_methods"][payment["payment_id"]]
        if method["source"] == "gift_card":
            method["amount"] = method["amount"] - payment["amount"]
        elif method["source"] == "certificate":
            del user["payment_methods"][payment["payment_id"]]  # a certificate is spent whole
    for day in days:
        day["available_seats"][cabin] -= len(passengers)
    reservation = {
        "reservation_id": reservation_id,
        "user_id": user_id,
        "origin": origin,
        "destination": destination,
        "flight_type": flight_type,
        "cabin": cabin,
        "flights": segments,
        "passengers": _passengers(passengers),
        "payment_history": history,
        "created_at": NOW,
        "total_baggages": total_baggages,
        "nonfree_baggages": nonfree_baggages,
        "insurance": insurance,
    }
    db["reservations"][reservation_id] = reservation
    user["reservations"].append(reservation_id)
    return json.dumps(reservation)


def cancel_reservation(db: dict, reservation_id: str) -> str:
    reservation = _reservation(db, reservation_id)
    if reservation.get("status") == "cancelled":
        raise ToolError(f"reservation {reservation_id} is already cancelled")
    refunds = [
        {"payment_id": p["payment_id"], "amount": -p["amount"]} for p in reservation["payment_history"]
    ]
    reservation["payment_history"].extend(refunds)
    reservation["status"] = "cancelled"
    return json.dumps(reservation)


def send_certificate(db: dict, user_id: str, amount: float) -> str:
    user = _user(db, user_id)
    new_id = next((c for c in NEW_CERTIFICATE_IDS if c not in user["payment_methods"]), None)
    if new_id is None:
        raise ToolError("too many certificates")
    user["payment_methods"][new_id] = {"source": "certificate", "id": new_id, "amount": amount}
    return f"Certificate {new_id} added to user {user_id} with amount {amount}."


def update_reservation_baggages(
    db: dict, reservation_id: str, total_baggages: int, nonfree_baggages: int, payment_id: str
) -> str:
    reservation = _reservation(db, reservation_id)
    user = _user(db, reservation["user_id"])
    owed = BAG_FEE * max(0, nonfree_baggages - reservation["nonfree_baggages"])
    method, entry = _charge_for_change(user, payment_id, owed)
    _pay(method, entry, reservation)
    reservation["total_baggages"] = total_baggages
    reservation["nonfree_baggages"] = nonfree_baggages
    return json.dumps(reservation)


def update_reservation_flights(
    db: dict, reservation_id: str, cabin: str, flights: list[dict], payment_id: str
) -> str:
    """The whole new itinerary: a kept segment (same flight, date and cabin) keeps its price."""
    reservation = _reservation(db, reservation_id)
    user = _user(db, reservation["user_id"])
    travellers = len(reservation["passengers"])
    segments = []
    for leg in flights:
        kept = next(
            (
                s
                for s in reservation["flights"]
                if s["flight_number"] == leg["flight_number"]
                and s["date"] == leg["date"]
                and cabin == reservation["cabin"]
            ),
            None,
        )
        if kept is None:
            flight, day = _bookable(db, leg["flight_number"], leg["date"], cabin, travellers)
            kept = _segment(flight, leg["date"], day["prices"][cabin])
        segments.append(kept)
    owed = (sum(s["price"] for s in segments) - sum(s["price"] for s in reservation["flights"])) * travellers
    method, entry = _charge_for_change(user, payment_id, owed)
    _pay(method, entry, reservation)
    reservation["flights"] = segments
    reservation["cabin"] = cabin
    return json.dumps(reservation)


def update_reservation_passengers(db: dict, reservation_id: str, passengers: list[dict]) -> str:
    reservation = _reservation(db, reservation_id)
    if len(passengers) != len(reservation["passengers"]):
        raise ToolError("the number of passengers cannot change")
    reservation["passengers"] = _passengers(passengers)
    return json.dumps(reservation)


TOOLS: dict[str, Callable[..., str]] = {
    f.__name__: f
    for f in (
        book_reservation,
        calculate,
        cancel_reservation,
        get_reservation_details,
        get_user_details,
        list_all_airports,
        search_direct_flight,
        search_onestop_flight,
        send_certificate,
        transfer_to_human_agents,
        update_reservation_baggages,
        update_reservation_flights,
        update_reservation_passengers,
        get_flight_status,
    )
}
