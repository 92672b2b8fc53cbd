"""Seeded SWE-bench instances: small Python repositories, one seeded bug each, hidden tests that catch it.

A repository is a package of 2-4 modules with 4-7 short functions each, drawn from a library of
function recipes with varied names and constants, plus a tests/ folder covering some of them and a
README. One function carries a bug from a template (BUGS); its fix is always one line of a fixed
shape, e.g. `range(1, n)` -> `range(1, n + 1)`, and the issue text names the function, its file,
an input, what came out and what was expected, so a tiny model can learn the mapping.

Test expectations are never written by hand: every test case is computed by running our own
(trusted) correct and buggy module sources in-process, so PASS_TO_PASS cases are those where both
agree and FAIL_TO_PASS cases those where they differ. `make_repo` turns `files` into a real git
repository whose commit sha is reproducible (fixed author, dates, no user config).
"""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from vtb.domains.common import draw_distinct
from vtb.domains.swe.kit.diffs import diff_from_edit, file_diff
from vtb.domains.swe.patching import GIT_ENV

BUGS = [
    "off_by_one",
    "wrong_operator",
    "missing_edge_case",
    "wrong_default",
    "swapped_arguments",
    "wrong_return",
]
# The suffix of the hidden test's name, per template.
TEST_SUFFIX = {
    "off_by_one": "includes_last",
    "wrong_operator": "boundary",
    "missing_edge_case": "empty",
    "wrong_default": "default",
    "swapped_arguments": "argument_order",
    "wrong_return": "result",
}
STEMS = """
tally quill sprout pebble ember cobalt lumen harbor maple orbit pixel quartz ripple saffron timber
velvet willow zephyr acorn bramble cinder fable glacier hazel indigo juniper kestrel lagoon meadow
nimbus
""".split()
PKG_SUFFIXES = ["kit", "lib", "utils", "tools", "box", "ops"]
MODULES = """
calc series text checks money lists fmt convert stats records units helpers shapes scores
""".split()
WORDS = """
apple river stone cloud maple ember north piano tiger lemon orbit candle harbor violet copper garden
silver rocket meadow button
""".split()
AUTHOR = ("vtb", "vtb@example.invalid")
COMMIT_MESSAGE = "Base commit"


@dataclass
class Func:
    """One function of the library: its correct source, test inputs and, for a bug recipe, the bug."""

    name: str
    source: str
    doc: str
    cases: list[tuple]
    bug: str | None = None
    fixed: str = ""  # the correct line as it appears in the module (indented)
    buggy: str = ""  # the line that replaces it in the buggy repository
    helper: Func | None = field(default=None, repr=False)  # defined just before it in the same module


def _def(name: str, params: str, doc: str, body: list[str]) -> str:
    return "\n".join([f"def {name}({params}):", f'    """{doc}"""', *(f"    {b}" for b in body)]) + "\n"


def _func(name: str, params: str, doc: str, body: list[str], cases: list[tuple], **bug) -> Func:
    return Func(name, _def(name, params, doc, body), doc, cases, **bug)


def _sentence(rng: random.Random, k: int) -> str:
    return " ".join(rng.sample(WORDS, k))


def _ints(rng: random.Random, k: int, lo: int = 1, hi: int = 9) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(k)]


# ---- bug recipes: each returns the CORRECT function, with the one line the bug template breaks ----


VARS_N = ["n", "last", "stop", "limit", "upto"]
VARS_XS = ["xs", "values", "scores", "numbers", "items", "data"]
VARS_WORDS = ["words", "names", "labels", "tags", "titles"]
LIMITS = ["limit", "bound", "cutoff", "threshold", "level"]


def _off_by_one(rng):
    """`range(1, n)` -> `range(1, n + 1)`: the last value is left out."""
    v, c, p = (
        rng.choice(VARS_N),
        rng.randint(2, 12),
        rng.choice(["item", "row", "step", "page", "part", "lap"]),
    )
    loop = f"range(1, {v} + 1)"
    shape = rng.choice(["sum", "product", "list"])
    if shape == "sum":
        term, words, names = rng.choice(
            [
                ("k", "k", ["sum_upto", "total_upto", "triangle_number", "sum_first"]),
                ("k * k", "k squared", ["sum_squares", "square_total", "squares_upto", "sum_of_squares"]),
                ("k * k * k", "k cubed", ["sum_cubes", "cube_total", "cubes_upto", "sum_of_cubes"]),
                (f"k * {c}", f"{c} times k", ["sum_multiples", "scaled_total", "multiple_sum"]),
                (f"k + {c}", f"k plus {c}", ["shifted_sum", "offset_total", "padded_sum"]),
            ]
        )
        body = ["total = 0", f"for k in {loop}:", f"    total += {term}", "return total"]
        doc = f"Return the sum of {words} for k from 1 to {v}, {v} included."
    elif shape == "product":
        d = rng.randint(0, 5)
        term, names = (
            ("k", ["factorial", "product_upto", "multiply_upto"])
            if d == 0
            else (f"k + {d}", ["shifted_product", "product_plus"])
        )
        body = ["result = 1", f"for k in {loop}:", f"    result *= {term}", "return result"]
        doc = f"Return the product of {term} for k from 1 to {v}, {v} included."
    else:
        v = rng.choice(["n", "count", "size"])
        loop = f"range(1, {v} + 1)"
        term, doc, names = rng.choice(
            [
                (
                    f"k * {c}",
                    f"Return the first {v} multiples of {c}.",
                    ["multiples", "times_table", "first_multiples"],
                ),
                (f"{c} ** k", f"Return the powers {c} ** 1 to {c} ** {v}.", [f"powers_of_{c}", "power_list"]),
                (
                    f'f"{p}{{k}}"',
                    f"Return {v} labels: {p}1, {p}2, ... up to {p}{{{v}}}.",
                    ["labels", "make_labels", "numbered_names"],
                ),
            ]
        )
        body = [f"return [{term} for k in {loop}]"]
    line = next(b for b in body if loop in b)
    cases = [(rng.randint(2, 5),), (rng.randint(6, 9),), (0,)]
    return _func(
        rng.choice(names),
        v,
        doc,
        body,
        cases,
        bug="off_by_one",
        fixed=f"    {line}",
        buggy=f"    {line.replace(loop, f'range(1, {v})')}",
    )


PREDICATES = {
    ">=": [
        ("age", range(16, 22), ["is_adult", "can_vote", "old_enough"]),
        ("score", range(40, 85, 5), ["is_passing", "passes", "made_the_cut"]),
        ("votes", range(3, 13), ["has_quorum", "enough_votes", "motion_carries"]),
        ("temperature", range(25, 41), ["is_hot", "heat_alert", "needs_cooling"]),
    ],
    "<=": [
        ("cost", range(50, 550, 50), ["fits_budget", "is_affordable", "within_budget"]),
        ("length", range(8, 21), ["is_short", "fits_line", "short_enough"]),
        ("speed", range(30, 130, 10), ["is_legal_speed", "under_limit", "within_limit"]),
        ("weight", range(5, 31), ["fits_luggage", "light_enough", "carry_on_ok"]),
    ],
}


def _wrong_operator(rng):
    """`<=` -> `<` (or `>=` -> `>`): the boundary value is treated wrongly."""
    op = rng.choice([">=", "<="])
    words, strict = ("at least" if op == ">=" else "at most"), op[0]
    shape = rng.choice(["count", "predicate", "filter"])
    if shape == "predicate":
        v, values, names = rng.choice(PREDICATES[op])
        c = rng.choice(values)
        line = f"return {v} {op} {c}"
        return _func(
            rng.choice(names),
            v,
            f"Return True when {v} is {words} {c}.",
            [line],
            [(c,), (c + rng.randint(3, 9),), (c - rng.randint(3, 9),)],
            bug="wrong_operator",
            fixed=f"    {line}",
            buggy=f"    {line.replace(op, strict)}",
        )
    # The limit is a parameter or a constant; `present` holds the boundary value, `absent` does not.
    xs, value, base = rng.choice(VARS_XS), rng.randint(1, 9), _ints(rng, 5)
    present, absent = base + [value], [x for x in base if x != value] or [value + 1]
    lists = [present, sorted(present), absent]
    if rng.random() < 0.5:
        lim = rng.choice(LIMITS)
        params, cases = f"{xs}, {lim}", [(x, value) for x in lists]
    else:
        lim = str(value)
        params, cases = xs, [(x,) for x in lists]
    if shape == "count":
        names = {
            ">=": ["count_at_least", "count_not_below", "num_reaching"],
            "<=": ["count_at_most", "count_not_above", "num_within"],
        }[op]
        line, doc = (
            f"return sum(1 for x in {xs} if x {op} {lim})",
            f"Count the elements of {xs} that are {words} {lim}.",
        )
    else:
        names = {
            ">=": ["keep_at_least", "drop_below", "filter_min"],
            "<=": ["keep_at_most", "drop_above", "filter_max"],
        }[op]
        line, doc = (
            f"return [x for x in {xs} if x {op} {lim}]",
            f"Return the elements of {xs} that are {words} {lim}, in order.",
        )
    return _func(
        rng.choice(names),
        params,
        doc,
        [line],
        cases,
        bug="wrong_operator",
        fixed=f"    {line}",
        buggy=f"    {line.replace(op, strict)}",
    )


def _missing_edge_case(rng):
    """`return total / len(xs)` -> `... if xs else 0.0`: an empty input divides by zero."""
    c, ch = rng.randint(0, 20), rng.choice("abcdefghklmnoprstw")
    total, doc, names = rng.choice(
        [
            ("total = sum({xs})", "the mean of {xs}", ["mean", "average", "mean_value", "arithmetic_mean"]),
            ("total = sum(x * x for x in {xs})", "the mean square of {xs}", ["mean_square", "avg_square"]),
            (
                "total = sum(abs(x) for x in {xs})",
                "the mean absolute value of {xs}",
                ["mean_magnitude", "mean_abs"],
            ),
            (
                "hits = sum(1 for x in {xs} if x > {c})",
                "the share of values in {xs} above {c}",
                ["share_above", "fraction_over"],
            ),
            (
                "hits = sum(1 for x in {xs} if x < {c})",
                "the share of values in {xs} below {c}",
                ["share_below", "fraction_under"],
            ),
            (
                "total = sum(len(w) for w in {xs})",
                "the average length of the strings in {xs}",
                ["average_length", "mean_word_length", "avg_len"],
            ),
            (
                'hits = sum(1 for w in {xs} if w.startswith("{ch}"))',
                'the share of strings in {xs} starting with "{ch}"',
                [f"share_starting_with_{ch}", f"fraction_with_{ch}"],
            ),
        ]
    )
    strings = " w " in total
    xs = rng.choice(VARS_WORDS if strings else VARS_XS)
    var = total.split(" =")[0]
    sample = rng.sample(WORDS, 3) if strings else _ints(rng, rng.randint(2, 5), -9, 9)
    line = f"return {var} / len({xs})"
    return _func(
        rng.choice(names),
        xs,
        f"Return {doc.format(xs=xs, c=c, ch=ch)}, or 0.0 when {xs} is empty.",
        [total.format(xs=xs, c=c, ch=ch), f"{line} if {xs} else 0.0"],
        [([],), (sample,)],
        bug="missing_edge_case",
        fixed=f"    {line} if {xs} else 0.0",
        buggy=f"    {line}",
    )


def _wrong_default(rng):
    """`sep=","` -> `sep=";"`: a default value differs from the documented one."""
    shape = rng.choice(["join", "round", "pad"])
    if shape == "join":
        good, bad = (f'"{s}"' for s in rng.sample([",", ";", "|", "-", ":", "/", " "], 2))
        arg, param = rng.choice(["fields", "parts", "cells"]), "sep"
        name = rng.choice(["join_fields", "format_row", "to_line", "join_parts", "render_row"])
        doc, body = (
            f"Join {arg} into one string, separated by sep ({good} by default).",
            [f"return sep.join({arg})"],
        )
        cases = [(rng.sample(WORDS, 2),), (rng.sample(WORDS, 3),), ([rng.choice(WORDS)],)]
    elif shape == "round":
        good, bad = rng.sample(range(0, 5), 2)
        arg, param = rng.choice(["x", "amount", "value"]), "digits"
        name = rng.choice(["round_price", "round_amount", "tidy_number"])
        doc, body = (
            f"Round {arg} to digits decimal places ({good} by default).",
            [f"return round({arg}, digits)"],
        )
        cases = [
            (round(rng.uniform(1, 100), 6),),
            (round(rng.uniform(100, 1000), 6),),
            (float(rng.randint(1, 99)),),
        ]
    else:
        good, bad = rng.sample(range(3, 9), 2)
        arg, param = rng.choice(["number", "code", "value"]), "width"
        name = rng.choice(["pad_number", "zero_pad", "format_code", "ticket_label"])
        doc = f"Return {arg} as text, padded with zeros to width digits ({good} by default)."
        body, cases = (
            [f"return str({arg}).zfill(width)"],
            [(rng.randint(1, 99),), (rng.randint(100, 999),), (123456789,)],
        )
    return _func(
        name,
        f"{arg}, {param}={good}",
        doc,
        body,
        cases,
        bug="wrong_default",
        fixed=f"def {name}({arg}, {param}={good}):",
        buggy=f"def {name}({arg}, {param}={bad}):",
    )


def _swapped_arguments(rng):
    """`clamp(x, hi, lo)` -> `clamp(x, lo, hi)`: a helper is called with two arguments swapped."""
    shape = rng.choice(["clamp", "difference", "ratio"])
    if shape == "clamp":
        h = rng.choice(["clamp", "bound", "limit_to", "keep_between"])
        helper = _func(
            h,
            "x, lo, hi",
            "Return x limited to the range [lo, hi].",
            ["return max(lo, min(x, hi))"],
            [(5, 0, 10), (-3, 0, 10), (42, 0, 10)],
        )
        lo, hi = rng.choice([0, 1, 5, 10]), rng.choice([20, 50, 64, 100, 255])
        v, name = (
            rng.choice(["x", "level", "score", "value"]),
            rng.choice(["to_percent", "limit_speed", "bound_score", "cap_level"]),
        )
        good, bad, doc = (
            f"{v}, {lo}, {hi}",
            f"{v}, {hi}, {lo}",
            f"Return {v} limited to the range [{lo}, {hi}].",
        )
        cases = [(rng.randint(lo + 1, hi - 1),), (lo - rng.randint(1, 9),), (hi + rng.randint(0, 9),)]
    elif shape == "difference":
        h = rng.choice(["difference", "minus", "subtract"])
        helper = _func(h, "a, b", "Return a minus b.", ["return a - b"], [(7, 3), (2, 5)])
        c, thing = rng.randint(10, 60), rng.choice(["days", "seats", "tickets", "credits"])
        v, name = "n_used", rng.choice([f"{thing}_left", "remaining", f"remaining_{thing}"])
        good, bad, doc = (
            f"{c}, {v}",
            f"{v}, {c}",
            f"Return how many of the {c} {thing} remain once {v} of them are used.",
        )
        cases = [(rng.randint(1, c - 1),), (rng.randint(1, c - 1),), (c,)]
    else:
        h = rng.choice(["ratio", "fraction", "divide"])
        helper = _func(
            h, "part, whole", "Return part divided by whole.", ["return part / whole"], [(1, 4), (3, 2)]
        )
        c, thing = rng.choice([4, 5, 8, 10, 20]), rng.choice(["tasks", "steps", "laps", "chapters"])
        v, name = "n_done", rng.choice(["progress", "completion", f"{thing}_done_share"])
        good, bad, doc = (
            f"{v}, {c}",
            f"{c}, {v}",
            f"Return the fraction of the {c} {thing} that is done, given {v} of them are done.",
        )
        cases = [(rng.randint(1, c - 1),), (rng.randint(1, c - 1),), (c,)]
    func = _func(
        name,
        v,
        doc,
        [f"return {h}({good})"],
        cases,
        bug="swapped_arguments",
        fixed=f"    return {h}({good})",
        buggy=f"    return {h}({bad})",
    )
    return replace(func, helper=helper)


def _wrong_return(rng):
    """`return a` -> `return b`: an intermediate value is returned instead of the result."""
    shape = rng.choice(["text", "money", "unique", "spread"])
    if shape == "text":
        method, case, safe = rng.choice(
            [
                ("lower", "lower case", "quiet river"),
                ("upper", "upper case", "LOUD RIVER"),
                ("title", "title case", "Maple Stone"),
                ("capitalize", "sentence case", "Quiet river"),
            ]
        )
        a = rng.choice(["stripped", "trimmed", "cleaned", "bare", "text"])
        b = rng.choice(["result", "normalized", "final", "out", "styled"])
        name = rng.choice(
            ["normalize_name", "clean_tag", "tidy_title", "canonical_key", "clean_label", "neat_text"]
        )
        body = [f"{a} = text.strip()", f"{b} = {a}.{method}()", f"return {b}"]
        params, doc = "text", f"Return text without surrounding spaces, in {case}."
        cases = [(f"  {_sentence(rng, 2).title()}  ",), (f" {_sentence(rng, 2).upper()} ",), (safe,)]
    elif shape == "money":
        rate, params = (
            rng.choice([0.05, 0.1, 0.12, 0.15, 0.2, 0.25, 0.3, 0.4]),
            rng.choice(["amount", "price", "cost"]),
        )
        pct = round(rate * 100)
        a, b, sign, doc, names = rng.choice(
            [
                (
                    "tax",
                    "total",
                    "+",
                    f"Return {params} plus {pct}% tax.",
                    ["with_tax", "gross_price", "add_tax"],
                ),
                (
                    "discount",
                    "final",
                    "-",
                    f"Return {params} after a {pct}% discount.",
                    ["sale_price", "discounted", "net_price"],
                ),
            ]
        )
        name, body = (
            rng.choice(names),
            [f"{a} = {params} * {rate}", f"{b} = {params} {sign} {a}", f"return {b}"],
        )
        cases = [(rng.randint(2, 20) * 10,), (float(rng.randint(10, 99)),), (0,)]
    elif shape == "unique":
        params, a, b = (
            rng.choice(VARS_XS),
            rng.choice(["ordered", "ranked"]),
            rng.choice(["unique", "distinct"]),
        )
        name = rng.choice(["sorted_unique", "distinct_sorted", "unique_values", "sorted_set"])
        body = [f"{a} = sorted({params})", f"{b} = list(dict.fromkeys({a}))", f"return {b}"]
        doc, dup = f"Return the distinct values of {params}, sorted.", _ints(rng, 4)
        cases = [(dup + dup[:2],), (dup + [dup[-1]],), (sorted(set(dup)),)]
    else:
        params, a, b = (
            rng.choice(VARS_XS),
            rng.choice(["high", "top", "largest"]),
            rng.choice(["spread", "span", "width"]),
        )
        name = rng.choice(["value_spread", "range_width", "span_of", "max_minus_min"])
        body = [f"low = min({params})", f"{a} = max({params})", f"{b} = {a} - low", f"return {b}"]
        doc = f"Return the largest value of {params} minus the smallest."
        cases = [(_ints(rng, 4, 2, 9),), (_ints(rng, 3, 1, 20),), ([0, 0],)]
    return _func(
        name, params, doc, body, cases, bug="wrong_return", fixed=f"    return {b}", buggy=f"    return {a}"
    )


BUG_RECIPES: dict[str, list[Callable[[random.Random], Func]]] = {
    "off_by_one": [_off_by_one],
    "wrong_operator": [_wrong_operator],
    "missing_edge_case": [_missing_edge_case],
    "wrong_default": [_wrong_default],
    "swapped_arguments": [_swapped_arguments],
    "wrong_return": [_wrong_return],
}


# ---- filler recipes: correct functions that make up the rest of the repository ----


def _fillers(rng: random.Random) -> list[Func]:
    """A fresh draw of every filler recipe (names and constants vary with rng)."""
    c = rng.randint(2, 9)
    s, t = _sentence(rng, 3), _sentence(rng, 2)
    xs, ys = _ints(rng, 5), _ints(rng, 4, -5, 20)
    n, w = rng.randint(5, 12), rng.randint(2, 3)
    return [
        _func(
            rng.choice([f"scale_by_{c}", f"times_{c}", f"multiply_by_{c}"]),
            "x",
            f"Return x times {c}.",
            [f"return x * {c}"],
            [(rng.randint(1, 20),), (-3,)],
        ),
        _func(
            rng.choice([f"is_multiple_of_{c}", f"divisible_by_{c}"]),
            "n",
            f"Return True when n is a multiple of {c}.",
            [f"return n % {c} == 0"],
            [(c * rng.randint(1, 9),), (c * rng.randint(1, 9) + 1,)],
        ),
        _func(
            rng.choice(["count_words", "word_count", "num_words"]),
            "text",
            "Return the number of words in text.",
            ["return len(text.split())"],
            [(s,), ("",)],
        ),
        _func(
            rng.choice(["reverse_words", "flip_words"]),
            "text",
            "Return the words of text in reverse order.",
            ['return " ".join(reversed(text.split()))'],
            [(s,), (t,)],
        ),
        _func(
            rng.choice(["initials", "monogram"]),
            "name",
            "Return the upper-case first letters of the words in name.",
            ['return "".join(w[0].upper() for w in name.split())'],
            [(t,), (s,)],
        ),
        _func(
            rng.choice(["spread", "value_range", "max_gap"]),
            "xs",
            "Return the largest value of xs minus the smallest.",
            ["return max(xs) - min(xs)"],
            [(xs,), (ys,)],
        ),
        _func(
            rng.choice(["to_fahrenheit", "celsius_to_fahrenheit"]),
            "celsius",
            "Convert degrees Celsius to Fahrenheit.",
            ["return celsius * 9 / 5 + 32"],
            [(rng.randint(-10, 40),), (100,)],
        ),
        _func(
            rng.choice(["chunk", "split_into", "batches"]),
            "xs, size",
            "Split xs into lists of size items (the last may be shorter).",
            ["return [xs[i : i + size] for i in range(0, len(xs), size)]"],
            [(xs, 2), (list(range(n)), w)],
        ),
        _func(
            rng.choice(["flatten", "concat_rows"]),
            "rows",
            "Return the items of all rows in one list.",
            ["return [x for row in rows for x in row]"],
            [([xs[:2], xs[2:]],), ([[], ys],)],
        ),
        _func(
            rng.choice(["count_vowels", "vowel_count"]),
            "text",
            "Return how many vowels text contains.",
            ['return sum(1 for ch in text.lower() if ch in "aeiou")'],
            [(s,), (t.upper(),)],
        ),
        _func(
            rng.choice(["is_palindrome", "reads_same_backwards"]),
            "text",
            "Return True when text reads the same backwards, ignoring spaces and case.",
            ['cleaned = text.replace(" ", "").lower()', "return cleaned == cleaned[::-1]"],
            [("Never odd or even",), (t,)],
        ),
        _func(
            rng.choice(["running_total", "cumulative_sum", "prefix_sums"]),
            "xs",
            "Return the running totals of xs.",
            ["acc = 0", "out = []", "for x in xs:", "    acc += x", "    out.append(acc)", "return out"],
            [(xs,), (ys,)],
        ),
        _func(
            rng.choice(["last_word", "final_word"]),
            "text",
            'Return the last word of text, or "" when there is none.',
            ["words = text.split()", 'return words[-1] if words else ""'],
            [(s,), ("   ",)],
        ),
        _func(
            rng.choice(["percent", "as_percent"]),
            "part, whole",
            "Return part as a percentage of whole, rounded to 1 decimal.",
            ["return round(100 * part / whole, 1)"],
            [(rng.randint(1, 9), rng.randint(10, 40)), (3, 3)],
        ),
        _func(
            rng.choice(["dedupe", "unique_in_order"]),
            "xs",
            "Return xs without repeated values, keeping the first of each.",
            ["return list(dict.fromkeys(xs))"],
            [(xs + xs[:2],), (ys,)],
        ),
        _func(
            rng.choice(["to_snake", "make_key", "slugify"]),
            "text",
            "Return text in lower case with spaces replaced by underscores.",
            ['return text.strip().lower().replace(" ", "_")'],
            [(t.title(),), (f" {s} ",)],
        ),
        _func(
            rng.choice(["shorten", "truncate", "ellipsize"]),
            "text",
            f'Return text cut to {n} characters plus "..." when it is longer.',
            [f'return text if len(text) <= {n} else text[:{n}] + "..."'],
            [(s,), (t[:n],)],
        ),
        _func(
            rng.choice(["as_clock", "format_minutes"]),
            "minutes",
            "Return minutes as hours:minutes, e.g. 75 -> 1:15.",
            ['return f"{minutes // 60}:{minutes % 60:02d}"'],
            [(rng.randint(61, 600),), (5,)],
        ),
    ]


# ---- evaluating our own sources and writing the repository ----


def _call(namespace: dict, name: str, args: tuple):
    try:
        return ("ok", namespace[name](*copy.deepcopy(args)))
    except Exception as e:  # a buggy function may raise; that is its observable behaviour
        return ("raise", f"{type(e).__name__}: {e}")


def _load(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "<generated>", "exec"), namespace)  # our own generated code, never model output
    return namespace


def _call_text(name: str, args: tuple) -> str:
    return f"{name}({', '.join(repr(a) for a in args)})"


def _assert(mod: str, name: str, args: tuple, value) -> str:
    return f"    assert {mod}.{_call_text(name, args)} == {value!r}"


def _module_text(pkg: str, mod: str, funcs: list[Func]) -> str:
    return f'"""The {mod} module of {pkg}."""\n\n\n' + "\n\n".join(f.source for f in funcs)


def _issue(pkg: str, mod: str, path: str, func: Func, args: tuple, got: tuple, expected) -> str:
    call = _call_text(func.name, args)
    if got[0] == "raise":
        title = f"{call} raises {got[1].split(':')[0]} instead of returning {expected!r}"
        shown = f"Traceback (most recent call last):\n      ...\n    {got[1]}"
    else:
        title = f"{call} returns {got[1]!r} instead of {expected!r}"
        shown = repr(got[1])
    return (
        f'{title}\n\n`{func.name}` in `{path}` does not do what its docstring says: "{func.doc}"\n\n'
        f"    >>> from {pkg}.{mod} import {func.name}\n    >>> {call}\n    {shown}\n\nExpected: {expected!r}\n"
    )


def _build(rng: random.Random, target: Func) -> dict | None:
    """Lay a repository out around `target`; None when the draw cannot make a valid instance."""
    pkg = rng.choice(STEMS) + rng.choice(PKG_SUFFIXES)
    modules = rng.sample(MODULES, rng.randint(2, 4))
    home = rng.choice(modules)
    own = [target.helper, target] if target.helper else [target]
    used, docs = {f.name for f in own}, {f.doc for f in own}
    pool = _fillers(rng) + _fillers(rng) + [r(rng) for recipes in BUG_RECIPES.values() for r in recipes]
    rng.shuffle(pool)
    layout: dict[str, list[Func]] = {}
    for mod in modules:
        funcs: list[Func] = []
        size = rng.randint(4, 7) - (len(own) if mod == home else 0)
        while len(funcs) < max(size, 1) and pool:
            f = pool.pop()
            group = [f.helper, f] if f.helper else [f]
            if any(g.name in used or g.doc in docs for g in group):
                continue  # one name per repository, and no two functions doing the same thing
            used.update(g.name for g in group)
            docs.update(g.doc for g in group)
            funcs += [replace(g, bug=None, helper=None) for g in group]
        if mod == home:
            at = rng.randint(0, len(funcs))
            funcs[at:at] = own
        layout[mod] = funcs
    if any(not [f for f in fs if f is not target] for fs in layout.values()):
        return None  # the pool ran dry: every module needs a function with a passing test
    texts = {m: _module_text(pkg, m, fs) for m, fs in layout.items()}
    path = f"{pkg}/{home}.py"
    if texts[home].count(target.fixed) != 1:
        return None
    buggy_text = texts[home].replace(target.fixed, target.buggy)
    if buggy_text.count(target.buggy) != 1:
        return None
    good, bad = _load(texts[home]), _load(buggy_text)

    files = {
        "README.md": _readme(pkg, modules),
        f"{pkg}/__init__.py": f'"""{pkg}: small helper functions."""\n',
    }
    safe = [a for a in target.cases if _call(good, target.name, a) == _call(bad, target.name, a)]
    p2p: list[str] = []
    for mod in modules:
        files[f"{pkg}/{mod}.py"] = buggy_text if mod == home else texts[mod]
        # Existing tests: some functions of every module, plus (sometimes) the buggy function on an
        # input the bug does not affect; each must give the same result on the correct and buggy code.
        ns = good if mod == home else _load(texts[mod])
        others = [f.name for f in layout[mod] if f is not target]
        chosen = {name for name in others if rng.random() < 0.7} or {rng.choice(others)}
        if mod == home and safe and rng.random() < 0.5:
            chosen.add(target.name)
        tests = []
        for f in layout[mod]:
            if f.name not in chosen:
                continue
            lines = []
            for args in safe[:1] if f is target else f.cases[:2]:
                kind, value = _call(ns, f.name, args)
                if kind != "ok" or (mod == home and _call(bad, f.name, args) != (kind, value)):
                    raise RuntimeError(f"generator bug: {_call_text(f.name, args)} -> {value}")
                lines.append(_assert(mod, f.name, args, value))
            tests.append(f"def test_{f.name}():\n" + "\n".join(lines) + "\n")
            if mod == home:
                p2p.append(f"tests/test_{mod}.py::test_{f.name}")
        header = f'"""Tests for {pkg}.{mod}."""\n\nfrom {pkg} import {mod}\n'
        files[f"tests/test_{mod}.py"] = header + "".join(f"\n\n{t}" for t in tests)
    if not p2p:
        return None
    # The hidden test: inputs where the buggy and the correct function disagree.
    failing = [(a, _call(good, target.name, a), _call(bad, target.name, a)) for a in target.cases]
    failing = [(a, want, got) for a, want, got in failing if want != got and want[0] == "ok"][:2]
    if not failing:
        return None
    hidden = f"test_{target.name}_{TEST_SUFFIX[target.bug]}"
    test_path = f"tests/test_{home}.py"
    body = "\n".join(_assert(home, target.name, a, want[1]) for a, want, _ in failing)
    new_tests = files[test_path] + f"\n\ndef {hidden}():\n{body}\n"
    args, want, got = failing[0]
    return {
        "pkg": pkg,
        "files": files,
        "patch": diff_from_edit(files, path, target.buggy, target.fixed),
        "test_patch": file_diff(test_path, files[test_path], new_tests),
        "problem_statement": _issue(pkg, home, path, target, args, got, want[1]),
        "FAIL_TO_PASS": [f"{test_path}::{hidden}"],
        "PASS_TO_PASS": p2p,
        "fix": {"path": path, "old": target.buggy, "new": target.fixed},
    }


def _readme(pkg: str, modules: list[str]) -> str:
    listing = "".join(f"- `{pkg}/{m}.py`\n" for m in modules)
    return f"# {pkg}\n\nSmall helper functions.\n\n{listing}\nRun the tests with `python -m pytest tests`.\n"


def _git_date(instance: dict) -> str:
    stamp = datetime.strptime(instance["created_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return f"{int(stamp.timestamp())} +0000"


def _git(folder: Path, date: str, *args: str) -> str:
    """Run git in `folder` with a fixed identity and dates and no user/system config; its stdout."""
    env = {
        **os.environ,
        **GIT_ENV,
        "GIT_AUTHOR_NAME": AUTHOR[0],
        "GIT_AUTHOR_EMAIL": AUTHOR[1],
        "GIT_COMMITTER_NAME": AUTHOR[0],
        "GIT_COMMITTER_EMAIL": AUTHOR[1],
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_DATE": date,
    }
    config = [
        f"user.name={AUTHOR[0]}",
        f"user.email={AUTHOR[1]}",
        "init.defaultBranch=main",
        "commit.gpgsign=false",
        "core.autocrlf=false",
        "core.hooksPath=/dev/null",
    ]
    argv = ["git", *(x for c in config for x in ("-c", c)), *args]
    return subprocess.run(argv, cwd=folder, env=env, check=True, capture_output=True, text=True).stdout


def make_repo(instance: dict, folder: Path) -> str:
    """Write instance["files"] into `folder` as a git repository with one reproducible commit; its sha.

    Author, committer, dates (from created_at), message and branch are fixed and user/system git
    config is ignored, so the sha only depends on the files: it equals instance["base_commit"].
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if any(folder.iterdir()):
        raise ValueError(f"{folder} is not empty")
    for rel, text in sorted(instance["files"].items()):
        parts = Path(rel).parts
        if Path(rel).is_absolute() or ".." in parts or ".git" in parts:
            raise ValueError(f"unsafe path in instance files: {rel!r}")
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text.encode("utf-8"))
    date = _git_date(instance)
    _git(folder, date, "init", "-q", "--template=")
    _git(folder, date, "add", "-A")
    _git(folder, date, "commit", "-q", "--no-verify", "-m", COMMIT_MESSAGE)
    return _git(folder, date, "rev-parse", "HEAD").strip()


def _commit_shas(instances: list[dict]) -> list[str]:
    """The commit make_repo would create for each instance, built by one `git fast-import` in a temp repo.

    Same blobs (mode 100644), tree, identity, dates and message as make_repo's `git commit`, so the
    same sha, at a fraction of the cost: one git process for all instances instead of four each
    with a work tree (tests check the two agree).
    """
    stream = bytearray()
    for k, inst in enumerate(instances):
        who = f"{AUTHOR[0]} <{AUTHOR[1]}> {_git_date(inst)}"
        message = f"{COMMIT_MESSAGE}\n".encode()
        stream += f"commit refs/heads/i{k}\nmark :{k + 1}\nauthor {who}\ncommitter {who}\n".encode()
        stream += b"data %d\n%s\n" % (len(message), message)
        for rel, text in sorted(inst["files"].items()):
            data = text.encode("utf-8")
            stream += b"M 100644 inline %s\ndata %d\n%s\n" % (rel.encode(), len(data), data)
    with tempfile.TemporaryDirectory(prefix="vtb-swe-gen-") as tmp:
        _git(Path(tmp), "", "init", "-q", "--bare", "--template=")
        marks = Path(tmp) / "marks"
        argv = ["git", "fast-import", "--quiet", f"--export-marks={marks}"]
        env = {**os.environ, **GIT_ENV}
        subprocess.run(argv, cwd=tmp, env=env, input=bytes(stream), check=True, capture_output=True)
        shas = dict(line.split() for line in marks.read_text().splitlines())
    return [shas[f":{k + 1}"] for k in range(len(instances))]


def make_instances(seed: int, n: int, prefix: str, exclude: set | None = None) -> list[dict]:
    """n SWE-bench-schema instances cycling over BUGS; a bug already in `exclude` is skipped.

    The disjointness key is (template, name, source of the broken function): the same broken function
    never appears in two splits. `exclude` is updated in place, so successive calls give disjoint sets.
    """
    exclude = set() if exclude is None else exclude
    rng = random.Random(f"vtb-swe:{seed}:{prefix}")

    def draw(bug: str, i: int) -> tuple | None:
        target = rng.choice(BUG_RECIPES[bug])(rng)
        key = (bug, target.name, target.source.replace(target.fixed, target.buggy))
        built = None if key in exclude else _build(rng, target)
        if built is None:
            return None
        created = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randrange(365 * 86400))
        return key, {
            "instance_id": f"vtb__{built['pkg']}-{prefix}-{i:04d}",
            "repo": f"vtb-embedded/{built['pkg']}",
            "base_commit": "",
            "patch": built["patch"],
            "test_patch": built["test_patch"],
            "problem_statement": built["problem_statement"],
            "hints_text": "",
            "created_at": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "version": "0.1",
            "FAIL_TO_PASS": json.dumps(built["FAIL_TO_PASS"]),
            "PASS_TO_PASS": json.dumps(built["PASS_TO_PASS"]),
            "environment_setup_commit": "",
            "bug": bug,
            "files": built["files"],
            "fix": built["fix"],
        }

    ran_out = (
        f"cannot make {n} distinct {prefix} instances: the recipe library ran out; lower the split sizes"
    )
    out = draw_distinct(n, list(BUGS), draw, exclude, 500, ran_out)
    for instance, sha in zip(out, _commit_shas(out), strict=True):
        instance["base_commit"] = instance["environment_setup_commit"] = sha
    return out
