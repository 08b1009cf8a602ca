"""In-memory twins of the storage ports, for fast core tests. Same contracts as the real
adapters (``tests/contracts``), no disk."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

import attrs

from memory_core.domain.canonical import is_utf8_text, printable, sha256_hex
from memory_core.domain.errors import (
    BlobCorrupted,
    BlobNotFound,
    GenerationCorrupted,
    InvalidRequest,
    InvalidStorageLocation,
    ProjectExists,
    ProjectNotFound,
    SourceUnavailable,
)
from memory_core.domain.model import (
    EffectiveMemory,
    Generation,
    ManifestEntry,
    Project,
    ScannedResource,
    Source,
    Unit,
    validate_project_id,
)
from memory_core.domain.resource_rules import (
    DEFAULT_MAX_BYTES,
    is_hidden,
    media_type_for,
    resource_id_problem,
    text_problem,
    too_large,
)
from memory_core.domain.storage_rules import (
    STAGING_PREFIX,
    FileStamp,
    GenerationLayout,
    check_digest,
    check_revision,
    is_staging,
)
from memory_core.runs.rules import check_manifest


@attrs.define
class _Pointer:
    current: Generation | None = None
    previous: Generation | None = None


class InMemoryCatalog:
    """Catalog port plus the manifest and file-hash cache helpers of SqliteCatalog."""

    def __init__(self) -> None:
        self._projects: dict[str, Project] = {}
        self._pointers: dict[str, _Pointer] = {}
        self._manifests: dict[str, tuple[ManifestEntry, ...]] = {}
        self._file_hashes: dict[str, tuple[FileStamp, str]] = {}
        self._locations: dict[str, str] = {}

    def add_project(self, project: Project) -> None:
        validate_project_id(project.project_id)
        if project.project_id in self._projects:
            raise ProjectExists(f"project {project.project_id!r} already exists", project=project.project_id)
        self._projects[project.project_id] = project
        self._pointers[project.project_id] = _Pointer()

    def get_project(self, project_id: str) -> Project:
        try:
            return self._projects[project_id]
        except KeyError:
            raise ProjectNotFound.among(project_id, sorted(self._projects)) from None

    def list_projects(self) -> list[Project]:
        return [self._projects[k] for k in sorted(self._projects)]

    def remove_project(self, project_id: str) -> None:
        self.get_project(project_id)
        del self._projects[project_id]
        del self._pointers[project_id]
        self._locations.pop(project_id, None)

    def storage_location(self, project_id: str) -> str | None:
        return self._locations.get(project_id)

    def set_storage_location(
        self, project_id: str, location: str | None, directories: Mapping[str, str], forget: Iterable[str] = ()
    ) -> None:
        self.get_project(project_id)
        if location is None:
            self._locations.pop(project_id, None)
        else:
            self._locations[project_id] = location
        pointer = self._pointers[project_id]
        gone = set(forget)
        for name in ("current", "previous"):
            g = getattr(pointer, name)
            if g is not None and g.index_revision in gone:
                setattr(pointer, name, None)
            elif g is not None and g.index_revision in directories:
                setattr(pointer, name, attrs.evolve(g, directory=directories[g.index_revision]))

    def clear_generations(self, project_id: str) -> None:
        self.get_project(project_id)
        self._pointers[project_id] = _Pointer()

    def current_generation(self, project_id: str) -> Generation | None:
        self.get_project(project_id)
        return self._pointers[project_id].current

    def previous_generation(self, project_id: str) -> Generation | None:
        self.get_project(project_id)
        return self._pointers[project_id].previous

    def set_current_generation(self, generation: Generation) -> None:
        self.get_project(generation.project_id)
        pointer = self._pointers[generation.project_id]
        if pointer.current is not None and pointer.current.index_revision == generation.index_revision:
            pointer.current = generation
        else:
            pointer.previous, pointer.current = pointer.current, generation

    def put_manifest(self, effective_memory: EffectiveMemory) -> str:
        digest = check_manifest(effective_memory)
        self._manifests.setdefault(digest, tuple(effective_memory.entries))
        return digest

    def get_manifest(self, manifest_hash: str) -> tuple[ManifestEntry, ...] | None:
        return self._manifests.get(manifest_hash)

    def get_file_hash(self, path: str, stamp: FileStamp) -> str | None:
        hit = self._file_hashes.get(path)
        return hit[1] if hit is not None and hit[0] == tuple(stamp) else None

    def put_file_hashes(self, rows: Iterable[tuple[str, FileStamp, str]]) -> None:
        for path, stamp, digest in rows:
            self._file_hashes[path] = (FileStamp(*stamp), digest)

    def close(self) -> None:
        pass


class InMemoryBlobStore:
    """BlobStore port over a dict; ``blobs`` is public so tests can corrupt an entry."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    def put(self, data: bytes) -> str:
        digest = sha256_hex(data)
        self.blobs.setdefault(digest, bytes(data))
        return digest

    def get(self, digest: str) -> bytes:
        check_digest(digest)
        try:
            data = self.blobs[digest]
        except KeyError:
            raise BlobNotFound(f"blob {digest} is not in the store", digest=digest) from None
        actual = sha256_hex(data)
        if actual != digest:
            raise BlobCorrupted(f"blob {digest} is corrupted (its content hashes to {actual})", digest=digest)
        return data

    def exists(self, digest: str) -> bool:
        return check_digest(digest) in self.blobs

    def delete(self, digest: str) -> None:
        self.blobs.pop(check_digest(digest), None)

    def digests(self) -> Iterator[str]:
        return iter(sorted(self.blobs))


class InMemoryGenerationStore(GenerationLayout):
    """GenerationStore port; directories are fake paths under ``/in-memory/projects``."""

    def __init__(self, locate: Callable[[str], str | None] | None = None) -> None:
        self.root = Path("/in-memory/projects")
        self._locate = locate  # as FileGenerationStore: the catalog's recorded location
        self._staging: dict[Path, list[Unit] | None] = {}
        self._published: dict[Path, list[Unit]] = {}
        self._corrupted: set[Path] = set()
        self._counter = itertools.count(1)
        # Called with (staging, published) after a publish, as a real rename would move files:
        # in-memory index factories register their ``relocate`` here.
        self.on_publish: list[Callable[[Path, Path], None]] = []

    def list_generations(self, project_id: str) -> list[str]:
        gens = self.generations_dir(project_id)
        return sorted(p.name for p in self._published if p.parent == gens)

    def stage(self, project_id: str) -> Path:
        staging = self.generations_dir(project_id) / f"{STAGING_PREFIX}{next(self._counter)}"
        self._staging[staging] = None
        return staging

    def write_units(self, directory: Path, units: Sequence[Unit]) -> None:
        if directory not in self._staging:
            raise GenerationCorrupted(f"staging directory {str(directory)!r} does not exist")
        self._staging[directory] = list(units)

    def publish(self, project_id: str, staging: Path, index_revision: str) -> Path:
        if not is_staging(staging, self.generations_dir(project_id)):
            raise InvalidRequest(f"{str(staging)!r} is not a staging directory of project {project_id!r}")
        target = self.generation_dir(project_id, index_revision)
        if staging not in self._staging:
            raise GenerationCorrupted(f"staging directory {str(staging)!r} is gone")
        units = self._staging[staging]
        if units is None:
            raise GenerationCorrupted(f"staging directory {str(staging)!r} has no units.jsonl")
        del self._staging[staging]
        if target not in self._published or target in self._corrupted:
            self._published[target] = units
            self._corrupted.discard(target)
            for listener in self.on_publish:
                listener(staging, target)
        return target

    def load_units(self, directory: Path) -> list[Unit]:
        self.verify(directory)
        return list(self._published[directory])

    def verify(self, directory: Path) -> None:
        if directory not in self._published:
            raise GenerationCorrupted(f"generation {str(directory)!r} is not sealed")
        if directory in self._corrupted:
            raise GenerationCorrupted(f"generation {str(directory)!r} does not match its seal")

    def corrupt(self, directory: Path) -> None:
        """Test hook: make a published generation fail verification."""
        self._corrupted.add(directory)

    def prune(self, project_id: str, keep: set[str]) -> None:
        gens = self.generations_dir(project_id)
        for path in [p for p in self._published if p.parent == gens and p.name not in keep]:
            del self._published[path]

    def discard(self, staging: Path) -> None:
        if not is_staging(staging):
            raise InvalidRequest(f"{str(staging)!r} is not a staging directory of this store")
        self._staging.pop(staging, None)

    def remove_project(self, project_id: str, location: Path | None = None) -> None:
        project = location if location is not None else self.location(project_id)
        for table in (self._staging, self._published):
            for path in [p for p in table if p.is_relative_to(project / "generations")]:
                del table[path]
        if project == self.default_location(project_id):
            for table in (self._staging, self._published):
                for path in [p for p in table if p.is_relative_to(project)]:
                    del table[path]

    def usage(self, project_id: str) -> tuple[int, dict[str, int]]:
        """Sizes are the units' text bytes: there are no files to measure."""
        gens = self.generations_dir(project_id)
        per = {
            p.name: sum(len(u.text.encode()) for u in units) for p, units in self._published.items() if p.parent == gens
        }
        return sum(per.values()), per

    def prepare_location(self, project_id: str, destination: Path, taken: Sequence[Path]) -> Path:
        dest = Path(destination)
        if dest == self.location(project_id):
            raise InvalidStorageLocation("already there", project=project_id, reason="same_location")
        for other in [*taken, self.location(project_id)]:
            if dest == other or dest.is_relative_to(other) or Path(other).is_relative_to(dest):
                raise InvalidStorageLocation("overlaps", project=project_id, reason="overlaps")
        if any(p.is_relative_to(dest) for table in (self._staging, self._published) for p in table):
            raise InvalidStorageLocation("not empty", project=project_id, reason="not_empty")
        return dest

    def abandon_location(self, project_id: str, destination: Path) -> None:
        for table in (self._staging, self._published):
            for path in [p for p in table if p.is_relative_to(Path(destination) / "generations")]:
                del table[path]

    def overlap(self, path: Path, places: Sequence[Path]) -> Path | None:
        return next((p for p in places if path == p or path.is_relative_to(p) or p.is_relative_to(path)), None)

    def gone(self, directory: Path) -> bool:
        return directory not in self._published

    def building(self, project_id: str) -> AbstractContextManager[None]:
        """One process: the engine's callers serialise (the daemon's engine lock)."""
        return contextlib.nullcontext()

    def relocating(self, project_id: str) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def copy_generations(self, project_id: str, directories: Mapping[str, Path], destination: Path) -> dict[str, Path]:
        """In-memory index factories follow a rename, not a copy: their indexes move with it."""
        moved: dict[str, Path] = {}
        for revision, source in sorted(directories.items()):
            self.verify(source)
            target = Path(destination) / "generations" / check_revision(revision)
            moved[revision] = target
        for revision, target in moved.items():
            self._published[target] = list(self._published[directories[revision]])
            for listener in self.on_publish:
                listener(directories[revision], target)
        return moved


class InMemoryScanner:
    """SourceScanner port over ``{source path: {relative path: bytes}}``. The mapping is live:
    edit it (or use ``write``/``remove``) to simulate files changing."""

    def __init__(
        self,
        sources: MutableMapping[str, MutableMapping[str, bytes]] | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.sources: MutableMapping[str, MutableMapping[str, bytes]] = sources if sources is not None else {}
        self.max_bytes = max_bytes
        self._where: dict[str, tuple[str, str]] = {}

    def write(self, source_path: str, relative_path: str, data: bytes) -> None:
        self.sources.setdefault(source_path, {})[relative_path] = data

    def remove(self, source_path: str, relative_path: str) -> None:
        del self.sources[source_path][relative_path]

    def scan(self, source: Source, *, rehash: bool = False) -> tuple[list[ScannedResource], list[str]]:
        files: Mapping[str, bytes] | None = self.sources.get(source.path)
        if files is None:
            raise SourceUnavailable(f"source {source.path!r} is unavailable", path=source.path)
        resources: list[ScannedResource] = []
        warnings: list[str] = []
        for rel in sorted(files):
            media_type = media_type_for(rel)
            if is_hidden(rel) or media_type is None:
                continue
            data = files[rel]
            path = f"{source.path.rstrip('/')}/{rel}"
            if not is_utf8_text(rel):  # a file name whose bytes are not UTF-8 (os.fsdecode)
                warnings.append(f"skipped {printable(path)}: its name is not valid UTF-8")
                continue
            if problem := resource_id_problem(rel):
                warnings.append(f"skipped {path}: its path {problem}")
                continue
            problem = too_large(len(data), self.max_bytes) if len(data) > self.max_bytes else text_problem(data)
            if problem:
                warnings.append(f"skipped {path}: {problem}")
                continue
            self._where[path] = (source.path, rel)
            resources.append(
                ScannedResource(
                    resource_id=rel,
                    layer=source.layer,
                    uri=f"memory://{path}",
                    resource_hash=sha256_hex(data),
                    byte_size=len(data),
                    media_type=media_type,
                    path=path,
                )
            )
        return resources, warnings

    def read(self, resource: ScannedResource) -> bytes:
        source_path, rel = self._where.get(resource.path, ("", ""))
        data = self.sources.get(source_path, {}).get(rel)
        if data is None:
            raise SourceUnavailable(f"cannot read {resource.path}: no such file", path=resource.path)
        if sha256_hex(data) != resource.resource_hash:
            raise SourceUnavailable(
                f"{resource.path} changed since it was scanned; scan the source again",
                path=resource.path,
                resource_id=resource.resource_id,
            )
        return bytes(data)
