"""A solver of the embedded math miniature's question forms, as a hostile harness would carry it.

It reads only the question (what every harness gets) and needs no model: the provenance audit
must catch a harness that answers with it (tests/test_adversarial.py)."""

import re


def solve(question: str) -> int | None:
    s = re.split(r"(?<=[.?])\s+", question.strip())
    n = [[int(x) for x in re.findall(r"\d+", t)] for t in s]
    if re.match(r"\w+ has \d+ .* and \w+ has \d+ ", s[0]):  # two people, one gives all to the other
        v, i = n[0][0] + n[0][1], 2
    elif "works" in s[0] or ("buys" in s[0] and len(s) > 1 and s[1].startswith("Each ")):
        v, i = (n[0][0] * n[0][1], 1) if "works" in s[0] else (n[0][0] * n[1][0], 2)
    elif len(s) > 1 and re.match(r"\w+ has \d+ (more|fewer|times) ", s[1]):
        a, b = n[0][0], n[1][0]
        v, i = ({"more": a + b, "fewer": a - b}.get(s[1].split()[3], a * b), 2)
    elif re.match(r"\w+ has \d+ ", s[0]):
        v, i = n[0][0], 1
    else:
        return None
    for t, k in zip(s[i:], n[i:], strict=True):
        if t.startswith("How many"):
            return v
        he = t.split()[0] in ("He", "She")
        if "times as many as before" in t:
            v *= k[0]
        elif "half of" in t:
            v //= 2
        elif "equal groups" in t:
            v //= k[0]
        elif "earns" in t or " more " in t or not he:  # earns, buys more, another gives him
            v += k[0]
        else:  # spends, gives away, loses, eats, sells ...
            v -= k[0]
    return v
