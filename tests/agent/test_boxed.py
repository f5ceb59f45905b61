from __future__ import annotations

import pytest

from deepledger.agent.boxed import all_boxed, answer_box, is_non_answer, last_boxed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is \\boxed{42}.", "42"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("nested \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("deep \\boxed{a{b{c}}d}", "a{b{c}}d"),
        ("real \\boxed{Paris} then template \\boxed{}", "Paris"),
        ("real \\boxed{Paris} then \\boxed{answer}", "Paris"),
        ("real \\boxed{Paris} then \\boxed{...}", "Paris"),
        ("complete \\boxed{7} and cut off \\boxed{8", "7"),
        ("no box here", None),
        ("only \\boxed{}", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


def test_all_boxed_keeps_order_and_skips_unclosed():
    assert all_boxed("\\boxed{a} \\boxed{b{c}} \\boxed{d") == ["a", "b{c}"]


@pytest.mark.parametrize(
    "box",
    [
        "unknown",
        "Unknown",
        "UNKNOWN.",
        "\\text{unknown}",
        "\\textbf{\\text{Unknown}}",
        "\\mathrm{N/A}",
        "**Unknown**",
        "none",
        "None",
        "n/a",
        "N/A",
        "Not found",
        "not  found",
        "Cannot determine",
        "cannot be determined",
        "Can't determine",
        "can not determine",
        "Unable to determine",
        "No answer",
        "Insufficient information",
        "?",
        "???",
        "？",
    ],
)
def test_boxes_that_say_there_is_no_answer(box):
    assert is_non_answer(box)
    assert answer_box(f"I searched everywhere. \\boxed{{{box}}}") is None
    assert answer_box(f"\\boxed{{{box}}}", non_answers=False) == box


@pytest.mark.parametrize(
    "box",
    ["None of the above", "no solution", "Unknown Pleasures", "0", "N/A (2019)", "Nonet"],
)
def test_answers_that_only_contain_such_words_are_answers(box):
    assert not is_non_answer(box)
    assert answer_box(f"\\boxed{{{box}}}") == box


def test_the_last_box_decides_an_earlier_one_is_not_taken():
    assert answer_box("First \\boxed{Paris}, but on reflection \\boxed{unknown}") is None
    assert answer_box("\\boxed{unknown} at first; now I know: \\boxed{Paris}") == "Paris"
