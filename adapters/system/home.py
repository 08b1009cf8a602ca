"""The memory-core home: where ``local.db``, blobs and Project Local Storage live (brief §6)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import attrs
import platformdirs

from memory_core.domain.errors import StorageUnavailable
from memory_core.domain.model import validate_project_id

HOME_ENV = "MEMORY_CORE_HOME"
APP_NAME = "memory-core"
DIR_MODE = 0o700
FILE_MODE = 0o600


def resolve_home(explicit: str | os.PathLike[str] | None = None) -> Path:
    """``explicit``, else ``$MEMORY_CORE_HOME``, else the platform's user data directory."""
    if explicit is not None and str(explicit) != "":
        return Path(explicit).expanduser().absolute()
    from_env = os.environ.get(HOME_ENV, "")
    if from_env:
        return Path(from_env).expanduser().absolute()
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)).absolute()


def prepare_home(path: str | os.PathLike[str]) -> Path:
    """Set the owner-only umask, create the home 0700 (or tighten it) and prove it is writable."""
    os.umask(0o077)
    home = Path(path)
    try:
        home.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        os.chmod(home, DIR_MODE)
        # A probe write: os.access lies for root and knows nothing of read-only mounts.
        probe = home / f".probe-{secrets.token_hex(8)}"
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
        os.unlink(probe)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise StorageUnavailable(
            f"memory-core home {str(home)!r} cannot be created or written: {reason}. "
            f"Point ${HOME_ENV} at a writable directory.",
            path=str(home),
        ) from exc
    return home


class _Below:
    """A path below a ``HomeLayout``'s root, read as an attribute (``layout.db_path``)."""

    def __init__(self, *parts: str) -> None:
        self.parts = parts

    def __get__(self, layout: HomeLayout, owner: type[HomeLayout]) -> Path:
        return layout.root.joinpath(*self.parts)


@attrs.frozen
class HomeLayout:
    """Where each store lives under a home directory."""

    root: Path

    @classmethod
    def at(cls, root: str | os.PathLike[str]) -> HomeLayout:
        return cls(Path(root))

    @classmethod
    def prepared(cls, explicit: str | os.PathLike[str] | None = None) -> HomeLayout:
        """Resolve the home, prepare it (umask, 0700, writable) and lay it out."""
        return cls(prepare_home(resolve_home(explicit)))

    # Each store's place below the root (one table: a new folder goes here and in own_folders).
    db_path = _Below("local.db")
    blobs_dir = _Below("evaluation-corpora", "blobs")
    projects_dir = _Below("projects")
    models_dir = _Below("models")  # models built from shipped weights (the ONNX graph), owner-only like the rest
    evaluation_sources_dir = _Below("evaluation-sources")  # what ``eval import-beir`` writes, one folder a project
    run_dir = _Below("run")  # the daemon's lock file, log and (when the path is short enough) socket
    demo_dir = _Below("demo")  # ``memcore demo``'s copy of the shipped demo memory (its project's source)

    @property
    def own_folders(self) -> tuple[Path, ...]:
        """Every folder the home uses for itself: the one list (a new folder goes here too).
        A project's Local Storage may lie in none of them, nor anywhere else in the home but
        its own ``projects/<id>`` (``FileGenerationStore.prepare_location``)."""
        return (
            self.projects_dir,
            self.blobs_dir.parent,
            self.evaluation_sources_dir,
            self.models_dir,
            self.run_dir,
            self.demo_dir,
        )

    def project_dir(self, project_id: str) -> Path:
        """``projects/<project_id>/``; the id is validated so it can never escape the home."""
        return self.projects_dir / validate_project_id(project_id)


def db_path(home: str | os.PathLike[str]) -> Path:
    return HomeLayout.at(home).db_path


def blobs_dir(home: str | os.PathLike[str]) -> Path:
    return HomeLayout.at(home).blobs_dir


def projects_dir(home: str | os.PathLike[str]) -> Path:
    return HomeLayout.at(home).projects_dir


def project_dir(home: str | os.PathLike[str], project_id: str) -> Path:
    return HomeLayout.at(home).project_dir(project_id)
