from __future__ import annotations

from dataclasses import replace

import pytest

from deepledger.context.trim import OMITTED_PLACEHOLDER, trim_tool_results
from deepledger.llm.tokens import count_messages, default_counter
from deepledger.messages import ImagePart, Message, MessageKind, Role, ToolCall, ToolResult


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
