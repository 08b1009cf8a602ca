"""The Run writer's order (issue 32 item 3): writes behind the answer wait a moment
(``BEHIND_GRACE_S``), or land at once when an insert or a reader comes after them, and all before
close; every write in the order queued."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import apsw
import pytest

from memory_core.adapters.sqlite import open_database
from memory_core.adapters.sqlite import run_writer as rw


def _writer(tmp_path: Path) -> tuple[rw.RunWriter, apsw.Connection]:
    conn = open_database(tmp_path / "local.db")
    return rw.RunWriter(conn, threading.RLock()), conn


def test_a_write_behind_waits_its_grace_unless_an_insert_comes_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes land in the order queued (an answered Run's trace before the next Run's insert:
    a crash at that insert keeps the answered Run whole), and an insert never waits a grace."""
    monkeypatch.setattr(rw, "BEHIND_GRACE_S", 3600.0)
    writer, conn = _writer(tmp_path)
    order: list[str] = []
    try:
        assert writer.write_behind(lambda _: order.append("trace of run 1"))
        assert writer.write_behind(lambda _: order.append("prune after run 1"))
        time.sleep(0.2)
        assert order == []  # in their grace
        writer.submit("run-2", lambda _: order.append("insert of run 2"))
        writer.wait("run-2")
        assert order == ["trace of run 1", "prune after run 1", "insert of run 2"]
    finally:
        writer.close()
        conn.close()


def test_a_reader_settling_writes_what_waits_without_its_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rw, "BEHIND_GRACE_S", 3600.0)  # an hour: only settle can make it land
    writer, conn = _writer(tmp_path)
    written = threading.Event()
    try:
        assert writer.write_behind(lambda _: written.set())
        assert not written.wait(0.2)  # still in its grace
        settled = threading.Thread(target=writer.settle)
        settled.start()
        settled.join(30)
        assert not settled.is_alive() and written.is_set()
    finally:
        writer.close()
        conn.close()


def test_close_lands_every_write_behind_and_the_writer_restarts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rw, "BEHIND_GRACE_S", 3600.0)
    writer, conn = _writer(tmp_path)
    landed: list[int] = []
    try:
        for i in range(3):
            assert writer.write_behind(lambda _, i=i: landed.append(i))
        closing = threading.Thread(target=writer.close)
        closing.start()
        closing.join(30)
        assert not closing.is_alive() and landed == [0, 1, 2]
        assert writer.write_behind(lambda _: landed.append(3))  # a new thread for the next Run
        writer.settle()
        assert landed == [0, 1, 2, 3]
    finally:
        writer.close()
        conn.close()


def test_an_inserts_error_reaches_the_one_who_waits_for_it(tmp_path: Path) -> None:
    writer, conn = _writer(tmp_path)

    def broken(_: apsw.Connection) -> None:
        raise apsw.ConstraintError("UNIQUE constraint failed")

    try:
        writer.submit("run-1", broken)
        with pytest.raises(apsw.ConstraintError):
            writer.wait("run-1")
        writer.settle()  # a failed insert is not waited for twice
    finally:
        writer.close()
        conn.close()


def test_an_in_memory_database_writes_inline(tmp_path: Path) -> None:
    conn = apsw.Connection(":memory:")
    writer = rw.RunWriter(conn, threading.RLock())
    done: list[str] = []
    assert not writer.write_behind(lambda _: done.append("behind"))  # the caller writes it inline
    writer.submit("run-1", lambda _: done.append("insert"))
    assert done == ["insert"]
    writer.close()
