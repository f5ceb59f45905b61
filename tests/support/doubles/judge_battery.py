"""Generated judge replies, per grading protocol, each with the verdict its judge meant.

Every label set (SimpleQA's A / B / C, BrowseComp's and HLE's ``correct: yes | no`` with
a confidence, xbench's ``结论: 正确 | 错误``, FRAMES' ``Decision: TRUE | FALSE``,
GAIA-text's bare ``Correct`` / ``Incorrect``) is combined with the casings, markdown,
separators and layouts judges write: alone, with the other fields, as JSON in or out of a
fence, after a ``<think>`` block holding the opposite verdict. Each :class:`Shape` says
the label meant (``None``: no verdict can be read: no label, two, an unknown one, or one
taken back) and whether our reader must read it (``must_read``): prose like "the grade
is B" is meant as B, but reading grades out of prose is how the official SimpleQA parser
reads "As" as A, so ours may leave it unjudged (asked again), never read another label.

``tests/bench/test_judge_battery.py`` checks our readers on every shape;
``benchmarks/fidelity/judge_agreement.py`` compares them with the official parsers.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

CASINGS = (str.lower, str.upper, str.title)
SEPARATORS = (":", "：", " =", " -")


@dataclass(frozen=True)
class Shape:
    reply: str
    intended: str | None  # the label the judge meant; None: nothing can be read
    family: str  # which kind of shape, for the agreement table
    must_read: bool = True  # our reader must give ``intended`` (else: intended or nothing)


def _think(opposite: str) -> str:
    return f"<think>\nMaybe {opposite}.\n{opposite}\n</think>\n"


# -- SimpleQA: A / B / C ---------------------------------------------------------------------

GRADES = {"A": "CORRECT", "B": "INCORRECT", "C": "NOT_ATTEMPTED"}


def _grade_forms(letter: str) -> list[str]:
    label = GRADES[letter]
    return [
        letter,
        f"**{letter}**",
        f'"{letter}"',
        f"({letter})",
        f"{letter}.",
        f"Grade: {letter}",
        f"**Grade:** {letter}",
        f"{letter}: {label}",
        f"{letter}) {label}",
        f"**{letter}: {label}**",
        label,
        label.replace("_", " "),
        label.lower(),
        f'{{"grade": "{letter}"}}',
    ]


def simpleqa_shapes() -> list[Shape]:
    shapes = []
    for letter, label in GRADES.items():
        other = "B" if letter != "B" else "A"
        for form in _grade_forms(letter):
            shapes += [
                Shape(form, label, "grade alone"),
                Shape(f"{form}\n", label, "grade alone"),
                Shape(f"{_think(other)}{form}", label, "after thinking"),
                Shape(f"Comparing the answers.\n\n{form}", label, "after a reasoning line"),
                Shape(f"```\n{form}\n```", label, "fenced"),
            ]
        shapes += [
            Shape(f"The grade is {letter}.", label, "grade in prose", must_read=False),
            Shape(f"I would say {letter}", label, "grade in prose", must_read=False),
            Shape(f"After comparing, {letter}", label, "grade in prose", must_read=False),
        ]
    unreadable = [
        "D",
        "E: UNSURE",
        "A or B",
        "A\nB",
        "A: INCORRECT",
        "B: CORRECT",
        "C: CORRECT",
        "",
        "I cannot grade this.",
        "As the predicted answer is unclear, no grade.",
        "<think>A</think>",
        "<think>\nB",
        "Both A and C apply.",
    ]
    shapes += [Shape(reply, None, "no grade, two, or unknown") for reply in unreadable]
    return shapes


# -- BrowseComp / HLE: extracted_final_answer, reasoning, correct, confidence -----------------


def _official_fields(value: str, confidence: str, key: str = "correct") -> str:
    return (
        "extracted_final_answer: Paris\n"
        "reasoning: the extracted answer names the same city\n"
        f"{key}: {value}\n"
        f"confidence: {confidence}"
    )


def yes_no_shapes() -> list[Shape]:
    shapes = []
    for meant, case, sep in itertools.product(("yes", "no"), CASINGS, SEPARATORS):
        opposite = "no" if meant == "yes" else "yes"
        for word in (meant, {"yes": "true", "no": "false"}[meant]):
            key, value = case("correct"), case(word)
            lines = [
                f"{key}{sep} {value}",
                f"**{key}{sep}** {value}",
                f"**{key}**{sep} {value}",
                f"- {key}{sep} {value}",
                f'"{key}"{sep} "{value}"',
            ]
            for line in lines:
                shapes += [
                    Shape(line, meant, "verdict line alone"),
                    Shape(
                        f"extracted_final_answer: Paris\nreasoning: same\n{line}\nconfidence: 85",
                        meant,
                        "official fields",
                    ),
                    Shape(f"{_think(f'correct: {opposite}')}{line}", meant, "after thinking"),
                ]
        for confidence in ("85", "85%", "100"):
            shapes.append(Shape(_official_fields(meant, confidence), meant, "official fields"))
        data = {
            "extracted_final_answer": "Paris",
            "reasoning": "same city",
            "correct": meant,
            "confidence": 90,
        }
        shapes += [
            Shape(json.dumps(data), meant, "JSON"),
            Shape(json.dumps(data, indent=2), meant, "JSON"),
            Shape(f"```json\n{json.dumps(data, indent=2)}\n```", meant, "JSON in a fence"),
        ]
    unreadable = [
        "correct: maybe",
        "correct: yes\ncorrect: no",
        "correct: yes? No.",
        "correct: no, yes",
        "extracted_final_answer: Paris\nreasoning: same\nconfidence: 80",
        "<think>correct: yes</think>",
        "",
        '{"correct": "perhaps"}',
    ]
    shapes += [Shape(reply, None, "no verdict, two, or taken back") for reply in unreadable]
    return shapes


# -- xbench: 最终答案 / 解释 / 结论 -----------------------------------------------------------


def conclusion_shapes() -> list[Shape]:
    shapes = []
    for meant, sep, space in itertools.product(("正确", "错误"), (":", "："), ("", " ")):
        opposite = "错误" if meant == "正确" else "正确"
        lines = [
            f"结论{sep}{space}{meant}",
            f"**结论**{sep}{space}{meant}",
            f"**结论{sep}**{space}{meant}",
            f"## 结论{sep}{space}{meant}",
            f"- 结论{sep}{space}{meant}",
            f"结论{sep}{space}'{meant}'",
        ]
        for line in lines:
            shapes += [
                Shape(line, meant, "verdict line alone"),
                Shape(
                    f"最终答案{sep}{space}巴黎\n解释{sep}{space}一致。\n{line}",
                    meant,
                    "three fields",
                ),
                Shape(f"{line}\n解释{sep}{space}一致。", meant, "verdict first"),
                Shape(f"<think>\n结论: {opposite}\n</think>\n{line}", meant, "after thinking"),
                Shape(f"最终答案: 巴黎 (结论不变)\n{line}", meant, "answer names a field"),
            ]
    unreadable = [
        "结论: 正确？不，错误",
        "结论: 正确\n结论: 错误",
        "结论: 不正确",
        "结论: 待定",
        "最终答案: 巴黎\n解释: 一致。",
        "<think>结论: 正确</think>",
        "",
        "CORRECT",
    ]
    shapes += [Shape(reply, None, "no conclusion, two, or taken back") for reply in unreadable]
    return shapes


# -- FRAMES: Explanation / Decision ---------------------------------------------------------


def decision_shapes() -> list[Shape]:
    shapes = []
    for meant, case, sep in itertools.product(("TRUE", "FALSE"), CASINGS, (":", " =", " -")):
        opposite = "FALSE" if meant == "TRUE" else "TRUE"
        key, value = case("decision"), case(meant)
        lines = [
            f"{key}{sep} {value}",
            f"**{key}{sep}** {value}",
            f'"{key}{sep}" "{value}"',
            f"- {key}{sep} {value}",
            f"## {key}{sep} {value}",
        ]
        for line in lines:
            shapes += [
                Shape(line, meant, "decision alone"),
                Shape(f"Explanation: the response states it.\n{line}", meant, "official form"),
                Shape(f'"Explanation:" it is stated.\n{line}', meant, "official form"),
                Shape(f"{_think(f'Decision: {opposite}')}{line}", meant, "after thinking"),
            ]
    unreadable = [
        "Decision: TRUE? No.",
        "Decision: TRUE\nDecision: FALSE",
        "Decision: maybe",
        "Explanation: unclear.",
        "TRUE",
        "<think>Decision: TRUE</think>",
        "",
    ]
    shapes += [Shape(reply, None, "no decision, two, or taken back") for reply in unreadable]
    return shapes


# -- GAIA-text (MiroThinker): Correct / Incorrect --------------------------------------------


def correct_incorrect_shapes() -> list[Shape]:
    shapes = []
    for meant, case in itertools.product(("CORRECT", "INCORRECT"), CASINGS):
        word = case(meant)
        opposite = "INCORRECT" if meant == "CORRECT" else "CORRECT"
        for form in (word, f"{word}.", f"**{word}**", f'"{word}"', f"Verdict: {word}"):
            shapes += [
                Shape(form, meant, "verdict alone"),
                Shape(f"{form}\nReason: same city.", meant, "verdict and reason"),
                Shape(f"{_think(opposite)}{form}", meant, "after thinking"),
            ]
    unreadable = ["CORRECT? No.", "not correct", "Correct or incorrect", "", "Unsure."]
    shapes += [Shape(reply, None, "no verdict, two, or taken back") for reply in unreadable]
    return shapes


# The battery per rule; hle and browsecomp share one label set.
BATTERIES = {
    "simpleqa": simpleqa_shapes,
    "browsecomp": yes_no_shapes,
    "hle": yes_no_shapes,
    "xbench": conclusion_shapes,
    "frames": decision_shapes,
    "gaia_text": correct_incorrect_shapes,
}
