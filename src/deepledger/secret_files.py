"""Which local files are never shown to a model: those that hold secrets by convention.

Every tool that opens a local file for the model (the reader, tool-python's upload, the
search corpus, a task's attached file) asks :meth:`SecretFiles.rule_for` about the file's
*real* path (after ``..`` and symlinks are resolved) and refuses it when a rule matches,
whatever root it lies in. A symlink called ``notes.txt`` that points at ``.env`` is
therefore refused as ``.env``.

A rule is a shell-style pattern (``fnmatch``, case-insensitive) matched against the
name of every component of the path, so ``.git/`` refuses anything inside a ``.git``
folder and ``.env*`` refuses ``.env``, ``.env.local`` and a folder called ``.envs``.
A trailing ``/`` only says the rule is meant for a folder; it matches a file of that
name too (a worktree's ``.git`` file). The rules are :data:`BUILTIN_RULES` plus the
user's own (``web.secret_files``; tool servers read them from
:data:`SECRET_FILES_ENV`, separated by ``os.pathsep``).

Near misses stay readable: ``keyboard.xlsx``, ``environment.csv``, ``keys.txt`` and
``monkey.pem.txt`` match no rule (``*.pem`` and ``*.key`` are about how a name ends,
``.env*`` about a leading dot).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

SECRET_FILES_ENV = "DEEPLEDGER_SECRET_FILES"

BUILTIN_RULES: tuple[str, ...] = (
    ".env*",  # dotenv files: .env, .env.local, .env.production
    ".netrc",
    ".git-credentials",
    ".git/",  # remote URLs with tokens in config, credential helpers' stores
    "*.pem",
    "*.key",
    "id_rsa*",  # SSH private keys, under OpenSSH's default names
    "id_ed25519*",
    "id_ecdsa*",
    "id_dsa*",
    ".ssh/",
    ".aws/",
    ".npmrc",
    ".pypirc",
    "credentials*.json",  # Google service accounts, gcloud, many SDKs
)


@dataclass(frozen=True)
class SecretFiles:
    """The rules in force: the built-in ones and ``extra`` (the user's)."""

    extra: tuple[str, ...] = ()

    @classmethod
    def from_environment(cls) -> SecretFiles:
        """The rules a tool server was started with (``$DEEPLEDGER_SECRET_FILES``)."""
        return cls(parse_rules(os.environ.get(SECRET_FILES_ENV, "")))

    @property
    def rules(self) -> tuple[str, ...]:
        return BUILTIN_RULES + self.extra

    def rule_for(self, path: str | os.PathLike[str]) -> str | None:
        """The first rule ``path`` (a resolved path) matches, or None when it may be read.
        A backslash separates names too: an archive made on Windows names its members
        ``proj\\.env``, which must not pass as one harmless name."""
        names = [part.lower() for part in re.split(r"[\\/]", os.fspath(path)) if part]
        for rule in self.rules:
            pattern = rule.rstrip("/").lower()
            if pattern and any(fnmatchcase(name, pattern) for name in names):
                return rule
        return None

    def refusal(self, shown: str, rule: str) -> str:
        """The message a refused file gets: the rule, never a byte of the content."""
        return (
            f"{shown} is refused: it matches the secret-file rule {rule!r}. Files that hold "
            "keys or credentials by convention are never shown to the model."
        )

    def environment_value(self) -> str:
        """``extra`` as :data:`SECRET_FILES_ENV` carries it to a tool server."""
        return os.pathsep.join(self.extra)


def parse_rules(text: str) -> tuple[str, ...]:
    """Rules joined by ``os.pathsep`` (the environment's form), blanks dropped."""
    return clean_rules(text.split(os.pathsep))


def rule_problem(rule: str) -> str | None:
    """Why ``rule`` (a user's) cannot work, or None. A rule is matched against one name
    at a time, so a path such as ``config/secrets.yaml`` would silently match nothing."""
    if "/" in rule.strip().rstrip("/") or "\\" in rule:
        return (
            f"{rule!r} holds a path; a rule names one file or folder (a pattern such as "
            "'secrets.yaml', 'secrets*' or the folder 'config/'), matched at any depth"
        )
    return None


def clean_rules(rules: Iterable[str]) -> tuple[str, ...]:
    """Rules stripped of spaces, empty ones dropped."""
    return tuple(rule.strip() for rule in rules if rule.strip())
