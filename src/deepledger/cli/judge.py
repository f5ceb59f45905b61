"""``deepledger judge``: a finished run's answers graded again, beside its own judgement."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from deepledger.cli.common import EXIT_INTERRUPTED, EXIT_USAGE, config_dir, quiet_http_logs
from deepledger.errors import ConfigError

JUDGE_USAGE = (
    "usage: deepledger judge RUN_DIR [benchmark.judge.KEY=VALUE ...] "
    "[benchmark.execution.max_concurrent=N] [--name NAME] [-cd DIR]"
)


def judge_command(args: list[str]) -> int:
    """Grade a finished run's answers again, without running the agent; the verdicts go
    to a judging of their own inside the run directory (``bench/judging.py``)."""
    from dotenv import load_dotenv

    from deepledger.bench.judging import format_judging, run_judging
    from deepledger.bench.services import PresetPath
    from deepledger.bench.suite import unjudged_warning
    from deepledger.store.locate import require_run

    if any(a in ("-h", "--help") for a in args):
        print(f"{JUDGE_USAGE}\n\n{judge_command.__doc__}")
        return 0
    name, dirs, rest = None, [], list(args)
    positional: list[str] = []
    while rest:
        arg = rest.pop(0)
        if arg in ("--name", "-cd", "--config-dir"):
            if not rest:
                raise ConfigError(f"{arg} needs a value. {JUDGE_USAGE}")
            value = rest.pop(0)
            if arg == "--name":
                name = value
            elif not Path(value).is_dir():
                raise ConfigError(f"{arg} {value}: no such folder.")
            else:
                dirs.append(Path(value).resolve())
        elif arg.startswith("-"):
            print(f"deepledger judge: unknown flag {arg!r}.\n{JUDGE_USAGE}", file=sys.stderr)
            return EXIT_USAGE
        else:
            positional.append(arg)
    if not positional or "=" in positional[0]:
        print(JUDGE_USAGE, file=sys.stderr)
        return EXIT_USAGE
    load_dotenv(Path.cwd() / ".env", override=False)  # the judge's key, as bench reads it
    quiet_http_logs()
    run_dir = Path(positional[0])
    require_run(run_dir, "judge", kinds=("bench",))
    presets = PresetPath((*dirs, config_dir()))  # -cd first, as Hydra's search path has it
    try:
        summary, folder = asyncio.run(run_judging(run_dir, positional[1:], presets, name))
    except KeyboardInterrupt:
        print(
            "\ndeepledger judge: interrupted. The verdicts given are saved; run the same "
            "command again to go on from them.",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    print(format_judging(summary, folder))
    how = "run the same deepledger judge command again"
    if warning := unjudged_warning(summary.unjudged, how):
        print(f"deepledger: {warning}", file=sys.stderr)
    return 0
