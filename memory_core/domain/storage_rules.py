"""What local storage accepts, whoever implements it (files on disk or the in-memory fakes): blob
digests, index revisions, the staging prefix, the canonical manifest and the file stamp."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import NamedTuple

from memory_core.domain.canonical import canonical_json, is_sha256_hex, plain
from memory_core.domain.errors import InvalidRequest
from memory_core.domain.model import ManifestEntry

STAGING_PREFIX = ".staging-"
REVISION_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


def check_digest(digest: str) -> str:
    """Only a lowercase SHA-256 names a blob; anything else could walk out of the store."""
    if not is_sha256_hex(digest):
        raise InvalidRequest(f"not a SHA-256 digest: {digest!r}", digest=digest)
    return digest


def check_revision(index_revision: str) -> str:
    if not isinstance(index_revision, str) or not REVISION_PATTERN.match(index_revision):
        raise InvalidRequest(f"invalid index revision {index_revision!r}", index_revision=index_revision)
    return index_revision


def manifest_json(entries: Sequence[ManifestEntry]) -> bytes:
    """The canonical manifest whose SHA-256 is the Effective Memory hash."""
    return canonical_json(plain(list(entries)))


class FileStamp(NamedTuple):
    """What the hash cache compares: any content write changes ``ctime_ns``, and replacing the
    file (a rename over it, ``tar`` extracting) changes ``inode``."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileStamp:
        return cls(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
