"""One Chromium per test session (per xdist worker), a fresh Playwright connection and fresh
contexts per test (registered in the root conftest.py).

Chromium runs as a process of its own with a DevTools port; each test connects to it over CDP
and closes what it opened, so no cookie, storage or page outlives its test. Playwright's sync
API runs an event loop in the calling thread while it is connected, and Django refuses database
work under a running loop: the connection, and DJANGO_ALLOW_ASYNC_UNSAFE with it, last one
test only, so the tests after it run as they would without a browser.
"""

import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


@pytest.fixture(scope="session")
def chromium_endpoint() -> Iterator[str]:
    """The DevTools address of the session's Chromium, started on first use."""
    if shutil.which(CHROMIUM) is None:
        pytest.fail("Debian's chromium package is missing: run scripts/bootstrap.sh")
    profile = tempfile.mkdtemp(prefix="gpu-portal-chromium-")
    process = subprocess.Popen(
        [CHROMIUM, *CHROMIUM_ARGS, "--remote-debugging-port=0", f"--user-data-dir={profile}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    said: list[str] = []
    found = threading.Event()
    assert process.stderr is not None

    def read() -> None:  # all it says, so a full pipe never blocks it; its address once
        for line in process.stderr:
            said.append(line)
            if not found.is_set() and LISTENING.search(line):
                found.set()

    drain = threading.Thread(target=read, daemon=True)
    drain.start()
    # a Chromium that says nothing (hung, or gone) fails the test in 30 s, not never
    if not found.wait(timeout=30):
        process.kill()
        pytest.fail(f"Chromium did not start: {''.join(said[-20:])}")
    endpoint = next(m.group(1) for line in said if (m := LISTENING.search(line)))
    yield endpoint
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    drain.join(timeout=10)
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def browser(chromium_endpoint, monkeypatch) -> Iterator[Browser]:
    """The session's Chromium, connected for this test: `new_page()` and `new_context()` give
    contexts of this test's own, closed when it ends."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # for this test only (see above)
    with sync_playwright() as p:
        connected = p.chromium.connect_over_cdp(chromium_endpoint)
        yield connected
        connected.close()  # closes the contexts this test made; Chromium stays up
