"""What an MCP tool result becomes for the model: text, images, and notes for the rest.

An MCP ``CallToolResult`` holds content blocks of several kinds. Each one is either
passed on or named, never dropped silently:

- text blocks: joined, in order;
- image blocks (and embedded image resources): :class:`ImagePart` s, sent to a model
  that accepts images (``llm.accepts_images``); for any other model, a one-line note in
  the text says what the image was and why it is not shown;
- audio blocks and binary resources: a note naming their type, size and URI;
- resource links: their URI (and name), so the model can read them with another tool;
- no blocks but ``structured_content``: that, as JSON.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from deepledger.messages import ImagePart, ToolResult


def result_parts(result: Any, source: str) -> tuple[str, tuple[ImagePart, ...]]:
    """The text and the images of an MCP ``CallToolResult`` from tool ``source``."""
    parts: list[str] = []
    images: list[ImagePart] = []
    for item in result.content or ():
        kind = getattr(item, "type", None)
        if kind == "text":
            parts.append(item.text)
        elif kind == "image":
            images.append(ImagePart(item.mime_type or "image/png", item.data, source))
        elif kind == "resource_link":
            name = f" ({item.name})" if getattr(item, "name", None) else ""
            parts.append(f"[resource: {item.uri}{name}]")
        elif kind == "resource":
            _embedded(item.resource, source, parts, images)
        else:  # audio, or a kind newer than this code
            size = _base64_size(getattr(item, "data", "") or "")
            mime = getattr(item, "mime_type", None) or kind or "unknown"
            parts.append(f"[{kind or 'non-text'} content from {source} ({mime}, {size}) not shown]")
    if not parts and not images and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts), tuple(images)


def _embedded(resource: Any, source: str, parts: list[str], images: list[ImagePart]) -> None:
    """An embedded resource: its text, its image, or a note naming it."""
    text = getattr(resource, "text", None)
    if text is not None:
        parts.append(f"[resource: {resource.uri}]\n{text}")
        return
    blob = getattr(resource, "blob", "") or ""
    mime = resource.mime_type or "application/octet-stream"
    if mime.startswith("image/"):
        images.append(ImagePart(mime, blob, str(resource.uri)))
    else:
        parts.append(f"[resource: {resource.uri} ({mime}, {_base64_size(blob)}) not shown]")


def _base64_size(data: str) -> str:
    size = len(data) * 3 // 4
    return f"{size / 1024:.0f} KB" if size >= 1024 else f"{size} bytes"


NOT_SHOWN = "not shown, this model does not accept images (llm.accepts_images=false)"


def for_model(result: ToolResult, accepts_images: bool) -> ToolResult:
    """``result`` as this model may receive it: images kept, or named in the text."""
    if accepts_images or not result.images:
        return result
    notes = "\n".join(image.note(NOT_SHOWN) for image in result.images)
    content = f"{result.content}\n{notes}" if result.content else notes
    return replace(result, content=content, images=())
