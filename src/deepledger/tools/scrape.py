"""Scrape and extract: read a page, and let a model pull out of it what the question needs.

Offered as MiroThinker's ``jina_scrape_llm_summary.scrape_and_extract_info(url,
info_to_extract, custom_headers)`` (its models are trained on that name) when a role
lists ``jina_scrape_llm_summary`` among its tools. It runs inside deepledger rather than
in a server, because its model call belongs to the task: its tokens and cost count in
the task's usage (kept apart as ``extraction``), it is journaled, and it can use any
provider deepledger speaks.

1. **Read** the page: through the Jina reader when ``web.scraper`` is ``jina`` (or
   ``auto`` with ``JINA_API_KEY`` set), else fetched and converted here
   (``deepledger.web``: HTML main content, PDF, office files, JSON, text; the offline
   corpus's ``corpus://`` links). When the Jina reader fails (an error status, a 404
   for a page that exists, a timeout, no content, no key), the page is fetched
   directly, as MiroThinker's scraper falls back; only an answer-leak or SSRF refusal
   is final. The first extraction call's journal line says which reader served the
   page (``reader``) and why Jina did not (``jina_error``). Either way the URL passes
   the SSRF guard and the answer-leak rules. The URL is taken as models write it
   (``web/model_input.py``): a bare ``example.com/a`` gets ``https://``, a pasted
   ``r.jina.ai/...`` address is unwrapped. ``custom_headers`` go with the request (and
   not to another host on a redirect), to Jina too, less hop-by-hop and credential
   headers (``Authorization``, ``Cookie``, ``Proxy-*``, ``Host``, ``Connection``, ...),
   which are named in the journal line's ``dropped_headers``.
2. **Extract**: with ``info_to_extract`` given, the extraction model reads the page and
   answers with what was asked, so a 40,000-token page enters the window as a few
   hundred tokens. The model is ``tools.extract_llm``'s preset when set; else
   MiroThinker's summary model when its variables name one (``SUMMARY_LLM_BASE_URL``,
   the chat-completions address or the API base; ``SUMMARY_LLM_MODEL_NAME``;
   ``SUMMARY_LLM_API_KEY``, optional), spoken to as an OpenAI-compatible server with
   an assumed 131,072-token window; else the agent's own. Which one is said on stderr
   when the first task builds the tool. A page longer than the model's window is cut
   into chunks that fit (at most ``MAX_CHUNKS``; the rest is not read and the result
   says so), each read on its own; their answers are joined under ``[part i of n]``
   lines. With ``info_to_extract`` empty, the page text itself is the answer (long
   ones go to the archive like any long result).

The result is JSON with MiroThinker's fields: ``success``, ``url``, ``extracted_info``,
``error``, ``scrape_stats`` (line and character counts, whether all of the page was
read), ``model_used``, ``tokens_used``. A page that cannot be read, a model call that
fails: ``success: false`` with the reason, and the task goes on. But an endpoint that
rejects the key or the model (401/403/404) would reject every page of the run: it is
raised (:class:`ExtractionModelRejectedError` for ``tools.extract_llm``'s), and the
runner stops the run naming the model. (The ``SUMMARY_LLM_*`` model has no preset the
runner could name: its refusal is each page's ``error``, naming the variables.)
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from deepledger import web
from deepledger.config import SUMMARY_MODEL_ENV, Config, LLMConfig, summary_llm_config
from deepledger.errors import ContextOverflowError, EndpointRejectedError, LLMError
from deepledger.llm.base import GenerationSettings, LLMClient
from deepledger.llm.usage import Price, UsageLedger
from deepledger.messages import JSONObject, Message
from deepledger.paths import resolve_data_path
from deepledger.prompts import render
from deepledger.records.events import ExtractionCall
from deepledger.store.journal import Journal
from deepledger.tools.types import LocalTool, ToolInfo
from deepledger.web.model_input import page_url, request_headers
from deepledger.web.search._http import display_url

log = logging.getLogger(__name__)

SERVER = "jina_scrape_llm_summary"
TOOL = "scrape_and_extract_info"
MAX_CHUNKS = 8
MAX_EXTRACTION_TOKENS = 4096  # the reply budget of one extraction call
PROMPT_RESERVE_TOKENS = 600  # the prompt's own words around the page, with a margin
MAX_PAGE_CHARS = 2_000_000  # what is read of a page at all
# Jina failures the direct fetch would meet again: said as they are, no fallback.
# Refusals of the URL itself: a direct fetch of it would be refused, or must not be tried.
NO_FALLBACK = frozenset({"answer_leak", "blocked", "invalid_url"})
_announced: set[str] = set()  # what this process said on stderr about extraction

SCHEMA = {
    "type": "object",
    "properties": {
        "url": {"type": "string", "description": "The page: an http(s) URL (or a link "
                "a search returned)."},
        "info_to_extract": {"type": "string", "description": "What to find on the page, "
                            "as a question or a list of facts. Empty: the whole page."},
        "custom_headers": {"type": "object", "additionalProperties": {"type": "string"},
                           "description": "Extra HTTP headers for the request (optional)."},
    },
    "required": ["url", "info_to_extract"],
}  # fmt: skip
DESCRIPTION = (
    "Read a web page (HTML, PDF, office file, text) and return only the information you "
    "ask for, extracted by a language model: give the URL and what to extract. Returns "
    "JSON with extracted_info, or an error saying why the page could not be read."
)


class ScrapeStats(TypedDict, total=False):
    """MiroThinker's four: the whole page's lines and characters, the line the part
    read ends on, and whether that part is all of it."""

    line_count: int
    char_count: int
    last_char_line: int
    all_content_displayed: bool  # False: the page, or the part extracted from, was cut


class ScrapeOutcome(TypedDict):
    """What the tool answers, as JSON (MiroThinker's tool answers the same keys)."""

    success: bool
    url: str
    extracted_info: str
    error: str
    scrape_stats: ScrapeStats
    tokens_used: int
    model_used: NotRequired[str]  # when a model extracted from the page


class ExtractionModelRejectedError(EndpointRejectedError):
    """The endpoint of ``tools.extract_llm`` refused its key or model."""

    config_key = "tools.extract_llm"  # named in the runner's message


@dataclass(frozen=True)
class ExtractionModel:
    """The model that reads pages for the agent, and what it costs."""

    llm: LLMClient
    settings: GenerationSettings
    price: Price | None
    window: int  # its context window in tokens: pages are chunked to fit it
    agents_own: bool = False  # the agent's model, not tools.extract_llm's
    # Built for one task (MiroThinker's SUMMARY_LLM_* variables): its connections are
    # released after each page, since no one closes the client at the task's end.
    close_after_use: bool = False
    source: str = ""  # how the run's output names it (empty: tools.extract_llm)


@dataclass(frozen=True)
class PageScraper:
    """How pages are read in this run: the extraction model and the page reader."""

    model: ExtractionModel
    scraper: str = "auto"  # auto | jina | direct (web.scraper)
    allow_private_networks: bool = False
    corpus: Path | None = None  # the suite's search corpus, whose corpus:// links it reads
    jina_limits: web.JinaLimits | None = None  # None: JinaLimits()

    @classmethod
    def for_agent(
        cls,
        cfg: Config,
        llm: LLMClient,
        price: Price | None,
        env: Mapping[str, str] | None = None,
    ) -> PageScraper:
        """Without ``tools.extract_llm``: pages read by MiroThinker's summary model when
        its ``SUMMARY_LLM_*`` variables name one, else by the agent's own model."""
        from deepledger.llm.factory import settings_from_config

        summary = summary_llm_config(os.environ if env is None else env)
        if summary is not None:
            model = summary_model(summary, cfg)
        else:
            model = ExtractionModel(llm, settings_from_config(cfg.llm), price,
                                    cfg.llm.max_context_length, agents_own=True,
                                    source="the agent's own model")  # fmt: skip
        _announce(model.source)
        return cls(model, cfg.web.scraper, cfg.web.allow_private_networks, suite_corpus(cfg))

    async def aclose(self) -> None:
        """Release the extraction model's client (one built for ``tools.extract_llm``)."""
        await self.model.llm.aclose()

    def tool(self, journal: Journal, ledger: UsageLedger) -> LocalTool:
        """The tool one agent calls; its extraction calls go to ``ledger``."""

        async def run(arguments: JSONObject) -> str:
            outcome = await self.scrape_and_extract(
                str(arguments["url"]),
                str(arguments.get("info_to_extract") or ""),
                _headers(arguments.get("custom_headers")),
                journal,
                ledger,
            )
            return json.dumps(outcome, ensure_ascii=False)

        info = ToolInfo(SERVER, TOOL, DESCRIPTION, SCHEMA)
        # The extracted answer is short; the whole page (no info_to_extract) is archived.
        return LocalTool(info, run, max_result_chars=20_000, preview_chars=4_000)

    async def scrape_and_extract(
        self,
        url: str,
        info: str,
        headers: dict[str, str],
        journal: Journal,
        ledger: UsageLedger,
    ) -> ScrapeOutcome:
        """Read ``url`` (given as the model wrote it: the outcome names it so) and
        extract ``info`` from it; see the module docstring."""
        outcome: ScrapeOutcome = {"success": False, "url": url, "extracted_info": "",
                                  "error": "", "scrape_stats": {}, "tokens_used": 0}  # fmt: skip
        sent, dropped = request_headers(headers)
        try:
            page = await self._read(page_url(url), sent)
        except (web.FetchError, web.ContentError, web.JinaError, _UnreadableError) as exc:
            outcome["error"] = f"Could not read the page: {_reason(exc)}"
            return outcome
        page = replace(page, dropped_headers=dropped)
        why = f" after the Jina reader failed: {page.jina_error}" if page.jina_error else ""
        log.info("%s read by %s%s", url, page.reader, why)
        text = page.text[:MAX_PAGE_CHARS]
        whole = len(page.text) <= MAX_PAGE_CHARS
        outcome["scrape_stats"] = {
            "line_count": page.text.count("\n") + 1,
            "char_count": len(page.text),
            "last_char_line": text.count("\n") + 1 if text else 0,
        }
        if not info.strip():
            outcome["success"], outcome["extracted_info"] = True, text
            outcome["scrape_stats"]["all_content_displayed"] = whole
            return outcome
        try:
            extraction = await self._extract(url, info, replace(page, text=text), journal, ledger)
        finally:
            if self.model.close_after_use:
                await self.model.llm.aclose()
        outcome["scrape_stats"]["all_content_displayed"] = extraction.read_all and whole
        outcome["success"] = extraction.error is None
        outcome["extracted_info"] = extraction.text
        outcome["error"] = extraction.error or ""
        outcome["model_used"] = self.model.llm.model
        outcome["tokens_used"] = extraction.tokens
        return outcome

    def _uses_jina(self, url: str) -> bool:
        if url.lower().startswith("corpus:"):
            return False
        return self.scraper == "jina" or (
            self.scraper == "auto" and bool(os.environ.get("JINA_API_KEY", "").strip())
        )

    async def _read(self, url: str, headers: dict[str, str]) -> _Page:
        """The page's text and which reader served it: the Jina reader when it is on,
        else (or when Jina fails, as MiroThinker's scraper falls back) a direct fetch,
        through the same SSRF and answer-leak guards."""
        allow = self.allow_private_networks
        jina_error = None
        if self._uses_jina(url):
            try:
                document = await web.jina_read(
                    url, allow_private=allow, headers=headers, limits=self.jina_limits
                )
                return _Page(document.text, "jina")
            except web.JinaError as exc:
                if exc.kind in NO_FALLBACK:
                    raise
                jina_error = _reason(exc)
        try:
            document = await web.read_url(
                url, limits=web.FetchLimits(), headers=headers, allow_private=allow,
                corpus=self.corpus,
            )  # fmt: skip
        except (web.FetchError, web.ContentError) as exc:
            if jina_error is None:
                raise
            raise _UnreadableError(
                f"the Jina reader failed ({jina_error}), and fetching the page directly "
                f"failed too: {_reason(exc)}"
            ) from exc
        reader = "corpus" if document.kind == "corpus" else "direct"
        return _Page(document.text, reader, jina_error)

    async def _extract(
        self, url: str, info: str, page: _Page, journal: Journal, ledger: UsageLedger
    ) -> _Extraction:
        chunks = self._chunks(page.text, info)
        read_all = len(chunks) <= MAX_CHUNKS
        chunks = chunks[:MAX_CHUNKS]
        answers: list[str] = []
        tokens = 0
        for index, chunk in enumerate(chunks, 1):
            answer, used, error = await self._extract_chunk(
                url, info, chunk, (index, len(chunks)), journal, ledger, page
            )
            tokens += used
            if error is not None:
                return _Extraction("\n\n".join(answers), tokens, read_all, error)
            answers.append(answer if len(chunks) == 1 else f"[part {index} of {len(chunks)}]\n"
                           + answer)  # fmt: skip
        if not read_all:
            answers.append(f"[the page was longer than {MAX_CHUNKS} parts; the rest was not read]")
        return _Extraction("\n\n".join(answers), tokens, read_all)

    def _chunks(self, text: str, info: str) -> list[str]:
        """The page cut into pieces that fit the extraction model's window."""
        counter = self.model.llm.token_counter
        reply = self._settings().max_tokens
        budget = self.model.window - reply - PROMPT_RESERVE_TOKENS - counter.count(info)
        budget = max(256, budget)
        sample = text[:20_000]
        chars_per_token = max(1.0, len(sample) / max(1, counter.count(sample)))
        size = max(1000, int(budget * chars_per_token * 0.9))
        return [text[start : start + size] for start in range(0, len(text), size)] or [""]

    def _settings(self) -> GenerationSettings:
        settings = self.model.settings
        reply = min(settings.max_tokens, MAX_EXTRACTION_TOKENS, max(256, self.model.window // 4))
        return replace(settings, max_tokens=reply, stop=())

    async def _extract_chunk(
        self,
        url: str,
        info: str,
        chunk: str,
        part: tuple[int, int],
        journal: Journal,
        ledger: UsageLedger,
        page: _Page,
    ) -> tuple[str, int, str | None]:
        """(the answer, tokens used, an error or None). A chunk the provider finds too
        long is halved once and tried again."""
        for attempt in range(2):
            prompt = _prompt(url, info, chunk, part)
            try:
                response = await self.model.llm.generate(
                    [Message.task(prompt)], settings=self._settings()
                )
            except ContextOverflowError:
                if attempt == 0:
                    chunk = chunk[: len(chunk) // 2]
                    continue
                return "", 0, "the page did not fit the extraction model's window"
            except EndpointRejectedError as exc:
                if self.model.agents_own:
                    raise  # the agent's own model: the run stops on it anyway
                if self.model.close_after_use:  # SUMMARY_LLM_*: no preset to name
                    return "", 0, f"{self.model.source} refused the request: {exc}"
                raise ExtractionModelRejectedError(
                    str(exc), provider=exc.provider, status=exc.status
                ) from exc
            except LLMError as exc:
                return "", 0, f"the extraction model call failed: {exc}"
            ledger.record_extraction(response, self.model.price)
            journal.write(
                ExtractionCall(
                    url=url,
                    part=part[0],
                    parts=part[1],
                    page_chars=len(chunk),
                    model=self.model.llm.model,
                    usage=response.usage,
                    stop_reason=response.stop_reason,
                    reply_chars=len(response.text),
                    **(page.journaled() if part[0] == 1 else {}),
                )
            )
            text = response.text.split("</think>")[-1].strip()
            return text, response.usage.total_tokens, None
        raise AssertionError("unreachable")


def suite_corpus(cfg: Config) -> Path | None:
    """``benchmark.search_corpus``: the corpus the suite's search servers index."""
    corpus = cfg.benchmark.search_corpus
    return resolve_data_path(corpus).resolve() if corpus else None


@dataclass(frozen=True)
class _Page:
    """A page's text and how it was read (journaled with its first extraction call)."""

    text: str
    reader: str  # jina | direct | corpus
    jina_error: str | None = None  # why the Jina reader did not serve it
    dropped_headers: list[str] | None = None

    def journaled(self) -> dict[str, Any]:
        """The ``ExtractionCall`` fields that say how the page was read."""
        return {"reader": self.reader, "jina_error": self.jina_error,
                "dropped_headers": self.dropped_headers or None}  # fmt: skip


class _UnreadableError(Exception):
    """Neither the Jina reader nor a direct fetch could read the page."""


def summary_model(preset: LLMConfig, cfg: Config) -> ExtractionModel:
    """The extraction model a ``summary_llm_config`` preset describes."""
    from deepledger.llm.factory import create_client, settings_from_config
    from deepledger.llm.usage import find_price

    return ExtractionModel(
        create_client(preset),
        settings_from_config(preset),
        find_price(preset.model_name, cfg.pricing),
        preset.max_context_length,
        close_after_use=True,
        # Shown on stderr and in each page's error: no user:password or query (a key).
        source=f"{SUMMARY_MODEL_ENV}={preset.model_name} at {display_url(preset.base_url or '')}",
    )


def _announce(source: str) -> None:
    """Say once per process which model extracts from pages (it is not in the config
    when MiroThinker's variables chose it)."""
    if source and source not in _announced:
        _announced.add(source)
        print(f"deepledger: pages are extracted by {source}", file=sys.stderr)


@dataclass(frozen=True)
class _Extraction:
    text: str
    tokens: int
    read_all: bool
    error: str | None = None


def _prompt(url: str, info: str, chunk: str, part: tuple[int, int]) -> str:
    index, total = part
    note = (
        f"\nThe page is long: this is part {index} of {total}. Answer from this part only; "
        "say so if it holds nothing relevant.\n"
        if total > 1
        else ""
    )
    return render("extract.md", part_note=note, info_to_extract=info, url=url, page=chunk)


def _headers(value: Any) -> dict[str, str]:
    """The model's custom headers, as strings; anything else is ignored (what may be
    sent is decided by ``model_input.request_headers``)."""
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items() if isinstance(k, str)}


def _reason(exc: BaseException) -> str:
    """Why a page could not be read, in one line, without header values."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:500]
