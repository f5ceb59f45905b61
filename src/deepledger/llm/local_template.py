"""The local model's own tokenizer and chat template, read from its GGUF file.

With them the local provider renders each prompt itself and sends it as a plain
completion, which buys three things the chat endpoint cannot give:

- **prefill**: a trailing assistant message is continued, not closed and answered (the
  chat endpoint always opens a fresh assistant turn);
- **exact token counts** for the window guard, with the model's own vocabulary;
- **the reusable prefix**: llama.cpp evaluates a prompt only from the first token that
  differs from what it evaluated last, so that shared prefix is this server's "cache
  read".

Only the vocabulary is loaded (``vocab_only``): a tenth of a second and a few MB, not the
weights, which live in the server process.

Tools: a template that reads the ``tools`` variable (Qwen's, Hermes') writes the tool
specs it is given into the prompt itself, in the words and layout its model was trained
on (``renders_tools``); the hermes protocol then leaves them out of its own section, and
the window guard counts that block from the first request on (``local.py``'s
``tools_prompt_tokens``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from deepledger.errors import ConfigError
from deepledger.messages import JSONObject

if TYPE_CHECKING:  # llama_cpp itself is imported when a template is first loaded
    from llama_cpp.llama_types import ChatCompletionRequestMessage, ChatCompletionTool

log = logging.getLogger(__name__)

TEMPLATE_KEY = "tokenizer.chat_template"


class LocalTemplate:
    """Renders chat messages into the model's prompt text and counts its tokens."""

    def __init__(self, model_path: Path, template: str | None = None) -> None:
        """``template``: a chat template to use instead of the file's own."""
        from llama_cpp import Llama
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        with _quiet_stderr():  # llama.cpp prints load-time warnings straight to fd 2
            self._vocab = Llama(str(model_path), vocab_only=True, verbose=False)
        template = template or self._vocab.metadata.get(TEMPLATE_KEY)
        if not template:
            raise ConfigError(
                f"{model_path} has no chat template ({TEMPLATE_KEY}); set llm.chat_format "
                "to one of llama.cpp's chat formats."
            )
        eos = self._piece(self._vocab.token_eos())
        bos = self._piece(self._vocab.token_bos())
        self._formatter = Jinja2ChatFormatter(template, eos_token=eos, bos_token=bos)
        self._opening = Jinja2ChatFormatter(
            template, eos_token=eos, bos_token=bos, add_generation_prompt=False
        )
        self._adds_bos = self._vocab.metadata.get("tokenizer.ggml.add_bos_token") == "true"
        self.bos_count = 1 if self._adds_bos and self._vocab.token_bos() >= 0 else 0
        self.name = f"gguf:{model_path.name}"
        self.renders_tools = _reads_tools(template)

    def render(
        self, messages: Sequence[JSONObject], tools: Sequence[JSONObject] | None = None
    ) -> str:
        """The prompt for ``messages`` (role/content dicts). A trailing assistant message
        is left open, so the model's reply continues it. ``tools`` (OpenAI's
        ``{"type": "function", "function": ...}`` entries) go to the template's ``tools``
        argument; a template that does not read it leaves them out."""
        wire_tools = _chat_tools(tools) if tools else None
        if messages and messages[-1].get("role") == "assistant":
            head = self._formatter(messages=_chat_messages(messages[:-1]), tools=wire_tools)
            return head.prompt + (messages[-1].get("content") or "")
        return self._formatter(messages=_chat_messages(messages), tools=wire_tools).prompt

    def tokens(self, text: str) -> list[int]:
        """The token ids llama.cpp's completion endpoint evaluates for ``text``."""
        ids = self._vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        bos = self._vocab.token_bos()
        if self._adds_bos and bos >= 0 and (not ids or ids[0] != bos):
            ids.insert(0, bos)
        return ids

    def count(self, text: str) -> int:
        """Tokens in ``text`` as plain content (the window guard's counter)."""
        return len(self._vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def _piece(self, token: int) -> str:
        if token < 0:
            return ""
        return self._vocab.detokenize([token], special=True).decode("utf-8", errors="replace")


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading items ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence stderr for the duration: fd 2, where C code writes, and ``sys.stderr``,
    where llama-cpp-python's log callback prints."""
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            saved = os.dup(2)
        except OSError:  # no stderr at all: nothing more to silence
            yield
            return
        try:
            with open(os.devnull, "wb") as null:
                os.dup2(null.fileno(), 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _reads_tools(template: str) -> bool:
    """Whether the Jinja template uses the ``tools`` variable (it writes tool specs)."""
    import jinja2
    import jinja2.ext
    import jinja2.meta
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    extensions: list[str | type[jinja2.ext.Extension]] = [
        Jinja2ChatFormatter.IgnoreGenerationTags,
        "jinja2.ext.loopcontrols",
    ]
    try:
        parsed = jinja2.Environment(extensions=extensions).parse(template)
    except jinja2.TemplateError:  # llama.cpp's formatter will say what is wrong with it
        return False
    return "tools" in jinja2.meta.find_undeclared_variables(parsed)


def _chat_tools(tools: Sequence[JSONObject]) -> list[ChatCompletionTool]:
    # Safe for the same reason as below: OpenAI wire tools (llm/openai.py's to_wire_tool).
    return cast("list[ChatCompletionTool]", list(tools))


def _chat_messages(messages: Sequence[JSONObject]) -> list[ChatCompletionRequestMessage]:
    # Safe: these are OpenAI chat wire messages (llm/openai.py's to_wire_messages), the
    # shape llama_cpp's TypedDicts describe; the template reads them as plain dicts.
    return cast("list[ChatCompletionRequestMessage]", list(messages))
