"""A file a CLI command writes once its work is done (``activate --save-state``).

The path is checked, and a temporary file made next to it, before the work starts: a directory,
a missing parent, a path that is not a regular file or a folder that cannot be written is an
``InvalidRequest`` with nothing done (no Run recorded). The content then lands by an atomic
rename, owner-only (0600), so a failure midway never leaves half a file.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from types import TracebackType

from memory_core.domain.errors import InvalidRequest


class OutputFile:
    def __init__(self, path: str, what: str) -> None:
        self.path = Path(path)
        self._what = what
        self._fd: int | None = None
        self._temp: Path | None = None
        self._open()

    def _refuse(self, reason: str, message: str) -> InvalidRequest:
        return InvalidRequest(f"{self._what} {str(self.path)!r} {message}", path=str(self.path), reason=reason)

    def _open(self) -> None:
        try:
            try:
                mode = os.stat(self.path).st_mode
            except (FileNotFoundError, NotADirectoryError):  # the parent check below says which
                mode = None
            if mode is not None and stat.S_ISDIR(mode):
                raise self._refuse("is_a_directory", "is a directory: give a file path")
            if mode is not None and not stat.S_ISREG(mode):
                raise self._refuse("not_a_file", "exists and is not a regular file")
            parent = self.path.parent
            if not parent.is_dir():
                raise self._refuse("no_parent", f"cannot be created: {str(parent)!r} is not an existing directory")
            self._fd, temp = tempfile.mkstemp(dir=parent, prefix=f".{self.path.name}.", suffix=".tmp")
            self._temp = Path(temp)
        except OSError as exc:  # a folder without write permission, a read-only file system
            raise self._refuse("not_writable", f"cannot be written: {exc.strerror or exc}") from exc
        except ValueError as exc:  # a NUL in the path
            raise self._refuse("invalid_path", f"is not a usable path: {exc}") from exc

    def write(self, data: bytes) -> None:
        """Write ``data`` and rename it into place (once)."""
        if self._fd is None or self._temp is None:
            raise RuntimeError("output file already written or discarded")
        fd, self._fd = self._fd, None
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(self._temp, self.path)
        except OSError as exc:
            self.discard()
            raise self._refuse("not_writable", f"could not be written: {exc.strerror or exc}") from exc
        self._temp = None

    def discard(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        if self._temp is not None:
            self._temp.unlink(missing_ok=True)
            self._temp = None

    def __enter__(self) -> OutputFile:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.discard()  # nothing left once written; the temporary when the work failed
