"""The packages' public surface: what a user or another layer imports from a package is
its ``__all__``, every name of it is there, and importing a package stays cheap.

A package's ``__init__`` re-exports its public names lazily (``deepledger.lazy``): the
first use of a name imports its module, so ``deepledger --help`` and a tool server that
needs one module do not load a whole package.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

import pytest

# The packages meant to be imported by users or by the layers above them. Left out:
# testing (leaving the installed package),
# tools (split by lifetime: its names are being moved), tools.servers (each server is a
# process, run as python -m).
PUBLIC_PACKAGES = (
    "deepledger",
    "deepledger.prompts",
    "deepledger.config",
    "deepledger.records",
    "deepledger.store",
    "deepledger.llm",
    "deepledger.web",
    "deepledger.web.search",
    "deepledger.context",
    "deepledger.agent",
    "deepledger.report",
    "deepledger.bench",
)
# Packages whose __init__ defines its names itself rather than re-exporting them.
DEFINES_ITS_OWN = {"deepledger", "deepledger.prompts", "deepledger.web.search"}


def submodules(package: str) -> set[str]:
    module = importlib.import_module(package)
    return {info.name for info in pkgutil.iter_modules(module.__path__)}


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_every_public_name_is_there_and_none_is_private(package: str) -> None:
    module = importlib.import_module(package)
    names = getattr(module, "__all__", None)
    assert names, f"{package} has no __all__"
    assert len(set(names)) == len(names)
    assert [n for n in names if n.startswith("_") and n != "__version__"] == []
    for name in names:
        assert getattr(module, name) is not None, f"{package}.{name}"


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_no_public_name_is_also_a_submodule(package: str) -> None:
    """Importing ``package.x`` sets the package's attribute ``x`` to the module: a public
    name ``x`` would then be the module, not what ``__all__`` promised."""
    module = importlib.import_module(package)
    if not hasattr(module, "__path__"):
        return
    assert set(module.__all__) & submodules(package) == set()


def test_an_unknown_name_is_an_attribute_error() -> None:
    """``from deepledger.report import page`` still finds the submodule: the import
    system falls back to it on AttributeError, and only then."""
    llm = importlib.import_module("deepledger.llm")
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        _ = llm.NoSuchThing
    from deepledger.report import page  # a submodule, not a public name

    assert page.__name__ == "deepledger.report.page"


def test_importing_the_packages_loads_none_of_their_modules() -> None:
    """A fresh interpreter imports every public package: the only deepledger modules
    loaded are the packages, and what the packages that define names themselves use."""
    lazy = [p for p in PUBLIC_PACKAGES if p not in DEFINES_ITS_OWN]
    probe = (
        "import importlib, json, sys\n"
        f"for name in {lazy!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('deepledger'))))"
    )
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True
        ).stdout
    )
    assert sorted(set(loaded) - set(lazy)) == ["deepledger", "deepledger.lazy"]
