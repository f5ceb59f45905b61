"""The judge's shortcut: the model is skipped only where the two answers cannot differ
in meaning; every pair that may mean something else reaches the judge model."""

from __future__ import annotations

import itertools

import pytest

from deepledger.bench.judge import LLMJudge
from deepledger.bench.shortcut import same_beyond_doubt
from deepledger.llm.scripted import ScriptedLLM

# (answer, ground truth): each pair may mean two different things.
MEANING_CHANGES = [
    ("CO", "Co"),  # carbon monoxide, cobalt
    ("5 MW", "5 mW"),
    ("2 mS", "2 ms"),
    ("10²", "102"),
    ("x²", "x2"),
    ("5!", "5"),
    ("[0, 1]", "(0, 1)"),
    ("{1, 2}", "(1, 2)"),
    ("[5]", "5"),
    ("Who", "The Who"),
    ("The Hague", "Hague"),
    ("US", "us"),
    ("Paris", "paris"),
    ("café", "cafe"),
    ("1,000", "1000"),  # a thousands separator here, a decimal comma elsewhere
    ("1.000", "1,000"),
    ("-5", "5"),
    ("5%", "5"),
    ("$5", "5"),
    ("5 km", "5"),
    ("1/2", "0.5"),
    ("1e3", "1000"),
    ("0x10", "16"),
    ("\\frac{1}{2}", "1/2"),
    ("A", "a"),
    ("I", "1"),
    ("α", "a"),
    ("O", "0"),
    ("Paris, France", "Paris"),
    ("not Paris", "Paris"),
    ("Paris?", "Paris"),
    ("Paris!", "Paris"),
    ("'Paris'", "Paris"),
    ('"42"', "42"),
    ("4 2", "42"),
    ("42 ", "4 2"),
    ("ﬁne", "fine"),  # a ligature NFKC would fold
    ("Ⅻ", "XII"),
    ("½", "1/2"),
    ("N", "n"),
]


async def asks_the_model(answer: str, truth: str) -> bool:
    """Whether the model judge asks its model about ``answer`` against ``truth``."""
    llm = ScriptedLLM(["INCORRECT\nReason: not the same."])
    await LLMJudge(llm).judge("Which one?", answer, truth)
    return len(llm.calls) == 1


@pytest.mark.parametrize(("answer", "truth"), MEANING_CHANGES)
async def test_a_pair_that_may_mean_two_things_is_never_passed(answer: str, truth: str) -> None:
    assert same_beyond_doubt(answer, truth) is None
    assert same_beyond_doubt(truth, answer) is None
    assert await asks_the_model(answer, truth) and await asks_the_model(truth, answer)


SAME = [
    ("Paris", "Paris"),
    ("  Paris  ", "Paris"),
    ("Paris.", "Paris"),
    ("Paris.\n", "Paris"),
    ("42", "42.0"),
    ("42.", "42"),
    ("-3.50", "-3.5"),
    ("+7", "7"),
    ("0.5", ".5"),
    ("007", "7"),
    ("Saint-Étienne", "Saint-Étienne"),
]


@pytest.mark.parametrize(("answer", "truth"), SAME)
def test_the_same_text_or_the_same_plain_number_is_passed(answer: str, truth: str) -> None:
    assert same_beyond_doubt(answer, truth) is not None
    assert same_beyond_doubt(truth, answer) is not None


def test_nothing_is_not_an_answer() -> None:
    assert same_beyond_doubt("", "") is None
    assert same_beyond_doubt(" . ", "") is None


# Every decoration of a ground truth that changes its text: each must reach the model.
DECORATIONS = [
    str.lower, str.upper, str.title,
    lambda t: f"The answer is {t}",
    lambda t: f"[{t}]", lambda t: f"({t})", lambda t: f"{{{t}}}",
    lambda t: f"{t}!", lambda t: f"{t}?", lambda t: f"{t}²", lambda t: f"the {t}",
    lambda t: f"{t} units", lambda t: f"~{t}", lambda t: f"-{t}", lambda t: f"{t}%",
]  # fmt: skip
TRUTHS = ["Co", "Mercury", "The Who", "5 mW", "x", "42", "Gandhi", "NaCl"]


DECORATED = [
    (truth, decorate(truth))
    for truth, decorate in itertools.product(TRUTHS, DECORATIONS)
    if decorate(truth) != truth  # str.title of "The Who" is itself
]


@pytest.mark.parametrize(("truth", "answer"), DECORATED)
async def test_every_changed_text_reaches_the_judge_model(truth: str, answer: str) -> None:
    assert await asks_the_model(answer, truth)
