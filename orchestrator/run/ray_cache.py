"""A node's cache of the layers a run ships (``--backend ray``): each fetched once per node, kept between attempts.

A big workspace is shipped as layers (ray_ship.py on the lead), each put into
Ray's object store once by the lead and named by its content (``Layer.digest``);
an attempt's ``Workspace`` lists the layers it is made of, holding each one's
object reference *inside* it, so Ray does not fetch them with the attempt: the
node fetches (``ray.get``) only the layers its cache lacks.

The cache is ``<scratch>/team-cache/<run>/`` on the node (``scratch_root``:
``$TEAM_SCRATCH``, else ``/dev/shm``, else the temporary folder), one per lead
run, shared by the attempts and worker processes of that run on the machine:

* ``layers/<digest>/``: an archive layer (a tar of a folder, or of outputs
  that came back into it) unpacked once. An attempt's folder is the layers
  copied in order into its scratch folder (later layers over earlier ones):
  a copy in memory (``/dev/shm``) per attempt, no transfer and no tar. Layers
  are unpacked into a temporary folder and renamed into place, so two
  attempts that need the same layer at once never see half of one.
* ``git/``: a bare repository holding every commit the run shipped to this
  node. Each git layer is a bundle of a base commit (``tip``): the first one
  of a repository the whole history, each later one thin (its prerequisite is
  the base before it, which the node already has); the attempt's clone is a
  repository whose objects are the cache's (``objects/info/alternates``), so
  making it costs a checkout, whatever the history's size. Fetches into the
  cache take its lock (``flock``).

The lead removes its run's cache on every node when it closes
(``drop``); a cache its lead never came back for is removed by the machine's
watcher (ray_reaper.py, while attempts run on the machine) once unused for
``ray_reaper.CACHE_IDLE`` seconds.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from .ray_remote import Layer, Workspace, open_tar, scratch_root


def cache_root() -> Path:
    """Where the runs' caches are on this machine."""
    return Path(scratch_root(0) or tempfile.gettempdir()) / "team-cache"


def _fetch(layer: Layer) -> bytes:
    if layer.data is not None:
        return layer.data
    import ray  # on a worker: imported already

    data: Any = ray.get(layer.ref)
    return bytes(data)


def layer_dir(cache: Path, layer: Layer) -> Path:
    """The archive layer unpacked in the cache (fetched and unpacked if the cache lacks it)."""
    done = cache / "layers" / layer.digest
    if done.is_dir():
        return done
    done.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=done.parent))
    try:
        with open_tar(_fetch(layer)) as tar:
            tar.extractall(tmp, filter="data")
        try:
            os.rename(tmp, done)
        except OSError:  # another attempt put it there first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return done


def _copy_into(src: Path, dst: Path) -> None:
    """``src``'s files copied over ``dst`` (modes and times kept, as tar would have made them)."""
    for dirpath, dirs, files in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        target = dst if rel == "." else dst / rel
        target.mkdir(parents=True, exist_ok=True)
        for name in files:
            s = os.path.join(dirpath, name)
            d = target / name
            if os.path.islink(s):
                if d.is_symlink() or d.exists():
                    d.unlink()
                os.symlink(os.readlink(s), d)
                continue
            if d.is_symlink():
                d.unlink()
            shutil.copy2(s, d)
        for name in dirs:
            s = os.path.join(dirpath, name)
            if os.path.islink(s):
                d = target / name
                if d.is_symlink() or d.exists():
                    d.unlink()
                os.symlink(os.readlink(s), d)
        shutil.copystat(dirpath, target)


def materialise(ws: Workspace, top: Path) -> None:
    """Make the attempt's workspace at ``top`` from a ``layers`` or ``git`` workspace, through the cache."""
    cache = cache_root() / ws.cache
    cache.mkdir(parents=True, exist_ok=True)
    os.utime(cache)  # in use (the watcher removes caches unused for long)
    if ws.kind == "layers":
        top.mkdir()
        for layer in ws.layers:
            _copy_into(layer_dir(cache, layer), top / layer.prefix if layer.prefix else top)
        return
    repo = _git_cache(cache)
    _fetch_commits(repo, ws.layers)
    subprocess.run(["git", "init", "-q", str(top)], check=True, capture_output=True)
    (top / ".git" / "objects" / "info" / "alternates").write_text(f"{repo / 'objects'}\n")
    subprocess.run(["git", "checkout", "-q", "-B", "work", ws.layers[-1].tip], cwd=top, check=True,
                   capture_output=True, stdin=subprocess.DEVNULL)


def _git_cache(cache: Path) -> Path:
    repo = cache / "git"
    if not (repo / "HEAD").exists():
        with _locked(cache / ".git.lock"):
            if not (repo / "HEAD").exists():
                tmp = Path(tempfile.mkdtemp(prefix=".tmp-git-", dir=cache))
                subprocess.run(["git", "init", "-q", "--bare", str(tmp)], check=True, capture_output=True)
                os.rename(tmp, repo)
    return repo


def _has(repo: Path, tips: list[str]) -> set[str]:
    r = subprocess.run(["git", "cat-file", "--batch-check"], cwd=repo, input="\n".join(tips) + "\n",
                       capture_output=True, text=True, check=True)
    return {line.split()[0] for line in r.stdout.splitlines() if not line.endswith("missing")}


def _fetch_commits(repo: Path, layers: tuple[Layer, ...]) -> None:
    """The layers' commits into the cache repository, those it lacks (in order: each thin bundle needs the
    one before it)."""
    if _present(repo, layers[-1].tip):
        return
    with _locked(repo.parent / ".git.lock"):
        have = _has(repo, [layer.tip for layer in layers])
        for layer in layers:
            if layer.tip in have:
                continue
            with tempfile.NamedTemporaryFile(dir=repo.parent, prefix=".bundle-", suffix=".bundle") as f:
                f.write(_fetch(layer))
                f.flush()
                subprocess.run(["git", "fetch", "-q", f.name, f"+HEAD:refs/team/{layer.tip}"], cwd=repo,
                               check=True, capture_output=True, stdin=subprocess.DEVNULL)


def _present(repo: Path, tip: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{tip}^{{commit}}"], cwd=repo,
                          capture_output=True).returncode == 0


class _locked:
    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> None:
        self.f = open(self.path, "a")
        fcntl.flock(self.f, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def drop(run: str) -> bool:
    """Remove run ``run``'s cache on this machine (the lead, closing); True if there was one."""
    path = cache_root() / run
    if not path.is_dir():
        return False
    shutil.rmtree(path, ignore_errors=True)
    return True


def drop_idle(idle: float) -> None:
    """Remove the caches unused for ``idle`` seconds (the machine's watcher)."""
    root = cache_root()
    try:
        entries = list(root.iterdir())
    except FileNotFoundError:
        return
    now = time.time()
    for path in entries:
        try:
            if now - path.stat().st_mtime > idle:
                shutil.rmtree(path, ignore_errors=True)
        except FileNotFoundError:
            continue
