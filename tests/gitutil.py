"""Git test helpers: a user identity for the *user's* commits, and no identity
anywhere else, so `team` must commit with its own fallback and leave config alone."""

from __future__ import annotations

import pytest

USER_ID = {"GIT_AUTHOR_NAME": "User", "GIT_AUTHOR_EMAIL": "user@example.com",
           "GIT_COMMITTER_NAME": "User", "GIT_COMMITTER_EMAIL": "user@example.com"}


@pytest.fixture(autouse=True)
def no_git_identity(tmp_path_factory, monkeypatch):
    """Import into a test module to apply it to every test there."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in [*USER_ID, "EMAIL", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"]:
        monkeypatch.delenv(var, raising=False)
