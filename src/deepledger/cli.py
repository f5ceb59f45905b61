"""The ``deepledger`` command: ``bench | run | report | replay | judge``.

Hydra has no subcommands, so the first argument picks the command and the rest goes
to Hydra (overrides, ``--cfg job``, ``-m`` sweeps, ``hydra.run.dir=...``); for ``run``,
the question (and ``task_file``) are taken out first and handed to Hydra quoted, so any
text reaches the run as typed. Errors deepledger raises on purpose are printed as one
paragraph, exit code 2 for a usage or configuration error (Hydra's own included), 1 for
failed work; a traceback means a bug.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from deepledger import __version__
from deepledger.errors import ConfigError, DeepLedgerError, EndpointRejectedError

# Only what every command needs is imported here: `deepledger --help` stays fast (the
# records' models are built on import, and only the commands that read records need them).
if TYPE_CHECKING:
    from omegaconf import DictConfig

    from deepledger.config import Config, ToolServerConfig
    from deepledger.records.results import SummaryRecord

# A command run under Hydra: the typed config, and Hydra's node it was made from (for
# the files that record the config as composed, interpolations and all).
HydraTask = Callable[["Config", "DictConfig"], int]

USAGE = f"""\
deepledger {__version__} — a deep-research agent runtime

usage:
  deepledger bench [OVERRIDES...]           run a benchmark suite
  deepledger run "QUESTION" [OVERRIDES]     answer one question, any text; or
                                            question="...", or @FILE (question=@FILE)
                                            to read it from a UTF-8 file (@@: a
                                            literal @); task_file=PATH attaches a file
  deepledger report RUN_DIR [RUN_DIR...] [--out FILE]
                                            rebuild a run's summary and HTML report;
                                            several: compare them in one report
  deepledger replay RUN_DIR [KEY=VALUE...]  a run's cost under other context policies
                                            (agent.context.*, agent.keep_tool_result,
                                            llm.max_context_length; --price MODEL)
  deepledger judge RUN_DIR [KEY=VALUE...] [--name NAME] [-cd DIR]
                                            grade a finished run's answers again
                                            (benchmark.judge.*), beside its own
                                            judgement, with the agreement between them
  deepledger COMMAND --help                 Hydra's help: config groups and keys, and
                                            what the common keys mean
  deepledger bench --cfg job [OVERRIDES]    print the composed config and stop

OVERRIDES are Hydra overrides, e.g.
  llm=openai_compatible llm.base_url=http://127.0.0.1:8000/v1 llm.model_name=my-model
  agent=keep5_compress5 agent.keep_tool_result=3 benchmark.execution.max_tasks=10
For run, an argument is an override when its key is a config key or group (or hydra.*,
+key, ~key, a dotted key); any other argument is the question (after --, always).
Exit codes: 0 done, 1 some tasks failed, 2 a usage or configuration error, 130 Ctrl-C,
  141 the output pipe was closed.

Config groups:
  llm=local|local_qwen1.5b|openai_compatible|openai|azure_openai|anthropic|gemini|qwen-3|
    deepseek|openai_responses|qwen3-32b|claude|claude-3-7|gpt-5|minimax|
    minimax-m2.7-highspeed|minimax-m2.5-highspeed|default,
  agent=default|keep5_compress5|keep5_compress5_300turns|multi_agent|
    mirothinker_1.7_keep5_max200|mirothinker_1.7_keep5_max300|mirothinker_v1.5_keep5_max400,
    and every other agent preset of MiroThinker's under its name (docs/mirothinker.md),
  benchmark=example|worldfacts|gaia-validation|gaia-validation-text-103|browsecomp|
    browsecomp-zh|hle|hle-text-500|hle-text-2158|simpleqa|freshqa|fanoutqa|frames|
    xbench-deepsearch|webwalkerqa|seal-0|deepsearchqa|futurex|aime2025; MiroThinker's
    browsecomp_zh|xbench_deepsearch|xbench_deepresearch|debug|collect_trace|default.
Tool servers: tools.<name>.* (search, reader, python, web_search, search_and_scrape_webpage,
  tool-python, time); web.search_backend=serper|searxng|tavily|brave|local.
API keys are read from the environment (or ./.env), never from config files; a key given
as llm.api_key=... is used and never written.
"""

EXIT_TASKS_ERRORED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # the shell convention for Ctrl-C


def config_dir() -> Path:
    """``$DEEPLEDGER_CONFIG_DIR``, else the ``conf/`` of the source checkout."""
    configured = os.environ.get("DEEPLEDGER_CONFIG_DIR")
    path = Path(configured) if configured else Path(__file__).resolve().parents[2] / "conf"
    if not (path / "config.yaml").is_file():
        raise ConfigError(
            f"No deepledger configuration at {path} (config.yaml missing). Install from a "
            "source checkout (pip install -e .) or set DEEPLEDGER_CONFIG_DIR to a conf/ folder."
        )
    return path


EXIT_STDOUT_CLOSED = 141  # 128 + SIGPIPE: what a shell shows for `yes | head -1`


def main(argv: list[str] | None = None) -> int:
    """The command; a reader that stops reading (``deepledger --help | head -1``) ends it
    quietly instead of with a BrokenPipeError traceback. Run as the process itself
    (``argv`` None), it ends the process (:func:`end_process`)."""
    code = _main_guarded(argv)
    if argv is None:
        end_process(code)
    return code


def _main_guarded(argv: list[str] | None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:
        if not _stdout_closed():
            raise  # some other pipe broke (a subprocess's): a bug, keep its traceback
        # Not an error to report: whoever read the output has what they wanted. stdout
        # goes to /dev/null so the interpreter's last flush cannot fail again. The exit
        # code is 141, not 0, so that `set -o pipefail` still tells the output was cut
        # short, as it does for any program a closed pipe stops.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_STDOUT_CLOSED


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reading end has gone (poll reports an error)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):  # no usable stdout at all
        return True


def _main(argv: list[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else EXIT_USAGE
    if args[0] in ("-V", "--version"):
        print(f"deepledger {__version__}")
        return 0
    command, rest = args[0], args[1:]
    handlers: dict[str, Callable[[list[str]], int]] = {
        "bench": lambda a: _hydra_command("bench", a, _bench),
        "run": lambda a: _hydra_command("run", split_run_arguments(a).as_hydra_args(), _run),
        "report": _report,
        "replay": _replay,
        "judge": _judge,
    }
    if command not in handlers:
        print(f"deepledger: unknown command {command!r}.\n\n{USAGE}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return handlers[command](rest)
    except DeepLedgerError as exc:
        return _fail(exc)
    finally:
        if argv is None:  # the process ends next (not a caller's own interpreter)
            skip_exit_collection()


def end_process(code: int) -> None:
    """End the process now that the command is done: the atexit handlers run (logging's
    flush among them) and the standard streams are flushed, then the process exits
    without the interpreter's teardown, which frees every object one by one (50 ms after
    a one-task bench, most of it the C allocator giving back pydantic's and tiktoken's
    memory). Files, journals and servers are closed by then. A daemon thread (the
    thread pools' idle workers) ends with the process, as in Python's own exit; while a
    non-daemon thread still runs, the normal exit waits for it."""
    import atexit
    import threading

    main = threading.main_thread()
    if any(t is not main and not t.daemon for t in threading.enumerate()):
        return
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: the code says so
            stream.flush()
    os._exit(code)


def skip_exit_collection() -> None:
    """The interpreter's exit runs one last garbage collection over every object the
    command made, 0.2 s after a one-task bench; the process is ending and its memory
    goes back whole, so the objects alive now are moved out of the collector's sight.
    Files, journals and servers are closed by then; atexit handlers still run."""
    import gc

    gc.freeze()


def quiet_http_logs() -> None:
    """One INFO line per HTTP request from the SDKs' clients drowns the progress display."""
    for name in ("httpx", "httpx2", "openai", "anthropic", "mcp"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _fail(exc: DeepLedgerError) -> int:
    """One paragraph; 2 when the configuration (or the endpoint it names) is wrong, 1
    when the work itself failed (``deepledger run``'s model call, after its retries)."""
    print(f"deepledger: {exc}", file=sys.stderr)
    usage = isinstance(exc, ConfigError | EndpointRejectedError)
    return EXIT_USAGE if usage else EXIT_TASKS_ERRORED


def _hydra_command(name: str, overrides: list[str], task: HydraTask) -> int:
    """Run ``task(config, node)`` under Hydra with ``overrides`` as its command line."""
    import hydra
    from dotenv import load_dotenv

    from deepledger.config import register_schemas, typed

    overrides = checked_overrides(name, overrides)
    # The working directory's .env (not one next to the installed code); it never
    # replaces a variable that is already set.
    load_dotenv(Path.cwd() / ".env", override=False)
    register_schemas()
    outcome: dict[str, int] = {}  # "code" is set once Hydra composed a config

    @hydra.main(config_path=str(config_dir()), config_name="config", version_base="1.3")
    def _entry(node: DictConfig) -> None:
        outcome.setdefault("code", 0)
        quiet_http_logs()
        try:
            # The one place the composed node becomes the typed config.
            code = task(typed(node), node)
        except DeepLedgerError as exc:
            code = _fail(exc)
        except KeyboardInterrupt:  # tool servers are already stopped by the time we get here
            print(
                f"\ndeepledger {name}: interrupted. Finished work is saved; run the same "
                "command again (same hydra.run.dir) to resume.",
                file=sys.stderr,
            )
            code = EXIT_INTERRUPTED
        outcome["code"] = max(outcome["code"], code)  # a sweep's worst job

    saved_argv = sys.argv
    sys.argv = [f"deepledger {name}", *overrides]
    try:
        _entry()
    except SystemExit as exc:
        code = _hydra_exit_code(exc, composed="code" in outcome)
        if code == 0 and any(a in ("-h", "--help") for a in overrides):
            from deepledger.config.docs import key_help

            print(f"\n{key_help(name)}")  # below Hydra's help: what the keys mean
        return code
    except ValueError as exc:  # Hydra's check of its flags ("only one of --cfg, -m, ...")
        if "code" in outcome:
            raise
        print(f"deepledger {name}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        sys.argv = saved_argv
    return outcome.get("code", 0)


def checked_overrides(name: str, overrides: list[str]) -> list[str]:
    """The command line's overrides as Hydra gets them (a key on it moved to a variable,
    MiroThinker's spellings read, flags first), refused with :class:`ConfigError` naming
    an unknown key, an override that does not parse or a preset that does not exist."""
    from deepledger.config import carried_override, unknown_override_keys, unknown_presets

    overrides = flags_first([carried_override(o) for o in take_command_line_key(overrides)])
    if problems := unknown_override_keys(overrides):
        raise ConfigError(
            "not a configuration key: "
            + ", ".join(problems)
            + f". Every key is listed by: deepledger {name} --cfg job"
        )
    check_override_syntax(overrides)
    if not _searches_other_folders(overrides) and (
        missing := unknown_presets(overrides, config_dir())
    ):
        raise ConfigError("; ".join(missing) + ".")
    return overrides


def _searches_other_folders(overrides: list[str]) -> bool:
    """Presets may also come from folders the command line adds (``--config-dir``,
    ``hydra.searchpath``): Hydra then judges the names itself."""
    prefixes = (
        "-cd",
        "--config-dir",
        "-cp",
        "--config-path",
        "hydra.searchpath",
        "+hydra.searchpath",
    )
    return any(a.startswith(prefixes) for a in overrides)


def flags_first(args: list[str]) -> list[str]:
    """Hydra's flags (with their values) before the overrides: its argument parser takes
    the overrides as one run of words, so ``a=1 -m b=1,2`` would leave ``b=1,2`` out."""
    flags, overrides = [], []
    pending = list(args)
    while pending:
        arg = pending.pop(0)
        if not arg.startswith("-"):
            overrides.append(arg)
            continue
        flags.append(arg)
        if _flag_takes_value(arg, pending[0] if pending else None):
            flags.append(pending.pop(0))
    return flags + overrides


def check_override_syntax(overrides: list[str]) -> None:
    """Hydra names no override when one does not parse ("no viable alternative at input
    '[1,'"); this names it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    pending = list(overrides)
    while pending:
        override = pending.pop(0)
        if override.startswith("-"):  # a flag: Hydra's argument parser checks those
            if _flag_takes_value(override, pending[0] if pending else None):
                pending.pop(0)
            continue
        try:
            parser.parse_override(override)
        except HydraException as exc:
            raise ConfigError(
                f"cannot read the override {override!r}: {str(exc).splitlines()[0]}. Quote a "
                "value that holds spaces, commas, brackets or colons (key='a, b'); see "
                "https://hydra.cc/docs/advanced/override_grammar/basic/"
            ) from None


def _hydra_exit_code(exc: SystemExit, composed: bool) -> int:
    """Hydra exits 1 on its own errors (an unknown preset, a value of the wrong type, an
    override it cannot parse), message printed: before any config was composed, that is
    a usage error. After, it is a crash inside the command, and stays 1."""
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return EXIT_USAGE if code == 1 and not composed else code


def take_command_line_key(overrides: list[str]) -> list[str]:
    """``llm.api_key=KEY`` (MiroThinker's command lines pass keys so) taken out of the
    overrides before Hydra sees them, so the key is never written to the run directory,
    the manifest or a log: it moves to a variable of this process, which the llm preset
    then names. An empty one (an unset ``$API_KEY`` in a script) is dropped."""
    from deepledger.config import COMMAND_LINE_KEY_ENV

    kept, key = [], None
    for override in overrides:
        name, _, value = override.partition("=")
        if name.lstrip("+") == "llm.api_key":
            key = value.strip().strip("'\"") or key
        else:
            kept.append(override)
    if key:
        os.environ[COMMAND_LINE_KEY_ENV] = key
        kept.append(f"llm.api_key_env={COMMAND_LINE_KEY_ENV}")
    return kept


# Hydra's flags that take a value (hydra/_internal/utils.py get_args_parser).
HYDRA_FLAGS_WITH_VALUE = frozenset({
    "--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
    "--config-dir", "-cd", "--experimental-rerun",
})  # fmt: skip
HYDRA_INFO_CHOICES = frozenset(
    ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")
)
# `[+|++|~]key[@package][=value]`, as Hydra's override grammar spells a key.
OVERRIDE_KEY = re.compile(
    r"^(?P<prefix>\+\+|\+|~)?(?P<key>[A-Za-z_$][\w$-]*(?:[./][\w$-]+)*)"
    r"(?:@[\w.$/-]*)?(?P<eq>=|$)"
)
RUN_TEXT_KEYS = ("question", "task_file")  # values taken as text, never Hydra grammar
FILE_PREFIX = "@"  # question=@notes.txt reads the question from a file; @@ escapes it


@dataclass
class RunArguments:
    """``deepledger run``'s command line, split: Hydra's part and the text values."""

    hydra_args: list[str] = field(default_factory=list)
    question: str | None = None
    task_file: str | None = None

    def as_hydra_args(self) -> list[str]:
        """The question and task file as overrides Hydra parses back to the same text."""
        texts = [(k, getattr(self, k)) for k in RUN_TEXT_KEYS if getattr(self, k) is not None]
        return [f"{key}={hydra_value(text)}" for key, text in texts] + self.hydra_args


def split_run_arguments(args: list[str]) -> RunArguments:
    """Which arguments are overrides or Hydra flags, and which is the question.

    A word starting with ``-`` is a flag of Hydra's (``-m``, ``--cfg job``). An argument
    is an override when its key is one deepledger or Hydra knows (a schema key, a config
    group, ``hydra.*``), has a ``+``/``~`` prefix, is a dotted path (a mistyped key is
    then reported), or is a bare word close to a top-level key; anything else is the
    question. After ``--`` every argument is the question.
    """
    parsed = RunArguments()
    positional: list[str] = []
    pending = list(args)
    while pending:
        arg = pending.pop(0)
        if arg == "--":
            positional += pending
            break
        if arg.startswith("-") and not any(c.isspace() for c in arg):  # Hydra checks flags
            parsed.hydra_args.append(arg)
            if _flag_takes_value(arg, pending[0] if pending else None):
                parsed.hydra_args.append(pending.pop(0))
            continue
        key = override_key(arg)
        if key in RUN_TEXT_KEYS and "=" in arg:
            _set_text(parsed, key, arg.split("=", 1)[1])
        elif key is not None:
            parsed.hydra_args.append(arg)
        else:
            positional.append(arg)
    if len(positional) > 1:
        raise ConfigError(
            "deepledger run takes one question, as one argument; quote it: "
            f'deepledger run "..." [OVERRIDES]. Got {len(positional)}: '
            + ", ".join(repr(p) for p in positional)
        )
    if positional:
        _set_text(parsed, "question", positional[0])
    return parsed


def _flag_takes_value(flag: str, next_arg: str | None) -> bool:
    """Whether the argument after Hydra's ``flag`` is the flag's value."""
    if next_arg is None:
        return False
    if flag in ("--info", "-i"):  # its value is optional
        return next_arg in HYDRA_INFO_CHOICES
    return flag in HYDRA_FLAGS_WITH_VALUE


def override_key(arg: str) -> str | None:
    """The key of ``arg`` when it is an override, else None (then it is question text)."""
    from deepledger.config import CONFIG_GROUPS, closest_key, schema_keys

    match = OVERRIDE_KEY.match(arg)
    if match is None or (not match["eq"] and match["prefix"] != "~"):
        return None
    key = match["key"]
    keys, open_prefixes = schema_keys()
    top_level = {k for k in keys if "." not in k} | set(CONFIG_GROUPS) | {"hydra"}
    known = (
        key in keys
        or key.split(".")[0].split("/")[0] in top_level
        or any(key.startswith(p + ".") for p in open_prefixes)
    )
    if known or match["prefix"] or "." in key or closest_key(key, top_level, cutoff=0.75):
        return key
    return None


def _set_text(parsed: RunArguments, key: str, value: str) -> None:
    if getattr(parsed, key) is not None:
        raise ConfigError(f"deepledger run: {key} is given twice; give it once.")
    if key == "question":
        value = _question_text(value)
    if not value:
        raise ConfigError(f"deepledger run: {key} is empty.")
    setattr(parsed, key, value)


def _question_text(value: str) -> str:
    """The question itself, or a file's text for ``@PATH`` (``@@...``: a literal ``@``)."""
    if value.startswith(FILE_PREFIX * 2):
        return value[1:]
    if not value.startswith(FILE_PREFIX):
        return value
    path = Path(value[1:]).expanduser()
    try:
        # utf-8-sig: an editor's byte-order mark is not part of the question
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(
            f"question={value}: no such file {str(path)!r} (@PATH reads the question from a "
            "file; write @@ for a question that starts with @)."
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"question={value}: {str(path)!r} is not UTF-8 text (byte {exc.start} is "
            f"{exc.object[exc.start : exc.start + 1]!r}); save it as UTF-8."
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"question={value}: cannot read {str(path)!r} ({exc.strerror})."
        ) from None
    return text.rstrip("\r\n")


_INTERPOLATION = re.compile(r"(\\*)\$\{")


def hydra_value(text: str) -> str:
    """``text`` written in Hydra's override grammar so that the config holds exactly
    ``text``: as typed when Hydra reads it back unchanged, else quoted, with every
    ``${`` escaped (OmegaConf would resolve it: a question may say ``${HOME}``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Quote, QuotedString
    from hydra.errors import HydraException

    if "${" not in text and "\\" not in text:
        try:
            parsed = OverridesParser.create().parse_override(f"key={text}")
            if not parsed.is_sweep_override() and parsed.value() == text:
                return text
        except HydraException:
            pass  # not valid unquoted: quoted below
    # OmegaConf reads \${ as a literal ${, and \\ before ${ as one backslash.
    literal = _INTERPOLATION.sub(lambda m: m[1] * 2 + "\\${", text)
    quote = Quote.double if "'" in literal and '"' not in literal else Quote.single
    return QuotedString(text=literal, quote=quote).with_quotes()


def _checked(cfg: Config) -> None:
    from deepledger.config import share_reading_rules, validate
    from deepledger.context.strategies import STRATEGIES
    from deepledger.llm.factory import create_client

    validate(cfg, STRATEGIES)
    share_reading_rules(cfg)
    # Building the client fails early on a missing key or an unavailable provider.
    asyncio.run(create_client(cfg.llm).aclose())


@contextlib.contextmanager
def _refused_leaves_nothing() -> Iterator[None]:
    """A command refused for its configuration before its run started leaves no new run
    folder behind: the one the Hydra callback made (its lock, ``.hydra/``) is removed
    again. A folder that was there before is left as it was, and one whose run started
    (``RunStore.start``) is never touched (``store/lock.py``)."""
    from hydra.core.hydra_config import HydraConfig

    from deepledger.store.lock import discard_claimed

    try:
        yield
    except ConfigError:
        discard_claimed(Path(HydraConfig.get().runtime.output_dir))
        raise


def _bench(cfg: Config, node: DictConfig) -> int:
    from hydra.core.hydra_config import HydraConfig

    from deepledger.bench.suite import run_suite
    from deepledger.config import node_data

    root = Path(HydraConfig.get().runtime.output_dir)
    composed = node_data(node, resolve=False)  # for .hydra/config.yaml: as composed
    # run_suite refuses some settings itself (no tasks in data_dir, a judge's missing
    # key) before its run starts writing: those leave no folder either.
    with _refused_leaves_nothing():
        _checked(cfg)
        summary = asyncio.run(
            run_suite(cfg, root, config_dir(), sys.argv[1:], hydra_config=composed)
        )
    print(f"Run directory: {root}")
    budget = summary.budget
    not_done = budget is not None and (budget.tasks_not_started or budget.tasks_stopped)
    stopped = budget is not None and budget.exhausted and not_done  # tasks kept from finishing
    return 0 if not summary.tasks.errors and not stopped else 1


def _run(cfg: Config, node: DictConfig) -> int:
    with _refused_leaves_nothing():
        question = _checked_question(cfg)
    return asyncio.run(_answer_one(cfg, question))


def _checked_question(cfg: Config) -> str:
    question = cfg.question
    if not question:
        raise ConfigError(
            'deepledger run needs a question: deepledger run "..." [OVERRIDES] (or '
            'question="...", or question=@FILE to read it from a UTF-8 file).'
        )
    if cfg.task_file and not Path(cfg.task_file).is_file():
        raise ConfigError(f"task_file={cfg.task_file!r} is not a file.")
    if cfg.task_file:
        _refuse_secret_task_file(cfg)
    _checked(cfg)
    return question


def _refuse_secret_task_file(cfg: Config) -> None:
    """A ``task_file`` whose real path matches a secret-file rule is a usage error: the
    tools would refuse it anyway, and the model would be told where a key lies."""
    from deepledger.config import secret_rules

    assert cfg.task_file is not None
    if (rule := secret_rules(cfg).rule_for(Path(cfg.task_file).resolve())) is not None:
        raise ConfigError(
            f"task_file={cfg.task_file!r} matches the secret-file rule {rule!r}: files "
            "that hold keys or credentials are never shown to the model (docs/security.md)."
        )


def _run_tool_servers(cfg: Config) -> dict[str, ToolServerConfig]:
    """The tool servers of ``deepledger run``: the reader and tool-python get the attached
    file itself, never its folder (which may hold .env), and no data folder that holds
    the working directory or the home folder whole (``tools/roots.py``)."""
    from deepledger.config import tool_servers
    from deepledger.tools.roots import attach_file, narrow_wide_roots

    servers = tool_servers(cfg)
    attached = [Path(cfg.task_file)] if cfg.task_file else []
    narrow_wide_roots(servers, lambda: attached, cfg.web.allow_working_dir)
    for file in attached:
        attach_file(servers, file)
    return servers


async def _answer_one(cfg: Config, question: str) -> int:
    from hydra.core.hydra_config import HydraConfig

    from deepledger.agent.task import AgentFactory
    from deepledger.bench.services import note_writer, page_scraper
    from deepledger.llm.factory import create_client
    from deepledger.store.journal import Journal
    from deepledger.store.layout import RunLayout
    from deepledger.tools.list_cache import ToolListCache
    from deepledger.tools.pool import ToolManager

    layout = RunLayout(Path(HydraConfig.get().runtime.output_dir))
    journal = Journal(layout.run_journal)
    task_file = cfg.task_file
    servers = await asyncio.to_thread(_run_tool_servers, cfg)
    manager = ToolManager(
        servers, log_dir=layout.tool_server_logs, list_cache=ToolListCache.default()
    )
    writer = note_writer(cfg, config_dir())
    scraper = page_scraper(cfg, config_dir())
    llm = create_client(cfg.llm)
    try:
        factory = AgentFactory(cfg, llm, manager, note_writer=writer, scraper=scraper)
        state = await factory.solve(question, journal, task_file)
    finally:
        journal.close()
        await manager.aclose()
        await llm.aclose()
        if writer is not None:
            await writer.llm.aclose()
        if scraper is not None:
            await scraper.aclose()
    print(f"Answer: {state.final_answer if state.final_answer is not None else '(none)'}")
    ended = state.end_reason.value if state.end_reason is not None else "not ended"
    print(
        f"({state.provenance.value}; {ended} after {state.turn} turns, "
        f"{state.tool_calls} tool calls, {state.ledger.total.total_tokens} tokens)"
    )
    if state.end_detail:  # e.g. the task alone does not fit the window
        print(f"Why: {state.end_detail}")
    print(f"Log: {journal.path}")
    return 0


def _report(args: list[str]) -> int:
    """One run: rebuild its summary and report. Several: average them and write one
    report comparing them (``--out FILE``, else beside the runs). A sweep folder
    (``hydra.sweep.dir``) stands for its runs, compared side by side, not averaged."""
    from deepledger.bench.aggregate import aggregate, format_aggregate
    from deepledger.bench.metrics import format_summary
    from deepledger.bench.report import rebuild_summary
    from deepledger.report.compare import default_output, sweep_runs, write_comparison
    from deepledger.report.page import write_run_report
    from deepledger.store.layout import REPORT

    out = None
    if "--out" in args:
        at = args.index("--out")
        if at + 1 >= len(args):
            raise ConfigError("--out needs the path of the comparison file to write.")
        out = Path(args[at + 1])
        args = args[:at] + args[at + 2 :]
    if not args or any(a.startswith("-") for a in args):
        print("usage: deepledger report RUN_DIR [RUN_DIR...] [--out FILE]", file=sys.stderr)
        return EXIT_USAGE
    run_dirs: list[Path] = []
    sweep = False  # runs with different settings: compared, never averaged
    for folder in map(Path, args):
        runs = sweep_runs(folder)
        sweep = sweep or runs is not None
        run_dirs += runs or [folder]
    if len(run_dirs) == 1 and out is not None:
        raise ConfigError(
            f"--out names the comparison of several runs; one run's report is {REPORT} in "
            "its run directory."
        )
    if len(run_dirs) == 1:
        summary = rebuild_summary(run_dirs[0])
        print(format_summary(summary))
        print(f"Report: {write_run_report(run_dirs[0], summary)}")
        return 0
    summaries: dict[Path, SummaryRecord] = {}
    for run_dir in run_dirs:
        try:
            summaries[run_dir] = summary = rebuild_summary(run_dir)
            write_run_report(run_dir, summary)
        except DeepLedgerError as exc:
            print(f"deepledger: {exc}", file=sys.stderr)
        except Exception as exc:  # one run's report must not cost the comparison
            print(f"deepledger: {run_dir}: its report failed ({exc!r})", file=sys.stderr)
    combined = aggregate(run_dirs)
    print(format_aggregate(combined, averaged=not sweep))
    path = write_comparison(run_dirs, summaries, out or default_output(run_dirs))
    print(f"Comparison: {path}")
    return 0 if combined["complete"] else 1


def _replay(args: list[str]) -> int:
    """Replay a finished run's journals under other context policies; no model calls."""
    from deepledger.bench.replay import run_replay

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
    print(run_replay(Path(args[0]), args[1:], price))
    return 0


JUDGE_USAGE = (
    "usage: deepledger judge RUN_DIR [benchmark.judge.KEY=VALUE ...] "
    "[benchmark.execution.max_concurrent=N] [--name NAME] [-cd DIR]"
)


def _judge(args: list[str]) -> int:
    """Grade a finished run's answers again, without running the agent; the verdicts go
    to a judging of their own inside the run directory (``bench/judging.py``)."""
    from dotenv import load_dotenv

    from deepledger.bench.judging import format_judging, run_judging
    from deepledger.bench.services import PresetPath
    from deepledger.bench.suite import unjudged_warning

    if any(a in ("-h", "--help") for a in args):
        print(f"{JUDGE_USAGE}\n\n{_judge.__doc__}")
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
