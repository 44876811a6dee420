"""What the lead ships for a task's workspace (``--backend ray``): only what changed, each piece once.

``Workspaces.get(task)`` gives the ``Workspace`` an attempt starts from
(ray_remote.py), made once per base and shared by the attempts that start
from it; the node side (ray_cache.py) keeps what it fetched for the rest of
the run.

**A folder (outputs mode).** A small folder (its archive under
``INLINE_MAX``) goes inline with each attempt as one tar (``archive``: the
node unpacks it from memory, ~0.05 ms), archived again after outputs came
back into it (cheap: it is small). A bigger folder is ``layers``: its archive
as first shipped is put into Ray's object store once (the base layer); each
set of outputs that comes back into it (the tar the node sent, already on
the lead) becomes one more layer, put once, and the next attempts list the
base and every layer since. A node fetches only the layers its cache lacks,
so after the first attempt on a node an attempt costs no transfer and the
lead never archives the folder again: the lead's work per attempt does not
grow with the folder. (What changes in the folder other than by outputs
coming back — an edit by hand while the run goes — is not seen by later
attempts; it was seen only at the next re-archive before.)

**A repository (isolation: worktree).** The task's worktree is prepared by
the lead as on one machine; its base commit is shipped as a chain of git
bundle layers: the first base of the run as a full bundle, each later base
as a thin bundle whose prerequisite is the newest earlier base it descends
from (``git bundle create ... HEAD ^<earlier base>``: what the nodes already
hold is not sent again). A node's cache repository fetches the layers it
lacks, and the attempt's clone borrows its objects (ray_cache.py), so a
dependent task pays for its new commits, not for the history.

Layers under ``INLINE_MAX`` travel inline in the ``Workspace``; bigger ones by
an object reference held inside it, which Ray does not resolve on its own: the
node asks for it only when its cache lacks the layer.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import subprocess
import tarfile
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import UserError
from ..core.models import Task
from .ray_remote import Layer, Workspace

ARCHIVE_CAP = 512 * 1024 * 1024
"""The largest folder shipped to the nodes for an outputs-mode task (bytes, before compression)."""
INLINE_MAX = 64 * 1024
"""A workspace or layer smaller than this (bytes) goes inline with each attempt instead of through the
object store: Ray inlines small arguments, while one in the store is fetched by each attempt's node."""
COMPRESS_OVER = 8 * 1024 * 1024
"""A folder archive bigger than this (bytes) is shipped gzipped (tarfile reads either), if it compresses."""
COMPACT_OVER = 8
"""Small layers (outputs that came back) a folder keeps apart; more are merged into one."""
ANCESTORS_TRIED = 8
"""Earlier bases looked at (newest first) for the prerequisite of a thin bundle; else a full one."""
SKIP = frozenset({".git", ".tasks", ".team", "__pycache__", ".venv", "node_modules"})
"""Folders never put into a shipped workspace archive."""


@dataclass
class _Folder:
    """What was shipped of one folder: a small one's current archive, or a big one's layers."""

    inline: Workspace | None = None  # a small folder's archive (None: stale, or the folder is big)
    layers: list[Layer] = field(default_factory=list)  # a big folder's base and the outputs since
    size: int = 0


@dataclass
class _Repo:
    """The bases of one repository shipped in this run: tip -> (its layer, the tip it is thin against)."""

    layers: dict[str, tuple[Layer, str]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)


class Workspaces:
    """Each workspace a task starts from (module docstring). Thread-safe (shell and agent executors)."""

    def __init__(self, cache: str):
        """``cache``: the name of the nodes' cache of this run's layers (the lead's run)."""
        import ray

        self._ray = ray
        self.cache = cache
        self._lock = threading.Lock()
        self._folders: dict[str, _Folder] = {}
        self._repos: dict[str, _Repo] = {}
        self._common: dict[str, str] = {}  # a worktree -> its repository's common git folder

    def _layer(self, digest: str, data: bytes, **kw: Any) -> Layer:
        if len(data) < INLINE_MAX:
            return Layer(digest, data=data, **kw)
        return Layer(digest, ref=self._ray.put(data), **kw)

    def get(self, task: Task) -> tuple[Workspace, str]:
        """``task``'s workspace and the folder to run in, relative to its top."""
        if task.worktree:
            top = Path(task.worktree)
            rel = os.path.relpath(Path(task.cwd or top).resolve(), top.resolve())
            return self._git(top), rel
        return self._folder(Path(task.cwd or ".").resolve()), "."

    # -------------------------------------------------------------- folders
    def _folder(self, folder: Path) -> Workspace:
        with self._lock:
            state = self._folders.get(str(folder))
            if state is not None and state.inline is not None:
                return state.inline
            if state is not None and state.layers:
                return Workspace("layers", layers=tuple(state.layers), cache=self.cache, size=state.size)
        data = archive(folder)
        if len(data) < INLINE_MAX:
            ws = Workspace("archive", data, size=len(data))
            new = _Folder(inline=ws, size=len(data))
        else:
            base = self._layer(hashlib.sha256(data).hexdigest()[:32], data)
            new = _Folder(layers=[base], size=len(data))
            ws = Workspace("layers", layers=(base,), cache=self.cache, size=len(data))
        with self._lock:
            self._folders[str(folder)] = new
        return ws

    def changed(self, folder: Path, outputs: bytes) -> None:
        """The tar ``outputs`` came back into ``folder``: a small folder holding it is archived again; a big
        one gets it as a layer; a folder inside it is archived again."""
        folder = folder.resolve()
        layer: Layer | None = None
        with self._lock:
            for name, state in list(self._folders.items()):
                path = Path(name)
                if path == folder or path in folder.parents:
                    if state.inline is not None or not state.layers:
                        del self._folders[name]
                        continue
                    if layer is None:
                        layer = self._layer(hashlib.sha256(outputs).hexdigest()[:32], outputs)
                    prefix = "" if path == folder else os.path.relpath(folder, path)
                    state.layers.append(Layer(layer.digest, layer.data, layer.ref, prefix=prefix))
                    state.size += len(outputs)
                    if len(state.layers) > 1 + COMPACT_OVER:
                        state.layers = self._compact(state.layers)
                elif folder in path.parents:
                    del self._folders[name]

    def _compact(self, layers: list[Layer]) -> list[Layer]:
        """The newest layers, while small, merged into one (each later file over an earlier one): an
        attempt copies a few layers, not one per output that ever came back."""
        keep = len(layers)
        while keep > 1 and layers[keep - 1].data is not None:
            keep -= 1
        small = layers[keep:]  # the newest layers, all small (the order of layers is the order of writes)
        if len(small) < 2:
            return layers
        files: dict[str, tuple[tarfile.TarInfo, bytes | None]] = {}
        for x in small:
            assert x.data is not None
            with tarfile.open(fileobj=io.BytesIO(x.data)) as tar:
                for m in tar.getmembers():
                    f = tar.extractfile(m) if m.isfile() else None
                    name = os.path.normpath(os.path.join(x.prefix, m.name))
                    files.pop(name, None)  # re-inserted last: a later version comes after what it overwrites
                    files[name] = (m, f.read() if f is not None else None)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, (m, content) in files.items():
                m.name = name
                tar.addfile(m, io.BytesIO(content) if content is not None else None)
        data = buf.getvalue()
        merged = self._layer(hashlib.sha256(data).hexdigest()[:32], data)
        return [*layers[:keep], merged]

    # -------------------------------------------------------------- repositories
    def _git(self, top: Path) -> Workspace:
        key = str(top)
        with self._lock:
            common = self._common.get(key)
        if common is None:
            base, common = _git_out(top, "rev-parse", "HEAD", "--git-common-dir").splitlines()
            common = str((top / common).resolve())
            with self._lock:
                self._common[key] = common
        else:
            base = _git_out(top, "rev-parse", "HEAD")
        with self._lock:
            repo = self._repos.setdefault(common, _Repo())
            known = base in repo.layers
            earlier = list(reversed(repo.order[-ANCESTORS_TRIED:]))
        if not known:
            prereq = next((t for t in earlier if _is_ancestor(top, t, base)), "")
            data = bundle(top, prereq)
            layer = self._layer(f"git-{base}-{prereq or 'full'}", data, tip=base)
            with self._lock:
                if base not in repo.layers:
                    repo.layers[base] = (layer, prereq)
                    repo.order.append(base)
        with self._lock:
            chain: list[Layer] = []
            tip = base
            while tip:
                layer, tip = repo.layers[tip]
                chain.append(layer)
        chain.reverse()
        return Workspace("git", layers=tuple(chain), cache=self.cache,
                         size=sum(len(c.data) if c.data is not None else INLINE_MAX for c in chain))


def _git_out(cwd: Path, *args: str) -> str:
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise UserError(f"git {' '.join(args)} in {cwd}: {r.stderr.strip()}")
    return r.stdout.strip()


def _is_ancestor(top: Path, older: str, newer: str) -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", older, newer], cwd=top, capture_output=True,
                          stdin=subprocess.DEVNULL).returncode == 0


def bundle(top: Path, prereq: str = "") -> bytes:
    """A bundle of the worktree's ``HEAD``: its whole history, or (``prereq``) the commits since that one."""
    with tempfile.TemporaryDirectory(prefix="team-bundle-") as tmp:
        out = Path(tmp) / "base.bundle"
        _git_out(top, "bundle", "create", "-q", str(out), "HEAD", *([f"^{prereq}"] if prereq else []))
        return out.read_bytes()


def archive(folder: Path) -> bytes:
    """A tar of ``folder`` (without ``SKIP``), gzipped when bigger than ``COMPRESS_OVER``."""
    if not folder.is_dir():
        raise UserError(f"the task's folder {folder} does not exist")
    buf = io.BytesIO()
    total = 0

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        nonlocal total
        if Path(info.name).name in SKIP:
            return None
        total += info.size
        if total > ARCHIVE_CAP:
            raise UserError(f"{folder} holds more than {ARCHIVE_CAP >> 20} MB to ship to the nodes: run the task "
                            f"in a smaller folder (`cwd:`), or use isolation: worktree")
        return info

    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(folder, arcname=".", filter=keep)
    data = buf.getvalue()
    if total < COMPRESS_OVER or not compressible(data):
        return data  # a small one is not worth inflating on each node; incompressible data not worth trying
    return gzip.compress(data, compresslevel=1)


def compressible(data: bytes, sample: int = 1 << 20) -> bool:
    """Whether gzip shrinks ``data`` by a third, judged on a few slices of it (compressing 40 MB of
    incompressible files took 2 s here, for nothing)."""
    step = max(1, len(data) // 4)
    pieces = [data[i:i + sample // 4] for i in range(0, len(data), step)][:4]
    raw = sum(len(p) for p in pieces)
    return sum(len(gzip.compress(p, compresslevel=1)) for p in pieces) < raw * 2 / 3
