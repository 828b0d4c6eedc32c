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
import time
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
    said = []
    deadline = time.monotonic() + 30
    endpoint = None
    assert process.stderr is not None
    for line in process.stderr:  # Chromium prints its address once it listens
        said.append(line)
        if match := LISTENING.search(line):
            endpoint = match.group(1)
            break
        if time.monotonic() > deadline:
            break
    if endpoint is None:
        process.kill()
        pytest.fail(f"Chromium did not start: {''.join(said[-20:])}")
    # Keep reading what it says, so a full pipe never blocks it
    drain = threading.Thread(target=process.stderr.read, daemon=True)
    drain.start()
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
