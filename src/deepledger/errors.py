"""The exceptions deepledger raises, in one tree.

::

    DeepLedgerError                 anything deepledger raises on purpose
     ├── ConfigError                the configuration cannot work; the message says what to change
     │    ├── UnknownProviderError  llm.provider names no provider
     │    ├── MissingAPIKeyError    the API key variable is not set
     │    ├── RunRejectedError      a suite stopped: an endpoint refused its key or model
     │    └── RunDirectoryError     hydra.run.dir is a file, read-only, full, held by a
     │                              live run, or a resume would change its settings
     └── LLMError                   a model call failed
          ├── TransientLLMError     worth retrying: 5xx, timeouts, lost connections, bad bodies
          │    ├── RateLimitedError the provider said 429; carries its Retry-After
          │    ├── LLMTimeoutError  no answer within llm.timeout_seconds
          │    └── LLMConnectionError  could not reach llm.base_url
          └── FatalLLMError         retrying cannot fix it: bad request, auth, unknown model
               ├── ContextOverflowError  the provider rejected the prompt as too long
               └── EndpointRejectedError 401/403, or the model does not exist: every
                                         request of the run would fail the same way

Providers only *classify* SDK errors into this tree (see ``llm/base.py``); the retry
policy in ``llm/retry.py`` is the one place that decides what to do about them. A tool
that fails is not an exception: it is data the model sees (``ToolResult.is_error``).
"""

from __future__ import annotations


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


class LLMError(DeepLedgerError):
    """A call to the model failed."""

    def __init__(self, message: str, *, provider: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status


class TransientLLMError(LLMError):
    """A failure that may go away if the same request is sent again later."""


class RateLimitedError(TransientLLMError):
    """HTTP 429. ``retry_after`` is the provider's requested wait in seconds, if it gave one."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kw) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class LLMTimeoutError(TransientLLMError):
    """The provider did not answer within the configured timeout."""


class LLMConnectionError(TransientLLMError):
    """The provider could not be reached at all (refused, DNS, reset)."""


class FatalLLMError(LLMError):
    """A failure that sending the same request again cannot fix (4xx other than 408/409/429)."""


class ContextOverflowError(FatalLLMError):
    """The provider rejected the prompt because it does not fit the model's context window."""


class EndpointRejectedError(FatalLLMError):
    """The endpoint refuses this client or this model (HTTP 401/403, a 404 for the model):
    no request of the run can succeed, so a suite stops after the first one."""
