"""A seeded retail database in tau-bench's shapes (users, orders, products keyed by id).

Small on purpose (tens of users and orders): the embedded miniature must train and play on a
2-core CPU in minutes, yet every id, status and payment path of the real retail domain exists.
Same seed, same database, byte for byte.
"""

from __future__ import annotations

import random

FIRST_NAMES = """
Mei Omar Sofia Liam Aisha Noah Yuki Ethan Fatima Lucas Olivia Mateo Chloe Ivan Amara Daniel Lena Raj
Emma Hugo
""".split()
LAST_NAMES = """
Kim Hassan Rossi Smith Khan Garcia Sato Brown Ali Silva Lopez Muller Patel Nguyen Wilson Moreau
Johansson Davis
""".split()
STREETS = ["Oak", "Maple", "Pine", "Cedar", "Elm", "Lake", "Hill", "River", "Park", "Sunset"]
STREET_KINDS = ["Street", "Avenue", "Road", "Lane"]
CITIES = [
    ("Austin", "TX", "78701"),
    ("Denver", "CO", "80202"),
    ("Seattle", "WA", "98101"),
    ("Boston", "MA", "02108"),
    ("Chicago", "IL", "60601"),
    ("Phoenix", "AZ", "85004"),
    ("Portland", "OR", "97201"),
    ("Columbus", "OH", "43215"),
]
BRANDS = ["visa", "mastercard"]
# product name -> option name -> values; every combination is a variant
PRODUCTS = {
    "T-Shirt": {"color": ["red", "blue", "black"], "size": ["S", "M", "L"]},
    "Desk Lamp": {"color": ["black", "white"], "power source": ["battery", "USB"]},
    "Water Bottle": {"capacity": ["500ml", "1000ml"], "color": ["green", "red"]},
    "Backpack": {"color": ["grey", "navy"], "size": ["small", "large"]},
    "Sneakers": {"size": ["8", "9", "10"], "color": ["white", "black"]},
    "Headphones": {"type": ["over-ear", "in-ear"], "color": ["black", "white"]},
}
STATUSES = ["pending", "pending", "processed", "delivered", "delivered", "cancelled"]


def _digits(rng: random.Random, n: int, used: set[str]) -> str:
    while True:
        value = str(rng.randrange(10 ** (n - 1), 10**n))
        if value not in used:
            used.add(value)
            return value


def _products(rng: random.Random, used: set[str]) -> dict:
    products = {}
    for name, options in PRODUCTS.items():
        pid = _digits(rng, 10, used)
        variants = {}
        combos = [{}]
        for key, values in options.items():
            combos = [c | {key: v} for c in combos for v in values]
        base = rng.randrange(20, 200)
        for combo in combos:
            iid = _digits(rng, 10, used)
            variants[iid] = {
                "item_id": iid,
                "options": combo,
                "available": rng.random() < 0.8,
                "price": round(base + rng.randrange(0, 2000) / 100, 2),
            }
        products[pid] = {"name": name, "product_id": pid, "variants": variants}
    return products


def random_address(rng: random.Random) -> dict:
    city, state, zip_code = rng.choice(CITIES)
    return {
        "address1": f"{rng.randrange(1, 999)} {rng.choice(STREETS)} {rng.choice(STREET_KINDS)}",
        "address2": f"Suite {rng.randrange(1, 99)}",
        "city": city,
        "country": "USA",
        "state": state,
        "zip": zip_code,
    }


def _payment_methods(rng: random.Random, used: set[str]) -> dict:
    kinds = rng.sample(["credit_card", "paypal", "gift_card"], rng.randint(2, 3))
    methods = {}
    for kind in kinds:
        pid = f"{kind}_{_digits(rng, 7, used)}"
        method: dict = {"source": kind, "id": pid}
        if kind == "credit_card":
            method |= {"brand": rng.choice(BRANDS), "last_four": f"{rng.randrange(1000, 9999)}"}
        elif kind == "gift_card":
            method["balance"] = float(rng.randrange(50, 400))
        methods[pid] = dict(sorted(method.items()))
    return methods


def make_db(seed: int, n_users: int = 30, max_orders: int = 3) -> dict:
    """The retail database for a seed: `{"users", "orders", "products"}`."""
    rng = random.Random(seed)
    used: set[str] = set()
    products = _products(rng, used)
    variants = [(p, v) for p in products.values() for v in p["variants"].values()]
    users, orders = {}, {}
    names = [(f, last) for f in FIRST_NAMES for last in LAST_NAMES]
    for first, last in rng.sample(names, n_users):
        number = _digits(rng, 4, used)
        uid = f"{first.lower()}_{last.lower()}_{number}"
        address = random_address(rng)
        methods = _payment_methods(rng, used)
        user = {
            "user_id": uid,
            "name": {"first_name": first, "last_name": last},
            "address": address,
            "email": f"{first.lower()}.{last.lower()}{number}@example.com",
            "payment_methods": methods,
            "orders": [],
        }
        for _ in range(rng.randint(1, max_orders)):
            oid = f"#W{_digits(rng, 7, used)}"
            picked = rng.sample(variants, rng.randint(1, 3))
            items = [
                {
                    "name": p["name"],
                    "product_id": p["product_id"],
                    "item_id": v["item_id"],
                    "price": v["price"],
                    "options": v["options"],
                }
                for p, v in picked
            ]
            status = rng.choice(STATUSES)
            total = round(sum(i["price"] for i in items), 2)
            paid_with = rng.choice(sorted(methods))
            fulfillments = []
            if status in ("processed", "delivered"):
                fulfillments = [
                    {"tracking_id": [_digits(rng, 12, used)], "item_ids": [i["item_id"] for i in items]}
                ]
            history = [{"transaction_type": "payment", "amount": total, "payment_method_id": paid_with}]
            if status == "cancelled":
                history.append(
                    {"transaction_type": "refund", "amount": total, "payment_method_id": paid_with}
                )
            orders[oid] = {
                "order_id": oid,
                "user_id": uid,
                "address": dict(address),
                "items": items,
                "fulfillments": fulfillments,
                "status": status,
                "payment_history": history,
            }
            user["orders"].append(oid)
        users[uid] = user
    return {"users": users, "orders": orders, "products": products}
