"""Open a report in headless Chromium (Debian's ``chromium``; ``scripts/test.sh``
installs it) through playwright, and record what a user's browser would complain of.

No network: Chromium starts with its background networking off and every request that
is not for the file itself (or a data:/blob: URL the page makes) is recorded and
refused, so a report that reached for a CDN would fail its test.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("DEEPLEDGER_TEST_ARTIFACTS", ROOT / "test-artifacts"))
CHROMIUM_FLAGS = [
    "--no-sandbox",  # the tests run as root here
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-domain-reliability",
    "--disable-sync",
    "--no-pings",
    "--dns-prefetch-disable",
    "--proxy-server=127.0.0.1:9",  # anything that still tries goes nowhere
]


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        message = "chromium is not installed (scripts/test.sh installs Debian's package)"
        if os.environ.get("DEEPLEDGER_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@dataclass
class Visit:
    page: object
    problems: list[str] = field(default_factory=list)  # console errors and warnings
    requests: list[str] = field(default_factory=list)  # anything not from the file itself

    def screenshot(self, name: str, full_page: bool = True) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / name
        self.page.screenshot(path=str(path), full_page=full_page)
        return path


@contextmanager
def open_report(path: Path, fragment: str = "") -> Iterator[Visit]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, args=CHROMIUM_FLAGS
        )
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000}, offline=True)
            page = context.new_page()
            visit = Visit(page)
            page.on(
                "console",
                lambda m: (
                    visit.problems.append(f"{m.type}: {m.text}")
                    if m.type in ("error", "warning")
                    else None
                ),
            )
            page.on("pageerror", lambda e: visit.problems.append(f"uncaught: {e}"))

            def only_the_file(route) -> None:
                url = route.request.url
                if url.startswith(("file:", "data:", "blob:")):
                    route.continue_()
                else:
                    visit.requests.append(url)
                    route.abort()

            context.route("**/*", only_the_file)
            page.goto(path.resolve().as_uri() + fragment)
            page.wait_for_selector("body[data-ready=true]", timeout=20_000)
            yield visit
        finally:
            browser.close()
