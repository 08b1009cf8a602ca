"""Folders that hold the resources of evaluation projects (BEIR imports, replays).

``FolderSources(root)(project_id, files)`` makes ``<root>/<project_id>/`` hold exactly ``files``
(resource_id -> body): unchanged files are left alone (their cached hashes stay valid), changed
ones are replaced atomically, others removed. Directories 0700, files 0600. A resource id is a
relative POSIX path; one that would leave the folder is refused.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from memory_core.domain.errors import InvalidRequest, StorageUnavailable
from memory_core.domain.model import Source, validate_project_id

DIR_MODE = 0o700
FILE_MODE = 0o600


def safe_relative(resource_id: str) -> PurePosixPath:
    path = PurePosixPath(resource_id)
    if (
        not resource_id
        or path.is_absolute()
        or "\\" in resource_id
        or "\0" in resource_id
        or any(part in ("", ".", "..") for part in resource_id.split("/"))
    ):
        raise InvalidRequest(f"resource id {resource_id!r} is not a plain relative path", resource_id=resource_id)
    return path


class FolderSources:
    """``WriteSource`` for ``memory_core.services.beir_import.EngineWorkspace`` over real folders."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def folder(self, project_id: str) -> Path:
        return self.root / validate_project_id(project_id)

    def __call__(self, project_id: str, files: Mapping[str, bytes]) -> Source:
        folder = self.folder(project_id)
        wanted = {safe_relative(rid): data for rid, data in files.items()}
        folder.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        os.chmod(folder, DIR_MODE)
        for rel, data in wanted.items():
            try:
                self._write(folder, rel, data)
            except OSError as exc:  # a full disk, or a home so deep the path grows past PATH_MAX
                raise StorageUnavailable(
                    f"cannot write resource {str(rel)[:200]!r} under {folder}: {exc.strerror or exc}",
                    resource_id=str(rel)[:200],
                ) from exc
        keep = {str(rel) for rel in wanted}
        for path in sorted(folder.rglob("*"), reverse=True):
            name = path.relative_to(folder).as_posix()
            if path.is_file() and name not in keep:
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()
        return Source(str(folder))

    @staticmethod
    def _write(folder: Path, rel: PurePosixPath, data: bytes) -> None:
        target = folder.joinpath(*rel.parts)
        with contextlib.suppress(OSError):
            if target.is_file() and target.stat().st_size == len(data) and target.read_bytes() == data:
                return
        target.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        temp = target.with_name(f".tmp-{secrets.token_hex(6)}")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(temp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
