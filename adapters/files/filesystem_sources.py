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
- Nothing is read through a path that may have changed since it was checked (issue 30): the
  source folder is opened with ``O_NOFOLLOW`` (one that is a symbolic link, or was replaced by
  one, is ``source_unavailable``; folders above it are followed as configured), a folder is
  listed through a descriptor whose device and inode are those its parent listed, and every byte
  of a file is read from a descriptor opened one name at a time below the source folder's,
  following no symlink (``open_beneath``). A file or folder swapped for a link between the walk
  and the read is skipped with a warning, never followed out of the source.
- ``resource_id`` is the path relative to the source, POSIX-style; the walk is sorted, so two
  scans of the same tree give the same list. The walk keeps its own stack: any depth the file
  system allows is walked.
- A file's hash is cached under its path and ``FileStamp`` (size, mtime, ctime, inode); any write
  changes its ctime, which no tool can set back, so an edit that restores size and mtime
  (``cp -p``, ``rsync -t``, ``touch -r``) is still seen. ``scan(rehash=True)`` ignores the cache.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple, Protocol

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

# A folder on the way down, never a symlink in its place.
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# The last name: never a symlink either. O_NONBLOCK: a FIFO put where a file was scanned must
# not block the reader forever (fstat then says it is not a regular file).
_LEAF = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

Identity = tuple[int, int]  # (st_dev, st_ino): which file an open descriptor or a listing names


class FileHashCache(Protocol):
    """``(path, FileStamp) -> sha256``; SqliteCatalog and InMemoryCatalog provide it."""

    def get_file_hash(self, path: str, stamp: FileStamp) -> str | None: ...

    def put_file_hashes(self, rows: Iterable[tuple[str, FileStamp, str]]) -> None: ...


class _Unreadable(Exception):
    """A file that cannot become a resource; the message says why."""


class _Outside(Exception):
    """A symlink whose target is not below the source folder; the message is the target."""


class _OpenRoot(NamedTuple):
    """A source folder held open for a scan: every file is opened below ``fd``."""

    path: Path  # its real path: the resources' paths and URIs are under it
    fd: int


class _Folder(NamedTuple):
    rel: str  # the resource-id prefix of what it holds
    path: Path  # where it shows (under a link's name when reached through one)
    real: tuple[str, ...]  # its names below the source folder, no symlink among them
    identity: Identity  # what its parent's listing (or the link's checked target) said it is


class _Found(NamedTuple):
    rel: str  # the resource id
    path: Path
    media_type: str
    real: tuple[str, ...]  # what is opened to read it: its names below the source folder
    seen: os.stat_result  # its stat as the walk checked it (the target's, for a link)


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _identity(st: os.stat_result) -> Identity:
    return st.st_dev, st.st_ino


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def open_beneath(folder_fd: int, names: Sequence[str]) -> int:
    """A descriptor for ``names`` below the folder open as ``folder_fd`` (itself when empty),
    opened one name at a time with ``O_NOFOLLOW``: whatever is renamed or swapped meanwhile,
    what opens lies below that folder. A symlink met on the way raises OSError(ELOOP) saying so;
    the caller closes the descriptor."""
    fd = os.open(".", _FOLDER, dir_fd=folder_fd)
    try:
        for index, name in enumerate(names):
            if name in ("", ".", "..") or "/" in name:
                raise OSError(errno.EINVAL, f"{name!r} is not a plain name")
            try:
                opened = os.open(name, _LEAF if index == len(names) - 1 else _FOLDER, dir_fd=fd)
            except OSError as exc:  # O_NOFOLLOW says ELOOP, or ENOTDIR with O_DIRECTORY
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(name, fd):
                    raise OSError(errno.ELOOP, "a symbolic link is in its place now (not followed)") from exc
                raise
            fd, above = opened, fd
            os.close(above)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_folder(root: _OpenRoot, folder: _Folder) -> int:
    """``folder`` open, checked to be the folder its parent listed (device and inode): by its
    real path (one open); when that leads elsewhere now, name by name below the source folder's
    descriptor (``open_beneath``), which a folder swapped for a link on the way cannot escape."""
    try:
        fd = os.open(os.path.join(root.path, *folder.real), _FOLDER)
    except OSError:
        pass
    else:
        if _identity(os.fstat(fd)) == folder.identity:
            return fd
        os.close(fd)
    fd = open_beneath(root.fd, folder.real)
    if _identity(os.fstat(fd)) != folder.identity:
        os.close(fd)
        raise OSError(errno.ESTALE, "it was replaced during the scan")
    return fd


def _names_below(root: str, target: str) -> tuple[str, ...] | None:
    """``target``'s names below ``root`` (both real paths), or None when it is not below it."""
    if target == root:
        return ()
    prefix = root.rstrip("/") + "/"
    return tuple(target[len(prefix) :].split("/")) if target.startswith(prefix) else None


def _read_open(fd: int, limit: int) -> tuple[bytes, os.stat_result]:
    """At most ``limit + 1`` bytes of the regular file open as ``fd``, and its stat at opening."""
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


def _read_beneath(folder_fd: int, names: Sequence[str], limit: int) -> tuple[bytes, os.stat_result]:
    """The regular file ``names`` below ``folder_fd`` (``open_beneath``: no symlink followed)."""
    try:
        fd = open_beneath(folder_fd, names)
    except OSError as exc:
        raise _Unreadable(_reason(exc)) from exc
    return _read_open(fd, limit)


def _read_scanned(resource: ScannedResource, limit: int) -> bytes:
    """The body of a resource this scanner found: its source folder (the path without the
    resource id) opened with ``O_NOFOLLOW``, the file below it opened by name, no link followed;
    one reached through a link inside the source is opened by the names it resolves to, and
    refused when those lead outside the source now."""
    suffix = "/" + resource.resource_id
    if not resource.path.endswith(suffix):
        raise _Unreadable("its path does not end with its resource id")
    root = resource.path[: -len(suffix)] or "/"
    try:
        root_fd = os.open(root, _FOLDER)
    except OSError as exc:
        if os.path.islink(root):
            raise _Unreadable(f"its source folder {printable(root)} is a symbolic link now (not followed)") from exc
        raise _Unreadable(_reason(exc)) from exc
    try:
        try:
            fd = open_beneath(root_fd, resource.resource_id.split("/"))
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            # An alias (a link inside the source): where it points now, still opened below it.
            target = os.path.realpath(resource.path, strict=True)
            names = _names_below(root, target)
            if names is None:
                raise _Unreadable(f"it resolves outside its source now ({printable(target)})") from exc
            fd = open_beneath(root_fd, names)
    except OSError as exc:
        raise _Unreadable(_reason(exc)) from exc
    finally:
        os.close(root_fd)
    return _read_open(fd, limit)[0]


class FileSystemScanner:
    """Implements ``memory_core.ports.SourceScanner`` over real directories."""

    def __init__(self, hash_cache: FileHashCache | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.hash_cache = hash_cache
        self.max_bytes = max_bytes

    def scan(self, source: Source, *, rehash: bool = False) -> tuple[list[ScannedResource], list[str]]:
        root = _open_source_folder(source.path)
        try:
            warnings: list[str] = []
            found = self._walk(root, warnings)
            resources: list[ScannedResource] = []
            fresh: list[tuple[str, FileStamp, str]] = []
            now_ns = time.time_ns()
            for item in sorted(found, key=lambda f: f.rel):
                resource = self._resource(source, root, item, warnings, fresh, now_ns, rehash)
                if resource is not None:
                    resources.append(resource)
        finally:
            os.close(root.fd)
        if self.hash_cache is not None and fresh:
            self.hash_cache.put_file_hashes(fresh)
        return resources, warnings

    def read(self, resource: ScannedResource) -> bytes:
        try:
            data = _read_scanned(resource, max(self.max_bytes, resource.byte_size))
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

    def _walk(self, root: _OpenRoot, warnings: list[str]) -> list[_Found]:
        """Every text file below ``root``. Depth first in name order on an explicit stack (no
        recursion limit). Symlinked directories wait until every real one was walked, so a file
        reachable both ways keeps its real path as resource_id."""
        found: list[_Found] = []
        visited: set[Identity] = set()
        links: deque[_Folder] = deque()
        stack = [_Folder("", root.path, (), _identity(os.fstat(root.fd)))]
        while stack or links:
            folder = stack.pop() if stack else links.popleft()
            if folder.identity in visited:
                continue
            visited.add(folder.identity)
            stack.extend(reversed(self._list(root, folder, found, warnings, links)))
        return found

    def _list(
        self, root: _OpenRoot, folder: _Folder, found: list[_Found], warnings: list[str], links: deque[_Folder]
    ) -> list[_Folder]:
        """One directory, listed through a descriptor checked to be the folder its parent listed:
        its text files go to ``found``, symlinked directories to ``links``; returns its real
        subdirectories in name order."""
        try:
            fd = _open_folder(root, folder)
        except OSError as exc:
            warnings.append(f"skipped directory {printable(str(folder.path))}: {_reason(exc)}")
            return []
        try:
            with os.scandir(fd) as it:
                entries = sorted(it, key=lambda e: e.name)
            subdirectories: list[_Folder] = []
            for entry in entries:
                self._entry(root, folder, entry, found, warnings, subdirectories, links)
            return subdirectories
        except OSError as exc:
            warnings.append(f"skipped directory {printable(str(folder.path))}: {_reason(exc)}")
            return []
        finally:
            os.close(fd)  # after the entries: a listing's DirEntry stats through it

    def _entry(
        self,
        root: _OpenRoot,
        folder: _Folder,
        entry: os.DirEntry[str],
        found: list[_Found],
        warnings: list[str],
        subdirectories: list[_Folder],
        links: deque[_Folder],
    ) -> None:
        if entry.name.startswith("."):
            return
        path = folder.path / entry.name
        media_type = media_type_for(entry.name)
        try:
            is_link = entry.is_symlink()
            if not entry.is_dir() and media_type is None:  # a link's is_dir is a hint; its target is checked below
                return  # not a text file: ignored silently
            if not is_utf8_text(entry.name):
                # os.scandir decodes undecodable bytes to lone surrogates, which no resource
                # id, URI or database row can hold.
                warnings.append(f"skipped {printable(str(path))}: its name is not valid UTF-8")
                return
            if is_link:
                real, seen = self._link_target(root, folder, entry.name)
            else:
                real, seen = (*folder.real, entry.name), entry.stat(follow_symlinks=False)
        except _Outside as exc:
            warnings.append(f"skipped {path}: symlink points outside the source ({exc})")
            return
        except OSError as exc:
            warnings.append(f"skipped {path}: {_reason(exc)}")
            return
        rel = f"{folder.rel}/{entry.name}" if folder.rel else entry.name
        if stat.S_ISDIR(seen.st_mode):
            subfolder = _Folder(rel, path, real, _identity(seen))
            if is_link:
                links.append(subfolder)
            else:
                subdirectories.append(subfolder)
        elif media_type is None:
            return  # a link to a file without a text extension: ignored like the file
        elif not stat.S_ISREG(seen.st_mode):
            warnings.append(f"skipped {path}: not a regular file")
        elif problem := resource_id_problem(rel):  # one a fixture could not carry
            warnings.append(f"skipped {path}: its path {problem}")
        else:
            found.append(_Found(rel, path, media_type, real, seen))

    @staticmethod
    def _link_target(root: _OpenRoot, folder: _Folder, name: str) -> tuple[tuple[str, ...], os.stat_result]:
        """The real names below the source of the symlink ``name`` in ``folder`` and the stat of
        what is there, opened below the source folder following nothing (the resolved path only
        says where to look); _Outside when it points elsewhere."""
        target = os.path.realpath(os.path.join(root.path, *folder.real, name), strict=True)
        names = _names_below(str(root.path), target)
        if names is None:
            raise _Outside(printable(target))
        fd = open_beneath(root.fd, names)
        try:
            return names, os.fstat(fd)
        finally:
            os.close(fd)

    def _resource(
        self,
        source: Source,
        root: _OpenRoot,
        item: _Found,
        warnings: list[str],
        fresh: list[tuple[str, FileStamp, str]],
        now_ns: int,
        rehash: bool,
    ) -> ScannedResource | None:
        path = item.path
        if item.seen.st_size > self.max_bytes:
            warnings.append(f"skipped {path}: {too_large(item.seen.st_size, self.max_bytes)}")
            return None
        # The walk's stat of the checked file, never one taken again through the path.
        stamp = FileStamp.of(item.seen)
        cached = None
        if self.hash_cache is not None and not rehash:
            cached = self.hash_cache.get_file_hash(str(path), stamp)
        if cached is not None:
            digest, size = cached, item.seen.st_size
        else:
            try:
                data, opened = _read_beneath(root.fd, item.real, self.max_bytes)
            except _Unreadable as exc:
                warnings.append(f"skipped {path}: {exc}")
                return None
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
        return ScannedResource(
            resource_id=item.rel,
            layer=source.layer,
            uri=path.absolute().as_uri(),
            resource_hash=digest,
            byte_size=size,
            media_type=item.media_type,
            path=str(path),
        )


def source_root(raw: str) -> Path:
    """The source directory ``raw`` names, resolved; SourceUnavailable when it cannot be one
    (``memcore project add`` refuses such a source before anything is stored)."""
    return _open_root(raw)


def _open_root(raw: str) -> Path:
    """The source directory, resolved, checked as a scan opens it (``_open_source_folder``)."""
    root = _open_source_folder(raw)
    os.close(root.fd)
    return root.path


def _open_source_folder(raw: str) -> _OpenRoot:
    """The source folder, open; SourceUnavailable when missing, not a directory, unreadable, a
    symbolic link (a link swapped in for the folder would make any folder the source; the
    folders above it are followed, as configured), or reached through a path that is not text
    (a link above it to an undecodable name)."""
    shown = printable(raw)
    try:
        configured = os.path.abspath(os.path.expanduser(raw))
        real = os.path.realpath(configured, strict=True)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in a stored path
        raise _unavailable(shown, exc) from exc
    if not is_utf8_text(real):
        raise SourceUnavailable(f"source '{shown}' resolves to {printable(real)}, which is not valid UTF-8", path=shown)
    try:
        fd = os.open(configured, _FOLDER)
    except OSError as exc:
        if os.path.islink(configured):
            raise SourceUnavailable(
                f"source '{shown}' is a symbolic link (to {printable(real)}), which is never followed: "
                "name the folder itself",
                path=shown,
            ) from exc
        if exc.errno == errno.ENOTDIR:
            raise SourceUnavailable(f"source '{shown}' is not a directory", path=shown) from exc
        raise _unavailable(shown, exc) from exc
    try:
        if _identity(os.fstat(fd)) != _identity(os.stat(real)):
            raise OSError(errno.ESTALE, "it was replaced while it was opened")
    except OSError as exc:
        os.close(fd)
        raise _unavailable(shown, exc) from exc
    return _OpenRoot(Path(real), fd)


def _unavailable(shown: str, exc: Exception) -> SourceUnavailable:
    reason = getattr(exc, "strerror", None) or str(exc)
    return SourceUnavailable(f"source '{shown}' is unavailable: {reason}", path=shown)
