"""Project Local Storage: ``projects/<id>/generations/<index_revision>/`` (brief §6).

A generation is built in ``generations/.staging-<random>/``, sealed (a ``SEALED`` file lists
the SHA-256 of every file), fsynced and renamed into place, so a published directory is always
complete. Deletions rename to ``.trash-<random>`` first: a half-deleted generation never looks
like a published one, and leftovers are swept by the next ``prune``/``remove_project``.

A project's Local Storage is ``projects/<id>/`` unless ``memcore project storage move`` gave it
another directory; the catalog records that one and ``locate`` reads it, so every process that
shares the home finds the same place. A move copies the generations into the new directory
(staged, re-verified against their seals, renamed into place); the caller switches the catalog
in one transaction and only then drops the old copy, so a failure leaves the old one serving.

A Local Storage directory lies nowhere in the home but the project's own ``projects/<id>``
(the home's folders are the home's: ``eval import-beir`` replaces ``evaluation-sources/<id>``
wholesale, say), overlaps no other project's storage and no memory source. A move or clear
holds the home's relocation lock and the project's lock exclusively (a second one is refused,
``storage_unavailable`` with reason ``busy``); a build holds the project's lock shared from its
first look at the catalog to its last prune, so it never publishes into a place being moved
away (a build waits while a move runs; a move is refused while a build runs). The locks are
``flock``s on files under ``<root>/.locks/``: every process and thread of the home takes them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from memory_core.adapters.files.blob_store import fsync_dir, write_private
from memory_core.adapters.files.disk_errors import disk_writes, unavailable
from memory_core.adapters.storage_format import CONVERTER as STORED
from memory_core.adapters.system.crash_points import crash_point
from memory_core.adapters.system.home import HomeLayout
from memory_core.domain.canonical import canonical_json
from memory_core.domain.errors import (
    GenerationCorrupted,
    InvalidRequest,
    InvalidStorageLocation,
    StorageUnavailable,
)
from memory_core.domain.model import Unit, validate_project_id
from memory_core.domain.storage_rules import (
    REVISION_PATTERN,
    STAGING_PREFIX,
    GenerationLayout,
    check_revision,
    is_staging,
)

TRASH_PREFIX = ".trash-"
SEALED = "SEALED"
UNITS = "units.jsonl"
SEAL_FORMAT = 1
LOCKS = ".locks"  # under the store's root: never a project id (ids start with a letter or digit)
RELOCATION_LOCK = "relocation.lock"
WRITE_FAILURES = (errno.ENOSPC, errno.EDQUOT)


def _left_by_interrupted_copy(destination: Path) -> bool:
    """Whether ``destination`` holds only what ``copy_generations`` writes (staging folders and
    generations named by revision under ``generations/``): a move that died before its catalog
    switch left it, and running the move again must be able to reuse the place."""
    gens = destination / "generations"
    if os.listdir(destination) != ["generations"] or not gens.is_dir() or gens.is_symlink():
        return False
    return all(
        (gens / name).is_dir() and not (gens / name).is_symlink()
        and (name.startswith(STAGING_PREFIX) or REVISION_PATTERN.match(name) is not None)
        for name in os.listdir(gens)
    )  # fmt: skip


def _hash_file(path: Path, *, sync: bool = False) -> str:
    """SHA-256 of a file; ``sync``: fsync it too (sealing, before the rename publishes it)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
        if sync:
            os.fsync(f.fileno())
    return digest.hexdigest()


def read_seal(directory: Path) -> dict[str, str]:
    """The sealed ``relative path -> sha256`` map; GenerationCorrupted if absent or unreadable."""
    try:
        raw: Any = json.loads((directory / SEALED).read_bytes())
        files = raw["files"]
        if raw.get("format") != SEAL_FORMAT or not isinstance(files, dict):
            raise ValueError("unknown seal format")
        return {str(k): str(v) for k, v in files.items()}
    except FileNotFoundError:
        raise GenerationCorrupted(
            f"generation {str(directory)!r} is not sealed (missing or never published)",
            directory=str(directory),
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GenerationCorrupted(
            f"generation {str(directory)!r} has an unreadable {SEALED} file: {exc}", directory=str(directory)
        ) from exc


class FileGenerationStore(GenerationLayout):
    """Implements ``memory_core.ports.GenerationStore`` under ``projects_root``."""

    def __init__(
        self,
        projects_root: str | os.PathLike[str],
        staging_ttl_s: float = 3600.0,
        locate: Callable[[str], str | None] | None = None,
        home: HomeLayout | None = None,
    ) -> None:
        self.root = Path(projects_root)
        # The home whose folders no moved Local Storage may use (None: only the store's root).
        self.home = home
        # The directories ``prepare_location`` created for a move, by destination: a failed
        # move removes those (``abandon_location``), never one the user had made.
        self._created: dict[Path, list[Path]] = {}
        # A staging directory younger than this may belong to a build still running elsewhere.
        self.staging_ttl_s = staging_ttl_s
        self._locate = locate
        # The last units written and each one's line, by identity (the indexer hands back the
        # same Unit objects for unchanged resources): a re-index serialises only new units. And
        # the last body written, by its SHA-256: loading the generation just built (the engine's
        # first activation after a re-index) skips parsing 10,000 lines whose bytes match.
        self._memo_lock = threading.Lock()
        self._lines: dict[int, tuple[Unit, bytes]] = {}
        self._written: tuple[str, tuple[Unit, ...]] | None = None

    def list_generations(self, project_id: str) -> list[str]:
        """Index revisions published for the project, sorted."""
        gens = self.generations_dir(project_id)
        try:
            names = os.listdir(gens)
        except FileNotFoundError:
            return []
        return sorted(n for n in names if REVISION_PATTERN.match(n) and (gens / n).is_dir())

    def stage(self, project_id: str) -> Path:
        gens = self.generations_dir(project_id)
        gens.mkdir(mode=0o700, parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=gens))  # mkdtemp makes it 0700

    def write_units(self, directory: Path, units: Sequence[Unit]) -> None:
        with self._memo_lock:
            known = self._lines
        lines: dict[int, tuple[Unit, bytes]] = {}
        for u in units:
            hit = known.get(id(u))
            # ``is``: the memo holds its units, so an id is never reused while it is a key.
            line = hit[1] if hit is not None and hit[0] is u else canonical_json(STORED.unstructure(u)) + b"\n"
            lines[id(u)] = (u, line)
        body = b"".join(lines[id(u)][1] for u in units)
        try:
            write_private(Path(directory) / UNITS, body)
        except FileNotFoundError:
            raise GenerationCorrupted(
                f"staging directory {str(directory)!r} does not exist", directory=str(directory)
            ) from None
        except OSError as exc:  # a full disk: storage_unavailable naming the place
            raise unavailable("a generation's units", directory, exc) from exc
        with self._memo_lock:
            self._lines = lines  # only this build's: bounded
            self._written = (hashlib.sha256(body).hexdigest(), tuple(units))

    def publish(self, project_id: str, staging: Path, index_revision: str) -> Path:
        staging = self._own_staging(project_id, staging)
        target = self.generation_dir(project_id, index_revision)
        if not staging.is_dir():
            raise GenerationCorrupted(f"staging directory {str(staging)!r} is gone", directory=str(staging))
        if not (staging / UNITS).is_file():
            raise GenerationCorrupted(f"staging directory {str(staging)!r} has no {UNITS}", directory=str(staging))
        if target.exists() and self._keep_existing(target):
            self.discard(staging)
            return target
        crash_point("generation.publish.before_seal")
        with disk_writes("a generation's seal", staging):
            self._seal(staging, index_revision)
        crash_point("generation.publish.before_rename")
        try:
            os.rename(staging, target)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            # Another builder published the same revision first; its content is identical.
            self.discard(staging)
        crash_point("generation.publish.after_rename")
        fsync_dir(target.parent)
        return target

    def load_units(self, directory: Path) -> list[Unit]:
        directory = Path(directory)
        seal = read_seal(directory)
        try:
            data = (directory / UNITS).read_bytes()
        except FileNotFoundError:
            raise GenerationCorrupted(f"generation {str(directory)!r} has no {UNITS}") from None
        digest = hashlib.sha256(data).hexdigest()
        if seal.get(UNITS) != digest:
            raise GenerationCorrupted(
                f"generation {str(directory)!r}: {UNITS} does not match its seal", directory=str(directory)
            )
        with self._memo_lock:
            written = self._written
        if written is not None and written[0] == digest:
            return list(written[1])  # the very bytes this store wrote from these units
        return [STORED.structure(json.loads(line), Unit) for line in data.splitlines() if line]

    def verify(self, directory: Path) -> None:
        """Re-hash every sealed file; GenerationCorrupted on a missing file or a mismatch.
        Files added after sealing are ignored (readers may leave lock files)."""
        directory = Path(directory)
        for rel, expected in sorted(read_seal(directory).items()):
            try:
                actual = _hash_file(directory / rel)
            except FileNotFoundError:
                raise GenerationCorrupted(
                    f"generation {str(directory)!r} lost {rel}", directory=str(directory), file=rel
                ) from None
            if actual != expected:
                raise GenerationCorrupted(
                    f"generation {str(directory)!r}: {rel} does not match its seal",
                    directory=str(directory),
                    file=rel,
                )

    def prune(self, project_id: str, keep: set[str]) -> None:
        """Remove published generations not in ``keep``, stale staging dirs and leftover trash."""
        gens = self.generations_dir(project_id)
        try:
            entries = sorted(os.scandir(gens), key=lambda e: e.name)
        except FileNotFoundError:
            return
        stale_before = time.time() - self.staging_ttl_s
        for entry in entries:
            if entry.name in keep or not entry.is_dir(follow_symlinks=False):
                continue
            if entry.name.startswith(TRASH_PREFIX):
                shutil.rmtree(entry.path, ignore_errors=True)
            elif entry.name.startswith(STAGING_PREFIX):
                if entry.stat(follow_symlinks=False).st_mtime <= stale_before:
                    self._trash(Path(entry.path))
            elif REVISION_PATTERN.match(entry.name):
                self._trash(Path(entry.path))

    def discard(self, staging: Path) -> None:
        staging = Path(staging)
        if not is_staging(staging):
            raise InvalidRequest(f"{str(staging)!r} is not a staging directory of this store")
        shutil.rmtree(staging, ignore_errors=True)

    def remove_project(self, project_id: str, location: Path | None = None) -> None:
        """Delete the project's Local Storage (never its Runs or Cases, which live in local.db).

        ``location``: where it is, read before the catalog forgot the project (default: now)."""
        default = self.default_location(project_id)
        place = Path(location) if location is not None else self.location(project_id)
        if place != default:
            # A directory the user chose: empty what we put there, then the directory itself.
            gens = place / "generations"
            if gens.exists():
                self._trash(gens)
            self._sweep_trash(place)
            with contextlib.suppress(OSError):
                place.rmdir()
            return
        if place.exists():
            self._trash(place)
        self._sweep_trash(self.root)

    # -- Local Storage management -------------------------------------------------------------

    def usage(self, project_id: str) -> tuple[int, dict[str, int]]:
        """Bytes under the location (staging and trash included), and per published generation."""
        place = self.location(project_id)
        per = {rev: _tree_size(self.generation_dir(project_id, rev)) for rev in self.list_generations(project_id)}
        return _tree_size(place), per

    def prepare_location(self, project_id: str, destination: Path, taken: Sequence[Path]) -> Path:
        """Check and create ``destination`` (owner-only) for the project's Local Storage.

        Refused with InvalidStorageLocation when it is not a directory, not empty, not writable,
        inside or around another project's storage or a memory source (``taken``: ``overlaps``),
        or inside or around the home (``in_home``) other than as the project's own default
        place: removing one would delete the other, and the home's folders are the home's."""
        # Compared as real paths: a symlinked parent must not hide an overlap.
        dest = _real(Path(destination).expanduser())
        current, default = _real(self.location(project_id)), _real(self.default_location(project_id))

        def refuse(reason: str, message: str) -> InvalidStorageLocation:
            return InvalidStorageLocation(message, project=project_id, destination=str(dest), reason=reason)

        if dest == current:
            raise refuse("same_location", f"project {project_id!r} already keeps its Local Storage in {str(dest)!r}")
        for other in [*(_real(Path(t)) for t in taken), current]:
            if _overlaps(dest, other):
                raise refuse(
                    "overlaps",
                    f"{str(dest)!r} is inside or around {str(other)!r} (Local Storage or a memory source)",
                )
        if dest != default and _overlaps(dest, self._home_root()):
            raise refuse("in_home", self._in_home_message(dest))
        if dest.exists() and not dest.is_dir():
            raise refuse("not_a_directory", f"{str(dest)!r} exists and is not a directory")
        created = _missing(dest)
        try:
            dest.mkdir(mode=0o700, parents=True, exist_ok=True)
            if os.listdir(dest) and not _left_by_interrupted_copy(dest):
                raise refuse("not_empty", f"{str(dest)!r} is not empty: give an empty or new directory")
            os.chmod(dest, 0o700)
            probe = dest / f"{STAGING_PREFIX}probe-{secrets.token_hex(4)}"
            probe.mkdir(mode=0o700)
            probe.rmdir()
        except BaseException as exc:
            _remove_empty(created)
            if isinstance(exc, PermissionError):
                raise refuse("not_writable", f"{str(dest)!r} is not writable: {exc.strerror}") from exc
            if isinstance(exc, OSError) and exc.errno in WRITE_FAILURES:
                raise unavailable("the new Local Storage directory", dest, exc) from exc
            if isinstance(exc, OSError):
                raise refuse("not_writable", f"cannot use {str(dest)!r}: {exc.strerror or exc}") from exc
            raise
        if created:
            self._created[dest] = created
        return dest

    def abandon_location(self, project_id: str, destination: Path) -> None:
        """Undo a move into ``destination`` that did not complete: remove the generations copied
        there and the directories ``prepare_location`` created for it (none the user made)."""
        dest = Path(destination)
        gens = dest / "generations"
        if gens.is_dir() and not gens.is_symlink():
            self._trash(gens)
        self._sweep_trash(dest)
        _remove_empty(self._created.pop(dest, []))

    def overlap(self, path: Path, places: Sequence[Path]) -> Path | None:
        """The first of ``places`` that ``path`` lies in or around (as real paths), else None."""
        real = _real(Path(path).expanduser())
        return next((Path(p) for p in places if _overlaps(real, _real(Path(p)))), None)

    def gone(self, directory: Path) -> bool:
        """Whether nothing is left of a published generation: its directory is not there."""
        return not os.path.lexists(directory)

    @contextlib.contextmanager
    def building(self, project_id: str) -> Iterator[None]:
        """Held while a build reads the catalog, stages, publishes and prunes: shared with other
        builds of the project, waiting while a move or clear of it runs."""
        with self._flock(self._project_lock(project_id), fcntl.LOCK_SH, project_id):
            yield

    @contextlib.contextmanager
    def relocating(self, project_id: str) -> Iterator[None]:
        """Held while the project's Local Storage moves or is cleared: exclusive, refused at
        once (``storage_unavailable``, reason ``busy``) while another move or clear in the home,
        or a build of the project, holds it."""
        lock = fcntl.LOCK_EX | fcntl.LOCK_NB
        with (
            self._flock(self._lock_path(RELOCATION_LOCK), lock, project_id),
            self._flock(self._project_lock(project_id), lock, project_id),
        ):
            yield

    def copy_generations(self, project_id: str, directories: Mapping[str, Path], destination: Path) -> dict[str, Path]:
        """Copy published generations (index revision -> directory) into ``destination`` and
        return their new directories. Each is staged, re-verified against its seal, fsynced and
        renamed into place; on any failure every copy made here is removed and the originals
        are untouched. A write that fails (a full disk) is StorageUnavailable naming the place."""
        dest = Path(destination)
        gens = dest / "generations"
        moved: dict[str, Path] = {}
        try:
            with disk_writes("the moved generations", dest):
                gens.mkdir(mode=0o700, parents=True, exist_ok=True)
                for entry in os.listdir(gens):  # what an interrupted move left (prepare_location allowed it)
                    shutil.rmtree(gens / entry)
            for revision, source in sorted(directories.items()):
                self.verify(source)  # a damaged generation is not carried along as if sound
                with disk_writes(f"a copy of generation {revision}", dest):
                    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=gens))
                    _copy_tree(source, staging)
                self.verify(staging)
                with disk_writes(f"a copy of generation {revision}", dest):
                    _sync_tree(staging)
                    crash_point("generation.copy.before_rename")
                    target = gens / check_revision(revision)
                    os.rename(staging, target)
                    fsync_dir(gens)
                moved[revision] = target
        except BaseException:
            shutil.rmtree(gens, ignore_errors=True)
            raise
        return moved

    def _sweep_trash(self, directory: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(directory):
                if entry.name.startswith(TRASH_PREFIX):
                    shutil.rmtree(entry.path, ignore_errors=True)

    # -- helpers ----------------------------------------------------------------------------

    def _home_root(self) -> Path:
        return _real(self.home.root if self.home is not None else self.root)

    def _in_home_message(self, dest: Path) -> str:
        folders = self.home.own_folders if self.home is not None else (self.root,)
        within = next((f for f in folders if dest.is_relative_to(_real(f))), None)
        where = f"the home's {within.name!r} folder" if within is not None else "the memory-core home"
        return (
            f"{str(dest)!r} is inside or around {where} ({str(self._home_root())!r}): the home's folders "
            "are its own; give a directory outside it (or the project's default place, to move back)"
        )

    def _lock_path(self, name: str) -> Path:
        return self.root / LOCKS / name

    def _project_lock(self, project_id: str) -> Path:
        return self._lock_path(f"project-{validate_project_id(project_id)}.lock")

    @contextlib.contextmanager
    def _flock(self, path: Path, operation: int, project_id: str) -> Iterator[None]:
        with disk_writes("a Local Storage lock", path.parent):
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, operation)
            except BlockingIOError:
                relocation = path.name == RELOCATION_LOCK
                what = "another move or clear of Local Storage in this home" if relocation else "an index of it"
                raise StorageUnavailable(
                    f"project {project_id!r}: {what} is running; try again when it finishes",
                    project=project_id,
                    reason="busy",
                    path=str(path),
                ) from None
            yield
        finally:
            os.close(fd)  # releases the lock

    def _own_staging(self, project_id: str, staging: Path) -> Path:
        staging = Path(staging)
        if not is_staging(staging, self.generations_dir(project_id)):
            raise InvalidRequest(
                f"{str(staging)!r} is not a staging directory of project {project_id!r}",
                project=project_id,
            )
        return staging

    def _seal(self, staging: Path, index_revision: str) -> None:
        files: dict[str, str] = {}
        for dirpath, dirnames, filenames in os.walk(staging):
            dirnames.sort()
            here = Path(dirpath)
            for name in sorted(filenames):
                path = here / name
                rel = path.relative_to(staging).as_posix()
                if rel != SEALED:
                    files[rel] = _hash_file(path, sync=True)
            fsync_dir(here)
        seal = {"format": SEAL_FORMAT, "index_revision": index_revision, "files": files}
        write_private(staging / SEALED, canonical_json(seal))
        fsync_dir(staging)

    def _keep_existing(self, target: Path) -> bool:
        """True when ``target`` is a sound published generation; a corrupted one is trashed so
        that publishing the same revision again repairs it."""
        try:
            self.verify(target)
            return True
        except GenerationCorrupted:
            self._trash(target)
            return False

    def _trash(self, path: Path) -> None:
        trash = path.parent / f"{TRASH_PREFIX}{secrets.token_hex(8)}"
        try:
            os.rename(path, trash)
        except FileNotFoundError:
            return
        fsync_dir(path.parent)
        crash_point("generation.trash.after_rename")
        shutil.rmtree(trash, ignore_errors=True)


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _missing(path: Path) -> list[Path]:
    """``path`` and those of its ancestors that do not exist yet, deepest first."""
    missing = []
    while not os.path.lexists(path) and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def _remove_empty(directories: Sequence[Path]) -> None:
    """Remove these directories (deepest first) while they are empty; leave any that is not."""
    for directory in directories:
        try:
            directory.rmdir()
        except OSError:
            return


def _copy_file(source: Path, target: Path) -> None:
    """Copy one sealed file of a generation (bytes and mode)."""
    shutil.copy2(source, target)


def _copy_tree(source: Path, target: Path) -> None:
    """``source``'s files and folders into the existing ``target``. Not ``shutil.copytree``: it
    gathers its files' errors into one ``shutil.Error`` without errno, and a full disk must be
    told from a damaged generation."""
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames.sort()
        here = target / Path(dirpath).relative_to(source)
        here.mkdir(mode=0o700, exist_ok=True)
        for name in sorted(filenames):
            _copy_file(Path(dirpath) / name, here / name)


def _overlaps(a: Path, b: Path) -> bool:
    return a == b or a.is_relative_to(b) or b.is_relative_to(a)


def _tree_size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _sync_tree(root: Path) -> None:
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                os.fsync(f.fileno())
        fsync_dir(Path(dirpath))
