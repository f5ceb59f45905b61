"""The exceptions deepledger raises, in one tree.

Every exception class of the package is drawn here. Those defined in another module
name it in brackets (they live beside the code that raises them); the rest are
defined below. ``tests/test_errors.py`` checks the drawing against the code: every
class, its place and its parent.

::

    DeepLedgerError                  anything deepledger raises on purpose
     ├── ConfigError                 the configuration cannot work; the message says what to change
     │    ├── UnknownProviderError   llm.provider names no provider
     │    ├── MissingAPIKeyError     the API key variable is not set
     │    ├── RunRejectedError       a suite stopped: an endpoint refused its key or model
     │    ├── RunDirectoryError      hydra.run.dir is a file, read-only, full, held by a
     │    │                          live run, or a resume would change its settings
     │    ├── RayBackendError        backend=ray cannot start or go on: Ray not installed, the
     │    │                          cluster unreachable, a worker (or a dead one's replacement)
     │    │                          that cannot start or see the run directory
     │    └── CorpusError            [web/corpus.py] the search corpus cannot be read
     ├── LLMError                    a model call failed
     │    ├── TransientLLMError      worth retrying: 5xx, timeouts, lost connections, bad bodies
     │    │    ├── RateLimitedError  the provider said 429; carries its Retry-After
     │    │    ├── LLMTimeoutError   no answer within llm.timeout_seconds
     │    │    ├── LLMConnectionError  could not reach llm.base_url
     │    │    └── IncompleteReplyError  the server aborted the reply (finish_reason abort)
     │    │                          or it holds nothing at all; carries the reply
     │    └── FatalLLMError          retrying cannot fix it: bad request, auth, unknown model
     │         ├── ContextOverflowError  the provider rejected the prompt as too long
     │         └── EndpointRejectedError 401/403, or the model does not exist: every
     │              │                    request of the run would fail the same way
     │              ├── EndpointUnreachableError  llm.base_url refused every retry for
     │              │                    60 s, and no call of this process ever reached it
     │              ├── ExtractionModelRejectedError  [tools/scrape.py] tools.extract_llm's endpoint
     │              ├── NotesModelRejectedError  [context/compaction.py] agent.context.summary_llm's
     │              └── JudgeRejectedError  [bench/stopping.py] the judge's endpoint
     ├── SearchError                 [web/search/__init__.py] a web search failed; no secrets
     │    ├── SearchConfigError      [web/search/__init__.py] a key or base URL missing or malformed
     │    ├── SearchRejectedError    [web/search/__init__.py] the engine refused the request
     │    └── SearchUnavailableError  [web/search/__init__.py] timeout, unreachable, 5xx, bad body
     │         └── SearchRateLimitedError  [web/search/__init__.py] 429, with its Retry-After
     ├── ToolServerStartError        [tools/session.py] a tool server did not start or handshake
     ├── WorkerLostError             backend=ray: the worker running a task died again and
     │                               again (the task's error record says so; resumable)
     ├── JournalBusyError            [store/journal.py] another process still writes a journal
     │                               (a late writer): a resume sets it aside instead
     ├── RunLoadError                [bench/aggregate.py] a run directory without readable results
     └── ModelInstallError           [llm/local_models.py] a model installed on request cannot be
                                     assembled: a part missing or damaged, a wrong checksum, a
                                     full disk

Outside the tree, on purpose: these never reach the user as themselves. Each is caught
inside deepledger, by the code that called what raised it, and becomes data (an error
result the model sees, a note, a record) or one of the errors above::

    ValueError
     ├── BlockedURLError             [web/ssrf.py] the SSRF guard refused a URL
     └── ContentError                [web/convert.py] bytes of a kind we do not read, or damaged
    RuntimeError
     ├── IsolationUnavailableError   [tools/servers/sandbox_isolation.py] the isolation asked for
     │                               does not work on this machine
     ├── SandboxResourcesError       [tools/servers/sandbox_isolation.py] one sandbox's cgroup
     │                               or disk could not be made (though the probe could)
     ├── CgroupsUnavailableError     [tools/servers/sandbox_cgroups.py] no cgroup can hold a
     │                               sandbox's processes here
     ├── DiskQuotaUnavailableError   [tools/servers/sandbox_disk.py] no size-limited file
     │                               system can be made here
     ├── SandboxUnavailableError     [tools/servers/python_sandbox.py] the worker did not start
     └── SandboxFileError            [tools/servers/python_sandbox.py] a file not moved in or out
    Exception
     ├── FetchError                  [web/fetch.py] a URL could not be fetched; ``kind`` says why
     ├── JinaError                   [web/jina.py] the Jina reader could not give the page
     ├── LocalFileRefused            [tools/servers/confinement.py] a local file the model may
     │                               not open, or that does not exist
     ├── ToolRefusal                 [tools/types.py] an in-process tool turns a call down
     ├── ToolFailure                 [tools/servers/tool_python.py] a call the model can correct
     ├── StoppedByRunBudget          [bench/attempts.py] the run's budget cut a task short
     ├── _NotFound                   [view/app.py] a run the viewer was asked for is not one
     │                               under its logs folder: answered 404
     ├── _UnreadableError            [tools/scrape.py] neither the Jina reader nor a direct
     │                               fetch could read the page
     └── _Conflict                   [bench/verdict.py] a judge's verdict followed by a word
                                     that says otherwise: the reply is unreadable
    AssertionError
     └── ScriptExhaustedError        [llm/scripted.py] the test double got a call it did not plan

Providers only *classify* SDK errors into this tree (see ``llm/base.py``); the retry
policy in ``llm/retry.py`` is the one place that decides what to do about them. A tool
that fails is not an exception: it is data the model sees (``ToolResult.is_error``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # messages.py is read by much of the tree; errors.py by all of it
    from deepledger.messages import LLMResponse


class DeepLedgerError(Exception):
    """Base class of every error deepledger raises on purpose."""


class ConfigError(DeepLedgerError):
    """The configuration cannot work. The message names the key and what to change."""


class UnknownProviderError(ConfigError):
    """``llm.provider`` names a provider deepledger does not have."""


class MissingAPIKeyError(ConfigError):
    """The provider needs an API key and the environment variable holding it is empty."""

    def __init__(self, variable: str, preset_hint: str = "") -> None:
        self.variable = variable
        hint = f" {preset_hint}" if preset_hint else ""
        super().__init__(
            f"No API key: the environment variable {variable} is not set. "
            f"Export it (or put it in a .env file in the working directory).{hint}"
        )


class RunRejectedError(ConfigError):
    """A suite stopped because a model endpoint rejected it (:class:`EndpointRejectedError`):
    nothing more was started, and the tasks not done run on the next resume."""


class RunDirectoryError(ConfigError):
    """The run directory cannot take this run, or its disk filled while the run went;
    the message names the folder and what to do. What was recorded before stays valid."""


class RayBackendError(ConfigError):
    """``benchmark.execution.backend=ray`` cannot run: Ray is not installed, the cluster at
    ``benchmark.execution.ray.address`` cannot be reached, or a worker cannot start or see
    the run directory. Raised before the run starts (the manifest unchanged), or, when the
    replacement of a worker that died cannot start, mid-run: the run stops as after a kill
    and the same command resumes it. The message says what to do."""


class WorkerLostError(DeepLedgerError):
    """backend=ray: the Ray worker running a task died under it too often; the task ends
    as an error record, which a resume runs again."""


class LLMError(DeepLedgerError):
    """A call to the model failed."""

    def __init__(self, message: str, *, provider: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status


class TransientLLMError(LLMError):
    """A failure that may go away if the same request is sent again later."""


class IncompleteReplyError(TransientLLMError):
    """A reply that came back with nothing usable: the server aborted it (vLLM's and
    SGLang's ``finish_reason: abort``) or it holds no text, thinking or tool call.
    ``response`` is the reply itself, for the caller that keeps an empty one once the
    retries are spent."""

    def __init__(self, message: str, *, response: LLMResponse, provider: str = "") -> None:
        super().__init__(message, provider=provider)
        self.response = response
        self.aborted = response.raw_stop_reason == "abort"


class RateLimitedError(TransientLLMError):
    """HTTP 429. ``retry_after`` is the provider's requested wait in seconds, if it gave one."""

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        provider: str = "",
        status: int | None = None,
    ) -> None:
        super().__init__(message, provider=provider, status=status)
        self.retry_after = retry_after


class LLMTimeoutError(TransientLLMError):
    """The provider did not answer within the configured timeout."""


class LLMConnectionError(TransientLLMError):
    """The provider could not be reached at all (refused, DNS, reset)."""

    # No connection was made at all: refused, or no such host (not a reset, a dropped
    # connection or a connect timeout, which a busy server gives too). Set by
    # llm/classify.py; the retry policy reads it (EndpointUnreachableError).
    never_connected: bool = False


class FatalLLMError(LLMError):
    """A failure that sending the same request again cannot fix (4xx other than 408/409/429)."""


class ContextOverflowError(FatalLLMError):
    """The provider rejected the prompt because it does not fit the model's context window."""


class EndpointRejectedError(FatalLLMError):
    """The endpoint refuses this client or this model (HTTP 401/403, a 404 for the model):
    no request of the run can succeed, so a suite stops after the first one."""

    # With llm.endpoints: the URL of the one that refused (set by llm/endpoints.py).
    endpoint: str | None = None
    # Set by the worker that met it (backend=ray), for a driver that has not its models:
    # which model, URL and key source refused, and what the server said (key blanked).
    whose: str | None = None
    said: str | None = None


class EndpointUnreachableError(EndpointRejectedError):
    """The endpoint could not be reached (refused, no such host) after every retry and
    for ``llm.retry.unreachable_after_seconds``, and no call of this process (with
    backend=ray: this worker) has reached it yet: the address is wrong or the server is
    down, so a suite stops after the first task's retries instead of failing every task
    the same way. Raised by the retry policy (``llm/retry.py``) in place of the
    :class:`LLMConnectionError` it gave up on (its cause)."""
