"""``deepledger replay``: a finished run's cost under other context policies."""

from __future__ import annotations

import sys
from pathlib import Path

from deepledger.cli.common import EXIT_USAGE
from deepledger.errors import ConfigError


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
    require_run(Path(args[0]), "replay", kinds=("bench",))
    print(run_replay(Path(args[0]), args[1:], price))
    return 0


JUDGE_USAGE = (
    "usage: deepledger judge RUN_DIR [benchmark.judge.KEY=VALUE ...] "
    "[benchmark.execution.max_concurrent=N] [--name NAME] [-cd DIR]"
)
