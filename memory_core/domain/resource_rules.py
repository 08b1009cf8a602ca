"""What becomes a resource, as pure rules: the file-system scanner
(``adapters/files/filesystem_sources.py``, and its in-memory twin) applies them to the files it walks,
and fixture import to the resources a replay must write back as files and scan again. One copy,
so that an imported corpus is exactly one the scanner reproduces (or is refused at import).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

MEDIA_TYPES = {".md": "text/markdown", ".markdown": "text/markdown", ".txt": "text/plain"}
DEFAULT_MAX_BYTES = 1_000_000
# Linux's NAME_MAX: no file name (one path component) can be longer, in bytes.
NAME_MAX_BYTES = 255
# Linux's PATH_MAX is 4096 bytes with its NUL; a replay writes a resource under
# ``<home>/evaluation-sources/<project>/``, so a resource id keeps 512 bytes free for that folder.
MAX_RESOURCE_ID_BYTES = 4096 - 512


def media_type_for(name: str) -> str | None:
    return MEDIA_TYPES.get(os.path.splitext(name)[1].lower())


def is_hidden(relative_path: str) -> bool:
    return any(part.startswith(".") for part in relative_path.split("/"))


def text_problem(data: bytes) -> str | None:
    """Why ``data`` is not a text resource, or None when it is."""
    if b"\x00" in data:
        return "binary file (contains NUL bytes)"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not valid UTF-8 (byte {exc.start})"
    return None


def too_large(size: int, max_bytes: int) -> str:
    return f"{size} bytes, over the {max_bytes}-byte limit"


def resource_id_problem(resource_id: str) -> str | None:
    """Why no scan could give a file this resource id (a relative POSIX path), or None.

    The scanner names a resource by its path relative to the source, skips hidden names and
    extensions it ignores; the file system holds no NUL, no empty or over-long component."""
    if not resource_id or resource_id.startswith("/"):
        return "is not a relative path"
    if "\x00" in resource_id:
        return "contains a NUL character, which no file name can hold"
    if "\\" in resource_id:
        return "contains '\\', which a replay refuses to write (a path separator elsewhere)"
    parts = resource_id.split("/")
    if any(part == "" for part in parts):
        return "has an empty path component"
    if is_hidden(resource_id):
        return "has a component starting with '.', which the scanner skips (hidden, '.' or '..')"
    if media_type_for(resource_id) is None:
        return f"has an extension the scanner ignores (it reads {', '.join(sorted(MEDIA_TYPES))})"
    for part in parts:
        size = len(part.encode("utf-8"))
        if size > NAME_MAX_BYTES:
            return f"has a component of {size} bytes, over the {NAME_MAX_BYTES}-byte limit of a file name"
    size = len(resource_id.encode("utf-8"))
    if size > MAX_RESOURCE_ID_BYTES:
        return f"is {size} bytes long, over the {MAX_RESOURCE_ID_BYTES}-byte limit of a resource path"
    return None


def path_collisions(resource_ids: Iterable[str]) -> dict[str, str]:
    """resource id -> another id that would have to be its directory (``a.md`` for
    ``a.md/b.md``): one folder cannot hold both, so one scan never yields both."""
    ids = set(resource_ids)
    out: dict[str, str] = {}
    for rid in ids:
        parts = rid.split("/")
        for end in range(1, len(parts)):
            parent = "/".join(parts[:end])
            if parent in ids:
                out[rid] = parent
                break
    return out
