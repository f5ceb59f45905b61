"""Running a kept reply's tool calls: the step of a turn between the reply and the next.

The calls run one after another (a stateful tool such as python must see them in order);
calls the tools layer repaired before running are journaled as such; a call that could
not be read gets an error result saying why; a note the model must read (a resume lost a
tool server's state) rides on the last result; the calls that succeeded are remembered
(asking for one again is a duplicate, ``agent/rollback.py``); the results message goes
into the history and the journal.
"""

from __future__ import annotations

from dataclasses import replace

from deepledger.agent.rollback import call_key
from deepledger.agent.state import RunState
from deepledger.messages import ToolResult
from deepledger.records.events import ToolCallRepaired, ToolResults
from deepledger.store.journal import Journal
from deepledger.tools.protocols import ParsedCalls, ToolProtocol
from deepledger.tools.task_tools import TaskTools


async def run_calls(
    state: RunState,
    parsed: ParsedCalls,
    *,
    tools: TaskTools,
    protocol: ToolProtocol,
    journal: Journal,
    note: str | None = None,
) -> list[ToolResult]:
    """Run the calls of the reply just kept and append their results message; the
    results (``note`` added to the last one, when there is one)."""
    # The reply that asks for the calls, and its usage, on file before they act.
    journal.flush()
    # One after another: a stateful tool (python) must see its calls in order.
    results = [await tools.call(call) for call in parsed.calls]
    for repair in tools.take_repaired():  # run as meant (tools/repair.py)
        journal.write(
            ToolCallRepaired(
                turn=state.turn,
                call_id=repair.call_id,
                kind=repair.kind,
                written=repair.written,
                ran=repair.ran,
                detail=repair.detail,
            )
        )
    results += [
        ToolResult(f"t{state.turn}m{i}", f"Tool call not run: {why}", is_error=True)
        for i, why in enumerate(parsed.malformed, start=1)
    ]
    if note is not None and results:
        last = results[-1]
        results[-1] = replace(last, content=f"{last.content}\n\n{note}")
    for call, result in zip(parsed.calls, results, strict=False):
        key = call_key(call)
        if key is not None and not result.is_error:  # a failed call may be retried
            state.seen_call_keys.add(key)
    state.tool_calls += len(parsed.calls)
    state.history.append(protocol.results_message(results, list(parsed.calls)))
    journal.write(ToolResults(turn=state.turn, calls=parsed.calls, results=results))
    return results
