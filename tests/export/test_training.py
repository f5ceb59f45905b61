"""The training formats (``chatml``, ``openai``, ``dpo``) on a pass@2 bench against the
fake OpenAI server: task k01 is answered wrongly on its first attempt and rightly on
its second, k02 rightly at once. Each attempt looks a key up three times (the second
lookup carries a secret the tool's error repeats), with ``keep_tool_result=1`` so the
policy blanks older results: the per-turn requests differ from the whole conversation.
A second run does the same with native calls and compaction (notes replace rounds).
Every request the fake received is kept with the task and attempt it belonged to."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from deepledger.cli import main
from deepledger.errors import DeepLedgerError
from deepledger.export import ExportRequest, export
from deepledger.store.redaction import redact_exported as redacted
from tests.support.doubles.fake_llm_server import (
    FakeLLMServer,
    FakeToolCall,
    FakeUsage,
    RecordedRequest,
    Reply,
)
from tests.support.doubles.fault_tool_server import answer_for
from tests.support.doubles.faults import (
    POST_MORTEM_MARK,
    SUMMARY_MARK,
    bench_overrides,
    lookup_call,
    message_texts,
    run_in_process,
    task_key,
    write_suite,
)

SECRET = "token=sk-live-0123456789"
CORRECT = {("k01", 2), ("k02", 1)}  # (task, attempt) judged correct
THOUGHT = "weighing the lookups"
OMITTED = "[Tool result omitted to save context.]"  # a result keep_tool_result blanked
NOTES_MARK = "You keep the notes of a research agent"  # compact.md
# Compaction due at 2,000 tokens with 300 a message: from the fourth request on.
COMPACTION = (
    "agent.context.strategy=compaction",
    "agent.context.keep_rounds=1",
    "agent.context.compact_at=0.5",
    "agent.context.min_saving=0",
    "llm.max_context_length=4000",
    "llm.max_tokens=100",
)


@dataclass
class Model:
    """Three lookups, then done; the answer wrong on k01's first attempt only."""

    native: bool = False
    starts: Counter[str] = field(default_factory=Counter)
    turns: Counter[tuple[str, int]] = field(default_factory=Counter)  # loop calls an attempt
    received: list[tuple[str, int, list[Any]]] = field(default_factory=list)
    offered: list[tuple[str, int, Any]] = field(default_factory=list)  # tools (no compaction's)

    def __call__(self, request: RecordedRequest) -> Reply:
        key = task_key(request) or "?"
        if len(request.messages) == 2:
            self.starts[key] += 1
        self.received.append((key, self.starts[key], request.messages))
        texts = message_texts(request)
        last = texts[-1]
        if any(NOTES_MARK in text for text in texts):  # a compaction call: no sample
            return Reply("Notes: the keys looked up so far.")
        self.offered.append((key, self.starts[key], request.body.get("tools")))
        if POST_MORTEM_MARK in last:
            return Reply("Failure type: wrong_answer")
        if SUMMARY_MARK in last:
            right = key == "k02" or self.starts[key] >= 2
            answer = answer_for(key) if right else "code-wrong"
            return Reply(f"\\boxed{{{answer}}}", reasoning=THOUGHT)
        done = sum(m.get("role") == "assistant" for m in request.messages)
        if self.native:  # counted, not read from the request, which compaction shortens
            self.turns[key, self.starts[key]] += 1
            if self.turns[key, self.starts[key]] <= 3:
                return self.native_calls(key, self.turns[key, self.starts[key]] - 1)
        if done == 0:
            return Reply("Step 0.\n" + lookup_call(f"{key}-a", "none"), reasoning="first a lookup")
        if done == 1:
            return Reply("Step 1.\n" + lookup_call(SECRET, "error"))
        if done == 2:
            return Reply("Step 2.\n" + lookup_call(f"{key}-c", "none"))
        return Reply("I have what I need.")

    def native_calls(self, key: str, done: int) -> Reply:
        """Native calls with fixed ids; two at once on the second turn, the secret's."""
        calls = [FakeToolCall("faulty__lookup", {"key": f"{key}-{done}"}, id=f"c{done}")]
        if done == 1:
            calls.append(FakeToolCall("faulty__lookup", {"key": SECRET, "fault": "error"}, id="s"))
        # a prompt that grows a known amount a message: compaction comes when it is due
        usage = FakeUsage(input_tokens=300 * (2 + 3 * done))
        return Reply(
            f"Step {done}.",
            tool_calls=tuple(calls),
            finish_reason="tool_calls",
            reasoning="why",
            usage=usage,
        )


@dataclass
class Run:
    folder: Path
    model: Model


def record(root: Path, *extra: str, native: bool = False) -> Run:
    write_suite(root / "data", 2)
    model = Model(native)
    folder = root / "run"
    with FakeLLMServer(responder=model) as server:
        overrides = bench_overrides(
            root / "data",
            server.openai_base_url,
            tools=True,
            extra=[
                "benchmark.execution.pass_at_k=2",
                "benchmark.execution.max_concurrent=1",
                "agent.keep_tool_result=1",
                "agent.context.cut_batch=1",
                "agent.context_compress_limit=0",
                f"hydra.run.dir={folder}",
                *extra,
            ],
        )
        asyncio.run(run_in_process(overrides, folder))
        server.assert_all_consumed()
    return Run(folder, model)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return record(tmp_path_factory.mktemp("training"))


def lines(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_per_turn_samples_are_the_requests_the_model_received(run: Run, tmp_path: Path) -> None:
    out = tmp_path / "turns.jsonl"
    outcome = export(ExportRequest((run.folder,), "chatml", out, per_turn=True))
    samples = lines(out)
    assert outcome.rows == len(samples) == 10  # two correct attempts, 4 turns + answer each
    assert outcome.skipped == {"judged incorrect": 1}
    # What the fake received, as decoded JSON; secrets redacted as every sample is.
    received = [redacted(m) for key, n, m in run.model.received if (key, n) in CORRECT]
    prompts = [sample["messages"][:-1] for sample in samples]
    assert sorted(map(json.dumps, prompts)) == sorted(map(json.dumps, received))
    # keep_tool_result=1 blanked older results: the later requests are not the history
    assert any(m["content"] == OMITTED for prompt in prompts for m in prompt)
    for sample in samples:
        reply = sample["messages"][-1]
        assert reply["role"] == "assistant" and sample["tools"] == []
    answers = [s["messages"][-1] for s in samples if "\\boxed" in s["messages"][-1]["content"]]
    assert [a["reasoning_content"] for a in answers] == [THOUGHT, THOUGHT]


def test_attempt_samples_are_whole_conversations_in_openai_format(run: Run, tmp_path: Path) -> None:
    out = tmp_path / "openai.jsonl"
    outcome = export(ExportRequest((run.folder,), "openai", out, only="all"))
    samples = lines(out)  # plain json, a line each
    assert outcome.rows == len(samples) == 3 and outcome.skipped == {}
    for sample in samples:
        assert set(sample) == {"messages"}  # XML: no native calls, the tools in the prompt
        messages = sample["messages"]
        assert [m["role"] for m in messages[:2]] == ["system", "user"]
        assert "## Server name: faulty" in messages[0]["content"]  # the tool schemas (XML)
        assert not any(m["content"] == OMITTED for m in messages)  # untrimmed
        assert messages[-1]["content"].startswith(f"<think>\n{THOUGHT}\n</think>\n\n\\boxed{{")
        assert all("reasoning_content" not in m for m in messages)
        assert len(messages) == 2 + 4 + 3 + 2  # 4 replies, 3 results, summary prompt, answer
    text = out.read_text(encoding="utf-8")
    assert SECRET not in text and "sk-live" not in text and "token=***" in text


def test_thinking_dropped(run: Run, tmp_path: Path) -> None:
    for form in ("chatml", "openai"):
        out = tmp_path / f"{form}.jsonl"
        export(ExportRequest((run.folder,), form, out, per_turn=True, thinking="drop"))
        text = out.read_text(encoding="utf-8")
        assert "reasoning_content" not in text and "<think>" not in text
        assert THOUGHT not in text and "first a lookup" not in text


def test_identical_samples_are_written_once(run: Run, tmp_path: Path) -> None:
    out = tmp_path / "twice.jsonl"
    outcome = export(ExportRequest((run.folder, run.folder), "chatml", out))
    assert outcome.rows == len(lines(out)) == 2
    assert outcome.skipped == {"judged incorrect": 2, "duplicate": 2}


def test_filters_and_nothing_to_write(run: Run, tmp_path: Path) -> None:
    out = tmp_path / "filtered.jsonl"
    kept = export(ExportRequest((run.folder,), "chatml", out, only="all", max_turns=4))
    assert kept.rows == 3
    request = ExportRequest((run.folder,), "chatml", out, min_turns=5)
    with pytest.raises(DeepLedgerError, match=r"nothing to write .*2 fewer than 5 turns"):
        export(request)
    ended = ExportRequest(
        (run.folder,), "chatml", tmp_path / "none.jsonl", end_reasons=frozenset({"looping"})
    )
    with pytest.raises(DeepLedgerError, match="ended by model_finished"):
        export(ended)
    assert not (tmp_path / "none.jsonl").exists()


def test_dpo_pairs_share_the_prompt(run: Run, tmp_path: Path) -> None:
    out = tmp_path / "dpo.jsonl"
    outcome = export(ExportRequest((run.folder,), "dpo", out))
    [pair] = lines(out)  # k01 alone has a correct and an incorrect attempt
    assert outcome.skipped == {"task without both a correct and an incorrect attempt": 1}
    assert set(pair) == {"prompt", "chosen", "rejected"}
    assert [m["role"] for m in pair["prompt"]] == ["system", "user"]
    assert "k01" in pair["prompt"][1]["content"]
    assert pair["chosen"][0]["role"] == pair["rejected"][0]["role"] == "assistant"
    assert pair["chosen"][-1]["content"] == "\\boxed{code-k01}"
    assert pair["rejected"][-1]["content"] == "\\boxed{code-wrong}"


def test_the_command_line_writes_what_the_model_received_and_pairs_on_its_prompt(
    run: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's check through `deepledger export`, so that its flags reach the writer."""
    out = tmp_path / "turns.jsonl"
    flags = ["--per-turn", "--end-reason", "model_finished", "--min-turns", "1"]
    argv = ["export", str(run.folder), "chatml", "--only", "correct", *flags, "--out", str(out)]
    assert main(argv) == 0
    assert capsys.readouterr().out == f"{out}\n"
    received = [redacted(m) for key, n, m in run.model.received if (key, n) in CORRECT]
    prompts = [sample["messages"][:-1] for sample in lines(out)]
    assert sorted(map(json.dumps, prompts)) == sorted(map(json.dumps, received))
    assert main([*argv[:-1], str(tmp_path / "few.jsonl"), "--max-turns", "3"]) == 1
    assert "2 more than 3 turns" in capsys.readouterr().err
    assert not (tmp_path / "few.jsonl").exists()

    pairs = tmp_path / "dpo.jsonl"
    assert main(["export", "dpo", str(run.folder), "--thinking", "drop", "--out", str(pairs)]) == 0
    [pair] = lines(pairs)
    firsts = [redacted(m) for key, n, m in run.model.received if key == "k01" and len(m) == 2]
    assert len(firsts) == 2 and firsts[0] == firsts[1] == pair["prompt"]
    assert THOUGHT not in pairs.read_text(encoding="utf-8")


def test_native_calls_and_compaction_per_turn_and_in_openai_format(tmp_path: Path) -> None:
    # DeepSeek-style: each reply with calls sends its reasoning back (llm.send_back_reasoning)
    native = ("agent.tool_protocol=native", "llm.send_back_reasoning=true")
    run = record(tmp_path, *native, *COMPACTION, native=True)
    journals = "".join(p.read_text() for p in run.folder.glob("tasks/*/attempt-*.jsonl"))
    assert '"event":"compacted"' in journals
    out = tmp_path / "turns.jsonl"
    export(ExportRequest((run.folder,), "chatml", out, per_turn=True))
    received = [
        redacted(m)
        for key, n, m in run.model.received
        if (key, n) in CORRECT and NOTES_MARK not in json.dumps(m)  # notes calls: no samples
    ]
    samples = lines(out)
    prompts = [sample["messages"][:-1] for sample in samples]
    assert sorted(map(json.dumps, prompts)) == sorted(map(json.dumps, received))
    assert any("Notes: the keys" in json.dumps(prompt) for prompt in prompts)  # compacted
    # The tool schemas, as every request of those attempts carried them (the same ones).
    [offered] = {json.dumps(redacted(t)) for key, n, t in run.model.offered if (key, n) in CORRECT}
    assert "faulty__lookup" in offered
    assert {json.dumps(sample["tools"]) for sample in samples} == {offered}
    whole = tmp_path / "openai.jsonl"
    export(ExportRequest((run.folder,), "openai", whole))
    for sample in lines(whole):
        assert json.dumps(sample["tools"]) == offered
        assert sample["parallel_tool_calls"] is True  # two calls in one reply
        messages = sample["messages"]
        calls = [c for m in messages for c in m.get("tool_calls", ())]
        assert [c["id"] for c in calls] == ["c0", "c1", "s", "c2"]
        assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == [
            "c0",
            "c1",
            "s",
            "c2",
        ]
        secret = json.loads(calls[2]["function"]["arguments"])  # still JSON, redacted
        assert secret == {"key": "token=***", "fault": "error"}
        assert messages[2]["content"] == "<think>\nwhy\n</think>\n\nStep 0."
    # A journal of an older release has no tool_specs: no tools (chatml's list empty).
    for journal in run.folder.glob("tasks/*/attempt-*.jsonl"):
        older = [json.loads(line) for line in journal.read_text().splitlines()]
        assert sum(e.pop("tool_specs", None) is not None for e in older) == 1
        journal.write_text("".join(json.dumps(e) + "\n" for e in older))
    export(ExportRequest((run.folder,), "chatml", out))
    export(ExportRequest((run.folder,), "openai", whole))
    assert all(sample["tools"] == [] for sample in lines(out))
    assert all("tools" not in sample for sample in lines(whole))


def test_tool_schemas_are_redacted() -> None:
    schema = {"type": "object", "x-api-key": "sk-1", "description": "pass token=sk-2 along"}
    tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
    assert redacted(tool)["function"]["parameters"] == {
        "type": "object",
        "x-api-key": "***",
        "description": "pass token=*** along",
    }
