"""Lazy re-exports: a package's public names, imported from its modules on first use.

A package's ``__init__`` names what a user imports from it (``__all__``) without
importing its modules: ``deepledger --help`` and a tool server that needs one module of
a package do not pay for the rest of it. ``lazy_exports`` builds the package's module
``__getattr__`` from a table of module -> names; the first lookup of a name imports its
module, and the package keeps the value so the next lookup is a plain one.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(package: str, names_of: Mapping[str, tuple[str, ...]]) -> Callable[[str], object]:
    """The ``__getattr__`` of ``package``: each name of ``names_of[module]`` is read
    from ``package.module`` when first asked for."""
    module_of = {name: module for module, names in names_of.items() for name in names}

    def __getattr__(name: str) -> object:
        if name not in module_of:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module_of[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
