"""Headless Chromium (Debian's ``chromium``) driven over the DevTools protocol, for the report.

Chromium is started with ``--remote-debugging-pipe``: DevTools messages are JSON, each
ending with a NUL byte, written to its fd 3 and read from its fd 4. No port is opened and
no client library is needed. Every run gets a fresh ``--user-data-dir`` and the flags that
keep a headless browser from reaching out on its own (background networking, component
updates, sync, first-run).

:func:`load` opens a page, waits until ``window.ksReport.ready`` (every chart embedded),
records every console error, uncaught exception, log entry of level error, and every
request for anything but ``file:``/``data:``/``about:`` (the page must work offline), and
takes full-page screenshots.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
    "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
)  # fmt: skip


def chromium() -> str | None:
    """The ``chromium`` binary, if installed."""
    return shutil.which("chromium")


@dataclass
class Visit:
    """What loading a page showed."""

    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    screenshots: list[Path] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)


class Browser:
    """One headless Chromium and one page (a target attached with ``flatten``)."""

    def __init__(self, process: subprocess.Popen[bytes], send: Any, receive: Any) -> None:
        self.process = process
        self._send, self._receive = send, receive
        self._buffer = b""
        self._next_id = 0
        self.session: str | None = None
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, params: dict[str, Any] | None = None, *, timeout: float = 30.0,
             browser: bool = False) -> dict[str, Any]:
        """Send a command (to the page's session unless ``browser``) and wait for its answer."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if self.session is not None and not browser:
            message["sessionId"] = self.session
        self._send.write(json.dumps(message).encode() + b"\0")
        self._send.flush()
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._receive.fileno(), 1 << 16)
            if not chunk:
                raise RuntimeError(f"chromium closed its pipe (exit code {self.process.poll()})")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        parsed: dict[str, Any] = json.loads(message)
        return parsed

    def evaluate(self, expression: str, *, timeout: float = 30.0) -> Any:
        """The value of ``expression`` in the page (promises awaited)."""
        result = self.call("Runtime.evaluate", {
            "expression": expression, "awaitPromise": True, "returnByValue": True,
        }, timeout=timeout)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, *, timeout: float = 60.0) -> None:
        """Poll ``expression`` until it is true."""
        deadline = time.monotonic() + timeout
        while not self.evaluate(expression):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expression} still false after {timeout:.0f} s")
            time.sleep(0.1)

    def screenshot(self, path: Path, width: int = 1200) -> Path:
        """A PNG of the whole page (its full height) at ``path``."""
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        self.call("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": min(height, 16000), "deviceScaleFactor": 1, "mobile": False,
        })
        shot = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


@contextmanager
def launch(binary: str) -> Iterator[Browser]:
    """A headless Chromium with a fresh profile and a page attached; stopped on exit."""
    profile = Path(tempfile.mkdtemp(prefix="ksidecar-chromium-"))
    to_browser_r, to_browser_w = os.pipe()
    from_browser_r, from_browser_w = os.pipe()
    # The child's fds 3 and 4 must be these pipes: moved there in the child (first out of
    # the way, in case the pipes are 3 and 4 crossed). Our own fds are not inheritable
    # (PEP 446), so without close_fds the child gets 0-2 and these two only.
    def place() -> None:
        read_end = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
        write_end = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
        os.dup2(read_end, 3)
        os.dup2(write_end, 4)

    process = subprocess.Popen(
        [binary, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        close_fds=False, preexec_fn=place, start_new_session=True,
    )
    os.close(to_browser_r)
    os.close(from_browser_w)
    send = os.fdopen(to_browser_w, "wb")
    receive = os.fdopen(from_browser_r, "rb", buffering=0)
    browser = Browser(process, send, receive)
    try:
        target = browser.call("Target.createTarget", {"url": "about:blank"}, browser=True)
        attached = browser.call("Target.attachToTarget",
                                {"targetId": target["targetId"], "flatten": True}, browser=True)
        browser.session = attached["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.call(f"{domain}.enable")
        yield browser
    finally:
        with contextlib.suppress(Exception):  # already gone, or not answering: killed below
            browser.call("Browser.close", browser=True, timeout=5)
        send.close()
        receive.close()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(10)
        shutil.rmtree(profile, ignore_errors=True)


def _problems(events: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Console errors, exceptions and error log entries; requests that left the file."""
    errors: list[str] = []
    requests: list[str] = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            errors.append("console: " + " ".join(
                str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            errors.append("exception: " + str(details.get("exception", {}).get("description")
                                              or details.get("text")))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            errors.append(f"log: {entry.get('text')} ({entry.get('url', '')})")
        elif method == "Network.requestWillBeSent":
            url = params.get("request", {}).get("url", "")
            if not url.startswith(("file:", "data:", "about:", "blob:")):
                requests.append(url)
    return errors, requests


def load(browser: Browser, page: Path, *, shots: dict[str, str | None], timeout: float = 90.0) -> Visit:
    """Open ``page``, wait for every chart, and take a screenshot per entry of ``shots``
    (name → JavaScript run first, e.g. a drill-down; ``None``: as loaded), written beside
    the page as ``screenshot-<name>.png``."""
    browser.call("Page.navigate", {"url": page.resolve().as_uri()})
    browser.wait_for("window.ksReport !== undefined && window.ksReport.ready === true",
                     timeout=timeout)
    visit = Visit()
    visit.values["charts"] = browser.evaluate("Object.keys(window.ksReport.views).length")
    visit.values["svgs"] = browser.evaluate(
        "Array.from(document.querySelectorAll('.chart svg .mark-rect path, .chart svg .mark-line path,"
        " .chart svg .mark-symbol path, .chart svg .mark-rect, .chart svg .mark-line,"
        " .chart svg .mark-symbol')).length")
    for name, script in shots.items():
        if script:
            browser.evaluate(f"(async () => {{ await ({script}); return true; }})()")
            time.sleep(0.3)  # let the views repaint after their signals changed
        visit.screenshots.append(browser.screenshot(page.parent / f"screenshot-{name}.png"))
    visit.errors, visit.requests = _problems(browser.events)
    return visit
