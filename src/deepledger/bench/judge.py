r"""Answer judges: how a benchmark answer is scored against its ground truth.

Every judge is used as ``await judge.judge(question, answer, ground_truth)`` and returns a
:class:`Judgement`: ``correct`` (``True`` / ``False``, or ``None`` when not judged), the
judge's ``name``, a one-line ``reason``, and for the list judge (and the llm judge's
``deepsearchqa`` rule) a partial-credit ``score``. :func:`make_judge` builds one from
``benchmark.judge``; ``JUDGES`` names them.

Rules every judge applies first:

- A ground truth that is ``None``, empty or only whitespace: not judged
  (``correct=None``, "no ground truth"). The answer is not looked at.
- An answer that is ``None``: incorrect, "no answer". Empty or only whitespace:
  incorrect, "the answer is empty". No model is asked.

**exact** — correct iff ``answer.strip() == ground_truth.strip()``. Nothing else is
forgiven: case, punctuation and spacing inside the text all count.

**normalized** — both texts go through :func:`normalize` and must then be equal:

1. Unicode NFKC: full-width forms, ligatures, superscripts ("²" → "2") and
   non-breaking spaces become their plain forms.
2. LaTeX: ``\text``, ``\textbf``, ``\textit``, ``\textrm``, ``\texttt``, ``\mathrm``,
   ``\mathbf``, ``\mathit``, ``\mathsf``, ``\mathtt``, ``\operatorname``, ``\mbox``,
   ``\emph``, ``\boxed`` and ``\fbox`` ``{x}`` are replaced by ``x`` (nested too);
   ``\%`` ``\$`` ``\&`` ``\#`` ``\_`` by the character; ``\,`` ``\;`` ``\:`` ``\␣``
   ``\quad`` ``\qquad`` by a space and ``\!`` by nothing. Other commands (``\frac``)
   stay as written.
3. Case-folding (``str.casefold``: "Straße" → "strasse").
4. Accents removed: after NFKD decomposition the combining diacritical marks
   U+0300–U+036F are dropped ("Zürich" → "zurich", "São" → "sao"). Letters that do
   not decompose (ø, ł, đ) and the marks of other scripts (Devanagari, Arabic) stay.
5. Every run of whitespace becomes one space; the ends are stripped.
6. Then, repeated until nothing changes, at the two ends of the text only:

   - a wrapping pair around the whole text is removed: math delimiters ``$…$``,
     ``$$…$$``, ``\(…\)``, ``\[…\]``; quotes ``"…"`` ``'…'`` ``“…”`` ``‘…’`` ``„…“``
     ``«…»`` `````…`````; markdown ``*…*`` ``_…_``; brackets ``(…)`` ``[…]`` ``{…}``.
     A quote or ``$`` pair is removed only if that character does not occur inside
     (``"a" or "b"`` stays), a bracket pair only if the opening bracket closes at the
     very end (``(a) or (b)`` stays);
   - trailing ``.`` ``,`` ``;`` ``:`` ``!`` ``?`` are removed (leading ones are not:
     ".5" and "-5" keep their signs and points);
   - an answer preamble at the start is removed: "answer:", "answer is", "final
     answer:", "the answer is", "the final answer is", "the answers are" (an optional
     colon after "is" / "are"), when text follows it;
   - a leading article "a", "an" or "the" is removed when another word follows it
     ("The Beatles" → "beatles"; a bare "A" stays "a"). Articles elsewhere stay
     ("vitamin a", "statue of the liberty").

   So ``"The answer is Paris."`` and ``Paris`` are equal. Punctuation inside the
   text is kept: "St. Louis" ≠ "St Louis", "U.S." = "U.S" (trailing dot only).

**numeric** — both texts are read as one number by :func:`parse_number`; correct iff
``math.isclose(answer, truth, rel_tol=rel_tol, abs_tol=abs_tol)`` (defaults 1e-6 and 0),
i.e. ``|a − t| <= max(rel_tol · max(|a|, |t|), abs_tol)``, boundary included. If the
ground truth is not a number, the *normalized* rules above decide (the reason says so);
if the truth is a number and the answer is not, it is incorrect. Reading a number:

- the text is normalized as above first (preamble, quotes, LaTeX wrappers, trailing
  period are gone; "(5)" reads as 5, not as −5), with superscript digits read as
  powers ("10⁶" → "10^6", "m²" → "m^2") and "−" (U+2212) as a minus sign;
- fractions ``\frac{a}{b}`` (also ``\dfrac``, ``\tfrac``) and ``a/b`` with plain
  numbers a, b (b ≠ 0, not part of a date like 3/4/2020) are divided out;
- then the whole text must be, in order: an optional approximation word ("~", "≈",
  "approx", "approx.", "approximately", "about", "around", "roughly"); an optional
  sign, currency symbol ($ € £ ¥ ₹ ₩ ₽) or code (usd eur gbp jpy cny rmb inr chf cad
  aud) with the sign before or after it; the number: digits with an optional decimal
  point, with "," or " " thousands separators only in groups of exactly three digits
  ("1,234,567", "1 234"; "1,5" is not a number: decimal commas are not understood);
  an optional exponent ("1.5e6", "1.5 × 10^6", "1.5x10^{6}", ``\times``, ``\cdot``);
  an optional "%" / "percent" / "per cent" — dropped, so "12%" equals 12, not 0.12 —
  or a scale word that multiplies: "thousand" (1e3), "million" (1e6), "billion"
  (1e9), "trillion" (1e12), or their plurals; and an optional unit of at most four
  words that contains no digits except a one-digit power after a letter ("km",
  "km/h", "m^2", "cm3", "years old", "usd"). The unit is ignored: "3 km" equals "3 m".
- Anything else is not a number: "5 or 6", "between 5 and 6", "2024-05-03", "10^6"
  (a bare power), "five".

**list** — both texts are split into items, each item normalized as above, then
compared as sets (``ordered=False``, the default) or as sequences (``ordered=True``):

- splitting: a text of several lines is one item per line, with a leading bullet
  ("-", "*", "•", "1.", "1)") dropped; the whole text is normalized (so "[a, b]" and
  "The answers are a, b." lose their wrapper / preamble / period); items are separated
  by ";", "," and the word "and" ("a, b, and c" is three items). A comma between a
  digit and exactly three digits is a thousands separator, not a separator of items:
  write "100, 200" (with a space), not "100,200". "Bosnia and Herzegovina" splits in
  two — on both sides, so it still matches itself. Empty items are dropped;
- two items match when both read as numbers (rules above) that are close within the
  tolerances, otherwise when their normalized texts are equal;
- unordered: duplicates are ignored on both sides; correct iff every answer item
  matches a distinct truth item and none is left over; ``score`` is the F1 of the
  matching (2·matched / (answer items + truth items));
- ordered: correct iff the lists have the same length and match position by
  position; duplicates count; ``score`` is the share of matching positions among
  the longer list's length.

**gaia** — the public GAIA scorer's rules, written from their description:

- if the ground truth reads as a Python ``float`` ("12", "1.5e3", " 7 "): remove
  every "$", "%" and "," from the answer, read it with ``float``; correct iff the two
  floats are exactly equal (no tolerance; "12 km" is not a number, so incorrect);
- else if the ground truth contains "," or ";": split both texts on every "," and
  ";" (so a truth of "1,000" is a list of two); the lists must have the same length;
  element by element, a truth element that reads as a float is compared as above,
  any other is compared after removing all whitespace and lowercasing — punctuation
  is *kept* inside list elements, as the published scorer does;
- else: correct iff both texts are equal after removing all whitespace, removing
  ASCII punctuation (``string.punctuation``) and lowercasing. No Unicode folding,
  no article or preamble removal.

**aime** — AIME answers are whole numbers from 0 to 999. The ground truth is read as
digits only (the last complete ``\boxed{…}``'s content if any, normalized as above;
leading zeros allowed: "042" is 42). An answer is read with HuggingFace's
``math-verify``, within bounds that keep it from reading another value:

1. the content of the last complete ``\boxed{…}`` is taken if there is one (so
   ``\boxed{17}, not \boxed{42}`` states 42), else the whole text; a ``!`` after a
   number (a factorial) makes it not an integer;
2. it is normalized as above (preamble, ``$…$``, ``\text``, trailing period gone) and a
   leading variable assignment (``x =``, ``n=``) is dropped;
3. what is left may hold only numbers (digits, a decimal point), ``+ - * /``, brackets
   and ``\frac`` ``\dfrac`` ``\tfrac`` ``\cdot`` ``\times``, no two numbers side by side
   ("4 2"), at most 64 characters. Words, units, ``%``, subscripts, powers, roots, ``<``,
   ``≠``, ``±`` and commas make it not an integer (math-verify alone reads "42k", "x < 42",
   "42_8" or "42!" as 42); and it must be one well-formed expression of those, whose
   exact value we compute too: juxtaposed groups ("2(21)", "{41}{1}"), a dangling or
   doubled operator ("42*", "84//2", "8**2") make it not an integer (math-verify reads
   them as 23, 42, 42, 84 and 8);
4. math-verify parses it as LaTeX; its value must be exactly an integer ("42.0", "84/2",
   ``\frac{84}{2}``, "6 * 7" are 42; "42.5", "42.0000000000000000001" and "85/2" are
   not) and the value we computed, and ``math_verify.verify`` must accept it for the
   ground truth.

A value outside 0–999 is incorrect ("not an AIME answer"). Correct iff the two integers
are equal. math-verify runs off the event loop, one reading at a time, without its
signal-based timeouts (they only work in the main thread); a reading that takes over
10 s is ``unjudged``. If the ground truth does not read as an integer 0–999, the
*normalized* rules decide (the reason says so).

**llm** — if the answer cannot differ in meaning from the ground truth (the same text
once whitespace at the ends and a trailing full stop are removed, or the same plain
number: ``bench/shortcut.py``), correct without asking a model (the reason says the
model was not asked; a scored rule scores it 1). Case, brackets, articles, units,
superscripts and everything else go to the model. Otherwise the model is asked by the
judge's *rule* (``benchmark.judge.rule``): one benchmark's grading protocol, its prompt,
reply reader, label set, fields and official placeholders all in
:mod:`deepledger.bench.judge_rules` (``LLM_RULES``: ``default``, ``gaia_text``, ``hle``,
``browsecomp``, ``simpleqa``, ``xbench``, ``frames``, ``deepsearchqa``). Our prompt's
part before ``<!-- task -->`` is the system message, the rest, with question, ground
truth and answer filled in, the task; a user's template (``benchmark.judge.template``)
is sent whole as one user message. The judgement carries what the rule read: ``label``
(SimpleQA's three, DeepSearchQA's outcome), ``confidence``, ``extracted_answer``.

A reply the rule cannot read (no verdict, two, one contradicted, an unknown label) is
asked again, up to ``benchmark.judge.max_asks`` asks (default 3). Still unreadable:
``correct=None``, ``unjudged=True``, the reason quoting each reply's first line — never
INCORRECT. ``asks`` counts the model's calls and ``usage`` sums their tokens. Model
errors (:class:`~deepledger.errors.LLMError`) propagate to the caller. The reason names
the judge model and, for a rule other than ``default``, the rule.
"""

from __future__ import annotations

import ast
import asyncio
import logging
import math
import operator
import re
import string
import threading
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from fractions import Fraction
from typing import Any

from deepledger.agent.boxed import last_boxed
from deepledger.bench.judge_rules import (
    Reading,
    fill_template,
    first_lines,
    judge_prompt,
    load_template,
    rule_of,
)
from deepledger.bench.judge_rules import show as _show
from deepledger.bench.shortcut import same_beyond_doubt
from deepledger.bench.verdict import NOT_ATTEMPTED
from deepledger.config import JUDGES, JudgeName, JudgeRule  # validated with the config
from deepledger.errors import ConfigError
from deepledger.llm.base import GenerationSettings, LLMClient
from deepledger.messages import Message


@dataclass(frozen=True)
class Judgement:
    """A judge's decision on one answer."""

    correct: bool | None  # None when there is no ground truth (not judged), or unjudged
    judge: str  # the judge's name
    reason: str  # one line a human can read: why correct / incorrect
    score: float | None = None  # partial credit in [0, 1] (list judge: F1 or fraction)
    usage: dict[str, int] | None = None  # the judge model's tokens (LLM judge only)
    # The fields records/results.py's JudgementRecord documents.
    label: str | None = None
    confidence: float | None = None
    extracted_answer: str | None = None
    unjudged: bool = False
    asks: int = 0


def _number_text(value: float) -> str:
    return f"{value:.15g}"


class Judge(ABC):
    """Decides whether an answer matches a ground truth. Subclasses implement ``_judge``,
    which only sees a present answer and ground truth."""

    name: str = "abstract"

    async def judge(self, question: str, answer: str | None, ground_truth: str | None) -> Judgement:
        if ground_truth is None or not ground_truth.strip():
            return Judgement(None, self.name, "no ground truth: not judged")
        if answer is None:
            return Judgement(False, self.name, "no answer")
        if not answer.strip():
            return Judgement(False, self.name, "the answer is empty")
        return await self._judge(question, answer, ground_truth)

    @abstractmethod
    async def _judge(self, question: str, answer: str, ground_truth: str) -> Judgement: ...


# -- exact -----------------------------------------------------------------------------


class ExactJudge(Judge):
    name = "exact"

    async def _judge(self, question: str, answer: str, ground_truth: str) -> Judgement:
        got, want = answer.strip(), ground_truth.strip()
        if got == want:
            return Judgement(True, self.name, "the answer equals the ground truth exactly")
        return Judgement(False, self.name, f"answer {_show(got)} is not exactly {_show(want)}")


# -- normalized ------------------------------------------------------------------------

_LATEX_WRAPPER = re.compile(
    r"\\(?:text|textbf|textit|textrm|texttt|mathrm|mathbf|mathit|mathsf|mathtt"
    r"|operatorname|mbox|emph|boxed|fbox)\s*\{([^{}]*)\}"
)
_LATEX_ESCAPE = re.compile(r"\\([%$&#_])")
_LATEX_SPACE = re.compile(r"\\(?:[,;: ]|q?quad(?![A-Za-z]))")
_ACCENT = re.compile("[\u0300-\u036f]")
_TRAILING_PUNCTUATION = re.compile(r"[.,;:!?]+$")
_PREAMBLE = re.compile(r"^(?:the\s+)?(?:final\s+)?answers?\s*(?:(?:is|are)\b\s*:?|:)\s*(?=\S)")
_LEADING_ARTICLE = re.compile(r"^(?:a|an|the)\s+(?=\S)")
# Longer openers first, so "$$x$$" is not read as "$" + "$x$" + "$".
_PAIRS = (
    ("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"),
    ('"', '"'), ("'", "'"), ("“", "”"), ("‘", "’"), ("„", "“"), ("«", "»"), ("`", "`"),
    ("*", "*"), ("_", "_"), ("(", ")"), ("[", "]"), ("{", "}"),
)  # fmt: skip


def _expand_latex(text: str) -> str:
    while True:
        unwrapped = _LATEX_WRAPPER.sub(r"\1", text)
        if unwrapped == text:
            break
        text = unwrapped
    text = _LATEX_SPACE.sub(" ", text).replace("\\!", "")
    return _LATEX_ESCAPE.sub(r"\1", text)


def _strip_accents(text: str) -> str:
    return unicodedata.normalize("NFC", _ACCENT.sub("", unicodedata.normalize("NFKD", text)))


def _encloses(opening: str, closing: str, inner: str) -> bool:
    """Whether ``opening + inner + closing`` is one wrapper around the whole text."""
    if opening in "([{":
        depth = 0
        for char in inner:
            depth += (char == opening) - (char == closing)
            if depth < 0:
                return False
        return depth == 0
    if opening in "*_":
        return True
    return opening not in inner and closing not in inner


def _unwrap(text: str) -> str:
    for opening, closing in _PAIRS:
        if (
            len(text) >= len(opening) + len(closing)
            and text.startswith(opening)
            and text.endswith(closing)
        ):
            inner = text[len(opening) : len(text) - len(closing)]
            if _encloses(opening, closing, inner):
                return inner
    return text


def _strip_ends(text: str) -> str:
    while True:
        before = text
        text = _unwrap(text.strip()).strip()
        text = _TRAILING_PUNCTUATION.sub("", text).rstrip()
        text = _PREAMBLE.sub("", text, count=1)
        text = _LEADING_ARTICLE.sub("", text, count=1)
        if text == before:
            return text


def normalize(text: str) -> str:
    """The text as the *normalized* judge compares it (rules in the module docstring)."""
    text = _expand_latex(unicodedata.normalize("NFKC", text))
    text = " ".join(_strip_accents(text.casefold()).split())
    return _strip_ends(text)


class NormalizedJudge(Judge):
    name = "normalized"

    async def _judge(self, question: str, answer: str, ground_truth: str) -> Judgement:
        got, want = normalize(answer), normalize(ground_truth)
        if got == want:
            return Judgement(True, self.name, f"equal once normalized: both read {_show(got)}")
        return Judgement(
            False, self.name, f"normalized answer {_show(got)} ≠ normalized truth {_show(want)}"
        )


# -- numeric ---------------------------------------------------------------------------

_SUPERSCRIPT_RUN = re.compile("[⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺]+")
_SUPERSCRIPT_DIGITS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_PLAIN = r"[+-]?\d+(?:\.\d+)?"
_FRACTION = re.compile(
    rf"\\[dt]?frac\s*\{{\s*(?P<top>{_PLAIN})\s*\}}\s*\{{\s*(?P<bottom>{_PLAIN})\s*\}}"
    r"|(?<![\d./])(?P<a>\d+(?:\.\d+)?)\s*/\s*(?P<b>\d+(?:\.\d+)?)(?![\d./])"
)
_NUMBER = re.compile(
    r"""
    (?:(?:~|≈|approx\.?|approximately|about|around|roughly)\s*)?
    (?P<sign>[+-])?\s*
    (?:(?:[$€£¥₹₩₽]|usd|eur|gbp|jpy|cny|rmb|inr|chf|cad|aud)\s*)?
    (?P<sign_after>[+-])?\s*
    (?P<mantissa>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d{1,3}(?:\ \d{3})+(?:\.\d+)?|\d+(?:\.\d*)?|\.\d+)
    (?:e(?P<exp>[+-]?\d+)
      |\s*(?:x|×|\*|·|\\times|\\cdot)\s*10\s*\^\s*\{?\s*(?P<exp10>[+-]?\d+)\s*\}?)?
    (?:\s*(?:(?P<percent>%|percent\b|per\ cent\b)
            |(?P<scale>thousand|million|billion|trillion)s?\b))?
    (?P<unit>.*)
    """,
    re.VERBOSE | re.DOTALL,
)
_SCALE_EXPONENT = {"thousand": 3, "million": 6, "billion": 9, "trillion": 12}
_UNIT_POWER = re.compile(r"(?<=[^\W\d_])\^?\{?[+-]?\d\}?(?!\d)")
_MAX_UNIT_WORDS = 4


def _superscripts_as_powers(text: str) -> str:
    return _SUPERSCRIPT_RUN.sub(lambda m: "^" + m.group().translate(_SUPERSCRIPT_DIGITS), text)


def _divide(match: re.Match[str]) -> str:
    top, bottom = match["top"] or match["a"], match["bottom"] or match["b"]
    if float(bottom) == 0:
        return match.group()
    return repr(float(top) / float(bottom))


def _is_unit(tail: str) -> bool:
    tail = tail.strip()
    if len(tail.split()) > _MAX_UNIT_WORDS:
        return False
    return not any(char.isdigit() for char in _UNIT_POWER.sub("", tail))


def parse_number(text: str) -> float | None:
    """The one number ``text`` states, or None (rules in the module docstring)."""
    text = normalize(_superscripts_as_powers(text).replace("\u2212", "-"))
    match = _NUMBER.fullmatch(_FRACTION.sub(_divide, text))
    if match is None or (match["sign"] and match["sign_after"]) or not _is_unit(match["unit"]):
        return None
    exponent = int(match["exp"] or match["exp10"] or 0)
    exponent += _SCALE_EXPONENT.get((match["scale"] or "").removesuffix("s"), 0)
    mantissa = match["mantissa"].replace(",", "").replace(" ", "")
    value = float(f"{mantissa}e{exponent}")
    return -value if "-" in (match["sign"], match["sign_after"]) else value


def _check_tolerances(rel_tol: float, abs_tol: float) -> None:
    for key, value in (("rel_tol", rel_tol), ("abs_tol", abs_tol)):
        if not value >= 0:
            raise ConfigError(f"benchmark.judge.{key}={value!r} must be a number >= 0.")


class NumericJudge(Judge):
    name = "numeric"

    def __init__(self, rel_tol: float = 1e-6, abs_tol: float = 0.0) -> None:
        _check_tolerances(rel_tol, abs_tol)
        self.rel_tol = rel_tol
        self.abs_tol = abs_tol

    async def _judge(self, question: str, answer: str, ground_truth: str) -> Judgement:
        truth = parse_number(ground_truth)
        if truth is None:
            text = await NormalizedJudge()._judge(question, answer, ground_truth)
            reason = f"the ground truth is not a number, compared as text: {text.reason}"
            return Judgement(text.correct, self.name, reason)
        value = parse_number(answer)
        if value is None:
            reason = f"answer {_show(answer)} is not a number (truth {_number_text(truth)})"
            return Judgement(False, self.name, reason)
        correct = math.isclose(value, truth, rel_tol=self.rel_tol, abs_tol=self.abs_tol)
        relation = ("=" if value == truth else "≈") if correct else "≠"
        reason = (
            f"{_number_text(value)} {relation} {_number_text(truth)}"
            f" (rel_tol={self.rel_tol:g}, abs_tol={self.abs_tol:g})"
        )
        return Judgement(correct, self.name, reason)


# -- list ------------------------------------------------------------------------------

_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+(?=\S)")
_ITEM_SEPARATOR = re.compile(r"\s*(?:;|(?<!\d),|,(?!\d{3}(?!\d))|\band\b)\s*")


@dataclass(frozen=True)
class _Item:
    text: str  # normalized
    number: float | None


def split_items(text: str) -> list[str]:
    """The normalized items of a list answer (rules in the module docstring)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > 1:
        text = "; ".join(_BULLET.sub("", line) for line in lines)
    items = (normalize(part) for part in _ITEM_SEPARATOR.split(normalize(text)))
    return [item for item in items if item]


class ListJudge(Judge):
    name = "list"

    def __init__(self, ordered: bool = False, rel_tol: float = 1e-6, abs_tol: float = 0.0) -> None:
        _check_tolerances(rel_tol, abs_tol)
        self.ordered = ordered
        self.rel_tol = rel_tol
        self.abs_tol = abs_tol

    def _items(self, text: str) -> list[_Item]:
        return [_Item(item, parse_number(item)) for item in split_items(text)]

    def _same(self, a: _Item, b: _Item) -> bool:
        if a.number is not None and b.number is not None:
            return math.isclose(a.number, b.number, rel_tol=self.rel_tol, abs_tol=self.abs_tol)
        return a.text == b.text

    async def _judge(self, question: str, answer: str, ground_truth: str) -> Judgement:
        got, want = self._items(answer), self._items(ground_truth)
        if self.ordered:
            return self._compare_sequences(got, want)
        return self._compare_sets(_dedupe(got, self._same), _dedupe(want, self._same))

    def _compare_sets(self, got: list[_Item], want: list[_Item]) -> Judgement:
        missing, extra = list(want), []
        for item in got:
            match = next((t for t in missing if self._same(item, t)), None)
            if match is None:
                extra.append(item)
            else:
                missing.remove(match)
        matched = len(got) - len(extra)
        total = len(got) + len(want)
        f1 = 2 * matched / total if total else 1.0
        if not missing and not extra:
            return Judgement(True, self.name, f"all {len(want)} items match", f1)
        parts = [f"{matched} of {len(want)} items found"]
        parts += [f"missing {_show_items(missing)}"] if missing else []
        parts += [f"extra {_show_items(extra)}"] if extra else []
        return Judgement(False, self.name, f"{'; '.join(parts)} (F1 {f1:.2f})", f1)

    def _compare_sequences(self, got: list[_Item], want: list[_Item]) -> Judgement:
        same = [self._same(a, b) for a, b in zip(got, want, strict=False)]
        longest = max(len(got), len(want))
        score = sum(same) / longest if longest else 1.0
        if len(got) == len(want) and all(same):
            return Judgement(True, self.name, f"all {len(want)} items match in order", score)
        problems = []
        if len(got) != len(want):
            problems.append(f"{len(got)} items, expected {len(want)}")
        if False in same:
            index = same.index(False)
            problems.append(
                f"item {index + 1} is {_show(got[index].text)}, expected {_show(want[index].text)}"
            )
        return Judgement(False, self.name, f"{'; '.join(problems)} ({score:.2f} in place)", score)


def _dedupe(items: list[_Item], same: Callable[[_Item, _Item], bool]) -> list[_Item]:
    kept: list[_Item] = []
    for item in items:
        if not any(same(item, k) for k in kept):
            kept.append(item)
    return kept


def _show_items(items: list[_Item], limit: int = 3) -> str:
    shown = ", ".join(_show(item.text, 40) for item in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


# -- gaia ------------------------------------------------------------------------------

_GAIA_SEPARATOR = re.compile(r"[,;]")
_ASCII_PUNCTUATION = str.maketrans("", "", string.punctuation)


def _python_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _gaia_number(text: str) -> float | None:
    for char in "$%,":
        text = text.replace(char, "")
    return _python_float(text)


def _gaia_text(text: str, *, drop_punctuation: bool) -> str:
    text = re.sub(r"\s", "", text).lower()
    return text.translate(_ASCII_PUNCTUATION) if drop_punctuation else text


def _gaia_element_matches(answer: str, truth: str) -> bool:
    number = _python_float(truth)
    if number is not None:
        return _gaia_number(answer) == number
    return _gaia_text(answer, drop_punctuation=False) == _gaia_text(truth, drop_punctuation=False)


class GaiaJudge(Judge):
    name = "gaia"

    async def _judge(self, question: str, answer: str, ground_truth: str) -> Judgement:
        number = _python_float(ground_truth)
        if number is not None:
            return self._number_rule(answer, number)
        if _GAIA_SEPARATOR.search(ground_truth):
            return self._list_rule(answer, ground_truth)
        got = _gaia_text(answer, drop_punctuation=True)
        want = _gaia_text(ground_truth, drop_punctuation=True)
        relation = "=" if got == want else "≠"
        return Judgement(
            got == want, self.name, f"string rule: {_show(got)} {relation} {_show(want)}"
        )

    def _number_rule(self, answer: str, truth: float) -> Judgement:
        value = _gaia_number(answer)
        if value is None:
            reason = f"number rule: answer {_show(answer)} is not a number"
            return Judgement(False, self.name, f"{reason} (truth {_number_text(truth)})")
        relation = "=" if value == truth else "≠"
        reason = f"number rule: {_number_text(value)} {relation} {_number_text(truth)}"
        return Judgement(value == truth, self.name, reason)

    def _list_rule(self, answer: str, ground_truth: str) -> Judgement:
        got = _GAIA_SEPARATOR.split(answer)
        want = _GAIA_SEPARATOR.split(ground_truth)
        if len(got) != len(want):
            reason = f"list rule: {len(got)} elements, expected {len(want)}"
            return Judgement(False, self.name, reason)
        for index, (a, t) in enumerate(zip(got, want, strict=True)):
            if not _gaia_element_matches(a, t):
                reason = f"list rule: element {index + 1} {_show(a)} ≠ {_show(t)}"
                return Judgement(False, self.name, reason)
        return Judgement(True, self.name, f"list rule: all {len(want)} elements match")


# -- aime ------------------------------------------------------------------------------

_AIME_DIGITS = re.compile(r"[0-9]+")
_AIME_MAX = 999
# What is left of an answer once normalized and a leading "x =" is dropped may hold only
# numbers joined by arithmetic (no powers, roots, units, subscripts, "%", "!", "±" or
# words): math-verify reads "42k", "x < 42", "42_8" and "42!" as 42, which state other
# values. Short, so reading it cannot take long.
_AIME_ASSIGNMENT = re.compile(r"^[a-z][a-z0-9]*\s*=\s*")
_AIME_ARITHMETIC = re.compile(r"(?:[0-9.+\-*/(){} ]|\\[dt]?frac|\\cdot|\\times)+")
_AIME_FACTORIAL = re.compile(r"[0-9)}]\s*!")
_AIME_FRAC = re.compile(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}")
_LEADING_ZEROS = re.compile(r"(?<![0-9.])0+(?=[0-9])")
_AIME_OPERATIONS: dict[type, Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_AIME_LONGEST = 64
_AIME_SECONDS = 10.0  # math-verify's reading of one answer; over it: unjudged
# math-verify's own timeouts use SIGALRM, which only the main thread may set, and its
# LaTeX parsing is not documented as thread-safe: ours run one at a time, off the
# event loop, with the timeout above.
_MATH_VERIFY_LOCK = threading.Lock()


def aime_integer(text: str) -> int | None:
    """The ground truth's integer, or None: digits only once normalized (rules in the
    module docstring)."""
    boxed = last_boxed(text)
    text = normalize(boxed if boxed is not None else text)
    return int(text) if _AIME_DIGITS.fullmatch(text) else None


def aime_expression(text: str) -> str | None:
    """The arithmetic an AIME answer states (the last box's content, normalized, a
    leading ``x =`` dropped), or None when anything else is left."""
    boxed = last_boxed(text)
    scope = boxed if boxed is not None else text
    if _AIME_FACTORIAL.search(scope):  # normalize would drop a trailing "!"
        return None
    core = _AIME_ASSIGNMENT.sub("", normalize(scope))
    if len(core) > _AIME_LONGEST or not _AIME_ARITHMETIC.fullmatch(core):
        return None
    return core if arithmetic_value(core) is not None else None


def arithmetic_value(core: str) -> Fraction | None:
    """The exact value of numbers joined by ``+ - * /``, brackets and fractions, or None
    when the text is not one such expression: math-verify reads "4 2" as 6, "2(21)" as
    23, "42*" as 42 and "84//2" as 84, so its value is only taken when it is this one."""
    python = core
    while (plain := _AIME_FRAC.sub(r"((\1)/(\2))", python)) != python:
        python = plain
    python = python.replace("\\cdot", "*").replace("\\times", "*")
    python = python.replace("{", "(").replace("}", ")")
    python = _LEADING_ZEROS.sub("", python)  # "042" is 42 (Python reads no leading zero)
    try:
        tree = ast.parse(python, mode="eval")
        return _exact(tree.body, python)
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None


def _exact(node: ast.expr, source: str) -> Fraction | None:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(ast.get_source_segment(source, node) or "")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _exact(node.operand, source)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.BinOp) and type(node.op) in _AIME_OPERATIONS:
        left, right = _exact(node.left, source), _exact(node.right, source)
        if left is None or right is None:
            return None
        return _AIME_OPERATIONS[type(node.op)](left, right)
    return None  # a call ("2(21)"), a power, a floor division...


def math_verify_integer(expression: str, truth: int) -> tuple[int | None, bool]:
    """math-verify's reading of ``expression``: its value if that is exactly an integer
    (a Float must have no fractional part at its written precision: "42.0" yes,
    "42.0000000000000000001" no), and whether math-verify's ``verify`` accepts it for
    ``truth``. Blocking: called in a worker thread."""
    sympy, parse, verify = _load_math_verify()
    with _MATH_VERIFY_LOCK:
        _quiet_math_verify()
        parsed = parse(f"${expression}$", parsing_timeout=None)
        if not parsed or not isinstance(parsed[0], sympy.Basic):
            return None, False
        value = parsed[0].doit()
        if not (value.is_Rational or value.is_Float):
            return None, False
        exact = sympy.Rational(value)
        if exact.q != 1 or Fraction(int(exact.p)) != arithmetic_value(expression):
            return None, False
        gold = parse(f"${truth}$", parsing_timeout=None)
        return int(exact), bool(verify(gold, parsed, timeout_seconds=None))


def _load_math_verify() -> tuple[Any, Any, Any]:
    """sympy and math-verify's parse and verify, imported (seconds, the first time)."""
    import sympy
    from math_verify import parse, verify

    return sympy, parse, verify


class _OwnTimeout(logging.Filter):
    """Drops math-verify's warning that its timeouts are off: ours is in AimeJudge."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


def _quiet_math_verify() -> None:
    for name in ("math_verify.parser", "math_verify.grader"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _OwnTimeout) for f in logger.filters):
            logger.addFilter(_OwnTimeout())


class AimeJudge(Judge):
    name = "aime"

    async def _judge(self, question: str, answer: str, ground_truth: str) -> Judgement:
        truth = aime_integer(ground_truth)
        if truth is None or truth > _AIME_MAX:
            text = await NormalizedJudge()._judge(question, answer, ground_truth)
            reason = f"the ground truth is not an integer 0-999, compared as text: {text.reason}"
            return Judgement(text.correct, self.name, reason)
        expression = aime_expression(answer)
        if expression is None:
            return Judgement(False, self.name, f"answer {_show(answer)} is not an integer")
        await asyncio.to_thread(_load_math_verify)  # the import is not the reading's time
        try:
            value, accepted = await asyncio.wait_for(
                asyncio.to_thread(math_verify_integer, expression, truth), _AIME_SECONDS
            )
        except TimeoutError:
            reason = f"math-verify did not read {_show(expression)} in {_AIME_SECONDS:g} s"
            return Judgement(None, self.name, reason, unjudged=True)
        if value is None:
            return Judgement(False, self.name, f"answer {_show(answer)} is not an integer")
        if not 0 <= value <= _AIME_MAX:
            return Judgement(False, self.name, f"{value} is not an AIME answer (0-999)")
        if value == truth and not accepted:  # never seen; math-verify has the last word
            return Judgement(False, self.name, f"math-verify does not accept {value} for {truth}")
        relation = "=" if value == truth else "≠"
        return Judgement(value == truth, self.name, f"{value} {relation} {truth}")


# -- llm -------------------------------------------------------------------------------


DEFAULT_MAX_ASKS = 3  # benchmark.judge.max_asks=null: asks per answer before unjudged


class LLMJudge(Judge):
    """Asks a model by one grading protocol (``bench/judge_rules.py``); an unreadable
    reply is asked again up to ``max_asks`` times, then the answer is unjudged."""

    name = "llm"

    def __init__(
        self,
        llm: LLMClient,
        settings: GenerationSettings | None = None,
        rule: str = "default",
        *,
        template: str | None = None,
        max_asks: int | None = None,
    ) -> None:
        self.protocol = rule_of(rule)
        self.llm = llm
        self.settings = settings or GenerationSettings(max_tokens=1024, temperature=0.0)
        self.rule = JudgeRule(rule)
        # The text of the user's official template (benchmark.judge.template), or None.
        self.template = load_template(template, self.protocol) if template else None
        self.max_asks = DEFAULT_MAX_ASKS if max_asks is None else max_asks
        if self.max_asks < 1:
            raise ConfigError(f"benchmark.judge.max_asks={max_asks} must be at least 1.")

    async def judge(self, question: str, answer: str | None, ground_truth: str | None) -> Judgement:
        judgement = await super().judge(question, answer, ground_truth)
        # No answer at all is SimpleQA's NOT_ATTEMPTED: its grader is sent every response
        # and grades an empty one C, never B (which would lower accuracy-given-attempted).
        no_answer = answer is None or not answer.strip()
        if no_answer and judgement.correct is False and NOT_ATTEMPTED in self.protocol.labels:
            return replace(judgement, label=NOT_ATTEMPTED)
        return judgement

    async def _judge(self, question: str, answer: str, ground_truth: str) -> Judgement:
        rule = self.protocol
        if (same := same_beyond_doubt(answer, ground_truth)) is not None:
            # A checklist rule scores such an answer as it would: every part, nothing extra.
            score = 1.0 if rule.scored else None
            return Judgement(True, self.name, f"{same}; the model was not asked", score)
        messages = self._messages(question, answer, ground_truth)
        usage: dict[str, int] = {}
        unreadable: list[str] = []
        while len(unreadable) < self.max_asks:
            response = await self.llm.generate(messages, None, self.settings)
            for key, value in asdict(response.usage).items():
                usage[key] = usage.get(key, 0) + value
            reading = rule.read(response.text)
            if reading is not None:
                return self._judgement(reading, usage, asks=len(unreadable) + 1)
            unreadable.append(response.text)
        asks = len(unreadable)
        reason = (
            f"unjudged: {asks} {'reply' if asks == 1 else 'replies'} of {self.llm.model} "
            f"could not be read ({rule.expects}): {first_lines(unreadable)}"
        )
        return Judgement(None, self.name, reason, usage=usage, unjudged=True, asks=asks)

    def _messages(self, question: str, answer: str, ground_truth: str) -> list[Message]:
        """Our prompt (system + task), or the user's template whole as one user message,
        as the official graders send theirs."""
        if self.template is not None:
            values = {"question": question, "answer": answer, "ground_truth": ground_truth}
            return [Message.task(fill_template(self.template, self.protocol, values))]
        system, task = judge_prompt(question, answer, ground_truth, self.protocol.template)
        return [Message.system(system), Message.task(task)]

    def _judgement(self, reading: Reading, usage: dict[str, int], asks: int) -> Judgement:
        word = reading.label or ("CORRECT" if reading.correct else "INCORRECT")
        said = f"{self.llm.model} says {word}"
        said += "" if self.rule == "default" else f" ({self.rule} rule)"
        said += f" at ask {asks}" if asks > 1 else ""
        return Judgement(
            reading.correct,
            self.name,
            f"{said}: {reading.reason}",
            reading.score,
            usage,
            label=reading.label,
            confidence=reading.confidence,
            extracted_answer=reading.extracted_answer,
            asks=asks,
        )


@dataclass(frozen=True)
class JudgeOptions:
    """The other ``benchmark.judge`` keys, which some judges read."""

    rel_tol: float = 1e-6
    abs_tol: float = 0.0
    ordered: bool = False
    rule: str = "default"
    llm: LLMClient | None = None
    llm_settings: GenerationSettings | None = None
    template: str | None = None
    max_asks: int | None = None


def _llm_judge(options: JudgeOptions) -> Judge:
    if options.llm is None:
        raise ConfigError(
            "benchmark.judge.name=llm needs a model: benchmark.judge.llm must name an "
            "llm preset (conf/llm/<name>.yaml)."
        )
    return LLMJudge(
        options.llm,
        options.llm_settings,
        options.rule,
        template=options.template,
        max_asks=options.max_asks,
    )


# The one registry of judges: benchmark.judge.name's value -> how the judge is built.
JUDGE_BUILDERS: dict[JudgeName, Callable[[JudgeOptions], Judge]] = {
    JudgeName.EXACT: lambda _: ExactJudge(),
    JudgeName.NORMALIZED: lambda _: NormalizedJudge(),
    JudgeName.NUMERIC: lambda o: NumericJudge(o.rel_tol, o.abs_tol),
    JudgeName.LIST: lambda o: ListJudge(o.ordered, o.rel_tol, o.abs_tol),
    JudgeName.GAIA: lambda _: GaiaJudge(),
    JudgeName.AIME: lambda _: AimeJudge(),
    JudgeName.LLM: _llm_judge,
}


def make_judge(
    name: str,
    *,
    rel_tol: float = 1e-6,
    abs_tol: float = 0.0,
    ordered: bool = False,
    rule: str = "default",
    llm: LLMClient | None = None,
    llm_settings: GenerationSettings | None = None,
    template: str | None = None,
    max_asks: int | None = None,
) -> Judge:
    """The judge ``benchmark.judge.name`` names, configured from the other judge keys."""
    if name not in JUDGES:
        raise ConfigError(
            f"benchmark.judge.name={name!r} is not a judge; use one of {', '.join(JUDGES)}."
        )
    options = JudgeOptions(rel_tol, abs_tol, ordered, rule, llm, llm_settings, template, max_asks)
    return JUDGE_BUILDERS[JudgeName(name)](options)
