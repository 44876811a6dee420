"""Reading a ref, or a worktree's ``HEAD``, from the files git keeps them in: no git process.

A task in worktree isolation asked git for its plan's integration tip, its
own branch and its worktree's ``HEAD`` with ``git rev-parse``, one process
each: ~1 ms on an idle machine, 10–20 ms on a loaded one (a process waits
for a core like everything else). These are read here from git's own files
instead, as git itself reads them:

* a loose ref: ``<common dir>/refs/heads/...``, one line holding the commit
  id (git writes it to ``<ref>.lock`` and renames it into place, so a reader
  sees the old file or the new one, never half of one);
* else its line in ``packed-refs`` (``git pack-refs`` and ``gc`` move refs
  there), kept parsed while that file is the same (inode, size, mtime);
* a linked worktree's ``HEAD``: its ``.git`` file names its admin folder,
  whose ``HEAD`` holds a commit id (detached) or ``ref: refs/heads/...``.

Anything these files cannot answer plainly raises ``Unreadable`` and the
caller asks git (``Git.rev``): a repository whose refs are in a reftable
(git ≥ 2.45, ``extensions.refStorage``), a symbolic branch, a file that is
not what git writes. A missing ref is ``None``, as ``Git.rev`` answers it.
Unlike ``rev-parse --verify`` nothing checks that the object exists: the
refs read here are the plan's, which only ``team`` (and a person) writes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_SHA = re.compile(rb"[0-9a-f]{40}(?:[0-9a-f]{24})?")


class Unreadable(Exception):
    """The files cannot answer plainly: ask git."""


class Refs:
    """The refs of the repository whose common git directory is ``common_dir``."""

    def __init__(self, common_dir: Path):
        self.common_dir = common_dir
        self._packed: tuple[tuple[int, int, int], dict[bytes, str]] | None = None

    def get(self, ref: str) -> str | None:
        """The commit id ``ref`` (a full name, ``refs/heads/...``) holds; None when there is no such ref."""
        if not ref.startswith("refs/") or (self.common_dir / "reftable").exists():
            raise Unreadable(ref)
        try:
            with open(self.common_dir / ref, "rb") as f:
                data = f.read(200)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return self._from_packed(ref)
        return self._sha(data, ref)

    def head(self, worktree: Path) -> str | None:
        """The commit the linked worktree at ``worktree`` has checked out (None: an unborn branch)."""
        try:
            dotgit = (worktree / ".git").read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as e:
            raise Unreadable(str(worktree)) from e
        if not dotgit.startswith(b"gitdir: "):
            raise Unreadable(str(worktree))
        admin = worktree / os.fsdecode(dotgit[len(b"gitdir: "):].strip())  # absolute, or relative to it
        try:
            data = (admin / "HEAD").read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as e:
            raise Unreadable(str(worktree)) from e
        if data.startswith(b"ref: "):
            return self.get(data[len(b"ref: "):].strip().decode())
        return self._sha(data, str(worktree))

    @staticmethod
    def _sha(data: bytes, what: str) -> str:
        line = data.strip()
        if not _SHA.fullmatch(line):
            raise Unreadable(what)  # a symbolic ref, or not what git writes
        return line.decode()

    def _from_packed(self, ref: str) -> str | None:
        path = self.common_dir / "packed-refs"
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                key = (st.st_ino, st.st_size, st.st_mtime_ns)
                if self._packed is None or self._packed[0] != key:
                    self._packed = (key, self._parse(f.read()))
        except FileNotFoundError:
            return None
        return self._packed[1].get(ref.encode())

    @staticmethod
    def _parse(data: bytes) -> dict[bytes, str]:
        refs = {}
        for line in data.splitlines():
            if line[:1] in (b"#", b"^") or not line:  # the header; a peeled tag's target
                continue
            sha, _, name = line.partition(b" ")
            if not _SHA.fullmatch(sha):
                raise Unreadable("packed-refs")
            refs[name] = sha.decode()
        return refs
