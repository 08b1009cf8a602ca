"""BlobStore contract: FileBlobStore and InMemoryBlobStore behave the same."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.adapters.files.blob_store import FileBlobStore
from memory_core.adapters.in_memory.storage import InMemoryBlobStore
from memory_core.domain.errors import BlobNotFound, InvalidRequest


@pytest.fixture(params=["file", "memory"])
def store(request, tmp_path):
    return FileBlobStore(tmp_path / "blobs") if request.param == "file" else InMemoryBlobStore()


def test_put_returns_the_sha256_and_get_returns_the_bytes(store):
    digest = store.put(b"hello")
    assert digest == hashlib.sha256(b"hello").hexdigest()
    assert store.get(digest) == b"hello"
    assert store.exists(digest)


def test_empty_blob(store):
    digest = store.put(b"")
    assert store.get(digest) == b""


def test_put_of_existing_content_is_idempotent(store):
    first = store.put(b"same")
    second = store.put(b"same")
    assert first == second
    assert list(store.digests()) == [first]


def test_absent_blob_raises_not_found(store):
    missing = hashlib.sha256(b"never stored").hexdigest()
    assert not store.exists(missing)
    with pytest.raises(BlobNotFound) as info:
        store.get(missing)
    assert info.value.code == "blob_not_found"


def test_delete_removes_and_is_idempotent(store):
    digest = store.put(b"bye")
    store.delete(digest)
    store.delete(digest)
    assert not store.exists(digest)
    with pytest.raises(BlobNotFound):
        store.get(digest)


def test_digests_lists_exactly_what_is_stored_sorted(store):
    digests = {store.put(f"blob {i}".encode()) for i in range(20)}
    store.delete(min(digests))
    digests.discard(min(digests))
    assert list(store.digests()) == sorted(digests)


@pytest.mark.parametrize("bad", ["../../etc/passwd", "AB" * 32, "ab" * 31, "", "zz" * 32])
def test_malformed_digest_is_rejected(store, bad):
    for call in (store.get, store.exists, store.delete):
        with pytest.raises(InvalidRequest):
            call(bad)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payloads=st.lists(st.binary(max_size=2048), max_size=8))
def test_round_trip_of_arbitrary_bytes(store, payloads):
    # The store is shared across examples on purpose: content addressing makes puts idempotent.
    for data in payloads:
        assert store.get(store.put(data)) == data
    assert {hashlib.sha256(d).hexdigest() for d in payloads} <= set(store.digests())
