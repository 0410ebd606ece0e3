"""Compare a printed output with the output block shown on a page.

The rule, in one sentence: the two texts must consist of the same tokens (whitespace between
tokens is ignored), and each number must lie within one unit of the last digit shown on the page.

Tokens are numbers (``-0.4419``, ``1.0000e-05``, ``6``), words (``tensor``, ``inf``, ``nan``,
``True``, ``float32``) and single punctuation characters (``[``, ``,``, ``(``). Words and
punctuation must be equal. Numbers are compared by kind:

- an integer (``6``, ``-3``) must be printed as the same integer: shapes such as
  ``torch.Size([2, 6, 4])`` and counts match exactly;
- a number that ends in a bare decimal point (numpy's ``1.``) must have exactly that value;
- any other decimal (``0.4419``, ``1.2346e-05``, ``1e-05``) accepts values within one unit of its
  last shown digit: ``0.4419`` accepts 0.4418 to 0.4420, ``1.2346e-05`` accepts
  1.2345e-05 to 1.2347e-05, whichever way the actual value is printed.

A number written right after a tilde (``~4e-16``) is an order of magnitude, the way a page prints a
rounding error: which floating-point roundings a computation makes depends on the machine's
vector units and libraries, so such an error differs from one machine to another by more than its
last digit. It accepts any value within a factor of ten that is also written after a tilde (0 only
0): ``~4e-16`` accepts ``~5e-17`` to ``~4e-15``.

``inf``, ``nan`` and the sign in ``-inf`` are words and punctuation, so they must match exactly.
Arithmetic is done with :class:`decimal.Decimal`, so "one unit" is exact, not a float epsilon.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from decimal import Decimal

_NUMBER = r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?!\w)(?!\.\d)"
_TOKEN = re.compile(
    rf"""
    (?P<magnitude>~{_NUMBER})
    | (?P<number>{_NUMBER})
    | (?P<word>[^\W\d]\w*)
    | (?P<other>\S)
    """,
    re.VERBOSE,
)
_INTEGER = re.compile(r"[-+]?\d+")
_BARE_POINT = re.compile(r"[-+]?\d+\.(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Token:
    """One token of a printed text: its kind, its text and the 1-based line it sits on."""

    kind: str
    text: str
    line: int


@dataclass(frozen=True)
class Difference:
    """The first place where a printed text and its output block disagree."""

    line: int
    expected: str
    actual: str
    reason: str

    def describe(self, where: str = "") -> str:
        """One line for a failure message; ``where`` says where line ``self.line`` of the block
        is for readers (``docs/x.md:53``), by default "line N of the output block"."""
        place = where or f"line {self.line} of the output block"
        return f"first difference at {place}: {self.reason}"


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into number, word and punctuation tokens; whitespace only separates."""
    tokens = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        for match in _TOKEN.finditer(line):
            kind = match.lastgroup or "other"
            tokens.append(Token(kind, match.group(), line_number))
    return tokens


def tolerance(shown: str) -> Decimal:
    """One unit of the last digit of the number ``shown``; 0 for integers and ``1.``-style."""
    if _INTEGER.fullmatch(shown) or _BARE_POINT.fullmatch(shown):
        return Decimal(0)
    return Decimal(1).scaleb(Decimal(shown).as_tuple().exponent)


def number_matches(expected: str, actual: str) -> bool:
    """Whether the printed number ``actual`` agrees with the number ``expected`` on the page."""
    if _INTEGER.fullmatch(expected):
        return _INTEGER.fullmatch(actual) is not None and int(expected) == int(actual)
    return abs(Decimal(actual) - Decimal(expected)) <= tolerance(expected)


def magnitude_matches(expected: str, actual: str) -> bool:
    """Whether the order of magnitude ``actual`` (``~3e-16``) agrees with ``expected``: the same
    sign and within a factor of ten, or both zero."""
    e, a = Decimal(expected.lstrip("~")), Decimal(actual.lstrip("~"))
    if e == 0 or a == 0:
        return e == a
    return (e > 0) == (a > 0) and abs(a) <= 10 * abs(e) and abs(e) <= 10 * abs(a)


def _token_difference(expected: Token, actual: Token) -> str | None:
    if expected.kind == "magnitude":
        if actual.kind == "magnitude" and magnitude_matches(expected.text, actual.text):
            return None
        return f"expected {expected.text}, got {actual.text} (allowed: within a factor of 10)"
    if expected.kind == "number" and actual.kind == "number":
        if number_matches(expected.text, actual.text):
            return None
        if _INTEGER.fullmatch(expected.text):
            return f"expected the integer {expected.text}, got {actual.text} (integers must match)"
        unit = tolerance(expected.text)
        allowed = "exactly" if unit == 0 else f"within {unit:g}"
        return f"expected {expected.text}, got {actual.text} (allowed: {allowed})"
    if expected.text == actual.text:
        return None
    return f"expected {expected.text!r}, got {actual.text!r}"


def first_difference(expected: str, actual: str) -> Difference | None:
    """The first disagreement between the output block ``expected`` and the output ``actual``.

    Returns ``None`` when the texts agree under the module's rule.
    """
    wanted, got = tokenize(expected), tokenize(actual)
    for e, a in zip(wanted, got, strict=False):
        reason = _token_difference(e, a)
        if reason is not None:
            return Difference(e.line, e.text, a.text, reason)
    if len(wanted) > len(got):
        extra = wanted[len(got)]
        return Difference(extra.line, extra.text, "", f"the output ends before {extra.text!r}")
    if len(got) > len(wanted):
        extra = got[len(wanted)]
        last_line = wanted[-1].line if wanted else 1
        return Difference(last_line, "", extra.text, f"the output goes on with {extra.text!r}")
    return None


def unified_diff(expected: str, actual: str, expected_label: str, actual_label: str) -> str:
    """A unified diff from ``expected`` to ``actual``, labelled with where each comes from."""
    lines = difflib.unified_diff(
        expected.splitlines(),
        actual.splitlines(),
        fromfile=expected_label,
        tofile=actual_label,
        lineterm="",
    )
    return "\n".join(lines)
