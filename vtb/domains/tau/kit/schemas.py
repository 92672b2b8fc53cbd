"""The tau tools' JSON schemas (OpenAI function format) and which of them write, per environment.

What a harness and a data tool need to know about the tools; running them against the
database is the orchestrator's `vtb.domains.tau.tools` (retail) and `vtb.domains.tau.airline`,
which validate arguments by these schemas. The two environments' write tools have distinct
names, so `WRITE_TOOLS` (their union) tells a write from a read in either.
"""

from __future__ import annotations

CANCEL_REASONS = ("no longer needed", "ordered by mistake")
RETAIL_WRITE_TOOLS: frozenset[str] = frozenset(
    {
        "cancel_pending_order",
        "modify_pending_order_address",
        "modify_pending_order_items",
        "modify_pending_order_payment",
        "modify_user_address",
        "return_delivered_order_items",
        "exchange_delivered_order_items",
    }
)


def _string(description: str, **extra: object) -> dict:
    return {"type": "string", "description": description, **extra}


def _strings(description: str) -> dict:
    return {"type": "array", "items": {"type": "string"}, "description": description}


_ORDER_ID = _string("The order id, such as '#W0000000'. Note the '#' at the beginning.")
_PAYMENT_ID = _string(
    "The payment method id to pay or receive the refund of the price difference, such as "
    "'gift_card_0000000' or 'credit_card_0000000'; see the user or order details."
)
_ITEM_IDS = _strings("The item ids, each such as '1008292230'. The list may repeat an item.")
_NEW_ITEM_IDS = _strings(
    "The new item ids, each such as '1008292230', in the same order as item_ids; each must be an "
    "available variant of the same product."
)
_ADDRESS = {
    "address1": _string("The first line of the address, such as '123 Main St'."),
    "address2": _string("The second line of the address, such as 'Apt 1' or ''."),
    "city": _string("The city, such as 'San Francisco'."),
    "state": _string("The state, such as 'CA'."),
    "country": _string("The country, such as 'USA'."),
    "zip": _string("The zip code, such as '12345'."),
}
_CONFIRM = "Explain the details and get the user's explicit confirmation (yes) first."


def _schema(name: str, description: str, **properties: dict) -> dict:
    parameters = {"type": "object", "properties": properties, "required": list(properties)}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


TOOL_SCHEMAS: list[dict] = [
    _schema(
        "find_user_id_by_email",
        "Find a user id by email. Returns an error if no user has that email.",
        email=_string("The user's email, such as 'something@example.com'."),
    ),
    _schema(
        "find_user_id_by_name_zip",
        "Find a user id by first name, last name and zip code. Use it only when the user cannot be "
        "found by email or does not remember it.",
        first_name=_string("The first name, such as 'John'."),
        last_name=_string("The last name, such as 'Doe'."),
        zip=_string("The zip code, such as '12345'."),
    ),
    _schema(
        "get_user_details",
        "Get a user's details: name, address, email, payment methods and orders.",
        user_id=_string("The user id, such as 'sara_doe_496'."),
    ),
    _schema("get_order_details", "Get the status and details of an order.", order_id=_ORDER_ID),
    _schema(
        "get_product_details",
        "Get a product's details, including every variant item.",
        product_id=_string("The product id, such as '6086499569'. Not the same as an item id."),
    ),
    _schema("list_all_product_types", "List the name and product id of every product type in the store."),
    _schema(
        "cancel_pending_order",
        "Cancel a pending order and refund its payments (gift cards at once, others in 5-7 business "
        f"days). Processed or delivered orders cannot be cancelled. {_CONFIRM}",
        order_id=_ORDER_ID,
        reason=_string("Why the order is cancelled.", enum=list(CANCEL_REASONS)),
    ),
    _schema(
        "modify_pending_order_address",
        f"Change the shipping address of a pending order. {_CONFIRM}",
        order_id=_ORDER_ID,
        **_ADDRESS,
    ),
    _schema(
        "modify_pending_order_items",
        "Change items of a pending order to other available variants of the same product. It can be "
        f"done only once per order, so collect every item first. {_CONFIRM}",
        order_id=_ORDER_ID,
        item_ids=_ITEM_IDS,
        new_item_ids=_NEW_ITEM_IDS,
        payment_method_id=_PAYMENT_ID,
    ),
    _schema(
        "modify_pending_order_payment",
        f"Pay a pending order with a different payment method; the old one is refunded. {_CONFIRM}",
        order_id=_ORDER_ID,
        payment_method_id=_string("The new payment method id, such as 'gift_card_0000000'."),
    ),
    _schema(
        "modify_user_address",
        f"Change the default address of a user. {_CONFIRM}",
        user_id=_string("The user id, such as 'sara_doe_496'."),
        **_ADDRESS,
    ),
    _schema(
        "return_delivered_order_items",
        "Return items of a delivered order; the status becomes 'return requested' and the user gets "
        f"an email on how to send them back. {_CONFIRM}",
        order_id=_ORDER_ID,
        item_ids=_ITEM_IDS,
        payment_method_id=_string("Where the refund goes: the original payment method or a gift card."),
    ),
    _schema(
        "exchange_delivered_order_items",
        "Exchange items of a delivered order for other available variants of the same product. "
        f"A delivered order can be returned or exchanged only once. {_CONFIRM}",
        order_id=_ORDER_ID,
        item_ids=_ITEM_IDS,
        new_item_ids=_NEW_ITEM_IDS,
        payment_method_id=_PAYMENT_ID,
    ),
    _schema(
        "calculate",
        "Calculate the result of an arithmetic expression.",
        expression=_string("The expression, such as '2 + 2': numbers, + - * /, parentheses and spaces."),
    ),
    _schema(
        "transfer_to_human_agents",
        "Transfer the user to a human agent with a summary of the issue. Only when the user asks for "
        "a human, or the request cannot be handled with the available tools.",
        summary=_string("A summary of the user's issue."),
    ),
]

# tau2's retail domain has one more read tool than tau-bench's; a tau2 data set sends it too.
# Kept out of TOOL_SCHEMAS so that tau-bench and the embedded task see the tool set they had.
TAU2_EXTRA_SCHEMAS: list[dict] = [
    _schema(
        "get_item_details",
        "Get the details of one item (a product variant): options, availability and price.",
        item_id=_string("The item id, such as '6086499569'. Not the same as a product id."),
    ),
]
ALL_SCHEMAS: list[dict] = TOOL_SCHEMAS + TAU2_EXTRA_SCHEMAS

# --- airline (tau-bench's second environment, tau2's "airline" domain) ---------------------------

CABINS = ("basic_economy", "economy", "business")
AIRLINE_WRITE_TOOLS: frozenset[str] = frozenset(
    {
        "book_reservation",
        "cancel_reservation",
        "send_certificate",
        "update_reservation_baggages",
        "update_reservation_flights",
        "update_reservation_passengers",
    }
)
WRITE_TOOLS: frozenset[str] = RETAIL_WRITE_TOOLS | AIRLINE_WRITE_TOOLS


def _integer(description: str) -> dict:
    return {"type": "integer", "description": description}


def _objects(description: str, **properties: dict) -> dict:
    item = {"type": "object", "properties": properties, "required": list(properties)}
    return {"type": "array", "items": item, "description": description}


def _shared(name: str) -> dict:
    """A retail schema both environments have (calculate, transfer_to_human_agents)."""
    return next(s for s in TOOL_SCHEMAS if s["function"]["name"] == name)


_RESERVATION_ID = _string("The reservation id, such as 'ZFA04Y'.")
_USER_ID = _string("The user id, such as 'sara_doe_496'.")
_AIRPORT = "The IATA code of the {} airport, such as '{}'."
_DATE = _string("The date, as 'YYYY-MM-DD', such as '2024-05-01'.")
_CABIN = _string("The cabin class.", enum=list(CABINS))
_FLIGHTS = _objects(
    "Every flight segment of the reservation, in travel order (unchanged segments too).",
    flight_number=_string("The flight number, such as 'HAT001'."),
    date=_DATE,
)
_PASSENGERS = _objects(
    "Every passenger of the reservation.",
    first_name=_string("The first name, such as 'Noah'."),
    last_name=_string("The last name, such as 'Brown'."),
    dob=_string("The date of birth, as 'YYYY-MM-DD'."),
)
_PAYMENT_ID = _string(
    "A payment method id of the user's profile, such as 'credit_card_7815826' or 'gift_card_7815826'."
)

AIRLINE_SCHEMAS: list[dict] = [
    _schema(
        "book_reservation",
        "Book a reservation for the user. The payments must add up to the total price: each flight's "
        "price in the cabin per passenger, 30 per passenger for travel insurance and 50 per non-free "
        f"bag. {_CONFIRM}",
        user_id=_USER_ID,
        origin=_string(_AIRPORT.format("origin", "SFO")),
        destination=_string(_AIRPORT.format("destination", "JFK")),
        flight_type=_string("One way or round trip.", enum=["one_way", "round_trip"]),
        cabin=_CABIN,
        flights=_FLIGHTS,
        passengers=_PASSENGERS,
        payment_methods=_objects(
            "How the total is paid: payment method ids of the user's profile and the amount of each.",
            payment_id=_PAYMENT_ID,
            amount={"type": "number", "description": "The amount paid with this method."},
        ),
        total_baggages=_integer("The total number of checked bags."),
        nonfree_baggages=_integer("How many of those bags are paid for."),
        insurance=_string("Whether travel insurance is bought.", enum=["yes", "no"]),
    ),
    _shared("calculate"),
    _schema(
        "cancel_reservation",
        f"Cancel a whole reservation; every payment is refunded to where it came from. {_CONFIRM}",
        reservation_id=_RESERVATION_ID,
    ),
    _schema("get_reservation_details", "Get the details of a reservation.", reservation_id=_RESERVATION_ID),
    _schema(
        "get_user_details",
        "Get a user's details: name, date of birth, membership, payment methods, saved passengers "
        "and reservation ids.",
        user_id=_USER_ID,
    ),
    _schema("list_all_airports", "List the airports served, by IATA code and city."),
    _schema(
        "search_direct_flight",
        "Search the direct flights between two airports on a date, with their seats and prices.",
        origin=_string(_AIRPORT.format("origin", "JFK")),
        destination=_string(_AIRPORT.format("destination", "LAX")),
        date=_DATE,
    ),
    _schema(
        "search_onestop_flight",
        "Search the one-stop connections between two airports leaving on a date (the second leg "
        "may leave the next day).",
        origin=_string(_AIRPORT.format("origin", "JFK")),
        destination=_string(_AIRPORT.format("destination", "LAX")),
        date=_DATE,
    ),
    _schema(
        "send_certificate",
        f"Send the user a travel certificate worth `amount`, as the policy allows. {_CONFIRM}",
        user_id=_USER_ID,
        amount={"type": "number", "description": "The certificate's value."},
    ),
    _shared("transfer_to_human_agents"),
    _schema(
        "update_reservation_baggages",
        f"Change the number of checked bags; added non-free bags cost 50 each. {_CONFIRM}",
        reservation_id=_RESERVATION_ID,
        total_baggages=_integer("The new total number of checked bags."),
        nonfree_baggages=_integer("The new number of paid bags."),
        payment_id=_PAYMENT_ID,
    ),
    _schema(
        "update_reservation_flights",
        "Change a reservation's flights or cabin: give the whole new itinerary. The price difference "
        f"is paid or refunded with payment_id (not a certificate). {_CONFIRM}",
        reservation_id=_RESERVATION_ID,
        cabin=_CABIN,
        flights=_FLIGHTS,
        payment_id=_PAYMENT_ID,
    ),
    _schema(
        "update_reservation_passengers",
        f"Replace the passengers' details; their number cannot change. {_CONFIRM}",
        reservation_id=_RESERVATION_ID,
        passengers=_PASSENGERS,
    ),
    _schema(
        "get_flight_status",
        "Get the status of a flight on a date (available, delayed, on time, flying, landed, cancelled).",
        flight_number=_string("The flight number, such as 'HAT001'."),
        date=_DATE,
    ),
]


def schemas_of(env: str, tau2: bool = False) -> list[dict]:
    """The tools an environment's tasks are played with (tau2's retail has get_item_details too)."""
    if env == "airline":
        return AIRLINE_SCHEMAS
    return ALL_SCHEMAS if tau2 else TOOL_SCHEMAS


# every tool of every environment by name (a name two environments share has one schema)
PARAMETERS: dict[str, dict] = {
    s["function"]["name"]: s["function"]["parameters"] for s in ALL_SCHEMAS + AIRLINE_SCHEMAS
}
