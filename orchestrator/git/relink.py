"""Worktrees of a repository that was moved or copied: their links made to point where they are.

git records a linked worktree by two absolute paths: the worktree's ``.git``
file (``gitdir: <repo>/.git/worktrees/<id>``) and, back, the ``gitdir`` file
of that admin folder (``<worktree>/.git``). ``mv repo repo2`` leaves both
pointing into ``repo``: every git command in a task's kept worktree then
fails (``fatal: not a git repository``), and its branch counts as checked
out at a path that no longer exists. A copy (``cp -a repo repo2``) is worse:
the copy's worktrees still point into the *original* repository, and
``git worktree repair PATH`` run in the copy follows that link and rewrites
the original's admin folder to point at the copy (git 2.39), breaking the
repository that was left in place.

So the links are rewritten here, by hand and only towards this repository:
for each worktree folder of a group (``.team/worktrees/<group>/*``) whose
``.git`` file names an admin folder outside this repository's
``worktrees/``, the admin folder of the same id here is taken when its own
back link names a folder at the same place relative to its repository
(``.team/worktrees/<group>/<name>/.git``): the worktree's ``.git`` is made
to name it and its ``gitdir`` to name the worktree. A worktree whose
``.git`` already points here but whose back link does not (a move killed
halfway) gets its back link. Anything else is left for the usual repairs
(a folder git does not know is removed and made again by ``prepare``;
``team doctor`` lists strays). Both files are written atomically; a kill
between the two leaves a state the next look finishes.

``Worktrees`` calls ``moved`` on every construction (a few small reads) and
``relink`` under its lock only when something is to do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..core.fsutil import atomic_write


@dataclass(frozen=True)
class Link:
    """One worktree folder whose links are to be rewritten: its ``.git`` file and the admin folder here."""

    dotgit: Path
    admin: Path


def _gitdir_of(dotgit: Path) -> Path | None:
    try:
        text = dotgit.read_text()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, UnicodeDecodeError):
        return None
    if not text.startswith("gitdir: "):
        return None
    return Path(text[len("gitdir: "):].strip())


def moved(folder: Path, common_dir: Path, toplevel: Path) -> list[Link]:
    """The worktrees under ``folder`` (one group's) whose links do not point into ``common_dir``."""
    if not folder.is_dir():
        return []
    admins = _real(common_dir) / "worktrees"
    top = _real(toplevel)
    out = []
    for dotgit in sorted(_real(folder).glob("*/.git")):
        gitdir = _gitdir_of(dotgit)
        if gitdir is None:
            continue
        here = admins / gitdir.name
        if _real(gitdir.parent) == admins:  # points here: is the back link right?
            back = _gitdir_of_admin(here) if here.is_dir() else None
            if back is not None and _real(back) != dotgit:
                out.append(Link(dotgit, here))
            continue
        back = _gitdir_of_admin(here) if here.is_dir() else None
        if back is not None and _same_place(back, dotgit, top):
            out.append(Link(dotgit, here))
    return out


def _gitdir_of_admin(admin: Path) -> Path | None:
    try:
        return Path((admin / "gitdir").read_text().strip())
    except (FileNotFoundError, UnicodeDecodeError):
        return None


def _same_place(back: Path, dotgit: Path, toplevel: Path) -> bool:
    """``back`` (an old ``<worktree>/.git``) names the same place in its repository as ``dotgit`` here."""
    try:
        rel = dotgit.relative_to(toplevel).parts
    except ValueError:
        return False
    return len(back.parts) > len(rel) and back.parts[-len(rel):] == rel


def relink(links: list[Link]) -> list[str]:
    """Rewrite both links of each worktree (the caller holds the group's lock); what was done, to say."""
    done = []
    for link in links:
        worktree = link.dotgit.parent
        atomic_write(link.dotgit, f"gitdir: {link.admin}\n")
        atomic_write(link.admin / "gitdir", f"{link.dotgit}\n")
        done.append(f"relinked worktree {worktree.name} at {worktree} (the repository was moved or copied)")
    return done


def _real(path: Path) -> Path:
    """``path`` with symlinks resolved, as git writes worktree links."""
    return Path(os.path.realpath(path))
