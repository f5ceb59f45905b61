r"""The llm judge's rules: one entry of :data:`LLM_RULES` per grading protocol.

A rule (``benchmark.judge.rule``) says everything about one benchmark's protocol: the
prompt our judge model is sent (a file in ``src/deepledger/prompts/``, our own words
asking for exactly the official output fields), how the reply is read, the label set
and fields it returns (a preset's ``benchmark.judge.labels`` / ``fields`` must be among
them: :func:`check_protocol`), and the placeholders of the official template text a
user may run instead (``benchmark.judge.template``: :func:`load_template`).

==============  ===================================  =================================
rule            reply read as                        official grader
==============  ===================================  =================================
default         CORRECT / INCORRECT + Reason          (ours)
gaia_text       CORRECT / INCORRECT + Reason          MiroThinker's GAIA-text judge
hle             extracted_final_answer, reasoning,    HLE's judge script
                correct: yes|no, confidence
browsecomp      the same four fields                  simple-evals' browsecomp_eval
simpleqa        A / B / C = CORRECT / INCORRECT /     simple-evals' simpleqa_eval
                NOT_ATTEMPTED
xbench          最终答案, 解释, 结论: 正确|错误       xbench-evals' eval_grader
frames          Explanation, Decision: TRUE|FALSE     the FRAMES paper's autorater
deepsearchqa    JSON checklist (expected, extra)      (ours, DeepSearchQA's F1)
==============  ===================================  =================================

How each verdict is read (:mod:`deepledger.bench.verdict` for the labels; ``<think>``
blocks are removed first; a reply with no verdict, two different ones or one followed by
a contradicting word is unreadable, and unreadable is never a guess):

- ``default``, ``gaia_text``: the CORRECT / INCORRECT verdict (also xbench's ``结论``).
- ``hle``, ``browsecomp``: the extracted answer (``extracted_final_answer:`` or our
  older ``Extracted answer:``, also a JSON key) is read apart, so a CORRECT inside it is
  no verdict; the verdict is ``correct: yes | no`` (``true`` / ``false``; bold, quoted, a
  JSON key) or CORRECT / INCORRECT. An extracted answer of ``None`` (empty, ``null``,
  ``n/a``) is incorrect whatever the verdict. ``confidence:`` (0-100, "85%" too; the
  official form puts 100 when the response states none) fills the judgement's
  confidence; out of range or two different values: none.
- ``simpleqa``: a line that is only the grade: the letter ``A`` / ``B`` / ``C``
  (upper case; bold, quoted, bracketed, after ``Grade:``), the letter with its label
  (``A: CORRECT``; a letter with another letter's label is unreadable) or the label
  itself (``NOT_ATTEMPTED``, ``not attempted``). NOT_ATTEMPTED is not correct; the label
  is kept (``Judgement.label``) for SimpleQA's metrics. Prose around a letter is not a
  grade ("The answer is A" is unreadable: the official parser takes the first A, B or
  C anywhere, which reads "As" as A). No answer at all (none, empty) is NOT_ATTEMPTED
  without asking the model, as SimpleQA's grader grades an empty response.
- ``xbench``: ``结论`` with ``正确`` / ``错误`` only (either colon, bold); ``最终答案`` is
  the extracted answer (``无`` is none: incorrect), ``解释`` the reason.
- ``frames``: ``Decision:`` then ``TRUE`` / ``FALSE`` (any case, quoted as the paper's
  format writes it); ``Explanation:`` is the reason.
- ``deepsearchqa``: a JSON object ``{"expected": {"<part>": true | false, ...},
  "extra": ["<answer the truth lacks>", ...], "reason": "..."}`` read from a fenced
  block or the first ``{`` to the last ``}`` (small JSON slips forgiven); correct iff
  every part is found and nothing is extra; ``score`` = 2·found / (expected + found +
  extra); the label is DeepSearchQA's outcome: FULLY_CORRECT, CORRECT_WITH_EXTRANEOUS
  (every part and extra answers), PARTIALLY_CORRECT (some parts), FULLY_INCORRECT (none).

A user's template (``benchmark.judge.template=<path>``) is sent whole as one user
message, as the official graders send theirs, with the placeholders its rule's official
template uses filled (``{question}``, ``{correct_answer}``, ``{response}``; SimpleQA's
``{question}``, ``{target}``, ``{predicted_answer}``; ``{{`` / ``}}`` are literal braces,
as in a Python format string). The reply is read by the rule's reader above.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import json_repair

from deepledger.bench.verdict import Labels, read_grade, read_labels, strip_thinking
from deepledger.config import JudgeConfig, JudgeRule
from deepledger.errors import ConfigError
from deepledger.messages import JSONObject
from deepledger.paths import resolve_data_path
from deepledger.prompts import render


def show(text: str, limit: int = 80) -> str:
    """A value for a one-line reason: whitespace collapsed, long ones cut, quoted."""
    flat = " ".join(text.split())
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return repr(flat)


_PROMPT = "judge.md"
_TASK_MARKER = "<!-- task -->"
_REASON_LINE = re.compile(
    r"^[\s*_#>\"'-]*(?:reason(?:ing)?|explanation|解释)[*_\"']*\s*[:=\-：]\s*[*_\"']*"
    r"(?P<reason>.+)$",
    re.IGNORECASE,
)
# Our prompt's "Extracted answer:" and the official graders' "extracted_final_answer:",
# also as a JSON key. A quoted value ends at its closing quote, so the rest of a
# one-line JSON object (its "correct" key) stays to be read.
_EXTRACTED_LINE = re.compile(
    r"^[\s*_#>{\"'-]*extracted(?:[\s_]+final)?[\s_]+answer[*_\"']*\s*[:=-]\s*"
    r"(?P<answer>\"(?:[^\"\\\n]|\\.)*\"|.*)",
    re.IGNORECASE | re.MULTILINE,
)
_NO_EXTRACTED = {"", "none", "null", "n/a"}
# "None (the response gives no answer)", "None." — but not "None of the above", an answer.
_NO_EXTRACTED_SAID = re.compile(r"^\s*(?:none|null|n/a)\s*(?:$|[(\[.,;:—–-])", re.IGNORECASE)
_NO_EXTRACTED_ZH = {"无", "没有", "无答案"}
# xbench's 最终答案 line: its value is the candidate's text, read apart from the verdict.
_FINAL_ANSWER_LINE = re.compile(
    r"^[\s*_#>{\"'-]*最终答案[*_\"']*\s*[:=：]?\s*[*_\"']*(?P<answer>.*)$", re.MULTILINE
)
_CONFIDENCE = re.compile(
    r"(?:^|[{,])[\s*_#>`\"'~\-•+]*confidence[*_`\"'~]*\s*[:=\-：][\s*_`\"'~]*"
    r"(?P<value>\d+(?:\.\d+)?)\s*(?:\\?%|percent)?",
    re.IGNORECASE | re.MULTILINE,
)
_JSON_FENCE = re.compile(r"```(?:json)?\s*(\{.*\})\s*```", re.DOTALL | re.IGNORECASE)
_REASON_LIMIT = 200
_JSON_REASON = re.compile(
    r'"(?:reason(?:ing)?|explanation)"\s*:\s*"(?P<reason>(?:[^"\\]|\\.)*)"', re.IGNORECASE
)
_NOT_PROSE = re.compile(r"^\s*(?:```\w*|[{}\[\],]*)\s*$")  # a fence or a JSON brace line
# A verdict at the start of a line, left out when that line's words serve as the reason.
_LABEL_WORDS = re.compile(
    r"^[\s*_#>`\"'{-]*(?:(?:final\s+)?(?:verdict|judge?ment|grade)[*_`\"']*\s*[:=\-：]?\s*)?"
    r"[*_`\"']*(?:correct|incorrect|结论)(?![A-Za-z])[*_`\"']*\s*[:=\-：]?\s*[*_`\"']*(?:yes|no|true|false|正确|错误)?"
    r"(?![A-Za-z])",
    re.IGNORECASE,
)


def judge_prompt(
    question: str, answer: str, ground_truth: str, template: str = _PROMPT
) -> tuple[str, str]:
    """(system, task) texts for the model, from ``prompts/<template>``."""
    text = render(template, question=question, answer=answer, ground_truth=ground_truth)
    system, marker, task = text.partition(_TASK_MARKER)
    if not marker:
        raise RuntimeError(f"prompts/{template} lacks the {_TASK_MARKER} line")
    return system.strip(), task.strip()


def _one_line(text: str) -> str:
    flat = " ".join(text.split()).strip(" .:-–—*_")
    return flat[: _REASON_LIMIT - 1] + "…" if len(flat) > _REASON_LIMIT else flat


def parse_verdict(
    reply: str, labels: frozenset[Labels] = frozenset({Labels.VERDICT})
) -> tuple[bool, str] | None:
    """(correct, reason) read from the judge model's reply, or None if it has no verdict
    (rules in :mod:`deepledger.bench.verdict`)."""
    correct = read_labels(reply, labels)
    if correct is None:
        return None
    return correct, _reason(strip_thinking(reply).splitlines())


def _reason(lines: list[str]) -> str:
    for line in lines:
        if match := _REASON_LINE.match(line):
            return _one_line(match["reason"].strip().rstrip(",").strip("\"'"))
    if match := _JSON_REASON.search("\n".join(lines)):
        return _one_line(match["reason"])
    for line in lines:
        if _NOT_PROSE.match(line):
            continue
        # The verdict line's own words after the label, or the first other line.
        text = _one_line(_LABEL_WORDS.sub("", line, count=1).strip("\"',{} "))
        if text:
            return text
    return "the judge gave no reason"


@dataclass(frozen=True)
class Reading:
    """What a judge model's reply says, once read by a rule."""

    correct: bool
    reason: str
    score: float | None = None
    label: str | None = None  # the protocol's label, when it has more than two
    confidence: float | None = None  # the response's own confidence, 0-100
    extracted_answer: str | None = None  # the final answer the judge found


def read_verdict(reply: str) -> Reading | None:
    """The ``default`` and ``gaia_text`` rules: a CORRECT / INCORRECT verdict."""
    verdict = parse_verdict(reply)
    return Reading(*verdict) if verdict else None


def read_extracted_verdict(reply: str) -> Reading | None:
    """The ``hle`` and ``browsecomp`` rules: an extracted answer, then a CORRECT /
    INCORRECT or a ``correct: yes | no`` verdict (the official graders' form), and the
    response's confidence when the judge gives it."""
    reply = strip_thinking(reply)
    match = _EXTRACTED_LINE.search(reply)
    # The extracted answer is the candidate's text: a CORRECT inside it is no verdict.
    rest = _EXTRACTED_LINE.sub("", reply) if match else reply
    verdict = parse_verdict(rest, frozenset({Labels.VERDICT, Labels.YES_NO}))
    if verdict is None:
        return None
    correct, why = verdict
    confidence = read_confidence(rest)
    if match is None:
        return Reading(correct, f"no extracted answer given; {why}", confidence=confidence)
    extracted = _one_line(match["answer"].strip().rstrip(",").strip("\"'"))
    if extracted.lower() in _NO_EXTRACTED or _NO_EXTRACTED_SAID.match(extracted):
        why = f"the judge found no final answer in the response; {why}"
        return Reading(False, why, confidence=confidence, extracted_answer=extracted)
    why = f"extracted {show(extracted)}; {why}"
    return Reading(correct, why, confidence=confidence, extracted_answer=extracted)


def read_confidence(reply: str) -> float | None:
    """The ``confidence:`` field (also a JSON key; "85", "85%", "85.5 %"), or None when
    the reply has none, gives one outside 0-100, or gives two different ones."""
    values = {float(m["value"]) for m in _CONFIDENCE.finditer(strip_thinking(reply))}
    if len(values) != 1:
        return None
    value = values.pop()
    return value if 0 <= value <= 100 else None


def read_conclusion(reply: str) -> Reading | None:
    """The ``xbench`` rule: ``最终答案`` (the extracted answer; ``无`` when there is
    none), ``解释`` and ``结论: 正确 | 错误``."""
    reply = strip_thinking(reply)
    match = _FINAL_ANSWER_LINE.search(reply)
    rest = _FINAL_ANSWER_LINE.sub("", reply) if match else reply
    verdict = parse_verdict(rest, frozenset({Labels.CONCLUSION}))
    if verdict is None:
        return None
    correct, why = verdict
    if match is None:
        return Reading(correct, f"no 最终答案 given; {why}")
    extracted = _one_line(match["answer"].strip().strip("\"'[]【】"))
    if extracted.lower() in _NO_EXTRACTED or extracted in _NO_EXTRACTED_ZH:
        why = f"the judge found no final answer in the response; {why}"
        return Reading(False, why, extracted_answer=extracted)
    return Reading(correct, f"extracted {show(extracted)}; {why}", extracted_answer=extracted)


def read_decision(reply: str) -> Reading | None:
    """The ``frames`` rule: the FRAMES autorater's ``Decision: TRUE | FALSE`` (whether
    the ground truth is present in the answer), with its ``Explanation:``."""
    verdict = parse_verdict(reply, frozenset({Labels.DECISION}))
    return Reading(*verdict) if verdict else None


def read_letter_grade(reply: str) -> Reading | None:
    """The ``simpleqa`` rule: A / B / C = CORRECT / INCORRECT / NOT_ATTEMPTED. Only
    CORRECT is correct; the label is kept for SimpleQA's metrics."""
    label = read_grade(reply)
    if label is None:
        return None
    return Reading(label == "CORRECT", f"grade {label}", label=label)


def _json_object(reply: str) -> JSONObject | None:
    fence = _JSON_FENCE.search(reply)
    if fence:
        text = fence.group(1)
    else:
        start, end = reply.find("{"), reply.rfind("}")
        if start == -1 or end < start:
            return None
        text = reply[start : end + 1]
    # Judges copy trailing commas and single quotes from examples; json_repair forgives them.
    value = json_repair.loads(text)
    return value if isinstance(value, dict) else None


def read_checklist(reply: str) -> Reading | None:
    """The ``deepsearchqa`` rule: a JSON checklist of expected parts and extra answers."""
    data = _json_object(reply)
    if data is None:
        return None
    expected, extra = data.get("expected"), data.get("extra") or []
    if not isinstance(expected, dict) or not expected:
        return None
    if not all(isinstance(found, bool) for found in expected.values()):
        return None
    if not isinstance(extra, list) or not all(isinstance(item, str) for item in extra):
        return None
    missing = [str(part) for part, found in expected.items() if not found]
    found = len(expected) - len(missing)
    score = 2 * found / (len(expected) + found + len(extra))
    parts = [f"{found} of {len(expected)} parts found"]
    parts += [f"missing {_show_texts(missing)}"] if missing else []
    parts += [f"extra {_show_texts(extra)}"] if extra else []
    why = data.get("reason")
    reason = "; ".join(parts) + (f": {_one_line(why)}" if isinstance(why, str) and why else "")
    return Reading(not missing and not extra, reason, score, label=_outcome(found, missing, extra))


# DeepSearchQA's outcome categories: the deepsearchqa rule's labels, which its metrics
# count (bench/protocol_metrics.py).
FULLY_CORRECT = "FULLY_CORRECT"
CORRECT_WITH_EXTRANEOUS = "CORRECT_WITH_EXTRANEOUS"
PARTIALLY_CORRECT = "PARTIALLY_CORRECT"
FULLY_INCORRECT = "FULLY_INCORRECT"
OUTCOMES = (FULLY_CORRECT, CORRECT_WITH_EXTRANEOUS, PARTIALLY_CORRECT, FULLY_INCORRECT)


def _outcome(found: int, missing: list[str], extra: list[str]) -> str:
    """DeepSearchQA's outcome category of a checklist."""
    if not found:
        return FULLY_INCORRECT
    if missing:
        return PARTIALLY_CORRECT
    return CORRECT_WITH_EXTRANEOUS if extra else FULLY_CORRECT


def _show_texts(texts: list[str], limit: int = 3) -> str:
    shown = ", ".join(show(text, 40) for text in texts[:limit])
    return shown + (f" and {len(texts) - limit} more" if len(texts) > limit else "")


# The official templates' placeholders, by what they hold.
_OFFICIAL_SLOTS = {"question": "question", "correct_answer": "ground_truth", "response": "answer"}
_SIMPLEQA_SLOTS = {"question": "question", "target": "ground_truth", "predicted_answer": "answer"}
_VERDICT_FIELDS = ("verdict", "reasoning")
_EXTRACTED_FIELDS = ("extracted_answer", "reasoning", "verdict", "confidence")


@dataclass(frozen=True)
class LLMRule:
    """One grading protocol: how its judge model is asked and its reply read."""

    template: str  # our prompt: a file in src/deepledger/prompts/
    read: Callable[[str], Reading | None]
    expects: str  # what a readable reply holds, for the reason when it holds none
    labels: tuple[str, ...]  # the label set the reader reads, as a preset names it
    fields: tuple[str, ...]  # the fields the reply returns
    # An official template's placeholders -> what fills them (question, answer, ground_truth).
    slots: dict[str, str] = field(default_factory=lambda: dict(_OFFICIAL_SLOTS))
    scored: bool = False  # its readings carry a score (partial credit)

    def label_of(self, reading: Reading) -> str:
        """The reading as one of this protocol's labels (the first is the correct one)."""
        if reading.label is not None:
            return reading.label
        return self.labels[0] if reading.correct else self.labels[1]


# Unreadable: no verdict, two different ones, or one followed by a word that says otherwise.
_VERDICT = "no CORRECT or INCORRECT verdict, or two, or one contradicted"
_YES_NO_VERDICT = (
    "no CORRECT / INCORRECT or 'correct: yes / no' verdict, or two, or one contradicted"
)
# The one registry of llm judge rules: benchmark.judge.rule's value -> its protocol.
LLM_RULES: dict[JudgeRule, LLMRule] = {
    JudgeRule.DEFAULT: LLMRule(
        _PROMPT, read_verdict, _VERDICT, ("CORRECT", "INCORRECT"), _VERDICT_FIELDS
    ),
    JudgeRule.GAIA_TEXT: LLMRule(
        "judge_gaia_text.md", read_verdict, _VERDICT, ("CORRECT", "INCORRECT"), _VERDICT_FIELDS
    ),
    JudgeRule.HLE: LLMRule(
        "judge_hle.md", read_extracted_verdict, _YES_NO_VERDICT, ("yes", "no"), _EXTRACTED_FIELDS
    ),
    JudgeRule.BROWSECOMP: LLMRule(
        "judge_browsecomp.md",
        read_extracted_verdict,
        _YES_NO_VERDICT,
        ("yes", "no"),
        _EXTRACTED_FIELDS,
    ),
    JudgeRule.SIMPLEQA: LLMRule(
        "judge_simpleqa.md",
        read_letter_grade,
        "no grade A, B or C (CORRECT, INCORRECT, NOT_ATTEMPTED) on a line of its own, or two",
        ("CORRECT", "INCORRECT", "NOT_ATTEMPTED"),
        ("verdict",),
        slots=dict(_SIMPLEQA_SLOTS),
    ),
    JudgeRule.XBENCH: LLMRule(
        "judge_xbench.md",
        read_conclusion,
        "no '结论: 正确 / 错误', or two, or one contradicted",
        ("正确", "错误"),
        ("extracted_answer", "reasoning", "verdict"),
    ),
    JudgeRule.FRAMES: LLMRule(
        "judge_frames.md",
        read_decision,
        "no 'Decision: TRUE / FALSE', or two, or one contradicted",
        ("TRUE", "FALSE"),
        ("reasoning", "verdict"),
    ),
    JudgeRule.DEEPSEARCHQA: LLMRule(
        "judge_deepsearchqa.md",
        read_checklist,
        "no JSON object with a non-empty 'expected' of true/false and an 'extra' list",
        OUTCOMES,
        ("expected", "extra", "reasoning"),
        scored=True,
    ),
}


def rule_of(name: str) -> LLMRule:
    """The rule ``benchmark.judge.rule`` names; an unknown one is a ConfigError."""
    if name not in LLM_RULES:
        raise ConfigError(
            f"benchmark.judge.rule={name!r} is not a judge rule; use one of {', '.join(LLM_RULES)}."
        )
    return LLM_RULES[JudgeRule(name)]


def check_protocol(judge: JudgeConfig) -> None:
    """A preset's claims about the llm judge's protocol, checked against its rule
    (before any work): the labels and fields it names must be ones the rule returns,
    and a template must be a readable file with only the rule's placeholders."""
    if judge.name != "llm":
        return
    rule = rule_of(judge.rule)
    for key, claimed, known in (
        ("labels", judge.labels, rule.labels),
        ("fields", judge.fields, rule.fields),
    ):
        unknown = [str(item) for item in claimed or [] if str(item) not in known]
        if unknown:
            # YAML reads an unquoted yes / no / true / false as a boolean.
            hint = " (quote them in YAML)" if {"True", "False"} & set(unknown) else ""
            raise ConfigError(
                f"benchmark.judge.{key}: {', '.join(map(repr, unknown))} cannot be read by "
                f"benchmark.judge.rule={judge.rule}, whose {key} are {', '.join(known)}{hint}."
            )
    if judge.template is not None:
        load_template(judge.template, rule)


_SLOT = re.compile(r"\{\{|\}\}|\{(?P<name>[^{}]*)\}")


def load_template(path: str, rule: LLMRule) -> str:
    """The text of a user's template file, checked: it exists and each ``{name}`` in
    it is one of the rule's placeholders. Otherwise a ConfigError naming the file."""
    where = resolve_data_path(path)
    try:
        text = Path(where).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"benchmark.judge.template={path}: cannot read {where} ({exc.__class__.__name__}: "
            f"{exc}); give the path of your copy of the official judge template."
        ) from None
    names = {m["name"] for m in _SLOT.finditer(text) if m["name"] is not None}
    if unknown := sorted(names - set(rule.slots)):
        raise ConfigError(
            f"benchmark.judge.template={path}: {where} has the placeholder(s) "
            f"{', '.join('{' + n + '}' for n in unknown)}, which this rule does not fill; "
            f"its placeholders are {', '.join('{' + n + '}' for n in rule.slots)}."
        )
    return text


def fill_template(text: str, rule: LLMRule, values: dict[str, str]) -> str:
    """The template with its placeholders filled in one pass (a filled-in answer that
    holds "{question}" is left as it is), ``{{`` / ``}}`` made single braces."""

    def one(match: re.Match[str]) -> str:
        if match["name"] is None:
            return match.group(0)[0]
        return values[rule.slots[match["name"]]]

    # The official templates are stripped before filling; a file's final newline is not text.
    return _SLOT.sub(one, text.strip())


def template_digest(path: str) -> str:
    """The sha256 of a template file, for the judge's identity (a changed template is
    another judge)."""
    return hashlib.sha256(Path(resolve_data_path(path)).read_bytes()).hexdigest()


def first_lines(replies: Sequence[str]) -> str:
    """The first non-empty line of each unreadable reply, for a one-line reason."""
    shown = []
    for reply in replies:
        line = next((s for s in reply.strip().splitlines() if s.strip()), "")
        shown.append(show(line, 60))
    return "; ".join(shown)
