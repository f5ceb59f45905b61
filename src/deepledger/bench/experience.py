"""Carrying the lessons of failed retries into the next one.

Each format-retry's task text is rebuilt from the *original* question: the question,
then a header, one item per earlier post-mortem (in order), then a footer asking for a
different approach. It is never built on top of the previous retry's text, so headers
and footers cannot nest however many retries there are.
"""

from __future__ import annotations

from collections.abc import Sequence

from deepledger.prompts import render


def retry_task_text(question: str, post_mortems: Sequence[str]) -> str:
    if not post_mortems:
        return question
    items = [
        render("retry_item.md", number=n, post_mortem=text.strip())
        for n, text in enumerate(post_mortems, start=1)
    ]
    return "\n\n".join([question, render("retry_header.md"), *items, render("retry_footer.md")])
