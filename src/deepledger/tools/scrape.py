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
   corpus's ``corpus://`` links). Either way the URL passes the SSRF guard.
   ``custom_headers`` go with a direct fetch (and not to another host on a redirect);
   through Jina they are not sent, since Jina would pass them to a host we never see.
2. **Extract**: with ``info_to_extract`` given, the extraction model (``tools.extract_llm``,
   else the agent's own) reads the page and answers with what was asked, so a
   40,000-token page enters the window as a few hundred tokens. A page longer than the
   model's window is cut into chunks that fit (at most ``MAX_CHUNKS``; the rest is not
   read and the result says so), each read on its own; their answers are joined under
   ``[part i of n]`` lines. With ``info_to_extract`` empty, the page text itself is the
   answer (long ones go to the archive like any long result).

The result is JSON with MiroThinker's fields: ``success``, ``url``, ``extracted_info``,
``error``, ``scrape_stats`` (line and character counts, whether all of the page was
read), ``model_used``, ``tokens_used``. A page that cannot be read, a model call that
fails: ``success: false`` with the reason, and the task goes on. But an endpoint that
rejects the key or the model (401/403/404) would reject every page of the run: it is
raised (:class:`ExtractionModelRejectedError` for ``tools.extract_llm``'s), and the
runner stops the run naming the model.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from deepledger import web
from deepledger.config import Config
from deepledger.errors import ContextOverflowError, EndpointRejectedError, LLMError
from deepledger.llm.base import GenerationSettings, LLMClient
from deepledger.llm.usage import Price, UsageLedger
from deepledger.messages import JSONObject, Message
from deepledger.paths import resolve_data_path
from deepledger.prompts import render
from deepledger.records.events import ExtractionCall
from deepledger.store.journal import Journal
from deepledger.tools.manager import LocalTool, ToolInfo

log = logging.getLogger(__name__)

SERVER = "jina_scrape_llm_summary"
TOOL = "scrape_and_extract_info"
MAX_CHUNKS = 8
MAX_EXTRACTION_TOKENS = 4096  # the reply budget of one extraction call
PROMPT_RESERVE_TOKENS = 600  # the prompt's own words around the page, with a margin
MAX_PAGE_CHARS = 2_000_000  # what is read of a page at all

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
    line_count: int
    char_count: int
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


@dataclass(frozen=True)
class PageScraper:
    """How pages are read in this run: the extraction model and the page reader."""

    model: ExtractionModel
    scraper: str = "auto"  # auto | jina | direct (web.scraper)
    allow_private_networks: bool = False
    corpus: Path | None = None  # the suite's search corpus, whose corpus:// links it reads

    @classmethod
    def for_agent(cls, cfg: Config, llm: LLMClient, price: Price | None) -> PageScraper:
        """Pages read by the agent's own model (no ``tools.extract_llm``)."""
        from deepledger.llm.factory import settings_from_config

        model = ExtractionModel(llm, settings_from_config(cfg.llm), price,
                                cfg.llm.max_context_length, agents_own=True)  # fmt: skip
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
        outcome: ScrapeOutcome = {"success": False, "url": url, "extracted_info": "",
                                  "error": "", "scrape_stats": {}, "tokens_used": 0}  # fmt: skip
        try:
            text = await self._read(url, headers)
        except (web.FetchError, web.ContentError, web.JinaError) as exc:
            outcome["error"] = f"Could not read the page: {_reason(exc)}"
            return outcome
        whole = len(text) <= MAX_PAGE_CHARS
        text = text[:MAX_PAGE_CHARS]
        outcome["scrape_stats"] = {"line_count": text.count("\n") + 1, "char_count": len(text)}
        if not info.strip():
            outcome["success"], outcome["extracted_info"] = True, text
            outcome["scrape_stats"]["all_content_displayed"] = whole
            return outcome
        extraction = await self._extract(url, info, text, journal, ledger)
        outcome["scrape_stats"]["all_content_displayed"] = extraction.read_all and whole
        outcome["success"] = extraction.error is None
        outcome["extracted_info"] = extraction.text
        outcome["error"] = extraction.error or ""
        outcome["model_used"] = self.model.llm.model
        outcome["tokens_used"] = extraction.tokens
        return outcome

    async def _read(self, url: str, headers: dict[str, str]) -> str:
        use_jina = self.scraper == "jina" or (
            self.scraper == "auto" and bool(os.environ.get("JINA_API_KEY", "").strip())
        )
        allow = self.allow_private_networks
        if use_jina and not url.strip().lower().startswith("corpus:"):
            document = await web.jina_read(url, allow_private=allow)
        else:
            document = await web.read_url(
                url, limits=web.FetchLimits(), headers=headers, allow_private=allow,
                corpus=self.corpus,
            )  # fmt: skip
        return document.text

    async def _extract(
        self, url: str, info: str, text: str, journal: Journal, ledger: UsageLedger
    ) -> _Extraction:
        chunks = self._chunks(text, info)
        read_all = len(chunks) <= MAX_CHUNKS
        chunks = chunks[:MAX_CHUNKS]
        answers: list[str] = []
        tokens = 0
        for index, chunk in enumerate(chunks, 1):
            answer, used, error = await self._extract_chunk(
                url, info, chunk, (index, len(chunks)), journal, ledger
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
    """The model's custom headers, as strings; anything else is ignored."""
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items() if isinstance(k, str)}


def _reason(exc: BaseException) -> str:
    """Why a page could not be read, in one line, without header values."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:500]
