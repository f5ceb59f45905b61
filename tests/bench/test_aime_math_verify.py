"""The aime judge reads answers with math-verify: every way of writing the right integer
that math-verify reads is accepted, and no answer stating another value ever is."""

from __future__ import annotations

import asyncio
import threading

import pytest

from deepledger.bench import judge as judge_module
from deepledger.bench.judge import AimeJudge

TRUTHS = [0, 1, 2, 7, 10, 42, 99, 100, 217, 500, 999]


def right_forms(t: int) -> list[str]:
    return [
        f"{t}",
        f"{t:03d}",
        f"{t}.0",
        f"{t}.00",
        f"x = {t}",
        f"$n={t}$",
        f"\\boxed{{{t}}}",
        f"${t}$",
        f"\\({t}\\)",
        f"The answer is {t}.",
        f"The final answer is $\\boxed{{{t}}}$.",
        f"{2 * t}/2",
        f"\\frac{{{3 * t}}}{{3}}",
        f"\\dfrac{{{2 * t}}}{{2}}",
        f"{t + 1} - 1",
        f"\\boxed{{{t}.0}}",
        f"**{t}**",
    ]


def other_values(t: int) -> list[int | str]:
    """Values that are not ``t``, some near it, some spelled with its digits."""
    values: list[int | str] = [t + 1, t + 10, t + 100, t + 1000, 10 * t + 1, t + 0.5]
    values += [f"{t}.5", f"{t}.0000001", f"{t}.00000000000000000001", f"{t - 1}.999999"]
    values += [-t - 1, str(t)[::-1] + "1", f"0.{t}"]
    return [v for v in values if float(v) != t]  # "0.0" for 0 is no other value


def wrong_forms(t: int) -> list[str]:
    forms = []
    for v in other_values(t):
        forms += [f"{v}", f"\\boxed{{{v}}}", f"x = {v}", f"${v}$", f"The answer is {v}."]
    # the digits of t, stating another value: math-verify alone reads most of these as t
    forms += [f"{t}k", f"{t} thousand", f"{t}%", f"{t}\\%", f"{t}_8", f"{t}_{{16}}", f"{t}e3"]
    forms += [f"x < {t}", f"x \\neq {t}", f"x \\geq {t}", f"minus {t}", f"not {t}"]
    forms += [f"{t} \\pm 1", f"{t} or {t + 1}", f"{t + 1} or {t}", f"{t}i", f"{t}x"]
    forms += [f"{t} \\times 10^3", f"\\sqrt{{{t}}}", f"{t}^2", f"{str(t)[0]} {str(t)[1:] or 0}"]
    forms += [f"\\boxed{{{t}}} is wrong; it is \\boxed{{{t + 3}}}", f"{{{t}, {t + 1}}}"]
    # juxtaposed groups and dangling operators: math-verify adds "{41}{1}" up to 42
    forms += [f"{{{t - 1}}}{{1}}", f"({t - 1})(1)", f"{t - 1} 1", f"{t}*", f"{t}+"]
    forms += [f"\\times {t}", f"{t}}}", f"\\frac{{{2 * t}}}{{2}}{{1}}"]
    if t > 1:  # t**2 is another value; math-verify reads "8**2" as 8
        forms += [f"{t}**2", f"{t}^{{2}}"]
    if t > 2:  # 1! = 1 and 2! = 2
        forms += [f"{t}!", f"\\boxed{{{t}!}}"]
    return forms


async def verdicts(truth: int, answers: list[str]) -> dict[str, bool | None]:
    judge = AimeJudge()
    got = await asyncio.gather(*(judge.judge("q", a, str(truth)) for a in answers))
    return {a: j.correct for a, j in zip(answers, got, strict=True)}


async def test_every_form_of_the_right_integer_is_accepted():
    for t in TRUTHS:
        got = await verdicts(t, right_forms(t))
        assert [a for a, ok in got.items() if ok is not True] == [], t


async def test_no_answer_with_another_value_is_accepted():
    battery = {t: wrong_forms(t) for t in TRUTHS}
    assert sum(len(forms) for forms in battery.values()) > 500
    for t, forms in battery.items():
        got = await verdicts(t, forms)
        assert [a for a, ok in got.items() if ok is not False] == [], t


async def test_out_of_range_and_fractions_are_rejected_with_a_reason():
    judge = AimeJudge()
    assert (await judge.judge("q", "\\frac{2000}{2}", "42")).reason == (
        "1000 is not an AIME answer (0-999)"
    )
    assert (await judge.judge("q", "-42", "42")).reason == "-42 is not an AIME answer (0-999)"
    assert (await judge.judge("q", "85/2", "42")).reason == "answer '85/2' is not an integer"


def test_works_in_a_thread_that_is_not_the_main_one():
    # Ray workers and asyncio.to_thread: math-verify's SIGALRM timeouts would refuse here
    results: list[bool | None] = []

    def run() -> None:
        results.append(asyncio.run(AimeJudge().judge("q", "84/2", "42")).correct)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    assert results == [True]


async def test_a_reading_that_does_not_finish_is_unjudged(monkeypatch):
    release = threading.Event()

    def stuck(expression: str, truth: int) -> tuple[int | None, bool]:
        release.wait()
        return 42, True

    monkeypatch.setattr(judge_module, "math_verify_integer", stuck)
    monkeypatch.setattr(judge_module, "_AIME_SECONDS", 0.01)
    try:
        got = await AimeJudge().judge("q", "42", "42")
    finally:
        release.set()
    assert (got.correct, got.unjudged) == (None, True)
    assert got.reason == "math-verify did not read '42' in 0.01 s"


@pytest.mark.parametrize("answer", ["42", "x = 42"])
async def test_math_verify_has_the_last_word(monkeypatch, answer):
    monkeypatch.setattr(judge_module, "math_verify_integer", lambda e, t: (42, False))
    got = await AimeJudge().judge("q", answer, "42")
    assert (got.correct, got.reason) == (False, "math-verify does not accept 42 for 42")
