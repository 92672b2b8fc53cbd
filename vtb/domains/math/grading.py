"""Answer checking: lm-evaluation-harness GSM8K rules, and MATH/AIME boxed answers.

The GSM8K rules are reproduced rather than imported so that the orchestrator's scorer has no
heavy dependency and its behaviour is pinned by our own tests; scores are meant to be
comparable with published lm-eval GSM8K numbers (strict-match and flexible-extract).
The MATH normalisation follows the spirit of the Hendrycks MATH `is_equiv`.
"""

from __future__ import annotations

import re

INVALID = "[invalid]"
STRICT_RE = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE_RE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
IGNORE_RES = [",", "\\$", "(?s).*#### ", "\\.$"]


def _regex_filter(text: str, regex: re.Pattern[str], group_select: int) -> str:
    """lm-eval RegexFilter: findall, pick one match, take a non-empty group, strip."""
    matches = regex.findall(text)
    if not matches:
        return INVALID
    match = matches[group_select]
    if isinstance(match, tuple):
        groups = [g for g in match if g]
        if not groups:
            return INVALID
        match = groups[0]
    return match.strip()


def strict_extract(text: str) -> str:
    """First `#### N`, as lm-eval's gsm8k strict-match."""
    return _regex_filter(text, STRICT_RE, 0)


def flexible_extract(text: str) -> str:
    """Last number-like span, as lm-eval's gsm8k flexible-extract."""
    return _regex_filter(text, FLEXIBLE_RE, -1)


def normalize(text: str) -> str:
    """exact_match preprocessing: the gsm8k regexes_to_ignore, then ignore_case."""
    for pattern in IGNORE_RES:
        text = re.sub(pattern, "", text)
    return text.lower()


def gsm8k_score(response: str, reference_answer: str, mode: str = "strict") -> float:
    """1.0 if the extracted answer equals the reference's `#### N` after normalisation."""
    if mode == "strict":
        pred = strict_extract(response)
    elif mode == "flexible":
        pred = flexible_extract(response)
    else:
        raise ValueError(f"gsm8k mode {mode!r} is not one of strict, flexible")
    return 1.0 if normalize(pred) == normalize(reference_answer) else 0.0


# --- MATH / AIME ------------------------------------------------------------------------------


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}`, `\\fbox{...}` or `\\boxed x`; None if absent or unbalanced."""
    starts = [m for m in re.finditer(r"\\(?:boxed|fbox)", text)]
    if not starts:
        return None
    m = starts[-1]
    rest = text[m.end() :]
    if rest.startswith(" ") and not rest.lstrip().startswith("{"):
        content = rest.lstrip().split("$")[0].strip()
        return content or None
    rest = rest.lstrip()
    if not rest.startswith("{"):
        return None
    depth = 0
    for i, ch in enumerate(rest):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return rest[1:i]
    return None


def _fix_fracs(s: str) -> str:
    r"""`\frac12` -> `\frac{1}{2}`, `\frac1{b}` -> `\frac{1}{b}`, `\frac{a}b` -> `\frac{a}{b}`."""
    parts = s.split("\\frac")
    out = parts[0]
    for part in parts[1:]:
        out += "\\frac"
        args = []
        rest = part
        for _ in range(2):
            if rest.startswith("{"):
                depth = 0
                for i, ch in enumerate(rest):
                    depth += ch == "{"
                    depth -= ch == "}"
                    if depth == 0:
                        args.append(rest[: i + 1])
                        rest = rest[i + 1 :]
                        break
                else:
                    return s  # unbalanced: leave alone
            elif rest:
                args.append("{" + rest[0] + "}")
                rest = rest[1:]
        out += "".join(args) + rest
    return out


def _fix_sqrt(s: str) -> str:
    r"""`\sqrt3` -> `\sqrt{3}`."""
    return re.sub(r"\\sqrt([^{\\])", r"\\sqrt{\1}", s)


def _fix_slash(s: str) -> str:
    r"""A plain `a/b` of integers -> `\frac{a}{b}`."""
    m = re.fullmatch(r"(-?\d+)/(\d+)", s)
    return f"\\frac{{{m.group(1)}}}{{{m.group(2)}}}" if m else s


def strip_math(s: str) -> str:
    """Canonical form of a MATH answer for string comparison."""
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "").replace("$", "")
    s = s.replace("\\%", "").replace("%", "")
    s = s.strip()
    # units: a trailing \text{...} / \mbox{...} after a value; a bare \text{X} becomes X
    s = re.sub(r"(?<=\S)\s*\\(?:text|mbox)\{[^{}]*\}\s*$", "", s)
    s = re.sub(r"^\\(?:text|mbox)\{([^{}]*)\}$", r"\1", s)
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if s.startswith("."):
        s = "0" + s
    if s.count("=") == 1 and len(s.split("=")[0].strip()) <= 2:
        s = s.split("=")[1]
    s = _fix_sqrt(s)
    s = s.replace(" ", "")
    s = _fix_fracs(s)
    s = _fix_slash(s)
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    if re.fullmatch(r"-?\d+\.\d+", s):
        s = s.rstrip("0").rstrip(".")
    return s


def _as_number(s: str) -> float | None:
    r"""A plain number, or a `\frac{a}{b}` of integers, as a float; None otherwise."""
    m = re.fullmatch(r"(-?)\\frac\{(-?\d+)\}\{(\d+)\}", s)
    if m:
        value = int(m.group(2)) / int(m.group(3)) if int(m.group(3)) else None
        return -value if value is not None and m.group(1) else value
    try:
        return float(s)
    except ValueError:
        return None


def math_equiv(a: str | None, b: str | None) -> bool:
    """Equal after strip_math, or numerically equal (so AIME "042" == "42", "0.50" == ".5")."""
    if a is None or b is None:
        return False
    sa, sb = strip_math(a), strip_math(b)
    if sa == sb:
        return True
    na, nb = _as_number(sa), _as_number(sb)
    return na is not None and nb is not None and abs(na - nb) <= 1e-9 * max(1.0, abs(nb))


def _reference_final(reference: str) -> str:
    """The short answer in a reference: its boxed content, its `#### N`, or itself."""
    boxed = last_boxed(reference)
    if boxed is not None:
        return boxed
    if "####" in reference:
        return reference.rsplit("####", 1)[1].strip()
    return reference.strip()


def boxed_score(response: str, reference: str) -> float:
    """1.0 if the response's last boxed answer is equivalent to the reference answer."""
    return 1.0 if math_equiv(last_boxed(response), _reference_final(str(reference))) else 0.0


METRICS = ("strict", "flexible", "boxed")


def score(response: str, example: dict, metric: str) -> float:
    """Score one response against example["answer"] with the task's metric."""
    reference = str(example["answer"])
    if metric in ("strict", "flexible"):
        return gsm8k_score(response, reference, metric)
    if metric == "boxed":
        return boxed_score(response, reference)
    raise ValueError(f"metric {metric!r} is not one of {', '.join(METRICS)}")
