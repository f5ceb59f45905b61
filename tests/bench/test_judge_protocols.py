"""The llm judge's grading protocols (bench/judge_rules.py): each benchmark's labels and
fields as its official grader defines them, re-asking an unreadable reply and then
leaving the answer unjudged, a user's official template, and the presets' protocol data."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from deepledger.bench.judge import DEFAULT_MAX_ASKS, LLMJudge
from deepledger.bench.judge_rules import LLM_RULES, check_protocol
from deepledger.config import JudgeConfig, validate
from deepledger.errors import ConfigError
from deepledger.llm.scripted import ScriptedLLM, reply
from deepledger.messages import MessageKind, Usage
from tests.support.bench import bench_command, config, model, run
from tests.support.config import CONF, composed

Q = "Who wrote Hamlet?"


async def judged(rule: str, *replies: str, **options):
    llm = ScriptedLLM(list(replies))  # every reply is asked for, no more
    judgement = await LLMJudge(llm, rule=rule, **options).judge(Q, "Marlowe", "Shakespeare")
    llm.assert_consumed()
    return judgement, llm


# -- SimpleQA: three labels --------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "correct", "label"),
    [
        ("A", True, "CORRECT"),
        ("B", False, "INCORRECT"),
        ("C", False, "NOT_ATTEMPTED"),
        ("**C**", False, "NOT_ATTEMPTED"),
        ("C: NOT_ATTEMPTED", False, "NOT_ATTEMPTED"),
        ("NOT_ATTEMPTED", False, "NOT_ATTEMPTED"),
        ("<think>It is A, surely.</think>\nB", False, "INCORRECT"),
    ],
)
async def test_simpleqa_reads_the_letter_and_keeps_its_label(reply, correct, label):
    judgement, _ = await judged("simpleqa", reply)
    assert (judgement.correct, judgement.label, judgement.asks) == (correct, label, 1)
    assert judgement.unjudged is False
    assert f"says {label} (simpleqa rule)" in judgement.reason


@pytest.mark.parametrize("reply", ["D", "A: INCORRECT", "The grade is A", "A\nB", "As above."])
async def test_simpleqa_unknown_or_contradicted_grade_is_unjudged_never_a_label(reply):
    judgement, llm = await judged("simpleqa", *[reply] * DEFAULT_MAX_ASKS)
    assert (judgement.correct, judgement.label, judgement.unjudged) == (None, None, True)
    assert judgement.asks == DEFAULT_MAX_ASKS == len(llm.calls)


@pytest.mark.parametrize("answer", [None, "", "  \n"])
async def test_simpleqa_counts_no_answer_as_not_attempted_without_asking(answer):
    # SimpleQA's grader grades an empty response C: never INCORRECT, which would lower
    # accuracy-given-attempted and F1.
    llm = ScriptedLLM([])
    judgement = await LLMJudge(llm, rule="simpleqa").judge(Q, answer, "Shakespeare")
    assert (judgement.correct, judgement.label) == (False, "NOT_ATTEMPTED")
    default = await LLMJudge(ScriptedLLM([]), rule="default").judge(Q, answer, "Shakespeare")
    assert (default.correct, default.label) == (False, None)


async def test_simpleqa_prompt_asks_for_the_letter_with_the_three_labels():
    _, llm = await judged("simpleqa", "B")
    system, task = llm.calls[0].messages
    assert all(word in system.content for word in ("CORRECT", "INCORRECT", "NOT_ATTEMPTED"))
    assert "A, B or C" in system.content
    assert "Gold target:\nShakespeare" in task.content
    assert "Predicted answer:\nMarlowe" in task.content


# -- BrowseComp and HLE: extracted answer, yes / no, confidence ------------------------------


@pytest.mark.parametrize("rule", ["browsecomp", "hle"])
async def test_official_fields_fill_extracted_answer_and_confidence(rule):
    reply = (
        "extracted_final_answer: Christopher Marlowe\n"
        "reasoning: Marlowe is not Shakespeare\n"
        "correct: no\n"
        "confidence: 85%"
    )
    judgement, llm = await judged(rule, reply)
    assert (judgement.correct, judgement.label) == (False, None)
    assert (judgement.extracted_answer, judgement.confidence) == ("Christopher Marlowe", 85.0)
    system = llm.calls[0].messages[0].content
    for field in ("extracted_final_answer:", "reasoning:", "correct:", "confidence:"):
        assert field in system
    assert "100" in system  # what the official form puts when the response states none


@pytest.mark.parametrize(
    ("reply", "confidence"),
    [
        (
            '{"extracted_final_answer": "x", "reasoning": "r", "correct": "yes", "confidence": 40}',
            40,
        ),
        ("extracted_final_answer: x\ncorrect: yes", None),  # not given: not made up
        ("extracted_final_answer: x\ncorrect: yes\nconfidence: 140", None),  # out of range
        ("extracted_final_answer: x\ncorrect: yes\nconfidence: 40\nconfidence: 60", None),
    ],
)
async def test_confidence_is_read_only_when_given_once_within_0_to_100(reply, confidence):
    judgement, _ = await judged("browsecomp", reply)
    assert judgement.correct is True and judgement.confidence == confidence


def test_browsecomp_has_its_own_prompt():
    assert LLM_RULES["browsecomp"].template != LLM_RULES["hle"].template


# -- xbench: 最终答案 / 解释 / 结论 -----------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "correct", "extracted"),
    [
        ("最终答案: 莎士比亚\n解释: 与正确答案一致\n结论: 正确", True, "莎士比亚"),
        ("最终答案：马洛\n解释：不一致\n结论：错误", False, "马洛"),
        ("**最终答案**: 马洛\n**结论**: 错误", False, "马洛"),
        ("最终答案: 无\n解释: 没有答案\n结论: 正确", False, "无"),  # nothing to match
    ],
)
async def test_xbench_reads_its_chinese_fields(reply, correct, extracted):
    judgement, _ = await judged("xbench", reply)
    assert (judgement.correct, judgement.extracted_answer) == (correct, extracted)


@pytest.mark.parametrize("reply", ["CORRECT", "correct: yes", "结论: 正确？不，错误"])
async def test_xbench_reads_no_other_label_set(reply):
    judgement, _ = await judged("xbench", reply, max_asks=1)
    assert judgement.unjudged is True and judgement.correct is None


# -- FRAMES: is the ground truth present --------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "correct"),
    [
        ("Explanation: the response names Shakespeare.\nDecision: TRUE", True),
        ('"Explanation:" it names Marlowe\n"Decision:" "FALSE"', False),
        ("**Decision:** false", False),
    ],
)
async def test_frames_reads_the_autorater_decision(reply, correct):
    judgement, llm = await judged("frames", reply)
    assert judgement.correct is correct
    assert "Decision: TRUE" in llm.calls[0].messages[0].content


@pytest.mark.parametrize(
    "reply", ["Decision: TRUE? No.", "TRUE", "Decision: TRUE\nDecision: FALSE"]
)
async def test_frames_contradicted_or_bare_decisions_are_unreadable(reply):
    judgement, _ = await judged("frames", reply, max_asks=1)
    assert judgement.unjudged is True


# -- asking again ---------------------------------------------------------------------------


async def test_an_unreadable_reply_is_asked_again_and_every_ask_is_counted():
    llm = ScriptedLLM(
        [
            reply("Hmm, hard to say.", usage=Usage(input_tokens=100, output_tokens=5)),
            reply("B", usage=Usage(input_tokens=100, output_tokens=1)),
        ]
    )
    judgement = await LLMJudge(llm, rule="simpleqa").judge(Q, "Marlowe", "Shakespeare")
    assert (judgement.correct, judgement.label, judgement.asks) == (False, "INCORRECT", 2)
    assert judgement.usage is not None
    assert (judgement.usage["input_tokens"], judgement.usage["output_tokens"]) == (200, 6)
    assert "at ask 2" in judgement.reason
    assert llm.calls[0].messages == llm.calls[1].messages  # the same question again


async def test_still_unreadable_after_max_asks_is_unjudged_with_each_first_line():
    replies = ["I think\nA or B", "No idea.", "Perhaps D"]
    judgement, _ = await judged("simpleqa", *replies)
    assert (judgement.correct, judgement.unjudged, judgement.asks) == (None, True, 3)
    assert judgement.reason.startswith("unjudged: 3 replies of scripted could not be read")
    assert "'I think'; 'No idea.'; 'Perhaps D'" in judgement.reason
    assert judgement.usage is not None and judgement.usage["input_tokens"] > 0


async def test_max_asks_bounds_the_asks():
    judgement, _ = await judged("default", *["?"] * 5, max_asks=5)
    assert judgement.asks == 5 and judgement.unjudged is True
    with pytest.raises(ConfigError, match="max_asks"):
        LLMJudge(ScriptedLLM([]), max_asks=0)


def test_max_asks_below_one_is_a_config_error():
    cfg = composed("benchmark.judge.max_asks=0")
    with pytest.raises(ConfigError, match=r"benchmark\.judge\.max_asks=0"):
        validate(cfg)


async def test_the_runner_records_an_unjudged_answer_with_every_ask_s_tokens(tmp_path):
    judge = LLMJudge(ScriptedLLM(["no verdict here"] * 3), rule="simpleqa")
    answer_wrong = model(lambda contents: "\\boxed{Lyon}")
    (record,) = await run(config(), answer_wrong, tmp_path, ("easy/1",), judge=judge)
    assert record["status"] == "finished" and record["correct"] is None
    judgement = record["attempts"][0]["judgement"]
    assert judgement["unjudged"] is True and judgement["asks"] == 3
    assert "label" not in judgement  # said only when set
    assert record["judge_usage"] == judgement["usage"]
    assert judge.llm.calls and len(judge.llm.calls) == 3


# -- a user's official template ------------------------------------------------------------

OFFICIAL_STYLE = (
    "Judge [response] to [question] against [correct_answer].\n"
    "[question]: {question}\n[response]: {response}\n[correct_answer]: {correct_answer}\n"
    'Answer in JSON like {{"correct": "yes"}}.'
)


async def test_a_template_is_sent_whole_as_one_user_message_with_its_slots_filled(tmp_path):
    path = tmp_path / "grader.txt"
    path.write_text(OFFICIAL_STYLE, encoding="utf-8")
    llm = ScriptedLLM(['{"extracted_final_answer": "x", "correct": "no", "confidence": 70}'])
    judge = LLMJudge(llm, rule="browsecomp", template=str(path))
    judgement = await judge.judge("Q {response}?", "Marlowe", "Shakespeare")
    assert (judgement.correct, judgement.confidence) == (False, 70.0)
    (message,) = llm.calls[0].messages
    assert message.kind is MessageKind.TASK
    assert message.content == (
        "Judge [response] to [question] against [correct_answer].\n"
        "[question]: Q {response}?\n[response]: Marlowe\n[correct_answer]: Shakespeare\n"
        'Answer in JSON like {"correct": "yes"}.'
    )


async def test_simpleqa_template_uses_its_official_slot_names(tmp_path):
    path = tmp_path / "simpleqa.txt"
    path.write_text("Q: {question}\nGold: {target}\nPredicted: {predicted_answer}\n")
    llm = ScriptedLLM(["C"])
    judgement = await LLMJudge(llm, rule="simpleqa", template=str(path)).judge(Q, "?", "X")
    assert judgement.label == "NOT_ATTEMPTED"
    assert llm.calls[0].messages[0].content == f"Q: {Q}\nGold: X\nPredicted: ?"


def test_an_unknown_placeholder_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "grader.txt"
    path.write_text("{question} {target} {response}")  # {target} is SimpleQA's, not HLE's
    with pytest.raises(ConfigError) as info:
        LLMJudge(ScriptedLLM([]), rule="hle", template=str(path))
    assert str(path) in str(info.value) and "{target}" in str(info.value)


def test_a_missing_template_is_refused_naming_the_file(tmp_path):
    missing = tmp_path / "nowhere.txt"
    with pytest.raises(ConfigError) as info:
        check_protocol(JudgeConfig(name="llm", rule="hle", template=str(missing)))
    assert str(missing) in str(info.value)


# -- the presets' protocol data --------------------------------------------------------------


def test_a_label_the_rule_cannot_read_is_a_config_error_naming_the_key():
    judge = JudgeConfig(name="llm", rule="hle", labels=["yes", "no", "NOT_ATTEMPTED"])
    with pytest.raises(ConfigError) as info:
        check_protocol(judge)
    assert "benchmark.judge.labels" in str(info.value) and "'NOT_ATTEMPTED'" in str(info.value)
    with pytest.raises(ConfigError, match=r"benchmark\.judge\.fields"):
        check_protocol(JudgeConfig(name="llm", rule="simpleqa", fields=["confidence"]))


OFFICIAL = {
    "simpleqa": ("simpleqa", ["CORRECT", "INCORRECT", "NOT_ATTEMPTED"]),
    "browsecomp": ("browsecomp", ["yes", "no"]),
    "browsecomp-zh": ("browsecomp", ["yes", "no"]),
    "hle": ("hle", ["yes", "no"]),
    "hle-text-500": ("hle", ["yes", "no"]),
    "xbench-deepsearch": ("xbench", ["正确", "错误"]),
    "frames": ("frames", ["TRUE", "FALSE"]),
    "deepsearchqa": (
        "deepsearchqa",
        ["FULLY_CORRECT", "CORRECT_WITH_EXTRANEOUS", "PARTIALLY_CORRECT", "FULLY_INCORRECT"],
    ),
}


@pytest.mark.parametrize("name", sorted(OFFICIAL))
def test_each_preset_states_its_official_protocol(name):
    judge = OmegaConf.load(CONF / "benchmark" / f"{name}.yaml")["judge"]
    rule, labels = OFFICIAL[name]
    assert (judge.rule, list(judge.labels)) == (rule, labels)
    assert list(judge.fields) == list(LLM_RULES[rule].fields)


@pytest.mark.parametrize("path", sorted((CONF / "benchmark").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_preset_s_protocol_data_is_one_its_rule_reads(path: Path):
    check_protocol(composed(f"benchmark={path.stem}").benchmark.judge)


def test_bench_with_a_missing_template_exits_2_naming_the_file_before_any_work(tmp_path):
    missing = tmp_path / "official_grader.txt"
    command = bench_command(
        "http://127.0.0.1:9/v1",  # never reached: the check comes first
        tmp_path / "run",
        "benchmark.judge.name=llm",
        "benchmark.judge.rule=simpleqa",
        "benchmark.judge.llm=openai_compatible",
        f"benchmark.judge.template={missing}",
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert f"benchmark.judge.template={missing}" in done.stderr
    assert not (tmp_path / "run" / "benchmark_results.jsonl").exists()


@pytest.mark.parametrize(
    ("reply", "label"),
    [
        ('{"expected": {"a": true, "b": true}, "extra": []}', "FULLY_CORRECT"),
        ('{"expected": {"a": true, "b": true}, "extra": ["c"]}', "CORRECT_WITH_EXTRANEOUS"),
        ('{"expected": {"a": true, "b": false}, "extra": []}', "PARTIALLY_CORRECT"),
        ('{"expected": {"a": true, "b": false}, "extra": ["c"]}', "PARTIALLY_CORRECT"),
        ('{"expected": {"a": false, "b": false}, "extra": ["c"]}', "FULLY_INCORRECT"),
    ],
)
async def test_deepsearchqa_labels_its_outcome_category(reply, label):
    judgement, _ = await judged("deepsearchqa", reply)
    assert judgement.label == label
    assert judgement.correct is (label == "FULLY_CORRECT")


@pytest.mark.parametrize("rule", ["hle", "browsecomp"])
@pytest.mark.parametrize(
    ("reply", "correct"),
    [
        # Two verdicts: an upper-case label in prose beside the yes / no field.
        ("extracted_final_answer: Marlowe\nJudgement: The response is INCORRECT\ncorrect: yes",
         None),
        ("extracted_final_answer: Marlowe\nreasoning: the response is not CORRECT\ncorrect: no",
         False),
        # The judge says there is no answer, with a note after it: never a correct one.
        ("extracted_final_answer: None (the response gives no answer)\ncorrect: yes", False),
        ("extracted_final_answer: None.\ncorrect: yes", False),
        # "None of the above" is an answer, not the absence of one.
        ("extracted_final_answer: None of the above\ncorrect: yes", True),
    ],
)  # fmt: skip
def test_the_official_fields_cannot_be_flipped_by_prose_or_a_noted_none(rule, reply, correct):
    reading = LLM_RULES[rule].read(reply)
    assert (reading.correct if reading else None) is correct
