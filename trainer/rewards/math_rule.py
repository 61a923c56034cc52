"""Rule-based math answer checking: extract the final answer, compare numerically.

Extraction order: GSM8K's `#### 42` (the last one), then LaTeX `\\boxed{...}` (the last one, nested
braces balanced), then — only with `last_number_fallback=True` — the last number in the text.
Equivalence: exact string match after normalisation, else numeric equality within `rel_tol`, where
"1,234" = 1234, "42.0" = 42, "3/4" = "\\frac{3}{4}" = 0.75, "-7" = -7, and "50%" = 50 (or 0.5 with
`percent_as_fraction=True`).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_GSM8K_RE = re.compile(r"####\s*([^\n]*)")
_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_FRAC_RE = re.compile(r"^(-?)\\[dt]?frac\{([^{}]+)\}\{([^{}]+)\}$")


def extract_boxed(text: str) -> str | None:
    r"""Content of the last `\boxed{...}` (or `\fbox{...}`), with nested braces; None if absent/unclosed."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j].strip()
    return None


def extract_answer(text: str, last_number_fallback: bool = False) -> str | None:
    """The final answer in `text` (`#### x`, then `\\boxed{x}`, then optionally the last number)."""
    hashes = _GSM8K_RE.findall(text)
    if hashes and hashes[-1].strip():
        return hashes[-1].strip()
    boxed = extract_boxed(text)
    if boxed:
        return boxed
    if last_number_fallback:
        numbers = _NUMBER_RE.findall(text)
        if numbers:
            return numbers[-1]
    return None


def normalize_answer(answer: str) -> str:
    """Strip LaTeX wrappers, `$`, units-free whitespace, thousands separators and trailing dots."""
    s = answer.strip().strip("$").strip()
    s = re.sub(r"\\text\{([^{}]*)\}", r"\1", s)
    s = re.sub(r"\\(left|right|!|,|;|\s)", "", s)
    s = s.replace("\\%", "%").replace(" ", "")
    s = s.rstrip(".")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?%?", s):  # thousands separators only, not "1,2"
        s = s.replace(",", "")
    return s


def parse_number(answer: str, percent_as_fraction: bool = False) -> Fraction | None:
    """Exact rational value of a normalised answer ("1,234", "-0.5", "3/4", "\\frac{3}{4}", "50%"), or None."""
    s = normalize_answer(answer)
    scale = Fraction(1)
    if s.endswith("%"):
        s = s[:-1]
        scale = Fraction(1, 100) if percent_as_fraction else Fraction(1)
    frac = _FRAC_RE.match(s)
    if frac:
        s = f"{frac.group(1)}{frac.group(2)}/{frac.group(3)}"
    try:
        if "/" in s:
            num, den = s.split("/", 1)
            value = Fraction(num) / Fraction(den)
        else:
            value = Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None
    return value * scale


def answers_equal(predicted: str, reference: str, *, percent_as_fraction: bool = False,
                  rel_tol: float = 1e-6) -> bool:
    """True if the two answers are the same string after normalisation or the same number."""
    if normalize_answer(predicted) == normalize_answer(reference):
        return True
    p = parse_number(predicted, percent_as_fraction)
    r = parse_number(reference, percent_as_fraction)
    if p is None or r is None:
        return False
    return p == r or math.isclose(float(p), float(r), rel_tol=rel_tol, abs_tol=rel_tol)


def math_score(response: str, reference: str, *, last_number_fallback: bool = False,
               percent_as_fraction: bool = False) -> float:
    """1.0 if the response's extracted answer equals the reference answer, else 0.0.

    `reference` may itself be a full GSM8K solution (its `#### x` is extracted) or a bare answer.
    """
    ref = extract_answer(reference) or reference
    pred = extract_answer(response, last_number_fallback=last_number_fallback)
    if pred is None:
        return 0.0
    return float(answers_equal(pred, ref, percent_as_fraction=percent_as_fraction))
