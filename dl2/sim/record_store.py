"""Where decision logs live: a local folder, or any fsspec URL (object storage: `s3://`, `gs://`, `az://`).

A decision log is written as whole files that are never replaced (a slot's journal, then its segment), so the one
primitive it needs is an atomic *create-if-absent*: the first writer of a name wins and every later one is told
so. Both places give it:

- a folder: the file is written aside, fsynced and hard-linked into place (`link` refuses to replace);
- object storage: a single PUT with `If-None-Match: *` (S3, and S3-compatible stores that honour it; GCS and
  Azure through their fsspec drivers' `mode="create"`): the object appears whole or not at all, and a second
  PUT of the same key gets 412.

That is what makes a failover exact on a managed cluster without a shared file system: the replicas need no
ReadWriteMany volume, only the same bucket, and a deposed leader that still writes finds its slot taken. S3
credentials and endpoint come from the usual places (`AWS_*` variables, workload identity), as for any fsspec user.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from dl2.core import InputError


def is_url(location: str | Path) -> bool:
    """Whether `location` names object storage (or another fsspec filesystem) rather than a local folder."""
    text = str(location)
    return "://" in text and not text.startswith("file://")


def _local_path(location: str | Path) -> Path:
    return Path(str(location).removeprefix("file://"))


class RecordStore:
    """The files of one decision log (names relative to its root, `/`-separated), in a folder or at a URL."""

    def __init__(self, location: str | Path) -> None:
        self.location = str(location).rstrip("/") or "/"
        self._fs: Any = None
        if is_url(self.location):
            import fsspec

            try:
                # no listings cache: another replica creates and deletes journals, and a cached listing would let
                # `exists` answer for an object that is gone
                self._fs, self._root = fsspec.core.url_to_fs(self.location, use_listings_cache=False)
            except (ImportError, ValueError) as error:  # an unknown scheme, or its driver not installed
                raise InputError(self.location, f"no filesystem for this URL: {error}") from error
            self._root = str(self._root).rstrip("/")
        else:
            self._root = str(_local_path(self.location))

    @property
    def remote(self) -> bool:
        return self._fs is not None

    def child(self, name: str) -> RecordStore:
        """The store of a sub-folder (a cluster's log under the root of all logs)."""
        return RecordStore(f"{self.location}/{name}")

    def _path(self, name: str) -> str:
        return f"{self._root}/{name}"

    def create(self, name: str, text: str) -> bool:
        """Write `name` unless it exists, atomically: True if this call wrote it, False if it was there."""
        if self._fs is None:
            from dl2.sim.decision_log import write_file

            path = Path(self._path(name))
            path.parent.mkdir(parents=True, exist_ok=True)
            return write_file(path, text, overwrite=False)
        try:
            self._fs.pipe_file(self._path(name), text.encode(), mode="create")
        except FileExistsError:
            return False
        return True

    def put(self, name: str, text: str) -> None:
        """Write `name`, replacing it (atomically: a reader sees the old or the new file)."""
        if self._fs is None:
            from dl2.sim.decision_log import write_file

            path = Path(self._path(name))
            path.parent.mkdir(parents=True, exist_ok=True)
            write_file(path, text)
            return
        self._fs.pipe_file(self._path(name), text.encode())

    def read_bytes(self, name: str) -> bytes | None:
        """The file's bytes, or None if it does not exist."""
        if self._fs is None:
            try:
                return Path(self._path(name)).read_bytes()
            except FileNotFoundError:
                return None
        try:
            data: bytes = self._fs.cat_file(self._path(name))
        except FileNotFoundError:
            return None
        return data

    def exists(self, name: str) -> bool:
        if self._fs is None:
            return Path(self._path(name)).is_file()
        return bool(self._fs.exists(self._path(name)))

    def read(self, name: str) -> str | None:
        data = self.read_bytes(name)
        return None if data is None else data.decode()

    def delete(self, name: str) -> None:
        """Remove `name` if it is there."""
        if self._fs is None:
            Path(self._path(name)).unlink(missing_ok=True)
            return
        with contextlib.suppress(FileNotFoundError):
            self._fs.rm_file(self._path(name))

    def names(self, folder: str = "", prefix: str = "", suffix: str = "") -> list[str]:
        """Sorted names of the files directly in `folder` (relative to it) that start and end as given."""
        where = self._path(folder) if folder else self._root
        if self._fs is None:
            try:
                entries = os.listdir(where)
            except (FileNotFoundError, NotADirectoryError):
                return []
            found = [e for e in entries if os.path.isfile(os.path.join(where, e))]
        else:
            try:
                listed = self._fs.ls(where, detail=True, refresh=True)
            except FileNotFoundError:
                return []
            found = [str(e["name"]).rstrip("/").rsplit("/", 1)[-1] for e in listed if e.get("type") == "file"]
        return sorted(n for n in found if n.startswith(prefix) and n.endswith(suffix) and not n.startswith("."))

    def folders(self) -> list[str]:
        """Sorted names of the sub-folders of the root (one per cluster under the root of all logs)."""
        if self._fs is None:
            root = Path(self._root)
            return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        try:
            listed = self._fs.ls(self._root, detail=True, refresh=True)
        except FileNotFoundError:
            return []
        return sorted(str(e["name"]).rstrip("/").rsplit("/", 1)[-1] for e in listed if e.get("type") == "directory")

    def __str__(self) -> str:
        return self.location
