"""Policy replay over journals written by the real agent loop, and its command."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from dataclasses import replace
from pathlib import Path

import genai_prices
import pytest

from deepledger.agent.answer import AnswerGenerator, AnswerPolicy, summary_prompt
from deepledger.agent.orchestrator import LoopLimits
from deepledger.bench.economics import economics_line, token_economics
from deepledger.bench.replay import RecordedRun, run_replay
from deepledger.config import CUT_BATCH, as_record
from deepledger.context.replay import Policy, attempts, replay
from deepledger.context.strategies import make_strategy
from deepledger.errors import ConfigError
from deepledger.llm.base import GenerationSettings
from deepledger.llm.scripted import ScriptedLLM
from deepledger.llm.tokens import IMAGE_TOKENS, default_counter
from deepledger.messages import ImagePart, Message, MessageKind, ToolCall, ToolResult, Usage
from deepledger.records.economics import EconomicsUnavailable, TokenEconomics
from deepledger.records.events import AssistantTurn, LLMCall, TaskStarted, ToolResults
from deepledger.records.parts import message_from_record, result_from_record
from deepledger.store.journal import Journal
from deepledger.tools.pool import ToolManager
from deepledger.tools.protocols import make_protocol
from deepledger.tools.types import LocalTool, ToolInfo
from tests.support.agent import loop
from tests.support.cli import deepledger
from tests.support.config import composed

SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}


def call(query: str) -> str:
    return (
        "<use_mcp_tool><server_name>kb</server_name><tool_name>lookup</tool_name>"
        f'<arguments>{{"query": "{query}"}}</arguments></use_mcp_tool>'
    )


async def lookup(arguments):
    return f"A page about {arguments['query']}. " + "Facts and figures. " * 120


def researcher(turns: int):
    def model(messages, tools):
        done = sum(m.kind is MessageKind.TOOL_RESULTS for m in messages)
        if messages[-1].kind is MessageKind.INJECTED:
            return "\\boxed{42}"
        return call(f"q{done}") if done < turns else "Found it: \\boxed{42}"

    return model


async def record_run(run_dir: Path, *overrides: str, tasks: int = 2, turns: int = 9) -> dict:
    """A run directory as `deepledger bench` leaves it, written by the real loop."""
    cfg = composed(
        "llm=openai_compatible",
        "llm.model_name=gpt-4.1",
        "llm.max_tokens=500",
        "agent.max_final_answer_retries=1",
        *overrides,
    )
    config = write_manifest(run_dir, as_record(cfg))
    for n in range(tasks):
        tools = ToolManager({}).for_task(
            [], local_tools=[LocalTool(ToolInfo("kb", "lookup", "Look up.", SCHEMA), lookup)]
        )
        await tools.start()
        journal = Journal(run_dir / "tasks" / f"task-{n}" / "attempt-1-retry-0.jsonl")
        context = make_strategy(cfg.agent.context)
        orchestrator = loop(
            ScriptedLLM(responder=researcher(turns + n)),
            tools,
            make_protocol(cfg.agent.tool_protocol),
            LoopLimits(20),
            AnswerGenerator(
                AnswerPolicy(max_final_answer_retries=1),
                summary_prompt=summary_prompt(cfg.benchmark.answer_format or ""),
            ),
            journal,
            settings=GenerationSettings(max_tokens=cfg.llm.max_tokens),
            system_prompt="You research. " * 50,
            context=context,
            window=cfg.llm.max_context_length,
            keep=cfg.agent.keep_tool_result,
        )
        await orchestrator.run(f"Question {n}?")
        journal.close()
        await tools.aclose()
    return config


def write_manifest(run_dir: Path, config: dict) -> dict:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "manifest.json").write_text(json.dumps({"config": config}))
    return config


def policies(run_dir: Path) -> dict[str, dict]:
    data = json.loads((run_dir / "replay.json").read_text())
    return {p["name"]: p for p in data["policies"]} | {"_": data}


async def test_the_recorded_policy_replays_to_the_recorded_counts_and_others_compare(tmp_path):
    await record_run(tmp_path, "llm.max_context_length=64000")
    table = run_replay(tmp_path, [])
    found = policies(tmp_path)
    recorded = found["recorded"]
    # Same counter as the run's (scripted) model: every call reproduced exactly.
    assert found["_"]["recorded_policy_error"]["max_relative_error"] == 0
    assert all(c["input_tokens"] == c["recorded_input_tokens"] for c in recorded["calls"])
    everything = found["keep everything"]
    assert everything["input_tokens"] == recorded["input_tokens"]  # it was keep-everything
    assert found["keep 5 tool results"]["input_tokens"] < everything["input_tokens"]
    assert found["round window 5"]["input_tokens"] < found["keep 5 tool results"]["input_tokens"]
    # Keeping everything is append-only: all but each conversation's first request cacheable.
    assert everything["cacheable_tokens"] > 0.8 * everything["input_tokens"]
    assert found["round window 5"]["cacheable_tokens"] < everything["cacheable_tokens"]
    per_turn = everything["prompt_tokens_per_turn"]
    assert per_turn == sorted(per_turn) and len(per_turn) == 11  # grows every turn
    assert "keep everything" in table and "round window 5" in table and "+0.0%" in table


async def test_a_small_window_shows_where_the_guard_fires_and_compaction_avoids_it(tmp_path):
    await record_run(tmp_path, "llm.max_context_length=64000")
    table = run_replay(tmp_path, ["llm.max_context_length=6000"])  # the standard set, smaller
    small = policies(tmp_path)["keep everything"]
    assert [g["journal"] for g in small["guard_fired"]] == [
        "task-0/attempt-1-retry-0",
        "task-1/attempt-1-retry-0",
    ]
    assert policies(tmp_path)["recorded"]["guard_fired"] == []  # the recorded run is the truth
    assert "compaction, keep 5 rounds" in table
    run_replay(
        tmp_path,
        [
            "llm.max_context_length=6000",
            "agent.context.strategy=compaction",
            "agent.context.keep_rounds=2",
        ],
    )
    compacted = next(p for n, p in policies(tmp_path).items() if "compaction" in n)
    assert compacted["guard_fired"] == [] and compacted["compactions"] >= 2
    assert any(c["purpose"] == "compaction" for c in compacted["calls"])


async def test_a_recorded_compaction_is_replayed_with_its_notes(tmp_path):
    await record_run(
        tmp_path,
        "llm.max_context_length=6000",
        "agent.context.strategy=compaction",
        "agent.context.keep_rounds=2",
    )
    run_replay(tmp_path, [])
    found = policies(tmp_path)
    recorded = found["recorded"]
    assert recorded["compactions"] >= 2
    replayed = [c for c in recorded["calls"] if c["recorded_input_tokens"]]
    assert all(c["input_tokens"] == c["recorded_input_tokens"] for c in replayed)
    assert any(c["purpose"] == "compaction" and c["input_tokens"] for c in recorded["calls"])
    # In this window, keeping everything would have ended both attempts early.
    assert recorded["guard_fired"] == [] and len(found["keep everything"]["guard_fired"]) == 2


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["agent.context.strategi=round_window"], "did you mean agent.context.strategy"),
        (["agent.context.strategy=sliding"], "agent.context.strategy='sliding'"),
        (["agent.context.strategy=round_window", "agent.context.keep_rounds=0"], "keep_rounds=0"),
        (["agent.context.strategy=compaction", "agent.context.compact_at=1.5"], "compact_at=1.5"),
        (["agent.keep_tool_result=-4"], "agent.keep_tool_result=-4"),
        (["agent.keep_tool_result=five"], "not a number"),
        (["llm.model_name=gpt-5"], "replay cannot change"),
    ],
)
async def test_bad_replay_settings_are_named(tmp_path, overrides, message):
    await record_run(tmp_path, tasks=1, turns=1)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        run_replay(tmp_path, overrides)


async def test_runs_it_cannot_replay_are_refused_with_the_reason(tmp_path):
    with pytest.raises(ConfigError, match="not a run directory"):
        run_replay(tmp_path, [])
    await record_run(tmp_path, tasks=1, turns=1)
    journal = next((tmp_path / "tasks").glob("*/attempt-*.jsonl"))
    old = [json.loads(line) for line in journal.read_text().splitlines()]
    for event in old:
        event.pop("system_prompt", None)
    journal.write_text("".join(json.dumps(e) + "\n" for e in old))
    with pytest.raises(ConfigError, match="older deepledger"):
        run_replay(tmp_path, [])


def test_the_replay_command(tmp_path):
    asyncio.run(record_run(tmp_path, tasks=1, turns=3))
    done = deepledger("replay", str(tmp_path), "--price", "gpt-4.1")
    assert done.returncode == 0, done.stderr
    assert "compaction, keep 5 rounds" in done.stdout
    library = f"genai-prices {genai_prices.__version__} (openai/gpt-4.1)"
    assert f"costs at gpt-4.1 prices: priced by {library}" in done.stdout
    assert json.loads((tmp_path / "replay.json").read_text())["priced_by"] == library
    unknown = deepledger("replay", str(tmp_path), "--price", "mystery-model-9000")
    assert unknown.returncode == 2
    assert "--price mystery-model-9000: no price for it in the run's pricing table" in (
        unknown.stderr
    )
    own = deepledger("replay", str(tmp_path))  # the run's self-hosted model: nothing prices it
    assert own.returncode == 0, own.stderr
    assert "no costs, unpriced: " in own.stdout
    usage = deepledger("replay")
    assert usage.returncode == 2 and "usage: deepledger replay RUN_DIR" in usage.stderr


async def test_token_economics_puts_the_run_beside_the_quadratic_arithmetic(tmp_path):
    await record_run(tmp_path / "all", "llm.max_context_length=64000")
    everything = token_economics(tmp_path / "all")
    curve = everything.input_tokens_per_turn
    assert len(curve) == 11 and curve == sorted(curve)
    assert everything.added_per_turn > 400  # a ~500-token page a turn
    predicted = everything.keep_everything_predicted_per_attempt
    assert predicted == pytest.approx(everything.keep_everything_replayed_per_attempt, 0.1)
    assert everything.saving_vs_keep_everything == 0
    assert everything.cacheable_share > 0.8
    await record_run(
        tmp_path / "keep5",
        "llm.max_context_length=64000",
        "agent.keep_tool_result=5",
        "agent.context.cut_batch=1",  # a cut every turn: the most it can save
    )
    keep5 = token_economics(tmp_path / "keep5")
    assert 0.2 < keep5.saving_vs_keep_everything < 1
    line = economics_line(keep5)
    assert "saves" in line and "+" in line
    assert token_economics(tmp_path / "nothing") == EconomicsUnavailable(
        unavailable=f"{tmp_path / 'nothing'} is not a run directory: it has neither "
        "manifest.json (deepledger bench) nor .hydra/config.yaml (deepledger run)."
    )


async def test_a_killed_runs_journals_and_torn_lines_are_left_out(tmp_path):
    await record_run(tmp_path, tasks=1, turns=2)
    journal = next((tmp_path / "tasks").glob("*/attempt-*.jsonl"))
    whole = run_replay(tmp_path, [])
    copy = journal.with_name("attempt-1-retry-0.interrupted-20260101T000000.jsonl")
    copy.write_text(journal.read_text() + '{"event": "llm_call", "tur')  # cut by a crash
    journal.write_text(journal.read_text() + '{"ts": "cut sh')
    assert run_replay(tmp_path, []) == whole
    assert isinstance(token_economics(tmp_path), TokenEconomics)


SCREENSHOT = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4000  # a megabyte of pixels


def write_image_journal(run_dir: Path, results: list[ToolResult]) -> Path:
    """One native-protocol turn whose results carry images, as the loop journals it."""
    path = run_dir / "tasks" / "task-0" / "attempt-1-retry-0.jsonl"
    journal = Journal(path)
    attached = ImagePart("image/jpeg", base64.b64encode(b"\xff\xd8" * 50).decode(), "q.jpg")
    journal.write(
        TaskStarted(
            task="What does the page show?",
            task_images=[attached],
            tools=["web.screenshot"],
            system_prompt="You research.",
            protocol="native",
        )
    )
    usage = Usage(100, 10)
    journal.write(LLMCall(turn=1, usage=usage))
    calls = [ToolCall(r.call_id, "screenshot", {"url": "a"}) for r in results]
    journal.write(AssistantTurn(turn=1, message=Message.assistant("", calls), boxed=None))
    journal.write(ToolResults(turn=1, calls=calls, results=results))
    journal.write(LLMCall(turn=2, usage=usage))
    journal.close()
    return path


def test_the_journal_names_images_without_their_data_and_replay_counts_them(tmp_path):
    data = base64.b64encode(SCREENSHOT).decode()
    shot = ImagePart("image/png", data, "https://example.org/a")
    results = [ToolResult("c1", "a page", name="screenshot", images=(shot, shot))]
    path = write_image_journal(tmp_path, results)
    text = path.read_text()
    assert data[:1000] not in text and len(text) < 5000  # the base64 is 1.3 MB
    lines = [json.loads(line) for line in text.splitlines()]
    (turn,) = [line for line in lines if line["event"] == "tool_results"]
    written = turn["results"][0]["images"]
    assert (
        written
        == [
            {
                "mime_type": "image/png",
                "source": "https://example.org/a",
                "size_bytes": len(SCREENSHOT),
                "sha256": hashlib.sha256(SCREENSHOT).hexdigest(),
            }
        ]
        * 2
    )

    (recorded,) = attempts(tmp_path)
    assert [i.mime_type for i in recorded.task_images] == ["image/jpeg"]
    counter = default_counter()
    policy = Policy("everything", composed().agent.context, -1)
    calls = replay(
        [recorded],
        policy,
        counter=counter,
        max_context_length=64000,
        max_tokens=500,
        summary_prompt="Answer.",
    ).calls
    # The second request holds the attached image and the two screenshots: each counted
    # as the fixed estimate, as at run time, though the journal has none of their data.
    without = write_image_journal(tmp_path / "plain", [replace(results[0], images=())])
    (plain,) = attempts(without.parents[2])
    plain = replace(plain, task_images=())
    plain_calls = replay(
        [plain],
        policy,
        counter=counter,
        max_context_length=64000,
        max_tokens=500,
        summary_prompt="Answer.",
    ).calls
    assert [c.input_tokens - p.input_tokens for c, p in zip(calls, plain_calls, strict=True)] == [
        IMAGE_TOKENS,
        3 * IMAGE_TOKENS,
    ]


def test_journals_from_before_images_still_load():
    old_result = {"call_id": "c1", "content": "a page", "is_error": False, "name": "search"}
    assert result_from_record(old_result) == ToolResult("c1", "a page", name="search")
    old_message = {"role": "user", "kind": "task", "content": "Q?", "tool_calls": []}
    assert message_from_record(old_message) == Message.task("Q?")
    named = result_from_record(
        old_result
        | {"images": [{"mime_type": "image/png", "source": "s", "size_bytes": 9, "sha256": "ab"}]}
    )
    assert [(i.mime_type, i.source, i.data) for i in named.images] == [("image/png", "s", "")]


def cut_events(run_dir: Path) -> list[dict]:
    return [
        event
        for journal in sorted((run_dir / "tasks").glob("*/attempt-*.jsonl"))
        for event in map(json.loads, journal.read_text().splitlines())
        if event["event"] == "context_cut"
    ]


async def test_a_batched_run_replays_to_its_counts_urgent_cuts_included(tmp_path):
    # Results of ~500 tokens, two kept, cut five at a time, in a window that the pile
    # of a whole batch overflows: the runtime cuts early (urgent), and journals it.
    await record_run(
        tmp_path,
        "llm.max_context_length=5000",
        "agent.keep_tool_result=2",
        "agent.context.cut_batch=5",
        tasks=1,
        turns=12,
    )
    cuts = cut_events(tmp_path)
    assert any(c["urgent"] for c in cuts) and all(c["tokens_freed"] > 0 for c in cuts)
    run_replay(tmp_path, ["llm.max_context_length=64000"])  # the others in a roomy window
    found = policies(tmp_path)
    assert found["_"]["recorded_policy_error"]["max_relative_error"] == 0  # cuts taken back
    batched = found["keep 5 tool results, cut 5 at a time"]
    one_a_turn = found["keep 5 tool results"]
    assert batched["cuts"] < one_a_turn["cuts"]
    assert batched["cacheable_tokens"] / batched["input_tokens"] > (
        one_a_turn["cacheable_tokens"] / one_a_turn["input_tokens"]
    )


def test_a_run_recorded_before_batches_replays_as_one_cut_a_turn():
    config = as_record(composed("llm=openai_compatible", "agent.keep_tool_result=5"))
    assert RecordedRun.from_config(config).context.batch == CUT_BATCH  # null: the default
    del config["agent"]["context"]["cut_batch"]
    assert RecordedRun.from_config(config).context.cut_batch == 1


async def test_cut_batch_is_a_replay_key(tmp_path):
    await record_run(tmp_path, tasks=1, turns=2)
    assert "cut 3 at a time" in run_replay(
        tmp_path, ["agent.keep_tool_result=2", "agent.context.cut_batch=3"]
    )
    assert "keep 2 tool results" in run_replay(
        tmp_path, ["agent.keep_tool_result=2", "agent.context.cut_batch=null"]
    )
    with pytest.raises(ConfigError, match=r"agent\.context\.cut_batch=0 must be at least 1"):
        run_replay(tmp_path, ["agent.keep_tool_result=2", "agent.context.cut_batch=0"])
