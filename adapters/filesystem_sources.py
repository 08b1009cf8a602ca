"""The SourceScanner port over a directory tree.

Rules (shared with the in-memory twin through the helpers below):
- ``.md``/``.markdown`` are ``text/markdown``, ``.txt`` is ``text/plain``; other files are ignored
  silently.
- Anything whose name starts with ``.`` (files and whole directories) is skipped silently.
- A file over ``max_bytes``, holding a NUL byte or not valid UTF-8 is skipped with a warning
  naming it.
- Symlinks are followed only when their target lies inside the source directory; one pointing
  outside is skipped with a warning (a source never leaks files from elsewhere). A directory
  reached twice (a loop, or a link to a folder of the source) is walked once, under its real
  path when it has one.
- ``resource_id`` is the path relative to the source, POSIX-style; the walk is sorted, so two
  scans of the same tree give the same list.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from memory_core.canonical import sha256_hex
from memory_core.errors import SourceUnavailable
from memory_core.model import ScannedResource, Source

# The rules live in the core, where fixture import applies them too (a replay scans its corpus).
from memory_core.resource_rules import (  # noqa: F401  (re-exported for the in-memory twin and the watcher)
    DEFAULT_MAX_BYTES,
    MEDIA_TYPES,
    is_hidden,
    media_type_for,
    text_problem,
    too_large,
)

# A file modified this recently may change again within the clock's granularity without its
# (size, mtime_ns) changing, so its hash is not cached yet (git's "racily clean" rule).
RACY_WINDOW_NS = 2_000_000_000


class FileHashCache(Protocol):
    """``(path, size, mtime_ns) -> sha256``; SqliteCatalog and InMemoryCatalog provide it."""

    def get_file_hash(self, path: str, size: int, mtime_ns: int) -> str | None: ...

    def put_file_hashes(self, rows: Iterable[tuple[str, int, int, str]]) -> None: ...


class FileSystemScanner:
    """Implements ``memory_core.ports.SourceScanner`` over real directories."""

    def __init__(self, hash_cache: FileHashCache | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.hash_cache = hash_cache
        self.max_bytes = max_bytes

    def scan(self, source: Source) -> tuple[list[ScannedResource], list[str]]:
        root = _open_root(source.path)
        warnings: list[str] = []
        found: list[tuple[str, Path, str]] = []
        visited: set[tuple[int, int]] = set()
        # Symlinked directories are walked after every real one, so a file reachable both ways
        # keeps its real path as resource_id.
        links: list[tuple[str, Path]] = []
        self._walk(root, root, "", found, warnings, visited, links)
        while links:
            rel, path = links.pop(0)
            self._walk(root, path, rel, found, warnings, visited, links)
        resources: list[ScannedResource] = []
        fresh: list[tuple[str, int, int, str]] = []
        now_ns = time.time_ns()
        for rel, path, media_type in sorted(found):
            resource = self._resource(source, rel, path, media_type, warnings, fresh, now_ns)
            if resource is not None:
                resources.append(resource)
        if self.hash_cache is not None and fresh:
            self.hash_cache.put_file_hashes(fresh)
        return resources, warnings

    def read(self, resource: ScannedResource) -> bytes:
        try:
            data = Path(resource.path).read_bytes()
        except OSError as exc:
            raise SourceUnavailable(f"cannot read {resource.path}: {exc.strerror or exc}", path=resource.path) from exc
        if sha256_hex(data) != resource.resource_hash:
            raise SourceUnavailable(
                f"{resource.path} changed since it was scanned; scan the source again",
                path=resource.path,
                resource_id=resource.resource_id,
            )
        return data

    # -- helpers ----------------------------------------------------------------------------

    def _walk(
        self,
        root: Path,
        directory: Path,
        rel: str,
        found: list[tuple[str, Path, str]],
        warnings: list[str],
        visited: set[tuple[int, int]],
        links: list[tuple[str, Path]],
    ) -> None:
        try:
            st = os.stat(directory)
            if (st.st_dev, st.st_ino) in visited:
                return
            visited.add((st.st_dev, st.st_ino))
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            warnings.append(f"skipped directory {directory}: {exc.strerror or exc}")
            return
        for entry in entries:
            if entry.name.startswith("."):
                continue
            child_rel = f"{rel}/{entry.name}" if rel else entry.name
            path = Path(entry.path)
            try:
                is_dir = entry.is_dir()
                is_file = not is_dir and entry.is_file()
                if entry.is_symlink() and (is_dir or media_type_for(entry.name)):
                    target = path.resolve(strict=True)
                    if not target.is_relative_to(root):
                        warnings.append(f"skipped {path}: symlink points outside the source ({target})")
                        continue
            except OSError as exc:
                warnings.append(f"skipped {path}: {exc.strerror or exc}")
                continue
            if is_dir and entry.is_symlink():
                links.append((child_rel, path))
            elif is_dir:
                self._walk(root, path, child_rel, found, warnings, visited, links)
            elif is_file and (media_type := media_type_for(entry.name)):
                found.append((child_rel, path, media_type))

    def _resource(
        self,
        source: Source,
        rel: str,
        path: Path,
        media_type: str,
        warnings: list[str],
        fresh: list[tuple[str, int, int, str]],
        now_ns: int,
    ) -> ScannedResource | None:
        try:
            st = path.stat()
            if st.st_size > self.max_bytes:
                warnings.append(f"skipped {path}: {too_large(st.st_size, self.max_bytes)}")
                return None
            cached = self.hash_cache.get_file_hash(str(path), st.st_size, st.st_mtime_ns) if self.hash_cache else None
            if cached is not None:
                digest, size = cached, st.st_size
            else:
                data = path.read_bytes()
                problem = too_large(len(data), self.max_bytes) if len(data) > self.max_bytes else text_problem(data)
                if problem:
                    warnings.append(f"skipped {path}: {problem}")
                    return None
                digest, size = sha256_hex(data), len(data)
                if size == st.st_size and now_ns - st.st_mtime_ns >= RACY_WINDOW_NS:
                    fresh.append((str(path), st.st_size, st.st_mtime_ns, digest))
        except OSError as exc:
            warnings.append(f"skipped {path}: {exc.strerror or exc}")
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


def _open_root(raw: str) -> Path:
    """The source directory, resolved; SourceUnavailable when missing, not a directory or
    unreadable."""
    try:
        root = Path(raw).expanduser().resolve(strict=True)
        if not root.is_dir():
            raise SourceUnavailable(f"source {raw!r} is not a directory", path=raw)
        os.listdir(root)
    except (OSError, RuntimeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise SourceUnavailable(f"source {raw!r} is unavailable: {reason}", path=raw) from exc
    return root
