"""A failed write to the home's or a project's storage is ``storage_unavailable``, naming the path.

A full disk (ENOSPC), a quota (EDQUOT), a read-only mount or an I/O error while writing a
generation, an index or a moved copy is the storage's fault, not the request's: the typed error
says where, so whoever reads it can free space there (issue 30 item 5). Every writer that can
meet one uses ``disk_writes``; what it had written is the caller's to remove.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

from memory_core.domain.errors import StorageUnavailable


def unavailable(what: str, path: str | os.PathLike[str], exc: OSError) -> StorageUnavailable:
    """The typed error for ``exc``, raised while writing ``what`` at ``path``."""
    code = errno.errorcode.get(exc.errno or 0, "")
    reason = exc.strerror or str(exc)
    return StorageUnavailable(
        f"cannot write {what} at {os.fspath(path)!r}: {reason}", path=os.fspath(path), errno=code or None
    )


@contextlib.contextmanager
def disk_writes(what: str, path: str | os.PathLike[str]) -> Iterator[None]:
    """Map an OSError raised inside to ``StorageUnavailable`` naming ``path``."""
    try:
        yield
    except OSError as exc:
        raise unavailable(what, path, exc) from exc
