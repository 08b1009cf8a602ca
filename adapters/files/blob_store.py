"""Content-addressed blobs on disk: ``<root>/<first two hex>/<sha256>`` (brief §6)."""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

from memory_core.adapters.system.crash_points import crash_point
from memory_core.domain.canonical import is_sha256_hex, sha256_hex
from memory_core.domain.errors import BlobCorrupted, BlobNotFound
from memory_core.domain.storage_rules import check_digest  # noqa: F401  (re-exported)

TEMP_PREFIX = ".tmp-"
DIR_MODE = 0o700
FILE_MODE = 0o600


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(fd: int, data: bytes) -> None:
    """Write ``data`` to the open file ``fd``, fsync and close it: on disk before it is published."""
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``, owner-only and fsynced (generation and index files)."""
    write_synced(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE), data)
    os.chmod(path, FILE_MODE)  # O_CREAT's mode does not reach a file that was already there


class FileBlobStore:
    """Implements ``memory_core.ports.BlobStore``: atomic writes, reads verified by hash."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)

    def path_of(self, digest: str) -> Path:
        check_digest(digest)
        return self.root / digest[:2] / digest

    def put(self, data: bytes) -> str:
        digest = sha256_hex(data)
        target = self.path_of(digest)
        with contextlib.suppress(FileNotFoundError):
            # Already stored, unless damaged since: a flipped byte keeps the size, so the content
            # is checked too and a damaged blob is rewritten (the next index build repairs it).
            if target.stat().st_size == len(data) and sha256_hex(target.read_bytes()) == digest:
                return digest
        shard = target.parent
        shard.mkdir(mode=DIR_MODE, exist_ok=True)
        temp = shard / f"{TEMP_PREFIX}{secrets.token_hex(8)}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            write_synced(fd, data)
            crash_point("blob.put.before_rename")
            os.replace(temp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
        crash_point("blob.put.after_rename")
        fsync_dir(shard)
        return digest

    def get(self, digest: str) -> bytes:
        path = self.path_of(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise BlobNotFound(f"blob {digest} is not in the store", digest=digest) from None
        actual = sha256_hex(data)
        if actual != digest:
            raise BlobCorrupted(
                f"blob {digest} is corrupted (its content hashes to {actual})",
                digest=digest,
                actual=actual,
                path=str(path),
            )
        return data

    def exists(self, digest: str) -> bool:
        return self.path_of(digest).is_file()

    def delete(self, digest: str) -> None:
        """Removes the blob; deleting an absent blob is a no-op (GC may race itself)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path_of(digest))
        crash_point("blob.delete.after_unlink")

    def digests(self) -> Iterator[str]:
        """Stored digests in sorted order; temp files and strays are never listed."""
        for shard in sorted(self._shards()):
            for entry in sorted(os.listdir(shard)):
                if is_sha256_hex(entry) and entry[:2] == shard.name and (shard / entry).is_file():
                    yield entry

    def sweep_temp(self, min_age_s: float = 3600.0) -> int:
        """Delete temp files left by crashed writers; younger ones may belong to a live writer."""
        cutoff = time.time() - min_age_s
        removed = 0
        for shard in self._shards():
            for entry in os.scandir(shard):
                if not entry.name.startswith(TEMP_PREFIX):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    if entry.stat(follow_symlinks=False).st_mtime <= cutoff:
                        os.unlink(entry.path)
                        removed += 1
        return removed

    def _shards(self) -> list[Path]:
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return []
        return [
            Path(e.path)
            for e in entries
            if len(e.name) == 2 and all(c in "0123456789abcdef" for c in e.name) and e.is_dir()
        ]
