"""``deepledger replay``: a finished run's cost under other context policies."""

from __future__ import annotations

import sys
from pathlib import Path

from deepledger.cli.common import EXIT_USAGE
from deepledger.errors import ConfigError

HELP = """\
deepledger replay — what a finished run would have cost under other context policies, from
its journals, with no model calls: one line per policy (calls, billed input tokens, the share
a prompt cache could serve, cost with and without caching, attempts the window guard would
have ended, compactions); every figure, per call, goes to RUN_DIR/replay.json.

usage: deepledger replay RUN_DIR [KEY=VALUE ...] [--price MODEL]
RUN_DIR is a folder deepledger bench or deepledger run wrote.

  (no KEY=VALUE)          the standard set: keep everything, keep the last 5 tool results, a
                          window of the last 5 rounds, compaction keeping 5 rounds
  KEY=VALUE               one policy to compare: agent.context.*, agent.keep_tool_result,
                          llm.max_context_length (e.g. agent.context.strategy=round_window)
  --price MODEL           price the tokens as MODEL's (a name of the price list)

Exit codes: 0 done, 2 a usage error or a folder that is not a run, 141 the output pipe was
  closed."""


def replay_command(args: list[str]) -> int:
    """Replay a finished run's journals under other context policies; no model calls."""
    from deepledger.bench.replay import run_replay
    from deepledger.store.locate import require_run

    price = None
    if "--price" in args:
        at = args.index("--price")
        if at + 1 >= len(args):
            raise ConfigError("--price needs a model name from the price list.")
        price = args[at + 1]
        args = args[:at] + args[at + 2 :]
    if not args or args[0].startswith("-") or "=" in args[0]:
        print(
            "usage: deepledger replay RUN_DIR [agent.context.strategy=... KEY=VALUE ...] "
            "[--price MODEL]",
            file=sys.stderr,
        )
        return EXIT_USAGE
    require_run(Path(args[0]), "replay")
    print(run_replay(Path(args[0]), args[1:], price))
    return 0
