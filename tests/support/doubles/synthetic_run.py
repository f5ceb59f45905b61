"""A run directory made up without a model: journals, results and manifest as
``deepledger bench`` writes them, for any number of tasks in seconds.

Written through the runtime's own classes (``RunStore``, ``Journal``, messages and
usage), so its files are in the current format. Tasks vary the way real ones do: many
turns or few, long tool results, rollbacks, compactions, the window guard, a wrong first
attempt whose post-mortem the retry carries, and, when asked, tasks that have not
finished (a run in progress) or an error.

    make_run(Path("/tmp/run"), tasks=500)
"""

from __future__ import annotations

import random
from contextlib import closing
from pathlib import Path

from deepledger.config import as_record, compose
from deepledger.messages import (
    EndReason,
    JSONObject,
    Message,
    StopReason,
    ToolCall,
    ToolResult,
    Usage,
)
from deepledger.records.events import (
    AssistantTurn,
    ClosingCall,
    Compacted,
    FinalAnswer,
    LLMCall,
    LoopEnded,
    PostMortem,
    RetryStarted,
    Rollback,
    TaskFinished,
    TaskStarted,
    ToolResults,
    WindowExhausted,
)
from deepledger.records.results import AttemptRecord, JudgementRecord, RetryRecord, TaskRecord
from deepledger.store.journal import Journal
from deepledger.store.run_store import RunStore

WINDOW = 32_000
_WORDS = [
    "population",
    "capital",
    "river",
    "founded",
    "census",
    "area",
    "border",
    "museum",
    "bridge",
    "railway",
    "harbour",
    "mountain",
    "province",
    "district",
    "treaty",
    "language",
    "currency",
    "airport",
    "cathedral",
    "university",
]


def config_for(conf_dir: Path, overrides: list[str] | None = None) -> JSONObject:
    """The worldfacts config, as a run directory records it."""
    cfg = compose(Path(conf_dir).resolve(), ["benchmark=worldfacts", *(overrides or [])])
    return as_record(cfg)


def make_run(
    root: Path,
    *,
    tasks: int,
    conf_dir: Path,
    seed: int = 7,
    unfinished: int = 0,
    errors: int = 0,
    not_started: int = 0,
    overrides: list[str] | None = None,
    finished: bool = True,
) -> Path:
    """Write a run of ``tasks`` tasks into ``root``; the last ``unfinished`` have journals
    and no result line, ``errors`` more before them ended in an error, and the suite
    expects ``not_started`` more that have neither."""
    rng = random.Random(seed)
    config = config_for(conf_dir, [f"llm.max_context_length={WINDOW}", *(overrides or [])])
    run_dir = RunStore(root)
    try:
        run_dir.start(config, ["bench", "(synthetic)"], tasks=tasks + not_started)
        for index in range(tasks):
            task_id = f"synthetic-{index:04d}"
            if index >= tasks - unfinished:
                _task(run_dir, rng, task_id, index, write_result=False)
            else:
                _task(run_dir, rng, task_id, index, error=index >= tasks - unfinished - errors)
        if finished and not unfinished:
            run_dir.finish()
    finally:
        run_dir.close()
    return root


def _task(
    run_dir: RunStore,
    rng: random.Random,
    task_id: str,
    index: int,
    *,
    write_result: bool = True,
    error: bool = False,
) -> None:
    question = f"What is the {rng.choice(_WORDS)} of place number {index}?"
    truth = str(rng.randint(1_000, 999_999))
    retries_wanted = 2 if rng.random() < 0.3 else 1
    retries: list[RetryRecord] = []
    post_mortem = None
    for retry in range(retries_wanted):
        last = retry == retries_wanted - 1
        answer = (truth if rng.random() < 0.5 else str(rng.randint(1, 999))) if last else None
        with closing(run_dir.journal(task_id, 1, retry)) as journal:
            record = _events(
                journal, rng, task_id, question, retry, post_mortem, answer, not write_result
            )
        if record is None:
            return
        post_mortem = record.post_mortem
        retries.append(record)
        run_dir.record_progress(task_id, record)
    final = retries[-1].final_answer
    correct = final == truth
    judgement = JudgementRecord(
        correct=correct, judge="exact", reason="match" if correct else "differs"
    )
    attempt = AttemptRecord(
        attempt=1,
        final_answer=final,
        provenance=retries[-1].provenance,
        correct=correct,
        judgement=judgement,
        carried_post_mortems=len(retries) - 1,
        retries=retries,
    )
    usage = sum((r.usage for r in retries), Usage())
    run_dir.add_result(
        TaskRecord(
            task_id=task_id,
            question=question,
            ground_truth=truth,
            final_answer=None if error else final,
            provenance="none" if error else attempt.provenance,
            correct=False if error else correct,
            judgement=None if error else judgement,
            status="error" if error else "finished",
            error="LLMError: the server went away" if error else None,
            end_reason="error" if error else retries[-1].end_reason,
            attempts=[] if error else [attempt],
            usage=usage,
            cost=round(usage.input_tokens * 4e-7 + usage.output_tokens * 1.6e-6, 6),
            turns=sum(r.turns for r in retries),
            tool_calls=sum(r.tool_calls for r in retries),
            elapsed_seconds=round(rng.uniform(5, 300), 3),
        )
    )


def _events(
    journal: Journal,
    rng: random.Random,
    task_id: str,
    question: str,
    retry: int,
    carried: str | None,
    answer: str | None,
    unfinished: bool,
) -> RetryRecord | None:
    """Write one retry's journal; its record (None: ``unfinished``, the journal of a
    run killed mid-retry)."""
    journal.write(
        RetryStarted(
            task_id=task_id,
            attempt=1,
            retry=retry,
            carried_post_mortems=int(carried is not None),
            final_retry=carried is not None,
        )
    )
    task_text = question if carried is None else f"{question}\n\nEarlier attempt:\n{carried}"
    journal.write(
        TaskStarted(
            task=task_text,
            tools=["search.search", "search.open"],
            system_prompt="You are a research agent. " * 40,
            protocol="xml",
        )
    )
    turns = rng.choice([rng.randint(2, 8), rng.randint(8, 30), rng.randint(30, 60)])
    prompt, total, calls_made, end = 1_800, Usage(), 0, "model_finished"
    for turn in range(1, turns + 1):
        if prompt + 2_500 > WINDOW:
            journal.write(
                WindowExhausted(
                    turn=turn - 1, limit=WINDOW, dropped_messages=2, estimate=prompt + 2_500
                )
            )
            end = "window_exhausted"
            break
        if rng.random() < 0.04 and turn > 4:
            journal.write(
                Compacted(
                    turn=turn,
                    rounds_replaced=turn - 4,
                    rounds_kept=3,
                    tokens_before=prompt,
                    tokens_after=prompt // 3,
                    notes="Goal: find the figure. Confirmed: page A says so.",
                )
            )
            prompt //= 2
        usage = Usage(prompt, rng.randint(30, 300), int(prompt * 0.8), 0)
        total = total + usage
        journal.write(
            LLMCall(
                turn=turn,
                messages=2 * turn + 1,
                left_out_messages=0,
                prefix_kept_messages=2 * turn - 1,
                prefix_broken=False,
                prefix_broken_by=None,
                blanked_tool_results=0,
                forced_call=turn == 1,
                usage=usage,
                stop_reason=StopReason.END_TURN,
            )
        )
        if rng.random() < 0.05:
            journal.write(
                Rollback(
                    turn=turn,
                    reason="duplicate_call",
                    detail="the same call was made before",
                    reply="<use_mcp_tool>…",
                )
            )
        query = " ".join(rng.sample(_WORDS, 3))
        call = ToolCall(f"t{turn}m1", "search", {"query": query}, server_name="search")
        text = f"Searching for {query}.\n" + "I will look at the results next. " * rng.randint(1, 8)
        journal.write(AssistantTurn(turn=turn, message=Message.assistant(text), boxed=None))
        result = "\n".join(
            f"{i}. {rng.choice(_WORDS).title()} [doc_id: pages/{rng.randint(1, 774)}.md] "
            + "Some text from the page. " * rng.randint(4, 20)
            for i in range(1, 6)
        )
        journal.write(
            ToolResults(
                turn=turn, calls=[call], results=[ToolResult(call.id, result, name="search")]
            )
        )
        calls_made += 1
        prompt += rng.randint(300, 1_200)
    if unfinished:
        return None
    journal.write(LoopEnded(end_reason=EndReason(end), turns=turns))
    closing = Usage(prompt, 40, int(prompt * 0.9), 0)
    total = total + closing
    reply = f"The answer is \\boxed{{{answer}}}." if answer else "I could not find it."
    journal.write(
        ClosingCall(
            purpose="summary",
            message=Message.assistant(reply),
            prefill=None,
            usage=closing,
            stop_reason=StopReason.END_TURN,
        )
    )
    journal.write(FinalAnswer(answer=answer, provenance="summary" if answer else "none"))
    post_mortem = None if answer else "Failure type: incomplete. Searched the wrong pages."
    if post_mortem:
        journal.write(PostMortem(text=post_mortem, failure_type="incomplete", prefilled=True))
    journal.write(
        TaskFinished(
            answer=answer,
            provenance="summary" if answer else "none",
            end_reason=EndReason(end),
            turns=turns,
            tool_calls=calls_made,
            rollbacks=0,
            usage=total,
            cost=None,
        )
    )
    assert journal.path is not None  # the run store's journals are files
    return RetryRecord(
        retry=retry,
        final_answer=answer,
        provenance="summary" if answer else "none",
        end_reason=end,
        turns=turns,
        tool_calls=calls_made,
        post_mortem=post_mortem,
        failure_type="incomplete" if post_mortem else None,
        carried_post_mortems=int(carried is not None),
        usage=total,
        journal=f"tasks/{journal.path.parent.name}/{journal.path.name}",
    )
