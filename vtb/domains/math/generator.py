"""Seeded generator of GSM8K-format arithmetic word problems (the embedded math miniature).

The language is deliberately small and regular: the base model is a ~1M-parameter word-level
LM trained from scratch on CPUs, so every word comes from a fixed vocabulary (`WORDS`) and every
number is an integer in 0..NUMBER_MAX (one token each). Each problem tracks one person's count
of one item through 1-4 arithmetic steps; each step is one question sentence and one answer
line with a GSM8K calculator annotation, so answers look exactly like GSM8K::

    Question: Tom has 12 apples. He buys 5 more apples. How many apples does Tom have now?
    Answer:   He has 12 + 5 = <<12+5=17>>17 apples.
              #### 17
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from vtb import salt
from vtb.domains.math.kit.datatools import strip_annotations  # noqa: F401  (re-exported for the domain)

NUMBER_MAX = 999
TOKEN_RE = re.compile(r"\d+|[A-Za-z]+|<<|>>|####|[^\sA-Za-z\d]")

# name -> (subject pronoun, object pronoun, possessive)
NAMES = {
    "Tom": ("he", "him", "his"),
    "Ben": ("he", "him", "his"),
    "Sam": ("he", "him", "his"),
    "Leo": ("he", "him", "his"),
    "Anna": ("she", "her", "her"),
    "Lily": ("she", "her", "her"),
    "Mia": ("she", "her", "her"),
    "Emma": ("she", "her", "her"),
}
ITEMS = ["apples", "pencils", "stickers", "cookies", "marbles", "books", "cards", "eggs", "shells", "stamps"]
CONTAINERS = [("box", "boxes"), ("bag", "bags"), ("pack", "packs")]
MONEY = "dollars"
THINGS = ["book", "toy", "game", "hat", "ball"]  # what money is spent on
LOSE_VERBS = ["sells", "loses", "uses", "eats"]
EATABLE = {"apples", "cookies", "eggs"}
# Words of the SFT prompt (datatools.PROMPT_TEMPLATE), so the tokenizer covers prompts too.
PROMPT_WORDS = ["Question", "Answer"]


@dataclass
class _State:
    """One problem under construction: the tracked person, item and running value."""

    rng: random.Random
    name: str
    item: str
    value: int = 0
    sentences: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def pron(self) -> tuple[str, str, str]:
        return NAMES[self.name]

    def other(self) -> str:
        """Another person, always of the other gender, so 'he'/'she' is never ambiguous."""
        return self.rng.choice([n for n in NAMES if NAMES[n][0] != self.pron[0]])

    def add_line(self, text: str) -> None:
        """Answer lines: the first is capitalised, later ones start with 'Then'."""
        self.lines.append(text[0].upper() + text[1:] if not self.lines else "Then " + text)


def _fmt(a: int, op: str, b: int, r: int) -> str:
    return f"{a} {op} {b} = <<{a}{op}{b}={r}>>{r}"


def _ok(*values: int) -> bool:
    return all(0 <= v <= NUMBER_MAX for v in values)


# --- opening templates: set the starting value, optionally with one step -------------------


def _open_has(s: _State) -> bool:
    s.value = s.rng.randint(2, 99)
    s.sentences.append(f"{s.name} has {s.value} {s.item}.")
    return False  # no arithmetic step


def _open_packs(s: _State) -> bool:
    a, b = s.rng.randint(2, 12), s.rng.randint(2, 24)
    if s.item == MONEY:
        s.sentences.append(f"{s.name} works {a} hours and earns {b} dollars each hour.")
        s.lines.append(f"{s.name} earns {_fmt(a, '*', b, a * b)} dollars.")
    else:
        one, many = s.rng.choice(CONTAINERS)
        s.sentences.append(f"{s.name} buys {a} {many} of {s.item}. Each {one} has {b} {s.item}.")
        s.lines.append(f"{s.name} buys {_fmt(a, '*', b, a * b)} {s.item}.")
    s.value = a * b
    return True


def _open_join(s: _State) -> bool:
    q = s.other()
    a, b = s.rng.randint(2, 99), s.rng.randint(2, 99)
    s.sentences.append(
        f"{s.name} has {a} {s.item} and {q} has {b} {s.item}. {q} gives all of {NAMES[q][2]} {s.item} to {s.name}."
    )
    s.lines.append(f"{s.name} has {_fmt(a, '+', b, a + b)} {s.item}.")
    s.value = a + b
    return True


def _open_compare(s: _State) -> bool:
    q = s.other()
    a = s.rng.randint(2, 99)
    kind = s.rng.choice(["more", "fewer", "times"])
    if kind == "more":
        b = s.rng.randint(1, 60)
        text, op, r = f"{b} more {s.item} than {q}", "+", a + b
    elif kind == "fewer":
        a = max(a, 3)
        b = s.rng.randint(1, a - 1)
        text, op, r = f"{b} fewer {s.item} than {q}", "-", a - b
    else:
        a = s.rng.randint(2, 60)
        b = s.rng.randint(2, 9)
        text, op, r = f"{b} times as many {s.item} as {q}", "*", a * b
    s.sentences.append(f"{q} has {a} {s.item}. {s.name} has {text}.")
    s.lines.append(f"{s.name} has {_fmt(a, op, b, r)} {s.item}.")
    s.value = r
    return True


# --- step templates: one arithmetic operation on the running value --------------------------


def _step_buy(s: _State) -> bool:
    v, room = s.value, NUMBER_MAX - s.value
    if room < 1:
        return False
    k = s.rng.randint(1, min(60, room))
    he, him, _ = s.pron
    if s.item == MONEY:
        s.sentences.append(f"{he.capitalize()} earns {k} dollars.")
    elif s.rng.random() < 0.5:
        s.sentences.append(f"{he.capitalize()} buys {k} more {s.item}.")
    else:
        s.sentences.append(f"{s.other()} gives {him} {k} {s.item}.")
    s.add_line(f"{he} has {_fmt(v, '+', k, v + k)} {s.item}.")
    s.value = v + k
    return True


def _step_lose(s: _State) -> bool:
    v = s.value
    if v < 2:
        return False
    k = s.rng.randint(1, min(60, v - 1))
    he = s.pron[0]
    if s.item == MONEY:
        s.sentences.append(f"{he.capitalize()} spends {k} dollars on a {s.rng.choice(THINGS)}.")
    elif s.rng.random() < 0.5:
        s.sentences.append(f"{he.capitalize()} gives {k} {s.item} to {s.other()}.")
    else:
        verbs = [w for w in LOSE_VERBS if w != "eats" or s.item in EATABLE]
        s.sentences.append(f"{he.capitalize()} {s.rng.choice(verbs)} {k} of the {s.item}.")
    s.add_line(f"{he} has {_fmt(v, '-', k, v - k)} {s.item} left.")
    s.value = v - k
    return True


def _step_times(s: _State) -> bool:
    v = s.value
    top = min(9, NUMBER_MAX // max(v, 1))
    if v < 1 or top < 2:
        return False
    k = s.rng.randint(2, top)
    he = s.pron[0]
    s.sentences.append(f"{he.capitalize()} gets more {s.item} until {he} has {k} times as many as before.")
    s.add_line(f"{he} has {_fmt(v, '*', k, v * k)} {s.item}.")
    s.value = v * k
    return True


def _step_split(s: _State) -> bool:
    v = s.value
    divisors = [k for k in range(2, 10) if v % k == 0 and v // k >= 1]
    if not divisors:
        return False
    k = s.rng.choice(divisors)
    he, _, his = s.pron
    if k == 2 and s.rng.random() < 0.5:
        s.sentences.append(f"{he.capitalize()} gives half of {his} {s.item} to {s.other()}.")
        s.add_line(f"{he} has {_fmt(v, '/', k, v // k)} {s.item} left.")
    else:
        s.sentences.append(
            f"{he.capitalize()} splits the {s.item} into {k} equal groups and keeps one group."
        )
        s.add_line(f"{he} keeps {_fmt(v, '/', k, v // k)} {s.item}.")
    s.value = v // k
    return True


OPENINGS: list[Callable[[_State], bool]] = [_open_packs, _open_join, _open_compare]
STEPS: list[tuple[Callable[[_State], bool], int]] = [
    (_step_buy, 3),
    (_step_lose, 3),
    (_step_times, 2),
    (_step_split, 2),
]


def _one_problem(rng: random.Random, steps: int) -> tuple[str, str, int]:
    """(question, answer, final) with exactly `steps` annotated operations."""
    while True:
        item = MONEY if rng.random() < 0.2 else rng.choice(ITEMS)
        s = _State(rng, rng.choice(list(NAMES)), item)
        opening = _open_has if rng.random() < 0.5 else rng.choice(OPENINGS)
        done = int(opening(s))
        if done > steps:
            continue
        tries = 0
        while done < steps and tries < 50:
            tries += 1
            kinds, weights = zip(*STEPS, strict=True)
            if rng.choices(kinds, weights)[0](s):
                done += 1
        if done != steps:
            continue
        now = " now" if len(s.sentences) > 1 or opening is _open_has else ""
        s.sentences.append(f"How many {item} does {s.name} have{now}?")
        s.lines.append(f"#### {s.value}")
        return " ".join(s.sentences), "\n".join(s.lines), s.value


def normalize_question(question: str) -> str:
    """The key splits are kept disjoint by: case- and whitespace-insensitive text."""
    return " ".join(question.lower().split())


def _generate(
    rng: random.Random, n: int, min_steps: int, max_steps: int, prefix: str, skip: set[str]
) -> list[dict]:
    """n distinct problems; step counts cycle through min..max so every count is covered."""
    if not 1 <= min_steps <= max_steps:
        raise ValueError(f"need 1 <= min_steps <= max_steps, got {min_steps}, {max_steps}")
    seen = set(skip)
    out: list[dict] = []
    span = max_steps - min_steps + 1
    for i in range(n):
        steps = min_steps + i % span
        for _ in range(1000):
            question, answer, final = _one_problem(rng, steps)
            key = normalize_question(question)
            if key not in seen:
                break
        else:
            raise ValueError(f"could not find a new {steps}-step problem after 1000 tries ({i} made)")
        seen.add(key)
        out.append(
            {
                "id": f"{prefix}-{i:05d}",
                "question": question,
                "answer": answer,
                "steps": steps,
                "final": final,
            }
        )
    return out


def generate_problems(seed: int, n: int, min_steps: int = 1, max_steps: int = 4) -> list[dict]:
    """n distinct problems, a pure function of the arguments (own Random, no global state)."""
    return _generate(random.Random(seed), n, min_steps, max_steps, "gen", set())


def make_splits(
    seed: int,
    n_pool: int,
    n_val: int,
    n_test: int,
    min_steps: int = 1,
    max_steps: int = 4,
    *,
    test_seed: int | None = None,
) -> dict[str, list[dict]]:
    """Disjoint pool / val / test splits; pool and val from the public `seed`, test from `test_seed`.

    One generation call from `seed`, cut val | pool (val does not depend on n_pool and covers
    every step count), then the test split from `test_seed` (vtb.salt: derived from a
    secret salt), skipping every pool and val question, so pool and val are reproducible from
    the public seed and the test split is not. Disjointness is checked here, not assumed: a
    leak of test questions into the train pool would void the benchmark. `test_seed=None`: the
    default salt's seed (what a run with task.test_salt unset draws).
    """
    if test_seed is None:
        test_seed = salt.seed_for(salt.DEFAULT_TEST_SALT, seed)
    public = generate_problems(seed, n_val + n_pool, min_steps, max_steps)
    if len(public) != n_val + n_pool:
        raise ValueError(f"generator returned {len(public)} problems, expected {n_val + n_pool}")
    taken = {normalize_question(p["question"]) for p in public}
    hidden = _generate(random.Random(test_seed), n_test, min_steps, max_steps, "gen", taken)
    cuts = {"test": hidden, "val": public[:n_val], "pool": public[n_val:]}
    splits: dict[str, list[dict]] = {}
    for name, rows in cuts.items():
        width = 5 if name == "pool" else 4
        splits[name] = [{**row, "id": f"{name}-{i:0{width}d}"} for i, row in enumerate(rows)]
    _check_disjoint(splits)
    return {"pool": splits["pool"], "val": splits["val"], "test": splits["test"]}


def _check_disjoint(splits: dict[str, list[dict]]) -> None:
    where: dict[str, str] = {}
    overlaps = 0
    for name, rows in splits.items():
        for row in rows:
            key = normalize_question(row["question"])
            if key in where:
                overlaps += 1
            where[key] = name
    if overlaps:
        raise ValueError(f"splits overlap: {overlaps} questions occur more than once across pool/val/test")


def pretraining_texts(seed: int, n: int, exclude: set[str]) -> list[str]:
    """Question-only texts for pre-training the base model, never containing an excluded string.

    No answers or annotations: the base model learns the language, not the solutions. The
    caller passes val/test questions; a text containing any of them (as a substring, after
    case/space normalisation too) is skipped.
    """
    rng = random.Random(f"pretrain:{seed}")
    banned = {normalize_question(e) for e in exclude if e.strip()}
    texts: list[str] = []
    for _ in range(50 * n + 100):
        if len(texts) >= n:
            break
        question, _, _ = _one_problem(rng, rng.randint(1, 4))
        key = normalize_question(question)
        if key in banned or any(b in key for b in banned):
            continue
        texts.append(question)
    if len(texts) < n:
        raise ValueError(f"only {len(texts)} of {n} pre-training texts avoid the excluded strings")
    return texts


_FINAL_RE = re.compile(r"####\s*(-?[\d,]*\.?\d+)\s*$")


def corrupt(answer: str, rng: random.Random) -> str:
    """A plausible but wrong answer: the final `#### N` and the last step's value changed together.

    The last step still looks like real work (`<<17-3=15>>15`, `#### 15`), so only checking the
    arithmetic finds it, which is what the data-cleaning task of the research agent is about.
    """
    match = _FINAL_RE.search(answer)
    if not match:
        return answer + "\n#### " + str(rng.randint(0, NUMBER_MAX))
    old = match.group(1)
    try:
        value = int(old.replace(",", ""))
    except ValueError:
        value = round(float(old.replace(",", "")))
    choices = [value + d for d in range(-10, 11) if d and 0 <= value + d <= NUMBER_MAX]
    new = str(rng.choice(choices) if choices else value + 1)
    body = answer[: match.start()]
    ann = list(re.finditer(rf"=({re.escape(old)})>>({re.escape(old)})(?!\d)", body))
    if ann:
        m = ann[-1]
        body = body[: m.start()] + f"={new}>>{new}" + body[m.end() :]
    else:
        plain = list(re.finditer(rf"(?<![\d.,]){re.escape(old)}(?![\d])", body))
        if plain:
            m = plain[-1]
            body = body[: m.start()] + new + body[m.end() :]
    return body + answer[match.start() : match.start(1)] + new + answer[match.end(1) :]


# Fixed words of the templates above; tests check that generated text uses no other word.
TEMPLATE_WORDS = (
    "How many does have now has and gives all of to works hours earns each hour buys Each more "
    "than fewer times as until before spends on a the gets half splits into equal groups keeps one "
    "group left Then"
).split()


def _all_words() -> list[str]:
    """Template words plus the whole fixed vocabulary (names, pronouns, items, units, verbs)."""
    words: set[str] = set(PROMPT_WORDS) | set(TEMPLATE_WORDS)
    for name, prons in NAMES.items():
        words.add(name)
        for p in prons:
            words.update((p, p.capitalize()))
    words.update(ITEMS + [MONEY] + THINGS + LOSE_VERBS + [w for pair in CONTAINERS for w in pair])
    return sorted(words)


WORDS: list[str] = _all_words()
