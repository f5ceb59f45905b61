"""Reading a judge model's verdict from its reply, so that no reply shape can flip it.

A verdict is read per label set (:class:`Labels`): ``CORRECT`` / ``INCORRECT`` (also
xbench's ``结论: 正确`` / ``结论: 错误``), ``correct: yes | no`` (BrowseComp's and HLE's
official output field), xbench's ``结论`` alone, and the FRAMES autorater's ``Decision:
TRUE | FALSE``. :func:`read_labels` returns ``True`` / ``False``, or ``None`` when the
reply holds no verdict, two different ones (a ``correct: yes`` beside "The response is
INCORRECT" in prose counts as two), or a verdict followed by a word that contradicts it
— unreadable is never turned into a guess. SimpleQA's letter grades
(``A`` / ``B`` / ``C``: CORRECT / INCORRECT / NOT_ATTEMPTED) are three labels, not a
verdict: :func:`read_grade` returns the label. ``<think>`` blocks are removed first: a
model's thinking often names both verdicts before it decides.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import Enum

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>.*", re.DOTALL | re.IGNORECASE)
_THINK_CLOSE = re.compile(r"^.*?</think>", re.DOTALL | re.IGNORECASE)

_DECO = r"[*_`\"'~]*"  # markdown emphasis and quotes around a key or a value
_LEAD = r"^[\s*_#>`\"'~{\-•+]*"  # heading, bullet, quote, JSON brace before a key
_SEP = r"\s*[:=\-：]"
_LABEL_LINE = re.compile(
    _LEAD + r"(?:(?:final\s+)?(?:verdict|judgement|judgment|grade)" + _DECO + _SEP + r"?\s*"
    r"[*_`\"'~]*\s*)?(?P<verdict>correct|incorrect)(?![A-Za-z])" + _DECO + r"(?P<rest>.*)$",
    re.IGNORECASE,
)
# The rest of a verdict line may only be punctuation and then a reason: "CORRECT. Same."
_REST = re.compile(r"^\s*(?:[.:!,;?()\[\]{}\"'=\-–—：。].*)?$", re.DOTALL)
_YES_NO = re.compile(
    r"(?:^|[{,])[\s*_#>`\"'~\-•+]*correct" + _DECO + _SEP + r"\s*" + _DECO + r"\s*"
    r"(?P<value>yes|no|true|false)(?![A-Za-z])" + _DECO + r"(?=(?P<rest>[^\n]*))",
    re.IGNORECASE | re.MULTILINE,
)
_CONCLUSION = re.compile(
    r"结论"
    + _DECO
    + _SEP
    + r"\s*"
    + _DECO
    + r"\s*(?P<value>正确|错误)"
    + _DECO
    + r"(?P<rest>[^\n]*)"
)
# FRAMES: "Decision:" then "TRUE" or "FALSE", each possibly quoted as the paper writes them.
_DECISION = re.compile(
    r"(?:^|[{,])[\s*_#>`\"'~\-•+]*decision[*_`\"'~]*\s*[:=\-：][\s*_`\"'~]*"
    r"(?P<value>true|false)(?![A-Za-z])" + _DECO + r"(?=(?P<rest>[^\n]*))",
    re.IGNORECASE | re.MULTILINE,
)
_CAPS_WORD = re.compile(
    r"(?<![A-Za-z])(?P<negated>(?i:not)\s+)?(?P<verdict>CORRECT|INCORRECT)(?![A-Za-z])"
)
_FIRST_WORD = re.compile(r"[A-Za-z]+")
_MEANS_TRUE = {"yes", "true", "correct", "right"}
_MEANS_FALSE = {"no", "false", "incorrect", "wrong"}
# Words that leave a verdict in doubt when they follow it ("correct: maybe").
_HEDGES = {
    "not", "maybe", "partially", "partly", "unclear", "uncertain", "unsure", "possibly",
    "perhaps", "probably", "likely", "unknown", "undetermined", "undecided", "ambiguous",
    "somewhat", "mostly", "depends", "none", "null",
}  # fmt: skip
# "correct": "<value>" — a JSON key whose value must itself be a verdict word.
_JSON_VALUE = re.compile(r'^["\'`]?\s*[:=：]\s*"(?P<value>[^"]*)"')
_Reader = Callable[[str, str], bool]  # (value, rest of the line) -> verdict


class Labels(Enum):
    """The label sets a judge's reply may be read in."""

    VERDICT = "CORRECT / INCORRECT (or 结论: 正确 / 错误)"
    YES_NO = "correct: yes / no"
    CONCLUSION = "结论: 正确 / 错误"
    DECISION = "Decision: TRUE / FALSE"


class _Conflict(Exception):
    """A verdict followed by a word that says otherwise: the reply is unreadable."""


def strip_thinking(reply: str) -> str:
    """The reply without its ``<think>`` blocks: closed ones, an unclosed one (which runs
    to the end), and thinking before a lone ``</think>`` (servers that drop the opener)."""
    text = _THINK_BLOCK.sub("\n", reply)
    text = _THINK_CLOSE.sub("", text) if "</think>" in text.lower() else text
    return _THINK_OPEN.sub("", text)


def read_labels(reply: str, labels: frozenset[Labels]) -> bool | None:
    """True / False as the reply's verdict in ``labels``, or None if it has none or two."""
    text = strip_thinking(reply)
    found: set[bool] = set()
    try:
        if Labels.YES_NO in labels:
            text = _take(_YES_NO, text, found, _yes_no)
        if Labels.DECISION in labels:
            text = _take(_DECISION, text, found, _yes_no)
        if labels & {Labels.VERDICT, Labels.CONCLUSION}:
            text = _take(_CONCLUSION, text, found, _conclusion)
        if Labels.VERDICT in labels:
            if found:  # "correct: yes" beside "The response is INCORRECT": two verdicts
                found |= {w["verdict"] == "CORRECT" for w in _CAPS_WORD.finditer(text)
                          if not w["negated"]}  # fmt: skip
            _verdict_lines(text, found)
            if not found:
                return _caps_word(text)
    except _Conflict:
        return None
    return found.pop() if len(found) == 1 else None


def _take(pattern: re.Pattern[str], text: str, found: set[bool], read: _Reader) -> str:
    """Adds every match's verdict to ``found`` and returns the text without the matches,
    so another label set does not read the same words again."""
    for match in pattern.finditer(text):
        found.add(read(match["value"], match["rest"]))
    return pattern.sub("\n", text)


def _contradicts(verdict: bool, rest: str) -> bool:
    """Whether the first word after a verdict says otherwise ("CORRECT? No.") or hedges."""
    word = _FIRST_WORD.search(rest)
    first = word.group(0).lower() if word else ""
    opposite = _MEANS_FALSE if verdict else _MEANS_TRUE
    # An upper-case opposite label anywhere after it is a second verdict, not a reason.
    label = "INCORRECT" if verdict else "CORRECT"
    return first in opposite or first in _HEDGES or re.search(rf"\b{label}\b", rest) is not None


def _yes_no(value: str, rest: str) -> bool:
    verdict = value.lower() in _MEANS_TRUE
    if _contradicts(verdict, rest):
        raise _Conflict
    return verdict


def _conclusion(value: str, rest: str) -> bool:
    verdict = value == "正确"
    if re.match(r"[\s\W]*(?:不|否|" + ("错误" if verdict else "正确") + ")", rest):
        raise _Conflict
    return verdict


def _verdict_lines(text: str, found: set[bool]) -> None:
    for line in text.splitlines():
        match = _LABEL_LINE.match(line)
        if match is None or not _REST.match(match["rest"]):
            continue
        verdict = match["verdict"].lower() == "correct"
        # "correct: no" is the yes/no label set: in this one it contradicts the label.
        if _contradicts(verdict, match["rest"]):
            raise _Conflict
        value = _JSON_VALUE.match(match["rest"])
        if value and value["value"].strip().lower() not in {*_MEANS_TRUE, *_MEANS_FALSE}:
            raise _Conflict  # {"correct": "perhaps"}: a key with no verdict for its value
        found.add(verdict)


def _caps_word(text: str) -> bool | None:
    """Failing a verdict line: exactly one upper-case label in the text, never negated
    nor followed by a contradicting word (a JSON ``"CORRECT": "NO"``)."""
    words = list(_CAPS_WORD.finditer(text))
    if any(w["negated"] for w in words) or len({w["verdict"] for w in words}) != 1:
        return None
    verdict = words[0]["verdict"] == "CORRECT"
    for word in words:
        rest = text[word.end() :].split("\n", 1)[0]
        if _contradicts(verdict, rest):
            return None
    return verdict


# SimpleQA's grades: the letter its grader asks for, or the label the letter stands for.
NOT_ATTEMPTED = "NOT_ATTEMPTED"  # read by the simpleqa rule and its metrics
GRADES = {"A": "CORRECT", "B": "INCORRECT", "C": NOT_ATTEMPTED}
_GRADE_LINE = re.compile(
    _LEAD + r"(?:(?:final\s+)?(?:grade|verdict|answer|label)" + _DECO + _SEP + r"[\s*_`\"'~(\[]*)?"
    r"[(\[]?(?:(?P<letter>[ABC])(?![A-Za-z0-9])(?:[*_`\"'~)\]]*\s*[:.)\-=]?[\s*_`\"'~]*"
    r"(?P<named>(?-i:CORRECT|INCORRECT|NOT[_ ]ATTEMPTED)))?"
    r"|(?P<label>correct|incorrect|not[_ ]attempted))"
    r"(?![A-Za-z])[*_`\"'~)\]}]*[\s.,;]*$",
    re.IGNORECASE,
)


def read_grade(reply: str) -> str | None:
    """SimpleQA's label (CORRECT, INCORRECT or NOT_ATTEMPTED) from a reply that grades
    with its letter ("A", "**B**", "Grade: C", "A: CORRECT") or the label itself, on a
    line of its own; None when no line is a grade, two lines differ, or a letter comes
    with another letter's label ("A: INCORRECT")."""
    found: set[str] = set()
    for line in strip_thinking(reply).splitlines():
        match = _GRADE_LINE.match(line)
        if match is None:
            continue
        letter, named = match["letter"], match["named"]
        if letter is not None and letter != letter.upper():
            continue  # a lone "a" or "c" is a word, not a grade
        grade = GRADES[letter] if letter else _label(match["label"])
        if named is not None and _label(named) != grade:
            return None
        found.add(grade)
    return found.pop() if len(found) == 1 else None


def _label(text: str) -> str:
    return text.upper().replace(" ", "_")
