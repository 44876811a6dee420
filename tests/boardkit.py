"""The board under test: a ``team board`` process, HTTP to it, and a headless Chromium.

``board_process`` starts the real command (``python -m orchestrator board``)
and yields the URL it prints; ``request`` talks HTTP to it with the standard
library. The browser is Debian's ``chromium`` driven by Selenium through
Debian's ``chromedriver`` (package ``chromium-driver``): both come from one
Debian source package, so
the driver always matches the browser, and WebDriver is a W3C protocol, so a
browser update does not break the client. Nothing is downloaded: the paths
are given, and Selenium Manager is told to stay offline.

``make test`` installs both packages where it can (see the Makefile); without
them the browser tests fail with the command to run, unless
``TEAM_SKIP_BROWSER=1`` asks to skip them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = [
    # the machine has no network and no display: never reach out, never draw on a GPU
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars", "--force-device-scale-factor=1",
]
SKIP_ENV = "TEAM_SKIP_BROWSER"


def missing() -> str | None:
    """Why no browser test can run here (with the fix), or None."""
    absent = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if not absent:
        return None
    return (f"the board's browser tests need Debian's chromium and chromium-driver ({', '.join(absent)} not found): "
            f"`make test` installs them as root, else `sudo apt-get install chromium chromium-driver`; "
            f"{SKIP_ENV}=1 skips these tests")


def start(width: int = 1400, height: int = 900, profile: Path | None = None):
    """A headless Chromium with a fresh profile; call ``.quit()`` when done."""
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must never try to download a driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    options.add_argument(f"--user-data-dir={profile or tempfile.mkdtemp(prefix='team-chromium-')}")
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@contextmanager
def board_process(root: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """``team board ARGS`` on ``root`` until the block ends; yields the URL it printed (with the token)."""
    from conftest import team_env

    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "board", *args], cwd=root,
                            env=env or team_env(root), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("board: "):
            proc.kill()
            raise AssertionError(f"team board did not start: {line}{proc.communicate(timeout=10)[1]}")
        yield line.split()[1]
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def split(url: str) -> tuple[str, str]:
    """(``http://127.0.0.1:PORT``, token) of a board URL."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}", parts.query.removeprefix("token=")


def request(url: str, *, method: str = "GET", body: Any = None, headers: dict[str, str] | None = None,
            timeout: float = 10) -> tuple[int, Any]:
    """(status, parsed JSON or text) of one HTTP request; error statuses are returned, not raised."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    text = raw.decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text
