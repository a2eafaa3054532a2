"""Session fixtures for tests in a real browser: Debian ``chromium`` driven by PyPI
``playwright`` (``playwright install`` cannot download browsers here, so the system Chromium is
launched by path). Chromium is installed with apt when missing and we are root; without
playwright or chromium the tests are skipped with the reason printed.

Use: ``from browser import browser_fixture, page_fixture`` in a test module; the fixtures are
named ``browser`` (module) and ``page`` (per test: a fresh context whose console errors and
uncaught page errors are collected in ``page.errors``); ``chromium_fixture`` (``chromium``, the
path) only makes sure Chromium is there."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentmeter.sandbox.hosttools import ensure_tools
from agentmeter.sandbox.spec import SandboxError

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def _skip(reason: str) -> None:
    print(f"\nbrowser tests skipped: {reason}", file=sys.stderr)
    pytest.skip(reason)


def chromium_path() -> str | None:
    found = shutil.which("chromium")
    if found:
        return found
    return CHROMIUM if Path(CHROMIUM).exists() else None


def require_chromium() -> str:
    """The path of Chromium, installed through agentmeter's host installer when missing (as a
    user's first browser-judged run does); skips the test when it cannot be had."""
    if chromium_path() is None:
        try:
            ensure_tools({"chromium": "chromium"}, "browser tests")
        except SandboxError as e:
            _skip(str(e))
    path = chromium_path()
    if path is None:
        _skip("chromium is not installed (apt-get install chromium)")
    assert path is not None
    return path


@pytest.fixture(scope="session", name="chromium")
def chromium_fixture() -> str:
    return require_chromium()


# module scope: playwright's sync API keeps an event loop running in this thread while open,
# which would break every asyncio test collected after the browser tests
@pytest.fixture(scope="module", name="browser")
def browser_fixture() -> Iterator[Any]:
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        _skip("the Python package playwright is not installed (pip install playwright)")
        return
    path = require_chromium()
    with sync_playwright() as pw:
        try:
            browser = pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS,
                                         headless=True)
        except Error as e:
            _skip(f"chromium at {path} does not start: {str(e).splitlines()[0]}")
            return
        yield browser
        browser.close()


@pytest.fixture(name="page")
def page_fixture(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console.{m.type}: {m.text}")
            if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.errors = errors
    yield page
    context.close()
