"""Prompt templates, kept as files beside this module.

Templates use ``string.Template`` placeholders (``$name``), so JSON braces in a prompt
need no escaping. A missing placeholder value is an error, not a silent blank.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from string import Template


@cache
def _template(name: str) -> Template:
    return Template(resources.files(__package__).joinpath(name).read_text(encoding="utf-8"))


def render(name: str, **values: object) -> str:
    return _template(name).substitute({k: str(v) for k, v in values.items()}).strip()


def prompt_exists(name: str) -> bool:
    return resources.files(__package__).joinpath(name).is_file()
