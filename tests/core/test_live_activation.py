"""The engine's live-memory read at activation (issue 15), with in-memory adapters: freshness,
what the Run records, and that reading the sources never changes or fails the answer."""

from __future__ import annotations

from typing import Any

import pytest

from memory_core.adapters.in_memory.storage import InMemoryScanner
from memory_core.domain.model import EffectiveMemory, Project, ScannedResource, Source
from memory_core.entrypoints.bootstrap import bootstrap_in_memory
from memory_core.runs.records import NullRecorder
from memory_core.services.live_memory import ScanningLiveMemory

SRC = "/notes"
QUERIES = ["deploy rollback", "advisory locks", "coffee printer", "helm"]


def notes() -> dict[str, bytes]:
    return {
        "deploy.md": b"# Deploy\n\nDeploy with helm upgrade.\n\n## Rollback\n\nhelm rollback.\n",
        "locks.md": b"# Locks\n\nUse Postgres advisory locks for the ledger.\n",
        "office.txt": b"Coffee is on the second floor. The printer is broken.\n",
    }


class CountingScanner(InMemoryScanner):
    def __init__(self, sources: Any) -> None:
        super().__init__(sources)
        self.reads: list[str] = []

    def read(self, resource: ScannedResource) -> bytes:
        self.reads.append(resource.resource_id)
        return super().read(resource)


class Pending(ScanningLiveMemory):
    def reindex_pending(self, project_id: str) -> bool:
        return True


class Broken:
    def effective_memory(self, project: Project) -> EffectiveMemory:
        raise RuntimeError("the disk went away")

    def read_ahead(self, project: Project) -> Any:
        raise RuntimeError("the disk went away")

    def reindex_pending(self, project_id: str) -> bool:
        raise RuntimeError("no watcher")


def engine(*, unread: bool = False, **parts: Any) -> Any:
    scanner = parts.pop("scanner", None) or CountingScanner({SRC: notes()})
    e = bootstrap_in_memory(scanner=scanner, **parts)
    if unread:
        e.live_memory = None  # bootstrap always gives one; an Engine built by hand may have none
    e.add_project("p", [Source(SRC)])
    e.index("p")
    return e


def test_the_answer_is_the_same_whatever_the_live_memory_says() -> None:
    plain, broken, live = engine(unread=True), engine(live_memory=Broken()), engine()
    live.indexer.scanner.write(SRC, "deploy.md", b"# Deploy\n\nDeploy with argo.\n")
    live.indexer.scanner.remove(SRC, "locks.md")
    for q in QUERIES:
        answers = [e.activate("p", q) for e in (plain, broken, live)]
        ranked = {tuple((c.unit.unit_id, c.final_rank, c.disposition) for c in a.candidates) for a in answers}
        assert len(ranked) == 1, q
        assert len({tuple(a.response.fragments) for a in answers}) == 1, q


def test_without_a_live_memory_freshness_says_it_is_unknown() -> None:
    freshness = engine(unread=True).activate("p", "helm").response.freshness
    assert freshness.live is False and freshness.index_behind is None and freshness.error


def test_a_failing_live_memory_is_said_and_the_run_keeps_the_generation() -> None:
    e = engine(live_memory=Broken())
    response = e.activate("p", "helm").response
    f = response.freshness
    assert (f.live, f.index_behind, f.changed_resources, f.reindex_pending) == (False, None, None, False)
    assert f.error == "RuntimeError: the disk went away"
    run = e.get_run(response.run_id)
    assert run.summary.status == "succeeded"
    assert run.summary.effective_memory_hash == response.revisions["effective_memory_hash"]


def test_a_pending_reindex_is_passed_on() -> None:
    scanner = CountingScanner({SRC: notes()})
    f = engine(scanner=scanner, live_memory=Pending(scanner)).activate("p", "helm").response.freshness
    assert f.live and f.reindex_pending is True and f.index_behind is False


@pytest.mark.parametrize("recorded", [True, False])
def test_changed_bodies_are_kept_once_and_only_for_a_recorded_run(recorded: bool) -> None:
    e = engine(**({} if recorded else {"recorder": NullRecorder()}))
    scanner = e.indexer.scanner
    edited = b"# Locks\n\nUse advisory locks, and say why in the ADR.\n"
    scanner.write(SRC, "locks.md", edited)
    scanner.write(SRC, "new.md", b"# New\n\nA note the index has never seen.\n")
    scanner.reads.clear()
    first = e.activate("p", "advisory locks").response
    assert first.freshness.changed_resources == 2 and first.freshness.stale_resources == ("locks.md",)
    from memory_core.domain.canonical import sha256_hex

    assert e.indexer.blobs.exists(sha256_hex(edited)) is recorded
    assert sorted(scanner.reads) == (["locks.md", "new.md"] if recorded else [])
    e.activate("p", "advisory locks")
    assert len(scanner.reads) == (2 if recorded else 0)  # the second Run finds them stored
    if recorded:
        manifest = e.history.run_manifest(e.get_run(first.run_id).summary.effective_memory_hash)
        assert {m.resource_id for m in manifest} == {"deploy.md", "locks.md", "office.txt", "new.md"}
