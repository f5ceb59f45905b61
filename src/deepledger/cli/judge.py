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

HELP = """\
deepledger judge — grade a finished run's answers again with another judge, without running
the agent. The verdicts go to RUN_DIR/judgings/<name>/ (results.jsonl, judging.json) beside
the run's own judgement, which is not touched; the summary on stdout gives the accuracy under
each and how often they agree.

usage: deepledger judge RUN_DIR [benchmark.judge.KEY=VALUE ...]
         [benchmark.execution.max_concurrent=N] [--name NAME] [-cd DIR]

  benchmark.judge.KEY=VALUE   the judge (name=exact|normalized|numeric|list|gaia|aime|llm; for
                              llm: benchmark.judge.llm=PRESET, rule, template ...)
  benchmark.execution.max_concurrent=N   answers graded at a time
  --name NAME                 the judging's folder name (default: made from the judge, e.g.
                              llm-hle-o3-mini); another judge under a used name is refused
  -cd DIR                     a folder of llm presets searched before conf/ (as bench's -cd)

Interrupted (Ctrl-C), the same command goes on from the verdicts already given.
Exit codes: 0 done, 1 the judge failed, 2 a usage error or a folder that is not a run,
  130 Ctrl-C, 141 the output pipe was closed."""


def judge_command(args: list[str]) -> int:
    """Grade a finished run's answers again, without running the agent; the verdicts go
    to a judging of their own inside the run directory (``bench/judging.py``)."""
    from dotenv import load_dotenv

    from deepledger.bench.judging import format_judging, run_judging
    from deepledger.bench.services import PresetPath
    from deepledger.bench.suite import unjudged_warning
    from deepledger.store.locate import require_run

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
