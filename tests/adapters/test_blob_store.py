"""FileBlobStore on disk: layout, modes, corruption and crash leftovers."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
import textwrap

import pytest

from memory_core.adapters.files.blob_store import TEMP_PREFIX, FileBlobStore
from memory_core.domain.errors import BlobCorrupted, BlobNotFound


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def store(tmp_path):
    return FileBlobStore(tmp_path / "evaluation-corpora" / "blobs")


def test_layout_and_owner_only_modes(store):
    digest = store.put(b"layout")
    path = store.root / digest[:2] / digest
    assert path.read_bytes() == b"layout"
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700
    assert mode(store.root) == 0o700


def test_flipped_byte_is_reported_as_corrupted(store):
    digest = store.put(b"precious bytes")
    path = store.path_of(digest)
    data = bytearray(path.read_bytes())
    data[3] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(BlobCorrupted) as info:
        store.get(digest)
    assert info.value.code == "blob_corrupted"
    assert info.value.details["digest"] == digest


def test_put_repairs_a_truncated_blob(store):
    digest = store.put(b"0123456789")
    store.path_of(digest).write_bytes(b"01234")
    with pytest.raises(BlobCorrupted):
        store.get(digest)
    assert store.put(b"0123456789") == digest
    assert store.get(digest) == b"0123456789"


def test_stray_files_are_not_listed(store):
    digest = store.put(b"real")
    (store.root / "README").write_text("not a blob")
    (store.root / digest[:2] / ("ff" * 32)).write_bytes(b"wrong shard")
    assert list(store.digests()) == [digest]


CRASH_IN_RENAME = textwrap.dedent(
    """
    import os, sys
    from memory_core.adapters.files.blob_store import FileBlobStore
    store = FileBlobStore(sys.argv[1])
    os.replace = lambda *a, **k: os._exit(9)  # die after the temp file is written, before rename
    store.put(b"half-way there")
    """
)


def test_crash_mid_write_never_shows_a_blob_and_is_swept(store):
    done = subprocess.run([sys.executable, "-c", CRASH_IN_RENAME, str(store.root)], timeout=60)
    assert done.returncode == 9
    digest = hashlib.sha256(b"half-way there").hexdigest()
    shard = store.root / digest[:2]
    # A writer that died mid-write (before any byte hit the disk) leaves a shorter temp file.
    (shard / f"{TEMP_PREFIX}torn").write_bytes(b"half")
    leftovers = [p.name for p in shard.iterdir()]
    assert len(leftovers) == 2 and all(n.startswith(TEMP_PREFIX) for n in leftovers)

    assert not store.exists(digest)
    assert list(store.digests()) == []
    with pytest.raises(BlobNotFound):
        store.get(digest)

    assert store.sweep_temp() == 0  # young temp files may belong to a live writer
    assert store.sweep_temp(min_age_s=0) == 2
    assert list(shard.iterdir()) == []
    assert store.get(store.put(b"half-way there")) == b"half-way there"
