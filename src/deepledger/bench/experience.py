"""Carrying the lessons of failed retries into the next one.

Each format-retry's task text is rebuilt from the *original* question: the question,
then a header, one item per earlier post-mortem (in order), then a footer asking for a
different approach, in agent.prompt_profile's templates (under ``mirothinker``,
MiroThinker's ``=== Previous Attempts Analysis ===`` frame, the box asked for after it
by the task message). It is never built on top of the previous retry's text, so
headers and footers cannot nest however many retries there are.
"""

from __future__ import annotations

from collections.abc import Sequence

from deepledger.prompts import PromptSet


def retry_task_text(
    question: str, post_mortems: Sequence[str], prompts: PromptSet | None = None
) -> str:
    if not post_mortems:
        return question
    prompts = prompts or PromptSet()
    items = [
        prompts.render("retry_item.md", number=n, post_mortem=text.strip())
        for n, text in enumerate(post_mortems, start=1)
    ]
    header, footer = prompts.render("retry_header.md"), prompts.render("retry_footer.md")
    return "\n\n".join([question, header, *items, footer])
