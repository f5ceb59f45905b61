"""A query's language and region in each engine's own spelling.

Models write ``hl`` every way there is: ``zh``, ``zh-cn``, ``zh_CN``, ``zh-Hans``,
``pt-BR``, ``ja``. :func:`parse` reads any of them (with ``gl`` as the region when
``hl`` names none); each engine then spells the result its own way:

- SearXNG takes a locale, ``lang`` or ``lang-REGION`` (``zh-CN``, ``en-US``); anything
  else (``zh-cn-CN``) it answers with HTTP 400. Its bot limiter also answers 429 to a
  request without ``Accept-Language``, so :func:`accept_language` gives one.
- Brave takes only the ``search_lang`` codes it documents (:data:`BRAVE_LANGUAGES`:
  ``zh-hans``/``zh-hant`` for Chinese, ``jp`` for Japanese, ``en-gb``, ``pt-br``/``pt-pt``)
  and only the ``country`` codes it lists (:data:`BRAVE_COUNTRIES`); any other value
  is answered with HTTP 422, so one it does not know is left out (the engine's
  default) rather than sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Brave's web search API, "codes" page: search_lang and country values.
BRAVE_LANGUAGES = frozenset(
    {"ar", "eu", "bn", "bg", "ca", "zh-hans", "zh-hant", "hr", "cs", "da", "nl", "en",
     "en-gb", "et", "fi", "fr", "gl", "de", "gu", "he", "hi", "hu", "is", "it", "jp", "kn",
     "ko", "lv", "lt", "ms", "ml", "mr", "nb", "pl", "pt-br", "pt-pt", "pa", "ro", "ru",
     "sr", "sk", "sl", "es", "sv", "ta", "te", "th", "tr", "uk", "vi"}
)  # fmt: skip
BRAVE_COUNTRIES = frozenset(
    {"ALL", "AR", "AU", "AT", "BE", "BR", "CA", "CL", "DK", "FI", "FR", "DE", "HK", "IN",
     "ID", "IT", "JP", "KR", "MY", "MX", "NL", "NZ", "NO", "CN", "PL", "PT", "PH", "RU",
     "SA", "ZA", "ES", "SE", "CH", "TW", "TR", "GB", "US"}
)  # fmt: skip
_TRADITIONAL_REGIONS = frozenset({"TW", "HK", "MO"})
_OLD_CODES = {"iw": "he", "in": "id", "ji": "yi", "no": "nb", "nn": "nb"}
_SUBTAG = re.compile(r"[A-Za-z0-9]+")


@dataclass(frozen=True, slots=True)
class Language:
    """A language (``zh``), its script if named (``Hans``) and its region (``CN``)."""

    language: str
    script: str | None = None
    region: str | None = None

    @property
    def chinese_script(self) -> str:
        """``Hant`` or ``Hans``: the script named, else the one the region writes."""
        if self.script in ("Hans", "Hant"):
            return self.script
        return "Hant" if self.region in _TRADITIONAL_REGIONS else "Hans"


def parse(hl: str | None, gl: str | None = None) -> Language | None:
    """``hl`` read as a language tag (``gl`` its region when it names none); None
    when ``hl`` is empty or not a language tag."""
    parts = _SUBTAG.findall(hl or "")
    if not parts or not parts[0].isalpha() or not 2 <= len(parts[0]) <= 3:
        return None
    script = region = None
    for part in parts[1:]:
        if len(part) == 4 and part.isalpha():
            script = part.title()
        elif (len(part) == 2 and part.isalpha()) or (len(part) == 3 and part.isdigit()):
            region = part.upper()
    if region is None and gl and len(gl.strip()) == 2 and gl.strip().isalpha():
        region = gl.strip().upper()
    if region == "UK":  # Google's gl for Britain; the ISO code is GB
        region = "GB"
    return Language(parts[0].lower(), script, region)


def searxng_locale(language: Language) -> str:
    """SearXNG's ``language`` value: ``lang-REGION`` or ``lang`` (a script alone becomes
    the region that writes it: ``zh-Hant`` is ``zh-TW``)."""
    region = language.region
    if region is None and language.language == "zh" and language.script:
        region = "TW" if language.chinese_script == "Hant" else "CN"
    return f"{language.language}-{region}" if region else language.language


def accept_language(language: Language | None) -> str:
    """An ``Accept-Language`` header for ``language`` (any language when None)."""
    if language is None:
        return "*"
    locale = searxng_locale(language)
    return locale if locale == language.language else f"{locale},{language.language};q=0.9"


def brave_language(language: Language) -> str | None:
    """Brave's ``search_lang`` code for ``language``; None when Brave has none."""
    code = _OLD_CODES.get(language.language, language.language)
    if code == "zh":
        code = "zh-hant" if language.chinese_script == "Hant" else "zh-hans"
    elif code == "ja":
        code = "jp"
    elif code == "pt":
        code = "pt-pt" if language.region == "PT" else "pt-br"
    elif code == "en" and language.region == "GB":
        code = "en-gb"
    return code if code in BRAVE_LANGUAGES else None


def brave_country(gl: str | None) -> str | None:
    """Brave's ``country`` code for ``gl``; None when Brave does not list it."""
    code = (gl or "").strip().upper()
    if code == "UK":
        code = "GB"
    return code if code in BRAVE_COUNTRIES else None
