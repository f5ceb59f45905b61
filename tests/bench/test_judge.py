from __future__ import annotations

import pytest

from deepledger.bench.judge import (
    JUDGES,
    AimeJudge,
    ExactJudge,
    GaiaJudge,
    Judge,
    ListJudge,
    LLMJudge,
    NormalizedJudge,
    NumericJudge,
    make_judge,
)
from deepledger.bench.judge_rules import LLM_RULES, judge_prompt
from deepledger.errors import ConfigError, FatalLLMError, RateLimitedError
from deepledger.llm.scripted import ScriptedLLM
from deepledger.messages import MessageKind

Q = "What is it?"


async def verdict(judge: Judge, answer: str | None, truth: str | None) -> bool | None:
    return (await judge.judge(Q, answer, truth)).correct


# -- what every judge does first --------------------------------------------------------

EVERY_JUDGE = [
    ExactJudge(),
    NormalizedJudge(),
    NumericJudge(),
    ListJudge(),
    GaiaJudge(),
    AimeJudge(),
    LLMJudge(ScriptedLLM([])),
    *(LLMJudge(ScriptedLLM([]), rule=rule) for rule in ("gaia_text", "hle", "deepsearchqa")),
]


@pytest.mark.parametrize(
    "judge", EVERY_JUDGE, ids=lambda j: f"{j.name}-{getattr(j, 'rule', '')}".rstrip("-")
)
async def test_no_ground_truth_is_not_judged_and_no_answer_is_wrong(judge):
    for truth in (None, "", "  \n"):
        unjudged = await judge.judge(Q, "Paris", truth)
        assert (unjudged.correct, unjudged.judge) == (None, judge.name)
        assert "no ground truth" in unjudged.reason
    missing = await judge.judge(Q, None, "Paris")
    assert (missing.correct, missing.reason) == (False, "no answer")
    blank = await judge.judge(Q, "   ", "Paris")
    assert (blank.correct, blank.reason) == (False, "the answer is empty")


# -- exact -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "truth", "correct"),
    [
        ("Paris", "Paris", True),
        ("  Paris\n", "Paris ", True),
        ("paris", "Paris", False),
        ("Paris.", "Paris", False),
        ("The answer is Paris.", "Paris", False),
        ("New  York", "New York", False),
    ],
)
async def test_exact(answer, truth, correct):
    assert await verdict(ExactJudge(), answer, truth) is correct


async def test_exact_reason_shows_both_texts():
    judgement = await ExactJudge().judge(Q, "Paris.", "Paris")
    assert judgement.reason == "answer 'Paris.' is not exactly 'Paris'"


# -- normalized --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "truth", "correct"),
    [
        ("The answer is Paris.", "Paris", True),
        ("Final answer: paris", "Paris", True),
        ('"Paris"', "Paris", True),
        ("“Paris”!", "paris", True),
        ("**Paris**", "Paris", True),
        ("(Paris)", "Paris", True),
        ("\\boxed{\\text{Paris}}", "Paris", True),
        ("$\\mathrm{Paris}$", "Paris", True),
        ("  New \n York  ", "new york", True),
        ("The Beatles", "Beatles", True),
        ("an apple", "Apple", True),
        ("Zürich", "Zurich", True),
        ("São Paulo", "sao paulo", True),
        ("Straße", "STRASSE", True),
        ("ＰＡＲＩＳ", "Paris", True),  # full-width letters, NFKC
        ("U.S.", "U.S", True),
        ("50\\%", "50%", True),
        ("A", "the", False),  # a bare article is not removed
        ("Vitamin A", "Vitamin", False),  # articles inside the text stay
        ("St. Louis", "St Louis", False),  # inner punctuation stays
        ("Oslo", "Ø", False),
        ("(a) or (b)", "a) or (b", False),  # not one wrapping pair
        ("London", "Paris", False),
        ("Paris, France", "Paris", False),
    ],
)
async def test_normalized(answer, truth, correct):
    assert await verdict(NormalizedJudge(), answer, truth) is correct


async def test_normalized_reason_shows_normalized_texts():
    judgement = await NormalizedJudge().judge(Q, "The answer is London.", "Paris")
    assert judgement.reason == "normalized answer 'london' ≠ normalized truth 'paris'"


# -- numeric -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "truth", "correct"),
    [
        ("1,234", "1234", True),
        ("1,234,567.5", "1234567.5", True),
        ("1 234", "1234", True),
        ("12%", "12", True),
        ("12 percent", "12", True),
        ("12%", "0.12", False),  # the percent sign is dropped, not divided out
        ("$1.5", "1.5", True),
        ("USD 1,500", "$1500", True),
        ("3 km", "3", True),
        ("25 °C", "25", True),
        ("5 m²", "5", True),
        ("-5", "-5", True),
        ("−5", "-5", True),  # U+2212 minus sign
        ("-$5", "-5", True),
        ("$-5", "-5", True),
        ("-5", "5", False),
        ("1.5e6", "1500000", True),
        ("1.5 × 10^6", "1,500,000", True),
        ("3 × 10⁶", "3000000", True),
        ("1.5 million", "1500000", True),
        ("1.5 million", "1.5", False),
        ("\\frac{3}{4}", "0.75", True),
        ("3/4", "0.75", True),
        ("The answer is 42.", "42", True),
        ("\\boxed{42}", "42.0", True),
        ("about 42", "42", True),
        ("42", "43", False),
        ("1,5", "1.5", False),  # decimal commas are not numbers
        ("5 or 6", "5", False),
        ("five", "5", False),
        ("2024-05-03", "2024", False),
    ],
)
async def test_numeric(answer, truth, correct):
    assert await verdict(NumericJudge(), answer, truth) is correct


@pytest.mark.parametrize(
    ("answer", "truth", "rel_tol", "abs_tol", "correct"),
    [
        ("1.0000001", "1", 1e-6, 0.0, True),  # within the default rel_tol
        ("1.00001", "1", 1e-6, 0.0, False),
        ("101", "100", 0.01, 0.0, True),  # |1| <= 0.01 * 101: the larger value scales it
        ("102", "100", 0.01, 0.0, False),
        ("10.5", "10", 0.0, 0.5, True),  # abs_tol boundary is included
        ("10.75", "10", 0.0, 0.5, False),
        ("0.1", "0", 0.5, 0.0, False),  # rel_tol alone never forgives a zero truth
        ("0.1", "0", 0.5, 0.1, True),
    ],
)
async def test_numeric_tolerances(answer, truth, rel_tol, abs_tol, correct):
    assert await verdict(NumericJudge(rel_tol, abs_tol), answer, truth) is correct


async def test_numeric_falls_back_to_normalized_text_when_the_truth_is_not_a_number():
    judge = NumericJudge()
    same = await judge.judge(Q, "The answer is Paris.", "Paris")
    assert same.correct is True
    assert same.reason.startswith("the ground truth is not a number, compared as text")
    assert await verdict(judge, "London", "Paris") is False


async def test_numeric_reasons():
    judge = NumericJudge()
    not_a_number = await judge.judge(Q, "about twelve", "12")
    assert not_a_number.reason == "answer 'about twelve' is not a number (truth 12)"
    wrong = await judge.judge(Q, "$1,235", "1234")
    assert wrong.reason == "1235 ≠ 1234 (rel_tol=1e-06, abs_tol=0)"


# -- list --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "truth", "correct", "score"),
    [
        ("a, b and c", "c; b; a", True, 1.0),
        ("[a, b, c]", "a, b, c", True, 1.0),
        ("The answers are A, B, and C.", "a, b, c", True, 1.0),
        ("- Paris\n- Rome", "Rome, Paris", True, 1.0),
        ("1. Paris\n2. Rome", "Paris and Rome", True, 1.0),
        ("'x', 'y'", "x, y", True, 1.0),
        ("a, a, b", "a, b", True, 1.0),  # duplicates are ignored
        ("a, b", "a, b, c", False, 0.8),  # F1 = 2*2 / (2 + 3)
        ("a, b, c, d", "a, b, c", False, 6 / 7),
        ("x, y", "a, b", False, 0.0),
        ("1,234, 5", "5, 1234", True, 1.0),  # 1,234 is one number, compared numerically
        ("$5, 10%", "5, 10", True, 1.0),
        ("2.0; 3", "2, 3", True, 1.0),
        ("Zürich, The Hague", "zurich, hague", True, 1.0),
    ],
)
async def test_list_unordered(answer, truth, correct, score):
    judgement = await ListJudge().judge(Q, answer, truth)
    assert judgement.correct is correct
    assert judgement.score == pytest.approx(score)


async def test_list_reason_names_missing_and_extra_items():
    judgement = await ListJudge().judge(Q, "a, b, d", "a, b, c")
    assert judgement.reason == "2 of 3 items found; missing 'c'; extra 'd' (F1 0.67)"


async def test_list_items_use_the_numeric_tolerance():
    assert await verdict(ListJudge(rel_tol=0.01), "101, 200", "100, 200") is True
    assert await verdict(ListJudge(), "101, 200", "100, 200") is False


@pytest.mark.parametrize(
    ("answer", "truth", "correct", "score"),
    [
        ("a, b, c", "a, b, c", True, 1.0),
        ("c, b, a", "a, b, c", False, 1 / 3),
        ("a, b", "a, b, c", False, 2 / 3),
        ("a, a, b", "a, b", False, 1 / 3),  # duplicates count in a sequence
    ],
)
async def test_list_ordered(answer, truth, correct, score):
    judgement = await ListJudge(ordered=True).judge(Q, answer, truth)
    assert judgement.correct is correct
    assert judgement.score == pytest.approx(score)


async def test_list_ordered_reason_points_at_the_first_difference():
    judgement = await ListJudge(ordered=True).judge(Q, "a, c, b", "a, b, c")
    assert judgement.reason == "item 2 is 'c', expected 'b' (0.33 in place)"


# -- gaia --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "truth", "correct"),
    [
        # the truth is a number: drop $ % , from the answer, compare floats exactly
        ("1,234", "1234", True),
        ("$1,234.00", "1234", True),
        ("12%", "12", True),
        ("12.0", "12", True),
        ("1234.0001", "1234", False),  # no tolerance
        ("12 km", "12", False),  # units are not removed
        ("The answer is 12", "12", False),
        # the truth has , or ; : element by element, same length
        ("a, b, c", "a,b,c", True),
        ("A ;B; C", "a; b; c", True),
        ("1, 2.0, $3", "1, 2, 3", True),
        ("c, b, a", "a, b, c", False),  # order matters
        ("a, b", "a, b, c", False),
        ("St. Louis, Rome", "St Louis, Rome", False),  # punctuation kept in list elements
        ("1000", "1,000", False),  # a truth of "1,000" is a two-element list
        # otherwise: drop whitespace and ASCII punctuation, lowercase
        ("St. Louis!", "st louis", True),
        ("NewYork", "New York", True),
        ("The Beatles", "Beatles", False),  # no article removal
        ("Zürich", "Zurich", False),  # no accent folding
    ],
)
async def test_gaia(answer, truth, correct):
    assert await verdict(GaiaJudge(), answer, truth) is correct


async def test_gaia_reasons_name_the_rule():
    judge = GaiaJudge()
    assert (await judge.judge(Q, "12 km", "12")).reason.startswith("number rule:")
    assert (await judge.judge(Q, "a", "a, b")).reason == "list rule: 1 elements, expected 2"
    assert (await judge.judge(Q, "Rome", "Paris")).reason == "string rule: 'rome' ≠ 'paris'"


# -- llm ---------------------------------------------------------------------------------


async def test_llm_judge_asks_the_model_with_the_template():
    llm = ScriptedLLM(["CORRECT\nReason: same city"])
    judgement = await LLMJudge(llm).judge("Capital of France?", "Paris, France", "Paris")
    assert (judgement.correct, judgement.judge) == (True, "llm")
    assert judgement.reason == "scripted says CORRECT: same city"
    system, task = llm.calls[0].messages
    assert system.kind is MessageKind.SYSTEM and task.kind is MessageKind.TASK
    assert "CORRECT or INCORRECT" in system.content and "$" not in system.content
    assert "Capital of France?" in task.content
    assert "Paris, France" in task.content and "Ground truth:\nParis" in task.content
    assert "<!-- task -->" not in system.content + task.content
    assert llm.calls[0].settings.temperature == 0.0
    assert judgement.usage["input_tokens"] > 0  # the judge's tokens are reported
    llm.assert_consumed()


@pytest.mark.parametrize(
    ("reply", "correct", "reason"),
    [
        ("INCORRECT\nReason: a different city", False, "a different city"),
        ("**Verdict:** INCORRECT — wrong year", False, "wrong year"),
        ("Verdict: correct.\nThe numbers agree.", True, "The numbers agree"),
        ("Thinking it over, the candidate is CORRECT.", True, "Thinking it over, the"),
    ],
)
async def test_llm_judge_reads_common_reply_shapes(reply, correct, reason):
    judgement = await LLMJudge(ScriptedLLM([reply])).judge(Q, "x", "y")
    assert judgement.correct is correct
    assert reason in judgement.reason


@pytest.mark.parametrize(
    "reply",
    [
        "I am not sure.",
        "It is NOT CORRECT.",
        "Could be CORRECT or INCORRECT.",
        "",
    ],
)
async def test_llm_judge_unreadable_reply_is_asked_again_then_unjudged_and_quoted(reply):
    llm = ScriptedLLM([reply] * 3)
    judgement = await LLMJudge(llm).judge(Q, "London", "Paris")
    assert (judgement.correct, judgement.unjudged, judgement.asks) == (None, True, 3)
    assert judgement.label is None
    assert judgement.reason.startswith("unjudged: 3 replies of scripted could not be read")
    assert repr(" ".join(reply.split())) in judgement.reason
    llm.assert_consumed()


async def test_llm_judge_unreadable_reply_quotes_only_the_start():
    reply = "I would rather discuss " + "something else entirely " * 20
    judgement = await LLMJudge(ScriptedLLM([reply]), max_asks=1).judge(Q, "London", "Paris")
    assert "'I would rather discuss something else" in judgement.reason
    assert len(judgement.reason) < 250


async def test_llm_judge_skips_the_model_only_for_the_same_text():
    llm = ScriptedLLM([])  # any model call would fail: the script is empty
    judgement = await LLMJudge(llm).judge(Q, "  Paris. ", "Paris")
    assert judgement.correct is True
    assert "the model was not asked" in judgement.reason
    assert llm.calls == []
    llm.assert_consumed()


async def test_llm_judge_does_not_ask_without_answer_or_truth():
    llm = ScriptedLLM([])
    judge = LLMJudge(llm)
    assert await verdict(judge, None, "Paris") is False
    assert await verdict(judge, "Paris", None) is None
    assert llm.calls == []


@pytest.mark.parametrize("error", [FatalLLMError("model not found"), RateLimitedError("slow down")])
async def test_llm_judge_lets_model_errors_through(error):
    with pytest.raises(type(error)):
        await LLMJudge(ScriptedLLM([error])).judge(Q, "London", "Paris")


# -- aime --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "truth", "correct"),
    [
        ("42", "42", True),
        ("042", "42", True),  # leading zeros
        ("42", "042", True),
        ("$42$", "42", True),
        ("\\boxed{42}", "42", True),
        ("\\boxed{\\text{042}}", "42", True),
        ("The answer is 42.", "42", True),
        ("so the total is \\boxed{17}, not \\boxed{42}", "42", True),  # the last box
        ("\\boxed{42} is wrong; it is \\boxed{17}", "42", False),
        ("0", "0", True),
        ("43", "42", False),
        ("42.0", "42", True),  # math-verify reads it as 42
        ("x = 42", "42", True),
        ("84/2", "42", True),
        ("42.5", "42", False),
        ("-42", "42", False),
        ("42 apples", "42", False),
        ("forty-two", "42", False),
        ("1042", "42", False),
        ("\\frac{84}{2}", "42", True),
        ("42!", "42", False),  # a factorial
    ],
)
async def test_aime(answer, truth, correct):
    assert await verdict(AimeJudge(), answer, truth) is correct


async def test_aime_reasons():
    judge = AimeJudge()
    assert (await judge.judge(Q, "\\boxed{042}", "42")).reason == "42 = 42"
    assert (await judge.judge(Q, "41", "42")).reason == "41 ≠ 42"
    assert (await judge.judge(Q, "42.5", "42")).reason == "answer '42.5' is not an integer"
    assert (await judge.judge(Q, "1000", "42")).reason == "1000 is not an AIME answer (0-999)"


async def test_aime_truth_that_is_not_an_aime_integer_is_compared_as_text():
    judge = AimeJudge()
    for truth in ("\\frac{1}{2}", "1000"):
        same = await judge.judge(Q, truth, truth)
        assert same.correct is True
        assert same.reason.startswith("the ground truth is not an integer 0-999")
    assert await verdict(judge, "0.5", "\\frac{1}{2}") is False


# -- llm rules ---------------------------------------------------------------------------


@pytest.mark.parametrize("rule", sorted(LLM_RULES))
def test_every_rule_prompt_fills_in_question_answer_and_truth(rule):
    system, task = judge_prompt("QUESTION-1", "ANSWER-2", "TRUTH-3", LLM_RULES[rule].template)
    assert system and "$" not in system and "<!-- task -->" not in system + task
    assert all(part in task for part in ("QUESTION-1", "ANSWER-2", "TRUTH-3"))
    assert "$" not in task  # every placeholder was filled


async def test_gaia_text_rule_asks_for_equivalence_and_reads_the_verdict():
    llm = ScriptedLLM(["Correct.\nReason: 1,000 km is the same distance"])
    judge = LLMJudge(llm, rule="gaia_text")
    judgement = await judge.judge("How far is it?", "about 1000 kilometres", "1,000 km")
    assert (judgement.correct, judgement.judge) == (True, "llm")
    assert (
        judgement.reason == "scripted says CORRECT (gaia_text rule): 1,000 km is the same distance"
    )
    system, task = llm.calls[0].messages
    assert "equivalent" in system.content
    assert "How far is it?" in task.content
    assert "Labeled answer:\n1,000 km" in task.content
    assert "Predicted answer:\nabout 1000 kilometres" in task.content
    assert judgement.usage["input_tokens"] > 0
    llm.assert_consumed()


async def test_hle_rule_sends_the_response_and_reads_the_extracted_answer():
    reply = "Extracted answer: 3/4\nCORRECT\nReason: 3/4 equals 0.75"
    llm = ScriptedLLM([reply])
    judgement = await LLMJudge(llm, rule="hle").judge("What is p?", "so p = 3/4", "0.75")
    assert judgement.correct is True
    assert judgement.reason == "scripted says CORRECT (hle rule): extracted '3/4'; 3/4 equals 0.75"
    system, task = llm.calls[0].messages
    assert "extracted_final_answer:" in system.content and "None" in system.content
    assert "correct: yes" in system.content and "confidence:" in system.content
    assert "What is p?" in task.content
    assert "Response:\nso p = 3/4" in task.content and "Correct answer:\n0.75" in task.content
    llm.assert_consumed()


@pytest.mark.parametrize(
    ("reply", "correct", "reason"),
    [
        ("Extracted answer: 12\nINCORRECT\nReason: 12 is not 13", False, "extracted '12'"),
        # the extracted text is the candidate's: a CORRECT inside it is not the verdict
        ("Extracted answer: CORRECT\nINCORRECT\nReason: wrong word", False, "wrong word"),
        ("**Extracted answer:** 13\n**CORRECT**\nReason: same", True, "extracted '13'"),
        ("Extracted answer: None\nCORRECT\nReason: no answer", False, "found no final answer"),
        ("CORRECT\nReason: same value", True, "no extracted answer given; same value"),
    ],
)
async def test_hle_rule_reply_shapes(reply, correct, reason):
    judgement = await LLMJudge(ScriptedLLM([reply]), rule="hle").judge(Q, "x", "y")
    assert judgement.correct is correct
    assert reason in judgement.reason


@pytest.mark.parametrize(
    ("rule", "reply", "correct", "reason"),
    [
        # the official graders' form: "correct: no" is INCORRECT, never CORRECT
        (
            "hle",
            "extracted_final_answer: 12\nreasoning: 12 is not 13\ncorrect: no\nconfidence: 90",
            False,
            "says INCORRECT (hle rule): extracted '12'; 12 is not 13",
        ),
        ("hle", "extracted_final_answer: None\ncorrect: yes", False, "found no final answer"),
        ("hle", '```json\n{\n  "correct": "no"\n}\n```', False, "says INCORRECT"),
        # thinking that names the other verdict is not the verdict
        ("default", "<think>It is CORRECT.\nCORRECT</think>\nINCORRECT", False, "INCORRECT"),
        ("default", "<think>\nCORRECT", None, "could not be read"),
        # a CORRECT label contradicted by the word after it is no verdict
        ("default", "**Correct:** no", None, "could not be read"),
        ("default", "CORRECT? No.", None, "could not be read"),
        ("default", "INCORRECT\nOn reflection:\nCORRECT", None, "could not be read"),
        # xbench-DeepSearch's grader answers in Chinese, with either colon
        ("default", "最终答案: 巴黎\n结论：正确", True, "says CORRECT"),
        ("gaia_text", "结论: 错误", False, "says INCORRECT"),
    ],
)
async def test_replies_that_must_not_flip(rule, reply, correct, reason):
    judge = LLMJudge(ScriptedLLM([reply]), rule=rule, max_asks=1)
    judgement = await judge.judge(Q, "x", "y")
    assert judgement.correct is correct
    assert reason in judgement.reason


async def test_hle_rule_reply_without_a_verdict_is_unreadable():
    reply = "Extracted answer: 12\nReason: it matches"
    judgement = await LLMJudge(ScriptedLLM([reply]), rule="hle", max_asks=1).judge(Q, "12", "13")
    assert (judgement.correct, judgement.unjudged) == (None, True)
    assert judgement.reason.startswith("unjudged: 1 reply of scripted could not be read (no")


async def test_deepsearchqa_rule_sends_the_parts_and_reads_the_checklist():
    reply = (
        "```json\n"
        '{"expected": {"Belgium": true, "France": true,}, "extra": [], "reason": "both"}\n'
        "```"
    )  # the trailing comma is forgiven
    llm = ScriptedLLM([reply])
    judge = LLMJudge(llm, rule="deepsearchqa")
    judgement = await judge.judge(
        "Which countries border Luxembourg to the west?", "France and Belgium", "Belgium, France"
    )
    assert (judgement.correct, judgement.score) == (True, 1.0)
    assert (
        judgement.reason
        == "scripted says FULLY_CORRECT (deepsearchqa rule): 2 of 2 parts found: both"
    )
    system, task = llm.calls[0].messages
    assert '"expected"' in system.content and '"extra"' in system.content
    assert "Which countries border Luxembourg to the west?" in task.content
    assert "Expected answer:\nBelgium, France" in task.content
    assert "Response:\nFrance and Belgium" in task.content
    llm.assert_consumed()


@pytest.mark.parametrize(
    ("reply", "correct", "score", "reason"),
    [
        # 2 of 3 found, nothing extra: F1 = 2*2 / (3 + 2 + 0)
        ('{"expected": {"a": true, "b": true, "c": false}, "extra": []}', False, 0.8,
         "2 of 3 parts found; missing 'c'"),
        # all found but one extra: F1 = 2*2 / (2 + 2 + 1)
        ('Here: {"expected": {"a": true, "b": true}, "extra": ["d"], "reason": "d is not"}',
         False, 0.8, "2 of 2 parts found; extra 'd': d is not"),
        ('{"expected": {"a": true}, "extra": null}', True, 1.0, "1 of 1 parts found"),
        ('{"expected": {"a": true}}', True, 1.0, "1 of 1 parts found"),
        ('{"expected": {"a": false}, "extra": ["b"]}', False, 0.0, "missing 'a'; extra 'b'"),
    ],
)  # fmt: skip
async def test_deepsearchqa_rule_checklists(reply, correct, score, reason):
    judgement = await LLMJudge(ScriptedLLM([reply]), rule="deepsearchqa").judge(Q, "x", "y")
    assert judgement.correct is correct
    assert judgement.score == pytest.approx(score)
    assert reason in judgement.reason


@pytest.mark.parametrize(
    "reply",
    [
        "CORRECT",  # a verdict is not a checklist
        '{"expected": {}, "extra": []}',
        '{"expected": {"a": "yes"}, "extra": []}',
        '{"expected": {"a": true}, "extra": "b"}',
        '["a", "b"]',
    ],
)
async def test_deepsearchqa_rule_unreadable_replies_are_unjudged(reply):
    judge = LLMJudge(ScriptedLLM([reply]), rule="deepsearchqa", max_asks=1)
    judgement = await judge.judge(Q, "x", "y")
    assert (judgement.correct, judgement.unjudged) == (None, True)
    assert "could not be read (no JSON object" in judgement.reason


@pytest.mark.parametrize("rule", sorted(LLM_RULES))
async def test_every_rule_skips_the_model_when_the_answer_is_the_ground_truth(rule):
    llm = ScriptedLLM([])
    judgement = await LLMJudge(llm, rule=rule).judge(Q, "Paris.", "Paris")
    assert judgement.correct is True and "the model was not asked" in judgement.reason
    assert judgement.score == (1.0 if rule == "deepsearchqa" else None)
    assert llm.calls == []


def test_an_unknown_rule_is_refused_naming_the_rules():
    with pytest.raises(ConfigError) as info:
        make_judge("llm", rule="fuzzy", llm=ScriptedLLM([]))
    message = str(info.value)
    assert "benchmark.judge.rule='fuzzy'" in message
    assert all(rule in message for rule in LLM_RULES)


# -- make_judge --------------------------------------------------------------------------


async def test_make_judge_builds_each_named_judge():
    llm = ScriptedLLM([])
    judges = {name: make_judge(name, llm=llm) for name in JUDGES}
    assert {name: judge.name for name, judge in judges.items()} == {n: n for n in JUDGES}


async def test_make_judge_passes_its_options():
    numeric = make_judge("numeric", rel_tol=0.0, abs_tol=0.5)
    assert await verdict(numeric, "10.5", "10") is True
    assert await verdict(numeric, "10.6", "10") is False
    ordered = make_judge("list", ordered=True)
    assert await verdict(ordered, "b, a", "a, b") is False
    assert await verdict(make_judge("list"), "b, a", "a, b") is True


async def test_make_judge_builds_aime_and_passes_the_rule():
    assert make_judge("aime").name == "aime"
    llm = ScriptedLLM(["Extracted answer: 7\nINCORRECT\nReason: not 8"])
    judge = make_judge("llm", rule="hle", llm=llm)
    assert (judge.name, judge.rule) == ("llm", "hle")
    assert "(hle rule)" in (await judge.judge(Q, "7", "8")).reason
    assert make_judge("llm", llm=ScriptedLLM([])).rule == "default"


def test_make_judge_rejects_an_unknown_name_listing_the_valid_ones():
    with pytest.raises(ConfigError) as info:
        make_judge("fuzzy")
    message = str(info.value)
    assert "'fuzzy'" in message
    assert all(name in message for name in JUDGES)


def test_make_judge_llm_needs_a_model():
    with pytest.raises(ConfigError, match=r"benchmark\.judge\.llm must name an llm preset"):
        make_judge("llm")


@pytest.mark.parametrize("name", ["numeric", "list"])
def test_make_judge_rejects_negative_tolerances(name):
    with pytest.raises(ConfigError, match=r"benchmark\.judge\.rel_tol"):
        make_judge(name, rel_tol=-0.1)
    with pytest.raises(ConfigError, match=r"benchmark\.judge\.abs_tol"):
        make_judge(name, abs_tol=float("nan"))
