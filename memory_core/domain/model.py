"""The domain's values. All frozen; named constructors instead of ``Cls(**row)``."""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Mapping, Sequence

import attrs

from memory_core.domain.canonical import hash_json, is_utf8_text, plain, printable, sha256_hex
from memory_core.domain.errors import InvalidProjectName, InvalidRequest

PROJECT_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def validate_project_id(name: str) -> str:
    """A project id is a lowercase slug: letters, digits, ``-`` and ``_``, at most 63 chars."""
    if not isinstance(name, str) or not PROJECT_ID_RE.fullmatch(name):
        raise InvalidProjectName(
            f"invalid project name {str(name)[:80]!r}: use 1-63 lowercase letters, digits, '-' or '_'",
            project=name,
        )
    return name


class Layer(enum.Enum):
    """A source's precedence; a later layer's resource overrides an earlier one's."""

    ORGANIZATION = "organization"
    PROJECT = "project"
    LOCAL = "local"

    @property
    def precedence(self) -> int:
        return _LAYER_ORDER[self]


_LAYER_ORDER = {Layer.ORGANIZATION: 0, Layer.PROJECT: 1, Layer.LOCAL: 2}


# Linux's PATH_MAX: the kernel refuses a longer path anyway, so storing one only defers the error.
MAX_SOURCE_PATH_BYTES = 4096


def validate_source_path(path: object) -> str:
    """A source path as typed must be one the catalog can store and the OS can open: a non-empty
    string of UTF-8 text (no lone surrogate, so no undecodable file-name bytes), without NUL."""
    if not isinstance(path, str) or not path:
        raise InvalidRequest("a source path must be a non-empty string")
    shown = printable(path)[:200]  # the error names it, and must itself stay encodable
    if not is_utf8_text(path):
        raise InvalidRequest(f"source path '{shown}' is not valid UTF-8 text", path=shown)
    if "\x00" in path:
        shown = shown.replace("\x00", "\\x00")
        raise InvalidRequest(f"source path '{shown}' contains a NUL character", path=shown)
    if len(path.encode("utf-8")) > MAX_SOURCE_PATH_BYTES:
        raise InvalidRequest(f"source path '{shown[:80]}...' is longer than {MAX_SOURCE_PATH_BYTES} bytes", path=shown)
    return path


@attrs.frozen
class Source:
    path: str
    layer: Layer = Layer.PROJECT


@attrs.frozen
class Project:
    project_id: str
    sources: tuple[Source, ...]
    created_at: str


@attrs.frozen
class ScannedResource:
    """A file found in one source, before override resolution."""

    resource_id: str
    layer: Layer
    uri: str
    resource_hash: str
    byte_size: int
    media_type: str
    path: str


@attrs.frozen
class ManifestEntry:
    ordinal: int
    resource_id: str
    layer: Layer
    uri: str
    resource_hash: str
    byte_size: int
    media_type: str


def manifest_hash(entries: Sequence[ManifestEntry]) -> str:
    """The Effective Memory hash: SHA-256 of the canonical manifest (brief §3)."""
    return hash_json(plain(list(entries)))


@attrs.frozen
class EffectiveMemory:
    """The ordered, override-resolved resources a project sees now."""

    project_id: str
    entries: tuple[ManifestEntry, ...]
    hash: str
    paths: Mapping[str, str] = attrs.field(factory=dict, eq=False, repr=False)
    warnings: tuple[str, ...] = ()

    @classmethod
    def from_entries(
        cls,
        project_id: str,
        entries: Sequence[ManifestEntry],
        paths: Mapping[str, str] | None = None,
        warnings: Sequence[str] = (),
    ) -> EffectiveMemory:
        return cls(project_id, tuple(entries), manifest_hash(entries), dict(paths or {}), tuple(warnings))

    def entry(self, resource_id: str) -> ManifestEntry | None:
        for e in self.entries:
            if e.resource_id == resource_id:
                return e
        return None


def unit_hash_of(text: str, start: int, end: int) -> str:
    """Hash of a unit's text and span (brief §3)."""
    return hash_json({"text": text, "span": [start, end]})


def content_key(text: str) -> str:
    """Whitespace-normalised text hash: two units with the same key duplicate each other."""
    return sha256_hex(" ".join(text.split()).casefold().encode("utf-8"))


@attrs.frozen
class Unit:
    """A chunk of a resource; ``[start, end)`` are code-point offsets into its decoded text."""

    unit_id: str
    resource_id: str
    ordinal: int
    start: int
    end: int
    heading_path: tuple[str, ...]
    text: str
    token_count: int
    unit_hash: str
    resource_hash: str = ""

    @functools.cached_property
    def duplicate_key(self) -> str:
        """``content_key`` of the text, computed once per Unit: selection asks it of every
        candidate of every activation, and a generation's Units live as long as it is open."""
        return content_key(self.text)

    @property
    def search_text(self) -> str:
        """What the lexical index and the embedder see: the unit's text, preceded by its heading
        path when the unit does not open with its own heading (a split section keeps context)."""
        if not self.heading_path or self.text.lstrip().startswith("#"):
            return self.text
        return " > ".join(self.heading_path) + "\n\n" + self.text


def unit_id_for(resource_id: str, ordinal: int) -> str:
    return f"{resource_id}#{ordinal}"


@attrs.frozen
class IndexRevisions:
    """What built a generation; a change in any of them means a new Index Revision."""

    parser: str
    chunker: str
    embedding_model: str
    lexical: str
    vector: str


def index_revision_of(effective_memory_hash: str, revisions: IndexRevisions) -> str:
    """The Index Revision names a commit generation; short, derived from all its inputs."""
    return hash_json({"effective_memory": effective_memory_hash, **plain(revisions)})[:16]


@attrs.frozen
class Generation:
    """A committed, immutable snapshot of Effective Memory plus its indexes."""

    project_id: str
    index_revision: str
    effective_memory_hash: str
    unit_count: int
    resource_count: int
    revisions: IndexRevisions
    created_at: str
    directory: str


Vector = Sequence[float]


Hit = tuple[str, float]  # (unit_id, score), best first


@attrs.frozen
class IndexReport:
    project_id: str
    index_revision: str
    status: str  # "built" or "unchanged"
    effective_memory_hash: str
    resources: int
    units: int
    embedded: int
    reused_embeddings: int
    seconds: float
    warnings: tuple[str, ...]
