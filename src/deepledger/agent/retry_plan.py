"""The retry plan: the one place config is read into how often a task is tried again.

A task gets up to ``attempts`` attempts (pass@k); inside an attempt, while the answer
has no box, up to ``format_retries`` more runs, each carrying the post-mortems of the
ones before it; each run's closing asks for a boxed answer up to ``final_answer_asks``
times. Three config keys carry more than one meaning, kept because MiroThinker's own
command lines rely on them (``docs/mirothinker.md``):

- ``agent.context_compress_limit`` is both the number of format-retries and the switch
  of context management (a run that is not the last may skip its answer and write a
  post-mortem instead): MiroThinker's runtime reads it as "on, and this many more".
- ``agent.max_final_answer_retries`` left null takes its number from
  ``agent.keep_tool_result``: 3 asks when every tool result is kept, else 1, as
  MiroThinker's answer generator does (a model whose history was trimmed has lost most
  of what asking it again would draw on).
- ``benchmark.metrics`` holding ``avg_at_k`` runs every attempt, a correct one
  included: the metric is their mean.

The runner (``bench/attempts.py``) and :func:`agent.task.policy_from_config` read this
plan and nothing else of those keys; what a run does with its answer policy (skip,
fall back, write a post-mortem) is :class:`~deepledger.agent.answer.AnswerPolicy`'s to
say, once.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepledger.agent.answer import AnswerPolicy
from deepledger.config import AgentConfig, Config

# Final-answer asks when agent.max_final_answer_retries is null (see the docstring).
ASKS_WITH_WHOLE_HISTORY = 3
ASKS_WITH_TRIMMED_HISTORY = 1


@dataclass(frozen=True)
class RetryPlan:
    """How often a task is tried, built once from config (:meth:`from_config`)."""

    # pass@k: attempts per task that has a ground truth (one without gets one: there is
    # nothing to retry for). benchmark.execution.pass_at_k.
    attempts: int = 1
    # avg@k: every attempt runs, a correct one too (benchmark.metrics has avg_at_k).
    every_attempt: bool = False
    # Runs after the first inside an attempt while the answer has no box; more than 0
    # also turns context management on. agent.context_compress_limit.
    format_retries: int = 0
    # A failed run that is not the last writes a post-mortem for the next to carry.
    # agent.retry_with_summary.
    retry_with_summary: bool = True
    # Asks for a boxed answer in one run's closing. agent.max_final_answer_retries, or
    # from agent.keep_tool_result when that is null.
    final_answer_asks: int = ASKS_WITH_WHOLE_HISTORY

    @classmethod
    def from_config(cls, cfg: Config) -> RetryPlan:
        """The plan of a benchmark run: the agent's keys and pass@k / avg@k."""
        return cls.for_agent(
            cfg.agent,
            attempts=cfg.benchmark.execution.pass_at_k,
            every_attempt="avg_at_k" in (cfg.benchmark.metrics or ()),
        )

    @classmethod
    def for_agent(
        cls, agent: AgentConfig, *, attempts: int = 1, every_attempt: bool = False
    ) -> RetryPlan:
        """The plan of ``agent``'s keys alone (``deepledger run``: one attempt)."""
        asks = agent.max_final_answer_retries
        if asks is None:
            whole = agent.keep_tool_result == -1
            asks = ASKS_WITH_WHOLE_HISTORY if whole else ASKS_WITH_TRIMMED_HISTORY
        return cls(
            attempts=attempts,
            every_attempt=every_attempt,
            format_retries=agent.context_compress_limit,
            retry_with_summary=agent.retry_with_summary,
            final_answer_asks=asks,
        )

    @property
    def context_management(self) -> bool:
        """Whether a run that is not the last may end without an answer (skipping it
        when its loop was exhausted), leaving the next run to try: on exactly when
        there is a next run to leave it to."""
        return self.format_retries > 0

    @property
    def writes_post_mortems(self) -> bool:
        """Whether any run of an attempt may write a post-mortem (for the summary's
        ``post-mortems`` line): its answer policy says, for every run but the last."""
        return self.answer_policy(final=False).writes_post_mortem

    def attempts_for(self, *, has_ground_truth: bool) -> int:
        """The attempts a task gets: without a ground truth nothing says to try again."""
        return self.attempts if has_ground_truth else 1

    def is_final(self, retry: int) -> bool:
        """Whether run ``retry`` (0 first) of an attempt is its last format-retry."""
        return retry == self.format_retries

    def may_run(self, retry: int) -> bool:
        """Whether an attempt has run ``retry`` (0 first) in it."""
        return retry <= self.format_retries

    def answer_policy(self, *, final: bool = False) -> AnswerPolicy:
        """What the answer generator is told for a run (``final``: the last one)."""
        return AnswerPolicy(
            context_management=self.context_management,
            retry_with_summary=self.retry_with_summary,
            is_final_retry=final,
            max_final_answer_retries=self.final_answer_asks,
        )

    def policy_for(self, retry: int) -> AnswerPolicy:
        """The answer policy of run ``retry`` (0 first) of an attempt."""
        return self.answer_policy(final=self.is_final(retry))
