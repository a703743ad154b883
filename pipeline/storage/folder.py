"""A folder on whichever filesystem holds it: a local or shared folder, or ``s3://bucket/prefix``.

Below both the staging area (:mod:`pipeline.staging`) and the lake's data folder
(:mod:`pipeline.lake.session`): every file operation of either (list, read and write, move,
delete) goes through one pyarrow filesystem, so each is written once for both kinds. Engines
outside this process get the location in their own spelling: DuckDB reads ``s3://…`` through
httpfs, Spark writes ``s3a://…`` through hadoop-aws.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from pipeline.storage.object_store import ObjectStore

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs

    from pipeline.settings.model import StorageOptions


def _pafs() -> ModuleType:
    """pyarrow's filesystems, imported when a file is first touched: a session that only reads
    the lake through DuckDB (--sql) never pays for pyarrow's import (about 0.09 s)."""
    import pyarrow.fs

    return pyarrow.fs


def split_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` -> ``("s3", "bucket/prefix")``; a folder -> ``("", "/abs/folder")``."""
    if "://" in uri:
        scheme, _, rest = uri.partition("://")
        return scheme.lower(), rest.strip("/")
    return "", uri.rstrip("/") or "/"


def is_object_store(uri: str | None) -> bool:
    """``s3://…``, ``gs://…``, ``r2://…`` rather than a folder: the one test for it."""
    return uri is not None and split_uri(uri)[0] != ""


def s3_filesystem(storage: StorageOptions) -> pafs.S3FileSystem:
    """The same S3 endpoint, credentials and addressing the lake's DuckDB secret uses."""
    return _pafs().S3FileSystem(**ObjectStore(storage).pyarrow())


@dataclass(frozen=True)
class Folder:
    """One folder on whichever filesystem holds it: of the staging area, or of the lake's data
    path (its table folder, zero-copy's incoming files, the ownership marker)."""

    fs: pafs.FileSystem
    scheme: str  # "" for a local/shared folder, "s3" for object storage
    path: str  # in the filesystem's own terms: "/abs/folder" or "bucket/prefix/folder"

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)

    @property
    def is_local(self) -> bool:
        return not self.scheme

    def uri(self, name: str | None = None) -> str:
        """What DuckDB reads and messages show: ``/abs/…`` or ``s3://bucket/…``."""
        path = self._join(name)
        return f"{self.scheme}://{path}" if self.scheme else path

    def spark_uri(self) -> str:
        """What Spark writes to: Hadoop's S3 connector is ``s3a://``."""
        return f"s3a://{self.path}" if self.scheme == "s3" else self.path

    def child(self, name: str) -> Folder:
        return Folder(self.fs, self.scheme, self._join(name))

    def parent(self) -> Folder:
        return Folder(self.fs, self.scheme, posixpath.dirname(self.path.rstrip("/")))

    def exists(self, name: str | None = None) -> bool:
        return self.fs.get_file_info(self._join(name)).type != _pafs().FileType.NotFound

    def subdirs(self, prefix: str) -> list[Folder]:
        """Child folders whose names start with ``prefix``, sorted by name."""
        if not self.exists():
            return []
        infos = self.fs.get_file_info(_pafs().FileSelector(self.path, allow_not_found=True))
        return [self.child(info.base_name) for info in sorted(infos, key=lambda i: i.base_name)
                if info.type == _pafs().FileType.Directory and info.base_name.startswith(prefix)]

    def files(self, suffix: str) -> list[str]:
        """Names of the data files directly inside, sorted; ``_``/``.`` names are bookkeeping
        (Spark's ``_SUCCESS``, our manifest temp file) and never data."""
        return sorted(posixpath.basename(path) for path in self._data_files(suffix, recursive=False))

    def walk(self, suffix: str) -> list[str]:
        """Paths (relative to this folder) of the data files anywhere below, sorted; bookkeeping
        names (``_SUCCESS``, ``.crc``) are skipped as in :meth:`files`."""
        return sorted(posixpath.relpath(path, self.path) for path in self._data_files(suffix, recursive=True))

    def files_below(self) -> list[pafs.FileInfo]:
        """Every file anywhere below (path, size, mtime), bookkeeping names included; none when
        the folder does not exist. One listing: what ownership, integrity and clean-ups read."""
        infos = self.fs.get_file_info(_pafs().FileSelector(self.path, recursive=True, allow_not_found=True))
        return [info for info in infos if info.type == _pafs().FileType.File]

    def _data_files(self, suffix: str, *, recursive: bool) -> list[str]:
        selector = _pafs().FileSelector(self.path, recursive=recursive, allow_not_found=True)
        infos = self.fs.get_file_info(selector)
        return [i.path for i in infos if i.type == _pafs().FileType.File
                and i.base_name.endswith(suffix) and not i.base_name.startswith(("_", "."))]

    def transfer(self, name: str, target: Folder, target_name: str) -> None:
        """Move one file to ``target`` (a rename within one filesystem, else copy then delete)."""
        target.make(exist_ok=True)
        if self.is_local and target.is_local:
            self.fs.move(self._join(name), target._join(target_name))
            return
        _pafs().copy_files(self._join(name), target._join(target_name), source_filesystem=self.fs,
                        destination_filesystem=target.fs)
        self.delete(name)

    def newest_change(self) -> float | None:
        """Seconds since the epoch of the newest file below (the folder's own time if empty)."""
        infos = self.fs.get_file_info(_pafs().FileSelector(self.path, recursive=True, allow_not_found=True))
        times = [i.mtime.timestamp() for i in infos if i.mtime is not None]
        if not times:
            own = self.fs.get_file_info(self.path).mtime
            return own.timestamp() if own is not None else None
        return max(times)

    def make(self, *, exist_ok: bool) -> None:
        if not exist_ok and self.exists():
            raise FileExistsError(self.uri())
        if self.is_local:  # object-store folders exist through their objects: no marker objects
            self.fs.create_dir(self.path, recursive=True)

    def open_input(self, name: str) -> pa.NativeFile:
        """A random-access reader (Parquet footers are read from the end)."""
        return self.fs.open_input_file(self._join(name))

    def open_output(self, name: str) -> pa.NativeFile:
        return self.fs.open_output_stream(self._join(name))

    def read_text(self, name: str) -> str | None:
        try:
            with self.fs.open_input_stream(self._join(name)) as stream:
                return stream.read().decode()
        except FileNotFoundError:
            return None

    def write_text(self, name: str, text: str) -> None:
        """All or nothing: a local file is written aside, fsynced and renamed into place; an
        object-store PUT is atomic by itself (readers see no object or the whole one)."""
        if not self.is_local:
            with self.open_output(name) as stream:
                stream.write(text.encode())
            return
        target = self._join(name)
        tmp = self._join(f".{name}.tmp")
        with open(tmp, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(self._join(name))

    def exists_uri(self, uri: str) -> bool:
        """Is there a file at ``uri`` (as :meth:`uri` spells it)?"""
        path = split_uri(uri)[1] if self.scheme else uri
        return self.fs.get_file_info(path).type == _pafs().FileType.File

    def delete_uri(self, uri: str) -> None:
        """Delete the file at ``uri`` (as :meth:`uri` spells it), which lies below this folder."""
        self.delete(posixpath.relpath(split_uri(uri)[1], self.path))

    def move_to(self, target: Folder) -> None:
        """Move this folder's files under ``target`` (a rename on a folder; copy then delete on an
        object store, which has no directory rename)."""
        if self.is_local:
            target.make(exist_ok=True)
            target.remove()
            self.fs.move(self.path, target.path)
            return
        infos = self.fs.get_file_info(_pafs().FileSelector(self.path, recursive=True))
        for info in infos:
            if info.type == _pafs().FileType.File:
                relative = posixpath.relpath(info.path, self.path)
                self.fs.copy_file(info.path, posixpath.join(target.path, relative))
        self.remove()

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_dir(self.path)

    def _join(self, name: str | None) -> str:
        return posixpath.join(self.path, name) if name else self.path


def folder_of(uri: str, storage: StorageOptions) -> Folder:
    """A folder or ``s3://bucket/prefix`` as a :class:`Folder` on its own filesystem."""
    scheme, path = split_uri(uri)
    if scheme == "s3":
        return Folder(s3_filesystem(storage), "s3", path)
    return Folder(_pafs().LocalFileSystem(), "", path)
