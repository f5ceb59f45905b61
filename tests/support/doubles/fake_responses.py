"""The OpenAI Responses API's side of the fake model server (``POST /v1/responses``).

:class:`ResponsesLedger` renders a scripted reply as a Responses object (``output``
items: ``reasoning``, ``message`` with ``output_text``, ``function_call``; ``status`` and
``incomplete_details``; ``usage`` with ``input_tokens_details.cached_tokens``) and checks
each request against the rules the API holds a client to, refusing with 400 what it
would refuse:

- the chat-completions names (``messages``, ``max_tokens``) and chat-shaped tools (the
  function nested under ``function``) are refused;
- input items must be messages of a known role with text or parts of the kinds that
  role takes, ``function_call`` items (``call_id``, ``name``, string ``arguments``),
  ``function_call_output`` items answering an earlier call, or ``reasoning`` items;
- every function call in the input has its output, and every output its call;
- a ``reasoning`` item must be one the server issued; with ``store: false`` it must
  carry the ``encrypted_content`` issued with it (nothing was stored to look it up by);
- a function call after the last user message whose reply came with an encrypted
  reasoning item must be preceded by that item (a reasoning model's tool-using turn goes
  on from its reasoning).

A reply carries a reasoning item when it scripts ``reasoning``, or when the request
asks for ``reasoning.encrypted_content`` (a reasoning model): then the fake writes a
line of its own. Its encrypted content is an HMAC under a key of this server's own.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deepledger.messages import JSONObject
    from tests.support.doubles.fake_llm_server import Reply

RESPONSES_PATH = "/v1/responses"
_PART_TYPES = {
    "user": {"input_text", "input_image", "input_file"},
    "system": {"input_text"},
    "developer": {"input_text"},
    "assistant": {"output_text", "refusal"},
}
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


class ResponsesLedger:
    """What the fake issued (reasoning items, and which calls came with which), to
    render replies and check requests against."""

    def __init__(self) -> None:
        self._key = os.urandom(16)
        self._issued: dict[str, str] = {}  # reasoning item id -> its encrypted content
        self._reasoning_of_call: dict[str, str] = {}  # call_id -> reasoning item id
        self._lock = threading.Lock()

    def _encrypt(self, item_id: str, text: str) -> str:
        digest = hmac.new(self._key, f"{item_id}\n{text}".encode(), hashlib.sha256).digest()
        return "gAAAA" + base64.b64encode(digest * 3).decode()

    # -- rendering

    def render(
        self, reply: Reply, request: JSONObject, request_no: int, new_id: Callable[[str], str]
    ) -> JSONObject:
        output: list[JSONObject] = []
        include = request.get("include") or []
        reasoning = self._reasoning(reply, include, request_no)
        if reasoning is not None:
            output.append(reasoning)
        if reply.text:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_fake_{request_no}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                }
            )
        for call in reply.tool_calls:
            call_id = call.id or new_id("call")
            arguments = call.arguments
            output.append(
                {
                    "type": "function_call",
                    "id": new_id("fc"),
                    "call_id": call_id,
                    "name": call.name,
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                    "status": "completed",
                }
            )
            if reasoning is not None and "encrypted_content" in reasoning:
                with self._lock:
                    self._reasoning_of_call[call_id] = reasoning["id"]
        return _response(reply, request_no, output)

    def _reasoning(self, reply: Reply, include: Any, request_no: int) -> JSONObject | None:
        encrypted = "reasoning.encrypted_content" in include
        if not (reply.reasoning or encrypted):
            return None
        item_id = f"rs_fake_{request_no}"
        text = reply.reasoning or f"Thinking about request {request_no}."
        sealed = self._encrypt(item_id, text)
        with self._lock:
            self._issued[item_id] = sealed
        item: JSONObject = {
            "type": "reasoning",
            "id": item_id,
            "summary": [{"type": "summary_text", "text": text}],
        }
        if encrypted:
            item["encrypted_content"] = sealed
        return item

    # -- checking

    def problem(self, body: JSONObject) -> str | None:
        """Why the Responses API would refuse ``body``, or None."""
        if "messages" in body:
            return "Unsupported parameter: 'messages'. The Responses API takes 'input'."
        if "max_tokens" in body:
            return (
                "Unsupported parameter: 'max_tokens'. The Responses API takes 'max_output_tokens'."
            )
        for index, tool in enumerate(body.get("tools") or []):
            if not (isinstance(tool, dict) and isinstance(tool.get("name"), str)):
                return f"Missing required parameter: 'tools[{index}].name'."
        items = body.get("input")
        if isinstance(items, str):
            return None
        if not isinstance(items, list):
            return "Invalid type for 'input': expected a string or an array of input items."
        return self._items_problem(items, store=body.get("store", True) is not False)

    def _items_problem(self, items: list[Any], *, store: bool) -> str | None:
        calls: list[str] = []
        answered: set[str] = set()
        reasoning_seen: set[str] = set()
        last_user = max(
            (i for i, it in enumerate(items) if isinstance(it, dict) and it.get("role") == "user"),
            default=-1,
        )
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                return f"Invalid type for 'input[{index}]': expected an object."
            kind = item.get("type", "message" if "role" in item else None)
            if kind == "message":
                why = _message_problem(item)
            elif kind == "function_call":
                why = self._call_problem(item, index > last_user, reasoning_seen)
                calls.append(str(item.get("call_id")))
            elif kind == "function_call_output":
                call_id = item.get("call_id")
                why = (
                    None
                    if call_id in calls
                    else (f"No tool call found for function call output with call_id {call_id}.")
                )
                answered.add(str(call_id))
            elif kind == "reasoning":
                why = self._reasoning_problem(item, store)
                reasoning_seen.add(str(item.get("id")))
            else:
                why = f"Invalid value: {kind!r}. Not an input item type."
            if why:
                return f"input[{index}]: {why}"
        missing = [c for c in calls if c not in answered]
        return f"No tool output found for function call {missing[0]}." if missing else None

    def _call_problem(self, item: JSONObject, this_turn: bool, seen: set[str]) -> str | None:
        if not all(isinstance(item.get(k), str) for k in ("call_id", "name", "arguments")):
            return "a function_call needs string 'call_id', 'name' and 'arguments'."
        with self._lock:
            needed = self._reasoning_of_call.get(item["call_id"])
        if this_turn and needed is not None and needed not in seen:
            return (
                f"function_call {item['call_id']} was provided without its required "
                f"'reasoning' item: '{needed}'."
            )
        return None

    def _reasoning_problem(self, item: JSONObject, store: bool) -> str | None:
        item_id = item.get("id")
        with self._lock:
            sealed = self._issued.get(str(item_id))
        if sealed is None:
            return f"Item with id '{item_id}' not found."
        if not isinstance(item.get("summary"), list):
            return "a reasoning item needs its 'summary' list."
        if store:
            return None
        if item.get("encrypted_content") != sealed:
            return (
                f"Item with id '{item_id}' not found: with 'store' false nothing is kept, "
                "so a reasoning item must carry the encrypted_content it came with."
            )
        return None


def _message_problem(item: JSONObject) -> str | None:
    role = item.get("role")
    if role not in _PART_TYPES:
        return f"Invalid value: {role!r}. Supported roles: user, system, developer, assistant."
    content = item.get("content")
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        return "a message's content must be a string or a list of parts."
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in _PART_TYPES[role]:
            return f"a content part of type {kind!r} is not allowed in a {role!r} message."
        if kind == "input_image" and not str(part.get("image_url") or "").startswith(
            ("data:image/", "http://", "https://")
        ):
            return "an input_image needs an image_url (a data: URL of an image, or http(s))."
    return None


def _response(reply: Reply, request_no: int, output: list[JSONObject]) -> JSONObject:
    finish = reply.finish_reason
    incomplete = _INCOMPLETE.get(finish)
    usage = reply.usage
    return {
        "id": f"resp_fake_{request_no}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "error": None,
        "model": reply.model,
        "output": output,
        "usage": reply.raw_usage
        if reply.raw_usage is not None
        else {
            "input_tokens": usage.input_tokens,
            "input_tokens_details": {"cached_tokens": usage.cache_read_tokens},
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.input_tokens + usage.output_tokens,
        },
    }
