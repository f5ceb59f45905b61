from __future__ import annotations

import pytest

from deepledger.agent.boxed import all_boxed, last_boxed


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
