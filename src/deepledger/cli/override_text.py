"""Text written in Hydra's override grammar so that the config holds it exactly."""

from __future__ import annotations

import re

_INTERPOLATION = re.compile(r"(\\*)\$\{")


def hydra_value(text: str) -> str:
    """``text`` written in Hydra's override grammar so that the config holds exactly
    ``text``: as typed when Hydra reads it back unchanged, else quoted, with every
    ``${`` escaped (OmegaConf would resolve it: a question may say ``${HOME}``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    if "${" not in text and "\\" not in text:
        try:
            parsed = OverridesParser.create().parse_override(f"key={text}")
            if not parsed.is_sweep_override() and parsed.value() == text:
                return text
        except HydraException:
            pass  # not valid unquoted: quoted below
    return quoted(text)


def quoted(text: str) -> str:
    """``text`` as a quoted override value that Hydra and OmegaConf read back as is."""
    from hydra.core.override_parser.types import Quote, QuotedString

    # OmegaConf reads \${ as a literal ${, and \\ before ${ as one backslash.
    literal = _INTERPOLATION.sub(lambda m: m[1] * 2 + "\\${", text)
    quote = Quote.double if "'" in literal and '"' not in literal else Quote.single
    return QuotedString(text=literal, quote=quote).with_quotes()
