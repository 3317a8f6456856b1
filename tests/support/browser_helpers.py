"""Helpers for the real-browser tests and the dashboard benchmark: serve the dashboard, drive Debian's chromium.

Chromium comes from Debian (``apt-get install chromium``) and is driven by the
Playwright Python package pointed at ``/usr/bin/chromium``; Playwright's own browser
download is never used (downloads are impossible here).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.paths import REPO

SCREENSHOTS = REPO / "test-output" / "screenshots"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def find_chromium() -> str | None:
    """Path of Debian's chromium (or ``PERSONAGAP_CHROMIUM``), None when absent."""
    explicit = os.environ.get("PERSONAGAP_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else None
    return shutil.which("chromium") or (str(p) if (p := Path("/usr/bin/chromium")).exists() else None)


def require_browser() -> str:
    """Return the chromium path; fail under CI=true when chromium or Playwright is missing, else skip."""
    import pytest

    chromium = find_chromium()
    try:
        import playwright.sync_api  # noqa: F401
        driver = True
    except ImportError:
        driver = False
    if chromium and driver:
        return chromium
    what = "chromium (apt-get install chromium)" if not chromium else "playwright (pip install playwright)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"browser test needs {what}; .ci/install_browser.sh installs it")
    pytest.skip(f"browser test needs {what}")
    raise AssertionError("unreachable")


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen[Any], timeout: float = 60.0) -> None:
    """Wait until the Streamlit server at ``url`` answers its health check; raise if ``proc`` ends or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"dashboard exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("dashboard did not start")
        time.sleep(0.2)


@contextlib.contextmanager
def serve_dashboard(db: Path, *, port: int | None = None, timeout: float = 60.0,
                    log: Path | None = None) -> Iterator[str]:
    """Run ``personagap dashboard --db DB`` as a subprocess; yield its base URL; stop it afterwards."""
    port = port or free_port()
    cli = Path(sys.executable).parent / "personagap"
    cmd = [str(cli)] if cli.exists() else [sys.executable, "-c", "from personagap.cli import main; main()"]
    out = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    # Own session: stopping it stops the Streamlit child the CLI starts, and nothing else.
    proc = subprocess.Popen([*cmd, "dashboard", "--db", str(db), "--port", str(port)], stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if log:
            out.close()  # type: ignore[union-attr]


@contextlib.contextmanager
def browser(chromium: str) -> Iterator[Any]:
    """A fresh headless chromium context (new empty profile) driven by Playwright."""
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="pg-chromium-")
    try:
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(
                profile, executable_path=chromium, headless=True, args=CHROMIUM_FLAGS,
                viewport={"width": 1400, "height": 2000})
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def wait_rendered(page: Any, text: str, timeout_ms: int = 60_000) -> None:
    """Wait until the script is idle, the main area has a title, and ``text`` is visible."""
    page.wait_for_selector('[data-testid="stMain"] h1', timeout=timeout_ms)
    page.get_by_text(text, exact=False).first.wait_for(state="visible", timeout=timeout_ms)
    page.wait_for_function(
        "() => { const a = document.querySelector('.stApp');"
        " return a && a.getAttribute('data-test-script-state') !== 'running'; }", timeout=timeout_ms)
    # Charts draw into canvas/svg after the script finishes; give them their frame.
    page.wait_for_timeout(300)


def screenshot_whole(page: Any, path: Path) -> None:
    """Screenshot the whole app: Streamlit scrolls inside its main container, so grow the viewport to fit it."""
    height = page.evaluate(
        "() => { const m = document.querySelector('[data-testid=\"stMain\"]');"
        " return Math.ceil(Math.max(m ? m.scrollHeight : 0, document.body.scrollHeight)); }")
    width = page.viewport_size["width"] if page.viewport_size else 1400
    page.set_viewport_size({"width": width, "height": min(max(int(height) + 40, 800), 16000)})
    # Tables (canvas grids) and charts repaint for the new viewport.
    page.wait_for_timeout(1200)
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)
