"""The task message a model reads: the question, and what it is told about an attached file.

With a reader tool the message names the file and the model reads it when it wants to.
Without one (MiroThinker's presets) nothing could open the file, so its converted
content goes into the message, as MiroThinker's input handler puts it there: a note
naming the file, a ``## <kind>`` heading with a ``File: <path>`` line, and the content
in a fenced block, headed by its title when the converter found one. Text, tables,
documents and archives are converted by ``web/convert.py``; an image goes to a model
that sees images as the message's image (the text says so), to others as a note. At
most ``MAX_ATTACHMENT_CHARS`` characters of content are sent (MiroThinker's cap); the
message says how many were left out. A file that cannot be read is named with the
reason, never dropped silently.

Under the ``mirothinker`` profile the question is followed by the instruction to box
the final answer (``task.md``), where MiroThinker puts it, and the file's part comes
after that instruction.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from deepledger.messages import ImagePart
from deepledger.prompts import PromptSet

MAX_ATTACHMENT_CHARS = 200_000  # MiroThinker's cap on a converted file in the task text
TASK_TEMPLATE = "task.md"  # a profile that has it puts the question in it

# Named by suffix first (a .py file converts as plain text), then by converted kind:
# (what the note calls it, its heading, what it was converted to).
_BY_SUFFIX = {
    "py": ("Python file", "Python File", "text"),
    "txt": ("text file", "Text File", "text"),
    "md": ("Markdown file", "Markdown File", "text"),
    "sh": ("shell script", "Shell Script File", "text"),
    "yaml": ("YAML file", "YAML File", "text"),
    "yml": ("YAML file", "YAML File", "text"),
    "toml": ("TOML file", "TOML File", "text"),
    "csv": ("CSV file", "CSV File", "text"),
}
_BY_KIND = {
    "json": ("JSON file", "JSON File", "JSON"),
    "xlsx": ("Excel file", "Excel File", "a Markdown table"),
    "xls": ("Excel file", "Excel File", "a Markdown table"),
    "pdf": ("PDF file", "PDF File", "text"),
    "docx": ("Word document", "Word Document", "Markdown"),
    "html": ("HTML file", "HTML File", "Markdown"),
    "pptx": ("PowerPoint presentation", "PowerPoint Presentation", "Markdown"),
    "zip": ("ZIP archive", "ZIP Archive", "a list of its files and their contents"),
    "image": ("image file", "Image Content", "an image"),
}
_OTHER = ("file", "File Content", "Markdown")


@dataclass(frozen=True)
class Attachment:
    """A task's file as read for the model: its converted text, its images, or why it
    could not be read (``problem``)."""

    path: Path
    text: str = ""
    title: str | None = None
    kind: str = "text"
    images: tuple[ImagePart, ...] = ()
    problem: str | None = None


async def read_attachment(path: Path) -> Attachment:
    from deepledger.web import ContentError, convert_async  # only runs that attach files

    try:
        data = await asyncio.to_thread(path.read_bytes)
        document = await convert_async(data, name=path.name, source=path.name)
    except OSError as exc:
        return Attachment(path, problem=exc.strerror or str(exc))
    except ContentError as exc:
        return Attachment(path, problem=str(exc))
    return Attachment(path, document.text, document.title, document.kind, document.images)


def compose_task(
    question: str,
    attachment: Attachment | None,
    prompts: PromptSet,
    *,
    reader: bool,
    sees_images: bool = False,
) -> str:
    """The task message for ``question`` with ``attachment`` (see the module docstring)."""
    part = ""
    if attachment is not None:
        part = _file_part(attachment, prompts, reader=reader, sees_images=sees_images)
    if prompts.exists(TASK_TEMPLATE):
        return prompts.render(TASK_TEMPLATE, question=question, attachment=part and f"\n\n{part}")
    if attachment is not None and reader:  # today's default layout, unchanged
        return prompts.render("task_file.md", question=question, path=str(attachment.path))
    return f"{question}\n\n{part}" if part else question


def _file_part(
    attachment: Attachment, prompts: PromptSet, *, reader: bool, sees_images: bool
) -> str:
    path = str(attachment.path)
    if reader:
        return prompts.render("attachment_reader.md", path=path)
    if attachment.problem is not None:
        return prompts.render("attachment_unreadable.md", path=path, reason=attachment.problem)
    suffix = attachment.path.suffix.lower().lstrip(".")
    label, heading, form = _BY_SUFFIX.get(suffix) or _BY_KIND.get(attachment.kind, _OTHER)
    if attachment.kind == "image":
        seen = (
            "it is attached to this message as an image"
            if sees_images
            else ("this model does not see images, so only this note reaches it")
        )
        body = f"{attachment.text.strip()} ({seen})"
    else:
        body = _fenced(attachment.text, attachment.title)
    return prompts.render(
        "attachment.md", path=path, label=label, heading=heading, form=form, body=body
    )


def _fenced(text: str, title: str | None) -> str:
    if len(text) > MAX_ATTACHMENT_CHARS:
        left_out = len(text) - MAX_ATTACHMENT_CHARS
        text = (
            f"{text[:MAX_ATTACHMENT_CHARS]}\n... [file cut here: its last {left_out:,} "
            "characters are left out]"
        )
    block = f"```\n{text.strip(chr(10))}\n```"
    return f"Title:\n\n{title}\n\nContent:\n\n{block}" if title else block
