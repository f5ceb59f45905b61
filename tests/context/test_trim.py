from __future__ import annotations

from dataclasses import replace

import pytest

from deepledger.context.trim import (
    OMITTED_PLACEHOLDER,
    ToolResultTrimmer,
    batched_cut,
    trim_tool_results,
)
from deepledger.llm.tokens import count_messages, default_counter
from deepledger.messages import ImagePart, Message, MessageKind, Role, ToolCall, ToolResult
from tests.support.histories import growing_histories


def xml_history() -> list[Message]:
    """System, task, three tool turns in the XML protocol, then a summarize prompt."""
    history = [Message.system("You are a researcher."), Message.task("Who wrote X?")]
    for n in range(1, 4):
        call = ToolCall(f"c{n}", "search", {"q": f"query {n}"}, server_name="web")
        history.append(Message.assistant(f"<use_mcp_tool>... {n}</use_mcp_tool>", [call]))
        history.append(
            Message.text_tool_results(f"result text {n}", [ToolResult(f"c{n}", f"raw {n}")])
        )
    history.append(Message.injected("Summarize and give the answer in \\boxed{}."))
    return history


def native_history() -> list[Message]:
    """Native protocol: the second turn has two parallel calls, then a post-mortem prompt."""
    history = [Message.system("sys"), Message.task("task")]
    turns = [["a"], ["b1", "b2"], ["c"]]
    for ids in turns:
        calls = [ToolCall(i, "fetch", {"url": i}) for i in ids]
        history.append(Message.assistant("", calls))
        history.append(Message.native_tool_results([ToolResult(i, f"page {i}") for i in ids]))
    history.append(Message.injected("Write a post-mortem."))
    return history


def result_texts(messages: list[Message]) -> list[str]:
    out = []
    for m in messages:
        if m.kind is MessageKind.TOOL_RESULTS:
            out.append(
                m.content if m.role is Role.USER else "|".join(r.content for r in m.tool_results)
            )
    return out


@pytest.mark.parametrize("build", [xml_history, native_history])
def test_minus_one_keeps_everything(build):
    history = build()
    assert trim_tool_results(history, -1) == history


def test_zero_blanks_every_tool_result_but_nothing_else_xml():
    history = xml_history()
    sent = trim_tool_results(history, 0)
    assert result_texts(sent) == [OMITTED_PLACEHOLDER] * 3
    for before, after in zip(history, sent, strict=True):
        if before.kind is not MessageKind.TOOL_RESULTS:
            assert after == before  # task, system, replies, injected prompt untouched
        else:
            assert after.role is Role.USER
            assert [r.call_id for r in after.tool_results] == [
                r.call_id for r in before.tool_results
            ]


def test_zero_keeps_ids_and_roles_native():
    history = native_history()
    sent = trim_tool_results(history, 0)
    blanked = [m for m in sent if m.kind is MessageKind.TOOL_RESULTS]
    assert all(m.role is Role.TOOL for m in blanked)
    assert [[r.call_id for r in m.tool_results] for m in blanked] == [["a"], ["b1", "b2"], ["c"]]
    assert all(r.content == OMITTED_PLACEHOLDER for m in blanked for r in m.tool_results)
    assert sent[-1] == Message.injected("Write a post-mortem.")


@pytest.mark.parametrize(
    ("keep", "expected_xml"),
    [
        (1, [OMITTED_PLACEHOLDER, OMITTED_PLACEHOLDER, "result text 3"]),
        (2, [OMITTED_PLACEHOLDER, "result text 2", "result text 3"]),
        (3, ["result text 1", "result text 2", "result text 3"]),
        (4, ["result text 1", "result text 2", "result text 3"]),
        (5, ["result text 1", "result text 2", "result text 3"]),
        (10, ["result text 1", "result text 2", "result text 3"]),
    ],
)
def test_keep_n_keeps_the_newest_n_xml(keep, expected_xml):
    assert result_texts(trim_tool_results(xml_history(), keep)) == expected_xml


def test_keep_n_counts_a_parallel_turn_once_native():
    sent = trim_tool_results(native_history(), 2)
    assert result_texts(sent) == [OMITTED_PLACEHOLDER, "page b1|page b2", "page c"]


@pytest.mark.parametrize("build", [xml_history, native_history])
@pytest.mark.parametrize("keep", [0, 1, 2])
def test_stored_history_is_untouched(build, keep):
    history = build()
    snapshot = list(history)
    trim_tool_results(history, keep)
    assert history == snapshot


def test_first_user_message_is_never_trimmed_even_if_marked_as_results():
    first = Message.text_tool_results("the task, mislabelled")
    history = [first, Message.assistant("x"), Message.text_tool_results("r")]
    sent = trim_tool_results(history, 0)
    assert sent[0].content == "the task, mislabelled"
    assert sent[2].content == OMITTED_PLACEHOLDER


def test_injected_prompts_survive_keep_zero_in_a_mixed_history():
    history = xml_history()
    history.insert(4, Message.injected("Your previous reply had no \\boxed{} answer."))
    sent = trim_tool_results(history, 0)
    injected = [m.content for m in sent if m.kind is MessageKind.INJECTED]
    assert injected == [
        "Your previous reply had no \\boxed{} answer.",
        "Summarize and give the answer in \\boxed{}.",
    ]


def test_rejects_invalid_keep():
    with pytest.raises(ValueError, match="keep_tool_result"):
        trim_tool_results(xml_history(), -2)


SHOT = ImagePart("image/png", "iVBORw0KGgo=", "shot.png")


def with_images(history: list[Message]) -> list[Message]:
    """Every tool result carries an image, as a screenshot tool's would."""
    return [
        replace(m, tool_results=tuple(replace(r, images=(SHOT,)) for r in m.tool_results))
        if m.kind is MessageKind.TOOL_RESULTS
        else m
        for m in history
    ]


@pytest.mark.parametrize("build", [xml_history, native_history])
def test_blanking_a_result_drops_its_images_with_its_text(build):
    task = Message.task("What does the attached chart show?", [SHOT])
    history = with_images(build())
    history[1] = task
    sent = trim_tool_results(history, 1)
    results = [m for m in sent if m.kind is MessageKind.TOOL_RESULTS]
    assert [len(m.all_images) for m in results] == [0, 0, len(results[-1].tool_results)]
    assert all(r.content == OMITTED_PLACEHOLDER for m in results[:-1] for r in m.tool_results)
    assert results[-1] == [m for m in history if m.kind is MessageKind.TOOL_RESULTS][-1]
    assert sent[1] == task  # the task's attachment is never blanked
    assert count_messages(default_counter(), sent) < count_messages(default_counter(), history)


# -- batched cuts (agent.context.cut_batch) ------------------------------------------------
def growing(turns: int) -> list[list[Message]]:
    """The history before each of ``turns`` turns of one-result tool calls (XML)."""
    return growing_histories(turns, lambda n: f"result {n} " * 20)


def one_at_a_time(messages: list[Message], keep: int) -> list[int]:
    """Which messages the reference runtime blanks: all but the newest ``keep`` results."""
    results = [i for i, m in enumerate(messages) if m.kind is MessageKind.TOOL_RESULTS]
    return results[: max(0, len(results) - keep)]


def test_the_schedule_waits_for_a_whole_batch_then_cuts_down_to_the_limit():
    assert [batched_cut(total, 2, 3) for total in range(13)] == [
        *(0, 0, 0, 0, 0),  # up to keep + batch - 1 = 4 shown
        *(3, 3, 3),
        *(6, 6, 6),
        *(9, 9),
    ]
    assert [batched_cut(total, 2, 1) for total in range(6)] == [0, 0, 0, 1, 2, 3]
    # After an urgent cut (floor), batches count on from it.
    assert [batched_cut(total, 2, 3, floor=4) for total in range(6, 11)] == [4, 4, 4, 7, 7]


@pytest.mark.parametrize("keep", [0, 1, 3])
def test_one_at_a_time_is_what_the_reference_runtime_blanks(keep):
    trimmer = ToolResultTrimmer(keep, batch=1)
    for history in growing(9):
        sent = trimmer(history, history)
        blanked = [i for i, m in enumerate(sent) if m is not history[i]]
        assert blanked == one_at_a_time(history, keep)


@pytest.mark.parametrize(("keep", "batch"), [(0, 2), (2, 3), (5, 5)])
def test_between_batched_cuts_each_request_only_grows_at_its_end(keep, batch):
    trimmer = ToolResultTrimmer(keep, batch=batch)
    before: list[Message] = []
    cuts = []
    for turn, history in enumerate(growing(4 * (keep + batch))):
        sent = trimmer(history, history)
        shown = sum(m.kind is MessageKind.TOOL_RESULTS and m in history for m in sent)
        assert shown == (turn if turn < keep + batch else keep + (turn - keep) % batch)
        if sent[: len(before)] != before:
            cuts.append(turn)
        before = sent
    # The first cut when keep + batch results are in, then one every batch turns.
    assert cuts == list(range(keep + batch, 4 * (keep + batch) + 1, batch))


def test_an_urgent_cut_blanks_down_to_the_limit_and_batches_count_on_from_there():
    states = growing(12)
    trimmer = ToolResultTrimmer(2, batch=4)
    assert trimmer.due(states[5]) == 0 and trimmer.pending(states[5]) == 3
    trimmer.cut_now(states[5])
    assert trimmer.due(states[5]) == 3 and trimmer.pending(states[5]) == 0
    assert [trimmer.due(states[n]) for n in range(6, 11)] == [3, 3, 3, 7, 7]
    adopted = ToolResultTrimmer(2, batch=4)
    adopted.adopt(3)  # a resumed or replayed conversation takes the journaled cut back
    assert [adopted.due(states[n]) for n in range(5, 11)] == [3, 3, 3, 3, 7, 7]


def test_results_are_counted_in_the_history_not_in_what_a_strategy_picked():
    history = growing(6)[-1]
    trimmer = ToolResultTrimmer(1, batch=3)
    picked = history[:2] + history[-8:]  # a round window of the last four rounds
    sent = trimmer(picked, history)
    # Six results, the oldest three blanked: of the window's, only the oldest.
    blanked = [m.content == OMITTED_PLACEHOLDER for m in sent if m.kind is MessageKind.TOOL_RESULTS]
    assert blanked == [True, False, False, False]
    assert trimmer.due(history) == 3 and trimmer.last_blanked == 1
