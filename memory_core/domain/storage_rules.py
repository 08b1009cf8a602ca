"""What local storage accepts, whoever implements it (files on disk or the in-memory fakes): blob
digests, index revisions, the staging prefix, where a project's generations are, the canonical
manifest and the file stamp."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from memory_core.domain.canonical import canonical_json, is_sha256_hex, plain
from memory_core.domain.errors import InvalidRequest
from memory_core.domain.model import ManifestEntry, validate_project_id

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


class GenerationLayout:
    """Where a project's generations are, for every GenerationStore: ``<root>/<project_id>/``
    unless the catalog recorded another directory (``_locate``), and ``generations/<revision>/``
    under it. A store sets ``root`` and ``_locate`` in its ``__init__``."""

    root: Path
    # The project's recorded Local Storage directory, None for the default (the catalog's).
    _locate: Callable[[str], str | None] | None

    def default_location(self, project_id: str) -> Path:
        return self.root / validate_project_id(project_id)

    def location(self, project_id: str) -> Path:
        """The directory that holds the project's ``generations/``."""
        default = self.default_location(project_id)  # the id is checked before the catalog is asked
        recorded = self._locate(project_id) if self._locate is not None else None
        return Path(recorded) if recorded else default

    def generations_dir(self, project_id: str) -> Path:
        return self.location(project_id) / "generations"

    def generation_dir(self, project_id: str, index_revision: str) -> Path:
        return self.generations_dir(project_id) / check_revision(index_revision)


def is_staging(path: Path, generations_dir: Path | None = None) -> bool:
    """Whether ``path`` is a staging directory in ``generations_dir``, or (None) in any project's
    ``generations/``: a moved project stages outside the store's root, so the name marks ours."""
    if generations_dir is None:
        in_place = path.parent.name == "generations"
    else:
        in_place = path.parent == generations_dir
    return in_place and path.name.startswith(STAGING_PREFIX)


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


def validate_build_input(unit_ids: Sequence[str], lengths: Sequence[int]) -> int:
    """Checks ids against vectors; returns the common dimension count (0 when empty)."""
    if len(unit_ids) != len(lengths):
        raise InvalidRequest(f"{len(unit_ids)} unit ids but {len(lengths)} vectors")
    if len(set(unit_ids)) != len(unit_ids):
        raise InvalidRequest("duplicate unit ids in a vector index")
    dims = set(lengths)
    if len(dims) > 1:
        raise InvalidRequest("vectors of different dimensions", dimensions=sorted(dims))
    dim = dims.pop() if dims else 0
    if unit_ids and dim == 0:
        raise InvalidRequest("vectors must have at least one dimension")
    return dim
