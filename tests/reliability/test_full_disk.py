"""A full disk while Lucene builds (issue 14 item 7): ``storage_unavailable`` with a one-line
message, the previous generation still current and serving, and a daemon log of JSON lines only.

Real Lucene on a 1 MiB tmpfs that a filler file takes whole; where mounting is not allowed,
an injected ENOSPC from Java (``full_disk``). Each test records which ran (``full_disk``
property, shown with ``-rA``/junit XML).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from memory_core.adapters.search import lucene_index
from memory_core.domain.errors import MemoryCoreError, StorageUnavailable
from memory_core.domain.model import Source, Unit, unit_hash_of
from tests.daemon.test_server import Daemon

from .full_disk import INJECTED, TMPFS, FullDisk, inject_enospc
from .harness import PROJECT, QUERIES, write_memory

pytestmark = pytest.mark.slow

# The JVM's native notice when JAVA_TOOL_OPTIONS is set in the environment (HotSpot writes it
# to fd 2 itself, before any Java code runs); the only line of the log that is not ours.
_NATIVE_JVM_NOTICE = "Picked up "


def _units(n: int) -> list[Unit]:
    units = []
    for i in range(n):
        text = f"note {i}: " + " ".join(f"term{i}x{j}" for j in range(60))
        units.append(Unit(f"r{i}.md#0", f"r{i}.md", 0, 0, len(text), (), text, 60, unit_hash_of(text, 0, len(text))))
    return units


def _assert_short(message: str) -> None:
    assert "java.io.IOException: No space left on device" in message, message
    assert "\n" not in message and ".java:" not in message, message  # no stack trace
    assert len(message) < 600, message


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record_property: pytest.RecordProperty) -> FullDisk:
    full = FullDisk(tmp_path / "disk")
    record_property("full_disk", full.mode)
    print(f"full disk: {full.mode}")
    if full.mode == INJECTED:
        monkeypatch.setattr(lucene_index, "_index_writer", inject_enospc(full.marker))
    yield full
    full.close()


def test_a_full_disk_while_lucene_builds_is_storage_unavailable_in_one_line(disk: FullDisk) -> None:
    factory = lucene_index.LuceneIndexFactory()
    disk.fill()
    with pytest.raises(StorageUnavailable) as caught:
        factory.build(disk.directory / "full", _units(300))
    assert caught.value.code == "storage_unavailable"
    _assert_short(caught.value.message)
    assert caught.value.details["java"] == "java.io.IOException"

    # The JVM and the adapter are fine afterwards: with room again the same build succeeds.
    disk.free()
    factory.build(disk.directory / "roomy", _units(300))
    searcher = factory.open(disk.directory / "roomy")
    try:
        assert searcher.search("term7x3", 1)[0][0] == "r7.md#0"
    finally:
        searcher.close()


def test_a_full_disk_while_the_daemon_indexes_leaves_the_previous_generation_serving(
    tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    home, log = tmp_path / "home", tmp_path / "daemon.log"
    source = write_memory(tmp_path / "memory", 0)
    disk = FullDisk(home / "projects" / PROJECT / "generations")
    record_property("full_disk", disk.mode)
    print(f"full disk: {disk.mode}")
    wrapper = () if disk.mode == TMPFS else (sys.executable, "-m", "tests.reliability.full_disk", str(disk.marker))
    try:
        daemon = Daemon(home, log, "--no-warm", "--no-ui", wrapper=wrapper)
        try:
            client = daemon.client
            client.add_project(PROJECT, [Source(str(source))])
            first = client.index_project(PROJECT)
            assert first.status == "built"

            disk.fill()
            write_memory(source, 1)  # new content: a new generation is due
            with pytest.raises(MemoryCoreError) as caught:
                client.index_project(PROJECT)
            assert caught.value.code == "storage_unavailable"
            _assert_short(caught.value.message)

            current = client.show_project(PROJECT).generation
            assert current is not None and current.index_revision == first.index_revision
            answer = client.activate_memory(PROJECT, QUERIES[0])
            assert answer.fragments and answer.revisions["index_revision"] == first.index_revision
            assert [p.name for p in disk.directory.iterdir() if p.name.startswith(".staging-")] == []

            disk.free()
            again = client.index_project(PROJECT)  # the watcher may have built it first: unchanged
            current = client.show_project(PROJECT).generation
            assert current is not None and current.index_revision == again.index_revision != first.index_revision
        finally:
            assert daemon.stop() == 0
    finally:
        disk.close()

    lines = [line for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
    records = [json.loads(line) for line in lines if not line.startswith(_NATIVE_JVM_NOTICE)]
    assert all(isinstance(r, dict) and {"ts", "level", "logger", "message"} <= r.keys() for r in records)
    assert any(r["message"] == "serving" for r in records)
