"""Prompt templates, kept as files beside this module.

Templates use ``string.Template`` placeholders (``$name``), so JSON braces in a prompt
need no escaping (a literal dollar sign is ``$$``). A missing placeholder value is an
error, not a silent blank.

A :class:`PromptSet` picks the file for each template name: a user's own copy in
``agent.prompts_dir`` first (sent as written, byte for byte, but for its placeholders),
then the prompt profile's (``mirothinker/`` holds the layout MiroThinker models are
trained on), then ours. :meth:`PromptSet.problems` checks a user's folder before a run
starts: every file must replace one of ours and fill exactly the placeholders it does.

Importable from here: ``PromptSet``, ``render`` (one of our templates filled),
``prompt_exists``, ``placeholders``, ``PROFILES`` and ``AGENT_TEMPLATES`` (the templates
``agent.prompts_dir`` may replace).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from string import Template

__all__ = ["AGENT_TEMPLATES", "PROFILES", "PromptSet", "placeholders", "prompt_exists", "render"]

PROFILES = ("default", "mirothinker")
# The templates an agent's requests are written from, which agent.prompts_dir may
# replace. The judge's own (benchmark.judge.template), compaction's and page
# extraction's are not among them.
AGENT_TEMPLATES = frozenset(
    {
        "system.md", "subagent_system.md", "xml_tools.md", "xml_no_tools.md",
        "native_tools.md", "hermes_tools.md", "hermes_template_tools.md", "task.md",
        "task_file.md", "attachment.md", "attachment_reader.md", "attachment_unreadable.md",
        "summarize.md", "boxed_missing.md", "post_mortem.md", "post_mortem_prefill.md",
        "report_summarize.md", "retry_header.md", "retry_item.md", "retry_footer.md",
        "example_small_model.md", "example_small_model_hermes.md",
    }
)  # fmt: skip


@cache
def _template(name: str) -> Template:
    return Template(_ours(name).read_text(encoding="utf-8"))


def _ours(name: str) -> Traversable:
    return resources.files(__package__).joinpath(*name.split("/"))


def render(name: str, **values: object) -> str:
    return _template(name).substitute({k: str(v) for k, v in values.items()}).strip()


def prompt_exists(name: str) -> bool:
    return _ours(name).is_file()


@cache
def _user_template(path: Path) -> Template:
    """A user's template, read once per run (its checks ran before the run started)."""
    return Template(path.read_text(encoding="utf-8"))


def placeholders(template: Template) -> set[str]:
    return set(template.get_identifiers())


@dataclass(frozen=True)
class PromptSet:
    """The templates one agent's prompts are rendered from (see the module docstring)."""

    profile: str = "default"
    folder: Path | None = None  # agent.prompts_dir: a user's replacements

    def render(self, name: str, **values: object) -> str:
        """``name`` filled with ``values``; ours are stripped of their edge blank lines,
        a user's file is sent exactly as written."""
        if self.folder is not None and (self.folder / name).is_file():
            template = _user_template(self.folder / name)
            return template.substitute({k: str(v) for k, v in values.items()})
        return render(self._shipped(name), **values)

    def exists(self, name: str) -> bool:
        return self._shipped(name) != name or prompt_exists(name)

    def _shipped(self, name: str) -> str:
        """The profile's own file for ``name`` when it has one, else the default's."""
        if self.profile != "default" and prompt_exists(f"{self.profile}/{name}"):
            return f"{self.profile}/{name}"
        return name

    def problems(self) -> list[str]:
        """What is wrong with the user's folder: a file that replaces none of ours, a
        placeholder ours fills that it lacks, one we do not fill, a ``$`` that is no
        placeholder. Each names the file."""
        if self.folder is None:
            return []
        if not self.folder.is_dir():
            return [f"agent.prompts_dir={self.folder}: no such folder."]
        found = []
        for path in sorted(self.folder.iterdir()):
            if path.is_file() and not path.name.startswith("."):
                found += self._file_problems(path)
        return found

    def _file_problems(self, path: Path) -> list[str]:
        where = f"agent.prompts_dir: {path}"
        if path.name not in self.names():
            known = ", ".join(self.names())
            return [f"{where} replaces no template of an agent's (their names: {known})."]
        try:
            template = Template(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            return [f"{where} cannot be read: {exc}"]
        if not template.is_valid():
            return [
                f"{where} has a '$' that is no placeholder; write a literal dollar sign as '$$'."
            ]
        wanted = placeholders(_template(self._shipped(path.name)))
        given = placeholders(template)
        found = [f"{where} lacks the placeholder ${name}." for name in sorted(wanted - given)]
        found += [
            f"{where} has the placeholder ${name}, which ours does not have (it may use: "
            f"{', '.join('$' + w for w in sorted(wanted)) or 'none'})."
            for name in sorted(given - wanted)
        ]
        return found

    def names(self) -> list[str]:
        """The names of the templates a user's folder may replace under this profile."""
        return sorted(name for name in AGENT_TEMPLATES if self.exists(name))
