"""Debian's chromium driven by Playwright, for the console's tests (docs/console.md).

Playwright's own browser download cannot run here, so the tests point it at the system
browser; a page that raises a JavaScript error or logs one fails its test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]


class WatchedPage:
    """A browser page that records JavaScript errors and failed loads of its own assets."""

    def __init__(self, page, shots: str) -> None:
        self.page = page
        self.shots = shots
        self.errors: list[str] = []
        page.on("pageerror", lambda exc: self.errors.append(f"page error: {exc}"))
        page.on("console", self._console)
        #: (url, status) of an error page the test asked for: chromium logs its status.
        self._expected: tuple[str, int] | None = None

    def _console(self, msg) -> None:
        if msg.type != "error":
            return
        if self._expected is not None and msg.location.get("url") == self._expected[0] \
                and f"status of {self._expected[1]} " in msg.text:
            return
        self.errors.append(f"console error: {msg.text} at {msg.location}")

    def expect(self, url: str, status: int) -> None:
        """The next page loaded is ``url`` with ``status``: an error page on purpose."""
        self._expected = (url, status) if status >= 400 else None

    def open(self, url: str, expect_status: int = 200):
        self.expect(url, expect_status)
        response = self.page.goto(url, wait_until="load", timeout=30_000)
        assert response is not None and response.status == expect_status, \
            (url, response and response.status, self.page.content()[:2000])
        assert not self.errors, self.errors
        return response

    def shot(self, name: str) -> str:
        path = os.path.join(self.shots, f"{name}.png")
        self.page.screenshot(path=path, full_page=True)
        return path

    def text(self, selector: str) -> str:
        return self.page.locator(selector).inner_text(timeout=10_000)


@contextmanager
def chromium(shots: str) -> Iterator:
    """A headless system chromium (.ci/run installs it; a machine without it fails here)."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is not installed (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright
    os.makedirs(shots, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def watched(browser, shots: str) -> WatchedPage:
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    return WatchedPage(context.new_page(), shots)
