"""The `ObjectStore` seam and its local-directory implementation (S3 lives in `s3store.py`).

Every tier below host memory is an ObjectStore: the local NVMe cache, the region store, the
other regions and the archive. The protocol is the S3 subset the tiers need: whole-object and
ranged reads, write-once puts (the manifest commit), and multipart uploads that can be resumed
by upload id (`list_parts`) after the uploader was killed.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import hashlib
import os
import shutil
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from rackscale.checkpoint.errors import AlreadyExists, CheckpointError, ObjectMissing

# The endings of the files the tiers write beside an object before it is one (a durable write,
# a multipart completion, an import's copy, a restore's download). Only these dotfiles are not
# objects: DCP's own `.metadata` is, and a listing that hid it made a whole checkpoint read as
# missing and let retention leave it behind.
TEMP_SUFFIXES = (".tmp", ".import", ".partial")


def is_temporary(name: str) -> bool:
    """Whether the file `name` is one of the tiers' own half-written files, not an object."""
    return name.startswith(".") and name.endswith(TEMP_SUFFIXES)


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    etag: str


@runtime_checkable
class ObjectStore(Protocol):
    """A flat key space of immutable-once-written objects."""

    name: str
    # Smallest part a multipart upload accepts except the last (S3: 5 MiB; a directory: 1).
    min_part_size: int

    def describe(self) -> str: ...
    def check(self) -> None: ...
    def put(self, key: str, data: bytes | memoryview, *, if_absent: bool = False) -> str: ...
    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes: ...
    def head(self, key: str) -> ObjectInfo | None: ...
    def list(self, prefix: str) -> list[str]: ...
    def delete(self, key: str) -> None: ...
    def create_upload(self, key: str) -> str: ...
    def upload_part(self, key: str, upload_id: str, part_no: int,
                    data: bytes | memoryview) -> str: ...
    def list_parts(self, key: str, upload_id: str) -> dict[int, str]: ...
    def complete_upload(self, key: str, upload_id: str, parts: dict[int, str]) -> str: ...
    def abort_upload(self, key: str, upload_id: str) -> None: ...
    def list_uploads(self, prefix: str) -> builtins.list[tuple[str, str]]: ...


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dirs(path: Path, root: Path) -> None:
    """fsync `path` and every directory above it up to `root`: a rename or a new directory is
    durable only once the directory holding its entry is synced."""
    path, root = Path(path), Path(root)
    while True:
        _fsync_dir(path)
        if path == root or root not in path.parents:
            return
        path = path.parent


def write_durable(path: Path, data: bytes | memoryview, *, sync: bool = True) -> None:
    """Write through a temporary name and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        _fsync_dir(path.parent)


class LocalDirStore:
    """Objects as files under a directory: the local NVMe tier, and a region in the demo.

    Durability: every object is written to a temporary name, fsynced and renamed; a write-once
    put links the temporary file to its final name, which fails if the name exists, so two
    committers cannot both win. ETags are (size, inode, mtime): a rename makes a new inode, so
    an overwritten object never keeps its old ETag.
    """

    min_part_size = 1

    def __init__(self, root: str | os.PathLike[str], *, name: str = "local",
                 sync: bool = True) -> None:
        self.root = Path(root)
        self.name = name
        self.sync = sync
        # Made on first write (every write path creates its parents): listing or reading an
        # empty tier creates nothing.

    def describe(self) -> str:
        return f"dir:{self.root}"

    def check(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CheckpointError(f"store {self.name!r}: cannot create directory {self.root} "
                                  f"({err.strerror}); choose another path") from None
        if not os.access(self.root, os.W_OK):
            raise CheckpointError(f"store {self.name!r}: directory {self.root} is not writable; "
                                  f"fix its permissions or choose another path")

    def path(self, key: str) -> Path:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise CheckpointError(f"invalid object key {key!r}: use a relative path without '..'")
        return self.root / key

    @staticmethod
    def _etag(st: os.stat_result) -> str:
        return f"{st.st_size:x}-{st.st_ino:x}-{st.st_mtime_ns:x}"

    def put(self, key: str, data: bytes | memoryview, *, if_absent: bool = False) -> str:
        dest = self.path(key)
        if not if_absent:
            write_durable(dest, data, sync=self.sync)
            return self._etag(dest.stat())
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, dest)  # atomic create-if-absent
        except FileExistsError:
            raise AlreadyExists(f"{self.name}: {key} already exists (write-once)") from None
        finally:
            tmp.unlink()
        _fsync_dir(dest.parent)
        return self._etag(dest.stat())

    def put_file(self, key: str, src: Path) -> str:
        """Copy a local file in as one object (the kernel copies: no bytes through Python,
        one copy instead of parts plus their concatenation); atomic like `put`."""
        dest = self.path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}.tmp")
        shutil.copyfile(src, tmp)
        if self.sync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, dest)
        if self.sync:
            _fsync_dir(dest.parent)
        return self._etag(dest.stat())

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        path = self.path(key)
        try:
            # O_NONBLOCK: a FIFO put where an object was opens at once (and is refused below)
            # instead of blocking the reader forever; it changes nothing for a regular file.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            raise ObjectMissing(f"{self.name}: no object {key}") from None
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):  # as open() says it, naming the path: the CLI tells how
            os.close(fd)
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(mode):
                raise CheckpointError(f"{self.name}: {key} is not a regular file (a FIFO, a "
                                      "device or a socket stands where the object was)")
            if start:
                f.seek(start)
            return f.read() if end is None else f.read(end - start)

    def head(self, key: str) -> ObjectInfo | None:
        try:
            st = self.path(key).stat()
        except FileNotFoundError:
            return None
        return ObjectInfo(key, st.st_size, self._etag(st))

    def list(self, prefix: str) -> list[str]:
        base = self.root / prefix.rsplit("/", 1)[0] if "/" in prefix else self.root
        if not base.exists():
            return []
        out = []
        for dirpath, dirnames, filenames in os.walk(base):
            # dot-directories are the store's own (`.uploads`), never part of a key
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for fn in filenames:
                if is_temporary(fn):
                    continue
                key = os.path.relpath(os.path.join(dirpath, fn), self.root).replace(os.sep, "/")
                if key.startswith(prefix):
                    out.append(key)
        return sorted(out)

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(key).unlink()

    # Multipart: parts are files under .uploads/<upload id>/, concatenated on completion.
    def _updir(self, upload_id: str) -> Path:
        if not upload_id.isalnum():
            raise CheckpointError(f"invalid upload id {upload_id!r}")
        return self.root / ".uploads" / upload_id

    def create_upload(self, key: str) -> str:
        self.path(key)
        upload_id = uuid.uuid4().hex
        write_durable(self._updir(upload_id) / "key", key.encode(), sync=self.sync)
        return upload_id

    def _upload_key(self, upload_id: str) -> str:
        try:
            return (self._updir(upload_id) / "key").read_text()
        except FileNotFoundError:
            raise ObjectMissing(f"{self.name}: no multipart upload {upload_id}") from None

    def upload_part(self, key: str, upload_id: str, part_no: int,
                    data: bytes | memoryview) -> str:
        self._upload_key(upload_id)
        write_durable(self._updir(upload_id) / f"part-{part_no:05d}", data, sync=self.sync)
        return hashlib.md5(data).hexdigest()

    def list_parts(self, key: str, upload_id: str) -> dict[int, str]:
        self._upload_key(upload_id)
        out = {}
        for p in self._updir(upload_id).glob("part-*"):
            out[int(p.name[5:])] = hashlib.md5(p.read_bytes()).hexdigest()
        return out

    def complete_upload(self, key: str, upload_id: str, parts: dict[int, str]) -> str:
        have = self.list_parts(key, upload_id)
        for n, etag in parts.items():
            if have.get(n) != etag:
                raise CheckpointError(f"{self.name}: part {n} of {key} has ETag {have.get(n)}, "
                                      f"expected {etag}; re-upload it")
        updir = self._updir(upload_id)
        dest = self.path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{upload_id[:8]}.tmp")
        with open(tmp, "wb") as out:
            for n in sorted(parts):
                with open(updir / f"part-{n:05d}", "rb") as src:
                    while block := src.read(8 << 20):
                        out.write(block)
            out.flush()
            if self.sync:
                os.fsync(out.fileno())
        os.replace(tmp, dest)
        if self.sync:
            _fsync_dir(dest.parent)
        self.abort_upload(key, upload_id)
        return self._etag(dest.stat())

    def abort_upload(self, key: str, upload_id: str) -> None:
        updir = self._updir(upload_id)
        if updir.exists():
            for p in updir.iterdir():
                p.unlink()
            updir.rmdir()

    def list_uploads(self, prefix: str) -> builtins.list[tuple[str, str]]:
        root = self.root / ".uploads"
        out = []
        if root.exists():
            for d in sorted(root.iterdir()):
                with contextlib.suppress(FileNotFoundError):
                    key = (d / "key").read_text()
                    if key.startswith(prefix):
                        out.append((key, d.name))
        return out

