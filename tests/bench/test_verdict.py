"""A generated battery of judge reply shapes, each with the verdict it must be read as.

Every label set is combined with casings, markdown decorations, separators and layouts
(alone, with reasoning, JSON, fenced, after a ``<think>`` block holding the opposite
verdict); the contradictions at the end must all be unreadable (None), never a guess.
"""

from __future__ import annotations

import itertools

import pytest

from deepledger.bench.judge_rules import read_extracted_verdict, read_verdict
from deepledger.bench.verdict import Labels, read_labels, strip_thinking

VERDICT = frozenset({Labels.VERDICT})
BOTH = frozenset({Labels.VERDICT, Labels.YES_NO})
SEPARATORS = (":", " =", " -", "：")
CASINGS = (str.lower, str.upper, str.title)


def _emphasis(kind: str, text: str) -> str:
    return {
        "plain": text,
        "bold": f"**{text}**",
        "italics": f"*{text}*",
        "underscores": f"_{text}_",
        "quotes": f'"{text}"',
        "heading": f"## {text}",
        "bullet": f"- {text}",
    }[kind]


EMPHASES = ("plain", "bold", "italics", "underscores", "quotes", "heading", "bullet")


def _keyed(emphasis: str, label: str, sep: str) -> str:
    """``Verdict: label``; a heading or bullet goes before the key, emphasis on the label."""
    if emphasis in ("heading", "bullet"):
        return _emphasis(emphasis, f"Verdict{sep} {label}")
    return f"Verdict{sep} {_emphasis(emphasis, label)}"


def _think(opposite: str) -> str:
    return f"<think>\nIt might be {opposite}.\n{opposite}\n</think>\n"


def _label_shapes() -> list[tuple[str, bool]]:
    shapes = []
    for correct, case, emphasis in itertools.product((True, False), CASINGS, EMPHASES):
        label = case("correct" if correct else "incorrect")
        opposite = "INCORRECT" if correct else "CORRECT"
        lines = [_emphasis(emphasis, label)]
        lines += [_keyed(emphasis, label, sep) for sep in SEPARATORS]
        for line in lines:
            shapes += [
                (line, correct),
                (f"The response names the same city as the ground truth.\n{line}", correct),
                (f"{line}\nReason: the response names the same city.", correct),
                (f"{_think(opposite)}{line}\nReason: checked.", correct),
            ]
        shapes += [
            (f'{{\n  "verdict": "{label}",\n  "reason": "same city"\n}}', correct),
            (f'```json\n{{"verdict": "{label}", "reason": "same city"}}\n```', correct),
        ]
    return shapes


def _yes_no_shapes() -> list[tuple[str, bool]]:
    shapes = []
    values = {True: ("yes", "true"), False: ("no", "false")}
    for correct, case, sep in itertools.product((True, False), CASINGS, SEPARATORS):
        for word in values[correct]:
            key, value = case("correct"), case(word)
            opposite = values[not correct][0]
            lines = [
                f"{key}{sep} {value}",
                f"**{key}{sep}** {value}",
                f"**{key}**{sep} {value}",
                f"*{key}*{sep} {value}",
                f"## {key}{sep} {value}",
                f"- {key}{sep} {value}",
                f'"{key}"{sep} "{value}"',
            ]
            for line in lines:
                shapes += [
                    (line, correct),
                    (f"extracted_final_answer: Paris\nreasoning: same city\n{line}", correct),
                    (f"{line}\nconfidence: 85", correct),
                    (f"{_think(f'correct: {opposite}')}{line}", correct),
                ]
            shapes += [
                (f'{{\n  "extracted_final_answer": "Paris",\n  "{key}": "{value}"\n}}', correct),
                (
                    f'```json\n{{"reasoning": "r", "{key}": "{value}", "confidence": 85}}\n```',
                    correct,
                ),
            ]
        literal = "true" if correct else "false"
        shapes.append((f'{{"extracted_final_answer": "Paris", "correct": {literal}}}', correct))
    return shapes


def _conclusion_shapes() -> list[tuple[str, bool]]:
    shapes = []
    for correct, sep, space in itertools.product((True, False), SEPARATORS, ("", " ")):
        value, opposite = ("正确", "错误") if correct else ("错误", "正确")
        lines = [
            f"结论{sep}{space}{value}",
            f"**结论**{sep}{space}{value}",
            f"**结论{sep}**{space}{value}",
            f"## 结论{sep}{space}{value}",
            f"- 结论{sep}{space}{value}",
        ]
        for line in lines:
            shapes += [
                (line, correct),
                (f"最终答案: 巴黎\n解释: 与标准答案一致。\n{line}", correct),
                (f"{line}\n解释: 与标准答案一致。", correct),
                (f"<think>\n结论: {opposite}\n</think>\n{line}", correct),
            ]
    return shapes


def _unreadable_label_shapes() -> list[str]:
    """Every verdict line of the battery made unreadable: only inside thinking, followed
    by a word that says otherwise, negated, or followed by the opposite verdict line."""
    shapes = []
    for correct, case, emphasis in itertools.product((True, False), CASINGS, EMPHASES):
        label = case("correct" if correct else "incorrect")
        other = case("incorrect" if correct else "correct")
        no = "No" if correct else "Yes"
        for line in (_emphasis(emphasis, label), _keyed(emphasis, label, ":")):
            shapes += [
                f"<think>{line}</think>",
                f"<think>\n{line}",
                f"{line}? {no}.",
                f"{line} - {no.lower()}, not really",
                f"{line}\nOn reflection:\n{_emphasis(emphasis, other)}",
            ]
        shapes.append(f"Verdict: not {label}")
    return shapes


LABELS = _label_shapes()
YES_NO = _yes_no_shapes()
CONCLUSIONS = _conclusion_shapes()


def test_the_battery_is_large():
    assert min(len(LABELS), len(YES_NO), len(CONCLUSIONS)) >= 160
    assert len(LABELS) + len(YES_NO) + len(CONCLUSIONS) >= 600


@pytest.mark.parametrize(("reply", "correct"), LABELS + CONCLUSIONS)
def test_verdict_labels(reply, correct):
    assert read_labels(reply, VERDICT) is correct
    assert read_labels(reply, BOTH) is correct


@pytest.mark.parametrize(("reply", "correct"), YES_NO + LABELS + CONCLUSIONS)
def test_yes_no_labels_and_the_hle_rule(reply, correct):
    assert read_labels(reply, BOTH) is correct
    reading = read_extracted_verdict(reply)
    assert reading is not None and reading.correct is correct


@pytest.mark.parametrize(("reply", "correct"), YES_NO)
def test_a_yes_no_verdict_is_not_a_label_of_the_default_rule(reply, correct):
    # In the CORRECT / INCORRECT label set "correct: no" is a label followed by a word
    # that contradicts it: unreadable, never CORRECT. "correct: yes" agrees with itself.
    reading = read_verdict(reply)
    if correct:
        assert reading is None or reading.correct is True
    else:
        assert reading is None


CONTRADICTIONS = [
    "CORRECT? No.",
    "CORRECT: not really",
    "Verdict: correct. No, INCORRECT.",
    "INCORRECT: yes it is CORRECT",
    "not correct",
    "NOT CORRECT",
    "The answer is NOT INCORRECT",
    "INCORRECT\nOn reflection the numbers agree.\nCORRECT",
    "CORRECT\nINCORRECT",
    "**Verdict:** CORRECT\n**Final verdict:** INCORRECT",
    "Both CORRECT and INCORRECT parts",
    "",
    "The judge could not decide.",
    "<think>CORRECT</think>",
    "<think>\nThe answer is CORRECT",
    "<think>INCORRECT</think>\n\n",
    "Verdict: maybe",
    "结论: 正确？不，错误",
    "结论：错误 正确",
    "结论: 正确\n结论: 错误",
    "结论: 不正确",
]
YES_NO_CONTRADICTIONS = [
    "correct: yes? No.",
    "correct: no, yes",
    "correct: yes\ncorrect: no",
    '{"correct": "yes", "correct": "no"}',
    "correct: yes\nINCORRECT",
    "correct: maybe",
    "correct: no not",
    "<think>correct: yes</think>",
    "correct: true\nverdict: INCORRECT",
    '{"correct": "perhaps"}',  # a key whose value is no verdict: not CORRECT
    '{"Correct": "in part"}',
    "correct: unknown",
    "**Correct:** probably",
]


@pytest.mark.parametrize("reply", _unreadable_label_shapes())
def test_generated_unreadable_shapes(reply):
    assert read_labels(reply, VERDICT) is None
    assert read_labels(reply, BOTH) is None
    assert read_verdict(reply) is None and read_extracted_verdict(reply) is None


@pytest.mark.parametrize("reply", CONTRADICTIONS)
def test_contradicted_or_missing_verdicts_are_unreadable(reply):
    assert read_labels(reply, VERDICT) is None
    assert read_labels(reply, BOTH) is None


@pytest.mark.parametrize("reply", ["correct: no", "Correct - no.", "**Correct:** false"])
def test_a_yes_no_form_in_the_verdict_label_set_is_a_contradiction(reply):
    assert read_labels(reply, VERDICT) is None
    assert read_labels(reply, BOTH) is False


@pytest.mark.parametrize("reply", CONTRADICTIONS + YES_NO_CONTRADICTIONS)
def test_contradictions_are_unreadable_in_the_hle_rule(reply):
    assert read_labels(reply, BOTH) is None
    assert read_extracted_verdict(reply) is None


@pytest.mark.parametrize(
    ("reply", "left"),
    [
        ("<think>a</think>b", "b"),
        ("<THINK>a</THINK>b<think>c</think>d", "bd"),
        ("a</think>b", "b"),  # the opener was dropped by the server
        ("b<think>a", "b"),  # never closed: thinking to the end
        ("<think>only thinking</think>", ""),
    ],
)
def test_strip_thinking(reply, left):
    assert strip_thinking(reply).replace("\n", "") == left


@pytest.mark.parametrize(
    "extracted",
    ["extracted_final_answer: None", "Extracted answer: None", '"extracted_final_answer": "None",'],
)
def test_an_official_none_extracted_answer_is_incorrect(extracted):
    reading = read_extracted_verdict(f"{extracted}\nreasoning: no answer given\ncorrect: yes")
    assert reading is not None and reading.correct is False
    assert "found no final answer" in reading.reason


def test_the_official_hle_form_is_read_with_its_fields():
    reply = "extracted_final_answer: 3/4\nreasoning: 3/4 is not 0.7\ncorrect: no\nconfidence: 90"
    reading = read_extracted_verdict(reply)
    assert reading is not None
    assert (reading.correct, reading.reason) == (False, "extracted '3/4'; 3/4 is not 0.7")
