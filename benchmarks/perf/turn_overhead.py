"""How the runtime's own work per turn grows over a 300-turn trajectory.

The model is the scripted double (zero latency, fixed usage) and the tool is an
in-process one returning 5 KB, so what is left of each turn is deepledger's own work:
guard, trimming, parsing, rollback checks, bookkeeping, journal. The result is the
median overhead of turns 1-10 against turns 290-300 (target: at most 2x, a few ms).

    .venv/bin/python benchmarks/perf/turn_overhead.py [--turns 300] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from deepledger.agent.answer import AnswerGenerator, AnswerPolicy
from deepledger.agent.orchestrator import LoopLimits, Orchestrator
from deepledger.context.guard import ContextWindow
from deepledger.context.policy import ContextPolicy
from deepledger.llm.base import GenerationSettings
from deepledger.llm.scripted import ScriptedLLM, reply
from deepledger.llm.tokens import default_counter
from deepledger.llm.usage import UsageLedger
from deepledger.messages import Usage
from deepledger.store.journal import Journal
from deepledger.tools.pool import ToolManager
from deepledger.tools.protocols import XmlProtocol
from deepledger.tools.types import LocalTool, ToolInfo

RESULT = "r" * 5 * 1024


class Clock:
    """Time spent inside the model and the tool, to subtract from each turn."""

    def __init__(self) -> None:
        self.outside = 0.0


def scripted_model(turns: int, clock: Clock) -> ScriptedLLM:
    def respond(messages, tools):
        started = time.perf_counter()
        n = sum(1 for m in messages if m.role.value == "assistant") + 1
        text = (
            "\\boxed{done}"
            if n > turns
            else f"Step {n}. <use_mcp_tool><server_name>kb</server_name><tool_name>lookup"
            f'</tool_name><arguments>{{"query": "q{n}"}}</arguments></use_mcp_tool>'
        )
        response = reply(text, usage=Usage(input_tokens=1000, output_tokens=50))
        clock.outside += time.perf_counter() - started
        return response

    return ScriptedLLM(responder=respond)


async def measure(turns: int, journal_dir: Path) -> list[float]:
    clock = Clock()

    async def lookup(arguments):
        started = time.perf_counter()
        result = RESULT
        clock.outside += time.perf_counter() - started
        return result

    default_counter()  # loading the tokenizer is start-up work, not per-turn work
    tools = ToolManager({}).for_task(
        [],
        local_tools=[LocalTool(ToolInfo("kb", "lookup", "Look up.", {"type": "object"}), lookup)],
    )
    await tools.start()
    journal = Journal(journal_dir / "journal.jsonl")
    llm, settings, ledger = (
        scripted_model(turns, clock),
        GenerationSettings(max_tokens=1000),
        UsageLedger(),
    )
    policy = ContextPolicy.for_model(
        None,
        keep_tool_result=5,
        llm=llm,
        settings=settings,
        window=ContextWindow(10**9),
        summary_prompt="summarize",
        journal=journal,
        ledger=ledger,
    )
    orchestrator = Orchestrator(
        llm=llm,
        tools=tools,
        protocol=XmlProtocol(),
        settings=settings,
        system_prompt="sys",
        limits=LoopLimits(max_turns=turns + 5),
        finalizer=AnswerGenerator(AnswerPolicy(), summary_prompt="summarize"),
        journal=journal,
        policy=policy,
        ledger=ledger,
    )
    overheads: list[float] = []
    real_turn = orchestrator._turn

    async def timed_turn(state):
        clock.outside = 0.0
        started = time.perf_counter()
        await real_turn(state)
        overheads.append(time.perf_counter() - started - clock.outside)

    orchestrator._turn = timed_turn
    state = await orchestrator.run("benchmark task")
    journal.close()
    assert state.final_answer == "done" and state.turn == turns + 1, state
    return overheads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/perf/results/turn_overhead.json")
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        overheads = asyncio.run(measure(args.turns, Path(folder)))
    early = statistics.median(overheads[:10]) * 1000
    late = statistics.median(overheads[args.turns - 10 : args.turns]) * 1000
    result = {
        "turns": args.turns,
        "tool_result_bytes": len(RESULT),
        "median_ms_turns_1_10": round(early, 3),
        "median_ms_last_10_turns": round(late, 3),
        "ratio_late_to_early": round(late / early, 2),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
