"""The SourceScanner port over a directory tree.

Rules (shared with the in-memory twin through the helpers below):
- ``.md``/``.markdown`` are ``text/markdown``, ``.txt`` is ``text/plain``; other files are ignored
  silently.
- Anything whose name starts with ``.`` (files and whole directories) is skipped silently.
- A file over ``max_bytes``, holding a NUL byte or not valid UTF-8 is skipped with a warning
  naming it; so is anything the index cannot represent or read: a name that is not valid UTF-8
  (a resource id is text), a FIFO, socket or device with a text extension, a file that cannot be
  opened. One such file never stops a scan.
- Symlinks are followed only when their target lies inside the source directory; one pointing
  outside is skipped with a warning (a source never leaks files from elsewhere). A directory
  reached twice (a loop, or a link to a folder of the source) is walked once, under its real
  path when it has one.
- ``resource_id`` is the path relative to the source, POSIX-style; the walk is sorted, so two
  scans of the same tree give the same list. The walk keeps its own stack: any depth the file
  system allows is walked.
- A file's hash is cached under its path and ``FileStamp`` (size, mtime, ctime, inode); any write
  changes its ctime, which no tool can set back, so an edit that restores size and mtime
  (``cp -p``, ``rsync -t``, ``touch -r``) is still seen. ``scan(rehash=True)`` ignores the cache.
"""

from __future__ import annotations

import os
import stat
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from memory_core.domain.canonical import is_utf8_text, printable, sha256_hex
from memory_core.domain.errors import SourceUnavailable
from memory_core.domain.model import ScannedResource, Source
from memory_core.domain.resource_rules import (  # noqa: F401  (re-exported for the in-memory twin and the watcher)
    DEFAULT_MAX_BYTES,
    MEDIA_TYPES,
    is_hidden,
    media_type_for,
    resource_id_problem,
    text_problem,
    too_large,
)

# The rules live in the core, where fixture import applies them too (a replay scans its corpus).
from memory_core.domain.storage_rules import FileStamp  # noqa: F401  (re-exported)

# A file modified this recently may change again within the clock's granularity without its
# stamp changing, so its hash is not cached yet (git's "racily clean" rule).
RACY_WINDOW_NS = 2_000_000_000


class FileHashCache(Protocol):
    """``(path, FileStamp) -> sha256``; SqliteCatalog and InMemoryCatalog provide it."""

    def get_file_hash(self, path: str, stamp: FileStamp) -> str | None: ...

    def put_file_hashes(self, rows: Iterable[tuple[str, FileStamp, str]]) -> None: ...


class _Unreadable(Exception):
    """A file that cannot become a resource; the message says why."""


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _read_regular(path: Path, limit: int) -> tuple[bytes, os.stat_result]:
    """At most ``limit + 1`` bytes of the regular file at ``path`` and its stat at opening.
    O_NONBLOCK: a FIFO put where a file was scanned must not block the reader forever."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise _Unreadable(_reason(exc)) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Unreadable("not a regular file")
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), st
    except OSError as exc:
        raise _Unreadable(_reason(exc)) from exc
    finally:
        os.close(fd)


class FileSystemScanner:
    """Implements ``memory_core.ports.SourceScanner`` over real directories."""

    def __init__(self, hash_cache: FileHashCache | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.hash_cache = hash_cache
        self.max_bytes = max_bytes

    def scan(self, source: Source, *, rehash: bool = False) -> tuple[list[ScannedResource], list[str]]:
        root = _open_root(source.path)
        warnings: list[str] = []
        found = self._walk(root, warnings)
        resources: list[ScannedResource] = []
        fresh: list[tuple[str, FileStamp, str]] = []
        now_ns = time.time_ns()
        for rel, path, media_type in sorted(found):
            resource = self._resource(source, rel, path, media_type, warnings, fresh, now_ns, rehash)
            if resource is not None:
                resources.append(resource)
        if self.hash_cache is not None and fresh:
            self.hash_cache.put_file_hashes(fresh)
        return resources, warnings

    def read(self, resource: ScannedResource) -> bytes:
        try:
            data, _ = _read_regular(Path(resource.path), max(self.max_bytes, resource.byte_size))
        except _Unreadable as exc:
            raise SourceUnavailable(f"cannot read {resource.path}: {exc}", path=resource.path) from exc
        if sha256_hex(data) != resource.resource_hash:
            raise SourceUnavailable(
                f"{resource.path} changed since it was scanned; scan the source again",
                path=resource.path,
                resource_id=resource.resource_id,
            )
        return data

    # -- helpers ----------------------------------------------------------------------------

    def _walk(self, root: Path, warnings: list[str]) -> list[tuple[str, Path, str]]:
        """Every text file under ``root`` as (resource id, path, media type). Depth first in name
        order on an explicit stack (no recursion limit). Symlinked directories wait until every
        real one was walked, so a file reachable both ways keeps its real path as resource_id."""
        found: list[tuple[str, Path, str]] = []
        visited: set[tuple[int, int]] = set()
        links: deque[tuple[str, Path]] = deque()
        stack: list[tuple[str, Path]] = [("", root)]
        while stack or links:
            rel, directory = stack.pop() if stack else links.popleft()
            subdirectories = self._list(root, directory, rel, found, warnings, visited, links)
            stack.extend(reversed(subdirectories))
        return found

    def _list(
        self,
        root: Path,
        directory: Path,
        rel: str,
        found: list[tuple[str, Path, str]],
        warnings: list[str],
        visited: set[tuple[int, int]],
        links: deque[tuple[str, Path]],
    ) -> list[tuple[str, Path]]:
        """One directory: its text files go to ``found``, symlinked directories to ``links``;
        returns its real subdirectories in name order."""
        try:
            st = os.stat(directory)
            if (st.st_dev, st.st_ino) in visited:
                return []
            visited.add((st.st_dev, st.st_ino))
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            warnings.append(f"skipped directory {printable(str(directory))}: {_reason(exc)}")
            return []
        subdirectories: list[tuple[str, Path]] = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = Path(entry.path)
            media_type = media_type_for(entry.name)
            try:
                is_dir = entry.is_dir()
                if not is_dir and media_type is None:
                    continue  # not a text file: ignored silently
                if not is_utf8_text(entry.name):
                    # os.scandir decodes undecodable bytes to lone surrogates, which no resource
                    # id, URI or database row can hold.
                    warnings.append(f"skipped {printable(str(path))}: its name is not valid UTF-8")
                    continue
                is_file = not is_dir and entry.is_file()
                if entry.is_symlink():
                    target = path.resolve(strict=True)
                    if not target.is_relative_to(root):
                        warnings.append(f"skipped {path}: symlink points outside the source ({printable(str(target))})")
                        continue
            except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Path.resolve)
                reason = _reason(exc) if isinstance(exc, OSError) else str(exc)
                warnings.append(f"skipped {path}: {reason}")
                continue
            child_rel = f"{rel}/{entry.name}" if rel else entry.name
            if is_dir and entry.is_symlink():
                links.append((child_rel, path))
            elif is_dir:
                subdirectories.append((child_rel, path))
            elif is_file and media_type is not None:
                if problem := resource_id_problem(child_rel):  # one a fixture could not carry
                    warnings.append(f"skipped {path}: its path {problem}")
                else:
                    found.append((child_rel, path, media_type))
            else:
                warnings.append(f"skipped {path}: not a regular file")
        return subdirectories

    def _resource(
        self,
        source: Source,
        rel: str,
        path: Path,
        media_type: str,
        warnings: list[str],
        fresh: list[tuple[str, FileStamp, str]],
        now_ns: int,
        rehash: bool,
    ) -> ScannedResource | None:
        try:
            st = path.stat()
            if st.st_size > self.max_bytes:
                warnings.append(f"skipped {path}: {too_large(st.st_size, self.max_bytes)}")
                return None
            stamp = FileStamp.of(st)
            cached = None
            if self.hash_cache is not None and not rehash:
                cached = self.hash_cache.get_file_hash(str(path), stamp)
            if cached is not None:
                digest, size = cached, st.st_size
            else:
                data, opened = _read_regular(path, self.max_bytes)
                problem = too_large(len(data), self.max_bytes) if len(data) > self.max_bytes else text_problem(data)
                if problem:
                    warnings.append(f"skipped {path}: {problem}")
                    return None
                digest, size = sha256_hex(data), len(data)
                # The stamp of the open file, taken before its bytes were read: a write after it
                # changes the ctime, so a stale row can never match.
                stamp = FileStamp.of(opened)
                if size == stamp.size and now_ns - max(stamp.mtime_ns, stamp.ctime_ns) >= RACY_WINDOW_NS:
                    fresh.append((str(path), stamp, digest))
        except OSError as exc:
            warnings.append(f"skipped {path}: {_reason(exc)}")
            return None
        except _Unreadable as exc:
            warnings.append(f"skipped {path}: {exc}")
            return None
        return ScannedResource(
            resource_id=rel,
            layer=source.layer,
            uri=path.absolute().as_uri(),
            resource_hash=digest,
            byte_size=size,
            media_type=media_type,
            path=str(path),
        )


def source_root(raw: str) -> Path:
    """The source directory ``raw`` names, resolved; SourceUnavailable when it cannot be one
    (``memcore project add`` refuses such a source before anything is stored)."""
    return _open_root(raw)


def _open_root(raw: str) -> Path:
    """The source directory, resolved; SourceUnavailable when missing, not a directory,
    unreadable, or reached through a path that is not text (a symlink to an undecodable name)."""
    shown = printable(raw)
    try:
        root = Path(raw).expanduser().resolve(strict=True)
        if not root.is_dir():
            raise SourceUnavailable(f"source '{shown}' is not a directory", path=shown)
        os.listdir(root)
    except (OSError, RuntimeError, ValueError) as exc:  # ValueError: a NUL in a stored path
        reason = getattr(exc, "strerror", None) or str(exc)
        raise SourceUnavailable(f"source '{shown}' is unavailable: {reason}", path=shown) from exc
    if not is_utf8_text(str(root)):
        real = printable(str(root))
        raise SourceUnavailable(f"source '{shown}' resolves to {real}, which is not valid UTF-8", path=shown)
    return root
