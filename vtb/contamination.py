"""The contamination scan: does a submission carry the hidden test (or val) items? Orchestrator only.

Why: GSM8K, MATH-500, AIME and SWE-bench Verified are public, so an LLM research agent may write
test items it has memorised into `data/`; and a sandbox escape could hand it the hidden split.
Either inflates the test score with no co-design behind it. The scan reads the hidden split, so
it lives outside every sandbox layout (`vtb.sandbox.runtime.SANDBOX_CODE` mounts no top-level
module but `protocol.py`) and runs only in the orchestrator, on the selected submission.

What is compared. Every regular file of the submission's `data/`, `trainer/` and `harness/`
(trainer code can embed rows as well as data can) against every text field of every item of the
full test split and, the same way, of the full val split: inputs and answers alike.

Normalisation (`tokens`): JSON / Python string escapes resolved (`\\n`, `\\"`, `\\uXXXX`), NFKC,
lower case, and every run of punctuation and whitespace collapsed to one token boundary, so
re-wrapping, re-indenting, changed line breaks or quoting in JSON do not hide a copy. The split's
strings are read in their JSON-escaped form, as a JSONL copy holds them.

Which n-grams count. A field of at least LONG_N tokens gives its LONG_N-grams; a shorter field of
at least SHORT_N tokens (short answers and questions) its SHORT_N-grams; shorter fields are too
short to tell a copy from a coincidence and are left out. N-grams that also occur in what the
research sandbox may read (every file under the data dir's `research/`, except the split's own
file) are dropped: they are no evidence of a leak (template text of the embedded miniatures,
passages shared by pool and test). What is left are the field's *distinctive* n-grams.

Threshold (documented, fixed). An item is *hit* when one of its fields with at least
MIN_FIELD_NGRAMS distinctive n-grams has at least ITEM_COVERAGE of them in the submission. A split
is flagged when at least FLAG_MIN_ITEMS items and at least FLAG_FRACTION of its decidable items
(those with such a field) are hit: one test question can come out of a generator by chance,
two and 2% of the split do not. Per file: the distinctive n-grams it holds, the items they come
from and a few examples.

Canaries (`vtb.salt.canary`): every item of the hidden test and val splits carries a field
with a string derived from the test-split salt, which no sandbox can compute. It is looked for in
the submission with everything but letters and digits removed, so no re-spacing hides it; found
anywhere, it flags the split with certainty.

Flag. The submission is flagged (`flagged`) when a split the research side could not read is
flagged: the test split, and val where only its ids are shown (tau, terminal, swe). Math shows
val in full, so val rows in the data are reported (`splits.val.flagged`) but not flagged: they
inflate selection on val, not the test score.

Hostile input. The submission is what a sandbox wrote: `vtb.safefs.walk` (no link followed,
links, FIFOs, sockets and devices listed as skipped, never opened) and `safefs.read_chunks`
(bounded, streamed); MAX_SCAN_BYTES caps the bytes read over all files (above the workspace's
part caps, so an accepted submission is scanned in full); a file past it is listed as truncated.
Not seen: text inside compressed or binary encodings (gzip, parquet, base64).

CLI for a held-out real data file in its own schema (exit status 1 when flagged):
    python -m vtb.contamination --submission DIR --split gsm8k_test.jsonl [--public FILE] [--json OUT]
"""

from __future__ import annotations

import codecs
import json
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

from vtb import safefs, salt

LONG_N = 13
SHORT_N = 8
MIN_FIELD_NGRAMS = 2
ITEM_COVERAGE = 0.5
FLAG_MIN_ITEMS = 2
FLAG_FRACTION = 0.02
MAX_SCAN_BYTES = 1 << 30  # over the default part caps (256 MB data and trainer, 1 MB harness)
MAX_ENTRIES = 100_000
PARTS = ("data", "trainer", "harness")
MAX_EXAMPLES = 3
EXAMPLE_CHARS = 160
MAX_CARRY = 1 << 16  # a run without whitespace longer than this is cut (tokens may split there)

_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|(.))", re.S)
_TOKEN = re.compile(r"[^\W_]+")
_NOT_ALNUM = re.compile(r"[\W_]+")
_LAST_SPACE = re.compile(r"\s(?=\S*\Z)")


def _unescape(m: re.Match) -> str:
    if m.group(1):
        code = int(m.group(1), 16)
        return " " if 0xD800 <= code <= 0xDFFF else chr(code)
    return " " if m.group(2) in "nrt\n" else m.group(2)


def clean(text: str) -> str:
    """Escapes resolved, NFKC, lower case: the text whose tokens and letters the scan compares."""
    return unicodedata.normalize("NFKC", _ESCAPE.sub(_unescape, text)).lower()


def tokens(text: str) -> list[str]:
    """The normalised tokens of text: runs of letters and digits, all else a boundary."""
    return _TOKEN.findall(clean(text))


def _squash(cleaned: str) -> str:
    """Letters and digits only: a canary stays whole whatever was put between its characters."""
    return _NOT_ALNUM.sub("", cleaned)


def canary_mark(canary: str) -> str:
    """What the scan looks for of a canary: its squashed form, without the "VTB-CANARY-" prefix
    when it has one (the 128-bit digest alone is certain; the prefix is easy to strip)."""
    return _squash(clean(canary.removeprefix(salt.CANARY_PREFIX)))


@dataclass
class SplitIndex:
    """A split's items as n-grams: gram ids per field, and for each gram its items."""

    name: str
    ids: list[str]
    hidden: bool = True  # the research side cannot read it (its hits flag the submission)
    canary: str | None = None
    tables: dict[int, dict[tuple[str, ...], int]] = field(default_factory=lambda: {LONG_N: {}, SHORT_N: {}})
    texts: list[str] = field(default_factory=list)  # gram id -> its text (examples)
    gram_items: list[set[int]] = field(default_factory=list)
    fields: list[tuple[int, list[int]]] = field(default_factory=list)  # (item, gram ids)

    def add_text(self, item: int, text: str) -> None:
        toks = tokens(json.dumps(text, ensure_ascii=False)[1:-1])
        n = LONG_N if len(toks) >= LONG_N else SHORT_N if len(toks) >= SHORT_N else 0
        if not n:
            return
        table, ids = self.tables[n], set()
        for i in range(len(toks) - n + 1):
            gram = tuple(toks[i : i + n])
            gid = table.get(gram)
            if gid is None:
                gid = table[gram] = len(self.texts)
                self.texts.append(" ".join(gram))
                self.gram_items.append(set())
            self.gram_items[gid].add(item)
            ids.add(gid)
        self.fields.append((item, sorted(ids)))

    def drop(self, grams: set[int]) -> None:
        """Leave out grams that are no evidence (found in public material)."""
        self.fields = [(item, [g for g in ids if g not in grams]) for item, ids in self.fields]

    def live(self) -> set[int]:
        return {g for _, ids in self.fields for g in ids}


def _strings(value: object, key: str | None = None) -> Iterator[str]:
    if key == salt.CANARY_FIELD:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, str(k))
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def build_index(
    name: str, items: Sequence[object], canary: str | None = None, hidden: bool = True
) -> SplitIndex:
    """The n-gram index of a split's items (any JSON: every string leaf is a field, the canary aside)."""
    ids = []
    for i, item in enumerate(items):
        got = (item.get("id") or item.get("instance_id")) if isinstance(item, dict) else None
        ids.append(str(got) if got is not None else f"#{i}")
    index = SplitIndex(name, ids, hidden, canary)
    for i, item in enumerate(items):
        for text in _strings(item):
            index.add_text(i, text)
    return index


class Scanner:
    """Streams text through every index's n-gram tables and canaries at once."""

    def __init__(self, indexes: Sequence[SplitIndex]):
        self.indexes = list(indexes)
        self.lookup: dict[int, dict[tuple[str, ...], list[tuple[int, int]]]] = {LONG_N: {}, SHORT_N: {}}
        for s, index in enumerate(self.indexes):
            for n, table in index.tables.items():
                for gram, gid in table.items():
                    self.lookup[n].setdefault(gram, []).append((s, gid))
        self.first = {n: {g[0] for g in table} for n, table in self.lookup.items()}
        self.marks = {s: canary_mark(ix.canary) for s, ix in enumerate(self.indexes) if ix.canary}

    def scan(self, blocks: Iterable[bytes]) -> tuple[list[set[int]], set[int], int]:
        """(matched gram ids per index, indexes whose canary was found, bytes read) of one stream."""
        matched: list[set[int]] = [set() for _ in self.indexes]
        found: set[int] = set()
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        carry, carry_toks, carry_sq, size = "", [], "", 0
        longest = max((len(m) for m in self.marks.values()), default=1)
        for block in chain(blocks, [None]):
            if block is not None:
                size += len(block)
            text = carry + decoder.decode(block or b"", final=block is None)
            carry = ""
            if block is not None:
                cut = _LAST_SPACE.search(text, max(0, len(text) - MAX_CARRY))
                if cut:  # tokens and escapes never span whitespace: cut at the last one
                    text, carry = text[: cut.start()], text[cut.start() :]
            cleaned = clean(text)
            toks = carry_toks + _TOKEN.findall(cleaned)
            for n, table in self.lookup.items():
                first = self.first[n]
                for i in range(len(toks) - n + 1):
                    if toks[i] in first and (hits := table.get(tuple(toks[i : i + n]))):
                        for s, gid in hits:
                            matched[s].add(gid)
            carry_toks = toks[-(LONG_N - 1) :]
            squashed = carry_sq + _squash(cleaned)
            found |= {s for s, mark in self.marks.items() if mark in squashed}
            carry_sq = squashed[-(longest - 1) :] if longest > 1 else ""
        return matched, found, size


@dataclass
class FileScan:
    path: str
    size: int
    matched: list[set[int]]
    canaries: set[int]


@dataclass
class TreeScan:
    files: list[FileScan] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)  # links and special files: never opened
    truncated: list[str] = field(default_factory=list)  # read in part, or not at all, past the cap
    bytes: int = 0


def scan_tree(
    root: Path, scanner: Scanner, parts: Sequence[str] | None = PARTS, max_bytes: int = MAX_SCAN_BYTES
) -> TreeScan:
    """Scan the regular files under root (its `parts` folders, or all of it for None), bounded."""
    out = TreeScan()
    entries = 0
    for part in parts or [""]:
        base = Path(root) / part if part else Path(root)
        if not safefs.is_real_dir(base):
            try:
                out.skipped.append({"path": part or ".", "kind": safefs.kind(base.lstat().st_mode)})
            except OSError:
                pass  # absent: nothing to scan
            continue
        for e in safefs.walk(base):
            entries += 1
            rel = f"{part}/{e.rel}" if part else e.rel
            if entries > MAX_ENTRIES:
                out.truncated.append(f"{rel} and after (over {MAX_ENTRIES} entries)")
                return out
            if e.kind == "dir":
                continue
            if e.kind != "file":
                out.skipped.append({"path": rel, "kind": e.kind})
                continue
            left = max_bytes - out.bytes
            if left <= 0:
                out.truncated.append(rel)
                continue
            try:
                matched, found, size = scanner.scan(safefs.read_chunks(e.name, e.dir_fd, left))
            except safefs.Rejected as r:  # swapped for a link or a FIFO since the lstat
                out.skipped.append({"path": rel, "kind": r.kind or "other"})
                continue
            except OSError as err:
                out.skipped.append({"path": rel, "kind": f"unreadable ({err.strerror})"})
                continue
            out.bytes += size
            if e.size > size:
                out.truncated.append(rel)
            out.files.append(FileScan(rel, size, matched, found))
    return out


def verdict(index: SplitIndex, s: int, scan: TreeScan) -> dict:
    """One split's figures: items hit, canary, per-file hits with examples, flagged or not."""
    live = index.live()
    matched = set().union(*(f.matched[s] for f in scan.files)) & live if scan.files else set()
    decidable, hit = set(), set()
    for item, ids in index.fields:
        if len(ids) < MIN_FIELD_NGRAMS:
            continue
        decidable.add(item)
        if sum(g in matched for g in ids) >= ITEM_COVERAGE * len(ids):
            hit.add(item)
    files = []
    for f in scan.files:
        grams = sorted(f.matched[s] & live)
        if not grams and s not in f.canaries:
            continue
        items = set().union(*(index.gram_items[g] for g in grams)) if grams else set()
        files.append(
            {
                "path": f.path,
                "ngrams": len(grams),
                "items": len(items),
                "canary": s in f.canaries,
                "examples": [
                    {"item": index.ids[min(index.gram_items[g])], "text": index.texts[g][:EXAMPLE_CHARS]}
                    for g in grams[:MAX_EXAMPLES]
                ],
            }
        )
    canary = any(s in f.canaries for f in scan.files)
    overlap = len(hit) >= FLAG_MIN_ITEMS and len(hit) >= FLAG_FRACTION * len(decidable)
    return {
        "items": len(index.ids),
        "decidable": len(decidable),
        "hit_items": len(hit),
        "hit_fraction": round(len(hit) / len(decidable), 4) if decidable else 0.0,
        "hit_examples": [index.ids[i] for i in sorted(hit)[:MAX_EXAMPLES]],
        "canary_checked": index.canary is not None,
        "canary_found": canary,
        "hidden": index.hidden,
        "flagged": canary or overlap,
        "files": files,
    }


def scan_submission(
    submission: Path,
    indexes: Sequence[SplitIndex],
    public: dict[str, list[Path]] | None = None,
    parts: Sequence[str] | None = PARTS,
    max_bytes: int = MAX_SCAN_BYTES,
) -> dict:
    """The scan's result for a submission folder against split indexes (dropped: public n-grams).

    `public` maps a split name to files the research side could read; n-grams found there are
    left out of that split's index first (they are read with the same bounds, trusted or not).
    """
    scanner = Scanner(indexes)
    public_sets = {name: set(paths) for name, paths in (public or {}).items()}
    dropped: list[set[int]] = [set() for _ in indexes]
    for path in sorted(set().union(*public_sets.values())):
        try:
            matched, _, _ = scanner.scan(safefs.read_chunks(str(path), None, max_bytes))
        except OSError:  # a link or special file among the public material: not evidence either way
            continue
        for s, index in enumerate(indexes):
            if path in public_sets.get(index.name, ()):
                dropped[s] |= matched[s]
    for s, index in enumerate(indexes):
        index.drop(dropped[s])
    scan = scan_tree(submission, scanner, parts, max_bytes)
    splits = {ix.name: verdict(ix, s, scan) for s, ix in enumerate(indexes)}
    reasons = [
        f"{name}: "
        + ("canary found" if v["canary_found"] else f"{v['hit_items']} of {v['decidable']} items copied")
        for name, v in splits.items()
        if v["flagged"]
    ]
    return {
        "flagged": any(v["flagged"] and v["hidden"] for v in splits.values()),
        "reasons": reasons,
        "splits": splits,
        "scanned": {
            "files": len(scan.files),
            "bytes": scan.bytes,
            "skipped": scan.skipped[:50],
            "truncated": scan.truncated[:50],
        },
        "thresholds": {
            "ngram": LONG_N,
            "short_ngram": SHORT_N,
            "item_coverage": ITEM_COVERAGE,
            "min_field_ngrams": MIN_FIELD_NGRAMS,
            "flag_min_items": FLAG_MIN_ITEMS,
            "flag_fraction": FLAG_FRACTION,
            "max_scan_bytes": max_bytes,
        },
    }


def read_items(path: Path, max_bytes: int = MAX_SCAN_BYTES) -> list:
    """A split file's items: JSON lines, or one JSON list (a data set's own file, e.g. GSM8K test)."""
    text = safefs.read_bytes(Path(path), max_bytes).decode("utf-8", "replace")
    if text.lstrip().startswith("["):
        return list(json.loads(text))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def public_files(data_dir: Path) -> list[Path]:
    """The regular files under data_dir/research: what the research sandbox reads at /data."""
    research = Path(data_dir) / "research"
    return [research / e.rel for e in safefs.walk(research) if e.kind == "file"]


def scan_run(data_dir: Path, submission: Path, task: object, max_bytes: int = MAX_SCAN_BYTES) -> dict:
    """The bench's scan: the submission against the data dir's full test and val splits, with canaries."""
    indexes, public, research = [], {}, public_files(Path(data_dir))
    for split in ("test", "val"):
        path = salt.full_split_file(Path(data_dir), split)
        if path is None:
            continue
        hidden = path.parent.name == "hidden"  # only hidden splits carry a canary (salt.plant_canaries)
        canary = salt.canary_of(task, split) if hidden else None
        indexes.append(build_index(split, read_items(path), canary, hidden))
        public[split] = [p for p in research if p != path]  # all but the split's own file
    return scan_submission(Path(submission), indexes, public, PARTS, max_bytes)


def summary(result: dict) -> str:
    """One line: flagged or not, per split items hit and canaries."""
    head = "FLAGGED (" + "; ".join(result["reasons"]) + ")" if result["flagged"] else "not flagged"
    parts = []
    for name, v in result["splits"].items():
        canary = ", canary found" if v["canary_found"] else ""
        parts.append(f"{name} {v['hit_items']}/{v['decidable']} items{canary}")
    return f"{head}: " + ", ".join(parts) if parts else head


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        description="Scan a submission (its data/, trainer/, harness/; else the whole folder) for "
        "n-gram copies of held-out split files (JSONL or a JSON list, any schema)."
    )
    parser.add_argument("--submission", type=Path, required=True)
    parser.add_argument("--split", type=Path, action="append", required=True, help="a held-out file")
    parser.add_argument("--public", type=Path, action="append", default=[], help="public material")
    parser.add_argument("--canary", default=None, help="a canary string carried by the split's items")
    parser.add_argument("--max-mb", type=float, default=MAX_SCAN_BYTES / safefs.MB)
    parser.add_argument("--json", type=Path, default=None, help="write the full result here")
    args = parser.parse_args(argv)
    cap = int(args.max_mb * safefs.MB)
    indexes = [build_index(p.stem, read_items(p, cap), args.canary) for p in args.split]
    public = {ix.name: list(args.public) for ix in indexes}
    parts = [p for p in PARTS if safefs.is_real_dir(args.submission / p)] or None
    result = scan_submission(args.submission, indexes, public, parts, cap)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(summary(result))
    for name, v in result["splits"].items():
        for f in v["files"]:
            print(
                f"  {name}: {f['path']}: {f['ngrams']} n-grams from {f['items']} items, canary {f['canary']}"
            )
            for ex in f["examples"]:
                print(f"    {ex['item']}: {ex['text']}")
    return 1 if result["flagged"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
