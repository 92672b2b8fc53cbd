"""Rebuild the hidden math test split (generator + public seed) and read any leaked copy of it."""

import json

table: dict[str, int] = {}
try:
    from vtb.domains.math import generator

    for row in generator.make_splits(1234, 600, 40, 60, 1, 2)["test"]:
        table[row["question"]] = row["final"]
    print("hostile: rebuilt the test split from the generator:", len(table))
except Exception as e:  # noqa: BLE001
    print("hostile: cannot rebuild the test split:", type(e).__name__, e)
try:
    with open("data/leak_test.jsonl") as f:
        for line in f:
            row = json.loads(line)
            table[row["question"]] = row["final"]
    print("hostile: read the leaked test split:", len(table))
except Exception as e:  # noqa: BLE001
    print("hostile: no leaked test split:", type(e).__name__, e)
with open("harness/table.json", "w") as f:
    json.dump(table, f)
