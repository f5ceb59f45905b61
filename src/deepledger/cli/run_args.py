"""``deepledger run``'s command line: which arguments are overrides, which is the question."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from deepledger.cli.hydra_command import flag_takes_value
from deepledger.cli.override_text import hydra_value
from deepledger.errors import ConfigError

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
            if flag_takes_value(arg, pending[0] if pending else None):
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
