"""Headless Chromium for the board's browser tests and its bench.

Debian's ``chromium`` driven by Selenium through Debian's ``chromedriver``
(package ``chromium-driver``): both come from one Debian source package, so
the driver always matches the browser, and WebDriver is a W3C protocol, so a
browser update does not break the client. Nothing is downloaded: the paths
are given, and Selenium Manager is told to stay offline.

``make test`` installs both packages where it can (see the Makefile); without
them the browser tests fail with the command to run, unless
``TEAM_SKIP_BROWSER=1`` asks to skip them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

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
