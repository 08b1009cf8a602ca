"""The Evaluation Set store over ``local.db`` (tables of migration ``m004_evaluation``).

Corpora are inserted once per ``corpus_id`` and never changed; a case row holds its frozen trace
as canonical JSON; judgment versions are rows of ``evaluation_judgment_sets`` with their
judgments in ``evaluation_judgments``. Compare-and-set on ``judgment_version`` happens inside one
``BEGIN IMMEDIATE`` transaction, so two editors can never both win.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import apsw
import attrs

from memory_core.adapters.sqlite.database import fetch, read_snapshot, storage_errors, write_transaction
from memory_core.adapters.storage_format import CONVERTER as STORED
from memory_core.adapters.system.crash_points import crash_point
from memory_core.domain.canonical import canonical_json
from memory_core.domain.clock import utc_now_iso
from memory_core.domain.errors import InvalidRequest
from memory_core.domain.evaluation_errors import EvaluationCaseExists, EvaluationCaseNotFound, EvaluationCorpusNotFound
from memory_core.domain.model import Layer, ManifestEntry
from memory_core.evaluation.cases import Case, CaseRecord, Corpus, Judgment, JudgmentSet, SourceTrace
from memory_core.ports.evaluation import check_judgment_version

# evaluation_cases names its columns after Case's fields (and adds trace_json): a row read in
# this order is a Case's values, and a Case's values are the row to write.
_CASE_COLUMNS = ", ".join(f.name for f in attrs.fields(Case))
_RESOURCE_COLUMNS = "ordinal, resource_id, layer, uri, resource_hash, byte_size, media_type"


def _case_from_row(row: Sequence[Any]) -> Case:
    return Case(*row)


class SqliteEvaluationStore:
    """Implements ``memory_core.ports.evaluation.EvaluationStore`` over a connection from ``open_database``."""

    def __init__(self, conn: apsw.Connection, now: Callable[[], str] = utc_now_iso) -> None:
        self._conn = conn
        self._now = now
        self._lock = threading.RLock()

    # -- corpora ----------------------------------------------------------------------------------

    def has_corpus(self, corpus_id: str) -> bool:
        with self._lock, storage_errors("cannot read evaluation corpus"):
            rows = fetch(self._conn, "SELECT 1 FROM evaluation_corpora WHERE corpus_id = ?", (corpus_id,))
        return bool(rows)

    def get_corpus(self, corpus_id: str) -> Corpus:
        with self._lock, storage_errors("cannot read evaluation corpus"), read_snapshot(self._conn):
            known = fetch(self._conn, "SELECT 1 FROM evaluation_corpora WHERE corpus_id = ?", (corpus_id,))
            rows = fetch(
                self._conn,
                f"SELECT {_RESOURCE_COLUMNS} FROM evaluation_corpus_resources WHERE corpus_id = ? ORDER BY ordinal",
                (corpus_id,),
            )
        if not known:
            raise EvaluationCorpusNotFound(f"no evaluation corpus {corpus_id!r}", corpus_id=corpus_id)
        entries = tuple(ManifestEntry(int(r[0]), r[1], Layer(r[2]), r[3], r[4], int(r[5]), r[6]) for r in rows)
        return Corpus(corpus_id, entries)

    # -- cases ------------------------------------------------------------------------------------

    def add_cases(self, corpora: Sequence[Corpus], records: Sequence[CaseRecord]) -> None:
        now = self._now()
        with self._lock, storage_errors("cannot store evaluation cases"), write_transaction(self._conn) as conn:
            for corpus in corpora:
                self._insert_corpus(conn, corpus, now)
            for r in records:
                self._insert_case(conn, r)
            crash_point("evaluation.add_cases.before_commit")
        crash_point("evaluation.add_cases.after_commit")

    def _insert_corpus(self, conn: apsw.Connection, corpus: Corpus, now: str) -> None:
        if fetch(conn, "SELECT 1 FROM evaluation_corpora WHERE corpus_id = ?", (corpus.corpus_id,)):
            return  # immutable and keyed by its manifest hash: the same id is the same corpus
        conn.execute(
            "INSERT INTO evaluation_corpora(corpus_id, resource_count, created_at) VALUES (?, ?, ?)",
            (corpus.corpus_id, len(corpus.resources), now),
        )
        conn.executemany(
            f"INSERT INTO evaluation_corpus_resources(corpus_id, {_RESOURCE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (corpus.corpus_id, e.ordinal, e.resource_id, e.layer.value, e.uri, e.resource_hash, e.byte_size,
                 e.media_type)
                for e in corpus.resources
            ],
        )  # fmt: skip
        conn.executemany(
            "INSERT OR IGNORE INTO retrieval_corpus_blobs(sha256, byte_size, media_type, first_seen_at) "
            "VALUES (?, ?, ?, ?)",
            [(e.resource_hash, e.byte_size, e.media_type, now) for e in corpus.resources],
        )

    def _insert_case(self, conn: apsw.Connection, record: CaseRecord) -> None:
        c = record.case
        versions = [s.version for s in record.judgment_sets]
        if versions != sorted(set(versions)) or (versions and versions[-1] != c.judgment_version):
            raise InvalidRequest("judgment versions must ascend to the case's version", case_id=c.case_id)
        if fetch(conn, "SELECT 1 FROM evaluation_cases WHERE case_id = ?", (c.case_id,)):
            raise EvaluationCaseExists(f"evaluation case {c.case_id!r} exists already", case_id=c.case_id)
        if not fetch(conn, "SELECT 1 FROM evaluation_corpora WHERE corpus_id = ?", (c.corpus_id,)):
            raise EvaluationCorpusNotFound(f"no evaluation corpus {c.corpus_id!r}", corpus_id=c.corpus_id)
        row = (*attrs.astuple(c, recurse=False), canonical_json(STORED.unstructure(record.trace)).decode("utf-8"))
        conn.execute(
            f"INSERT INTO evaluation_cases({_CASE_COLUMNS}, trace_json) VALUES ({', '.join('?' * len(row))})", row
        )
        for s in record.judgment_sets:
            self._insert_set(conn, c.case_id, s)

    @staticmethod
    def _insert_set(conn: apsw.Connection, case_id: str, s: JudgmentSet) -> None:
        conn.execute(
            "INSERT INTO evaluation_judgment_sets(case_id, version, created_at) VALUES (?, ?, ?)",
            (case_id, s.version, s.created_at or ""),
        )
        conn.executemany(
            "INSERT INTO evaluation_judgments(case_id, version, ordinal, unit_id, resource_id, relevance, note) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(case_id, s.version, i, j.unit_id, j.resource_id, j.relevance, j.note) for i, j in enumerate(s.judgments)],
        )

    def get_case(self, case_id: str) -> Case:
        with self._lock, storage_errors("cannot read evaluation case"):
            return self._case(self._conn, case_id)

    @staticmethod
    def _case(conn: apsw.Connection, case_id: str) -> Case:
        rows = fetch(conn, f"SELECT {_CASE_COLUMNS} FROM evaluation_cases WHERE case_id = ?", (case_id,))
        if not rows:
            raise EvaluationCaseNotFound(f"no evaluation case {case_id!r}", case_id=case_id)
        return _case_from_row(rows[0])

    def get_trace(self, case_id: str) -> SourceTrace:
        with self._lock, storage_errors("cannot read evaluation case"):
            rows = fetch(self._conn, "SELECT trace_json FROM evaluation_cases WHERE case_id = ?", (case_id,))
        if not rows:
            raise EvaluationCaseNotFound(f"no evaluation case {case_id!r}", case_id=case_id)
        return STORED.structure(json.loads(rows[0][0]), SourceTrace)

    def case_for_run(self, run_id: str, provenance: str) -> Case | None:
        with self._lock, storage_errors("cannot read evaluation cases"):
            rows = fetch(
                self._conn,
                f"SELECT {_CASE_COLUMNS} FROM evaluation_cases WHERE source_run_id = ? AND provenance = ? "
                "ORDER BY created_at, case_id LIMIT 1",
                (run_id, provenance),
            )
        return _case_from_row(rows[0]) if rows else None

    def list_cases(self, project_id: str | None = None, case_ids: Sequence[str] | None = None) -> list[Case]:
        with self._lock, storage_errors("cannot list evaluation cases"), read_snapshot(self._conn):
            if case_ids is not None:
                chosen = [self._case(self._conn, i) for i in dict.fromkeys(case_ids)]
            elif project_id is not None:
                rows = fetch(
                    self._conn, f"SELECT {_CASE_COLUMNS} FROM evaluation_cases WHERE project_id = ?", (project_id,)
                )
                chosen = [_case_from_row(r) for r in rows]
            else:
                rows = fetch(self._conn, f"SELECT {_CASE_COLUMNS} FROM evaluation_cases")
                chosen = [_case_from_row(r) for r in rows]
        chosen = [c for c in chosen if project_id is None or c.project_id == project_id]
        return sorted(chosen, key=lambda c: (c.created_at, c.case_id))

    # -- judgments --------------------------------------------------------------------------------

    def judgments(self, case_id: str, version: int | None = None) -> JudgmentSet:
        with self._lock, storage_errors("cannot read judgments"), read_snapshot(self._conn):
            case = self._case(self._conn, case_id)
            wanted = case.judgment_version if version is None else version
            if wanted == 0:
                return JudgmentSet(case_id, 0, (), None)
            found = self._sets(self._conn, case_id, wanted)
        if not found:
            raise InvalidRequest(
                f"case {case_id!r} has no stored judgment version {wanted}", case_id=case_id, version=wanted
            )
        return found[0]

    def judgment_history(self, case_id: str) -> list[JudgmentSet]:
        with self._lock, storage_errors("cannot read judgments"), read_snapshot(self._conn):
            self._case(self._conn, case_id)
            return self._sets(self._conn, case_id, None)

    @staticmethod
    def _sets(conn: apsw.Connection, case_id: str, version: int | None) -> list[JudgmentSet]:
        where, params = ("AND version = ?", (case_id, version)) if version is not None else ("", (case_id,))
        headers = fetch(
            conn,
            f"SELECT version, created_at FROM evaluation_judgment_sets WHERE case_id = ? {where} ORDER BY version",
            params,
        )
        rows = fetch(
            conn,
            "SELECT version, unit_id, resource_id, relevance, note FROM evaluation_judgments "
            f"WHERE case_id = ? {where} ORDER BY version, ordinal",
            params,
        )
        by_version: dict[int, list[Judgment]] = {int(v): [] for v, _ in headers}
        for v, unit_id, resource_id, relevance, note in rows:
            by_version[int(v)].append(Judgment(int(relevance), unit_id, resource_id, note))
        return [JudgmentSet(case_id, int(v), tuple(by_version[int(v)]), at or None) for v, at in headers]

    def replace_judgments(
        self, case_id: str, expected_version: int, judgments: Sequence[Judgment], created_at: str
    ) -> JudgmentSet:
        fresh = JudgmentSet(case_id, expected_version + 1, tuple(judgments), created_at)
        with self._lock, storage_errors("cannot store judgments"), write_transaction(self._conn) as conn:
            check_judgment_version(self._case(conn, case_id), expected_version)
            conn.execute(
                "UPDATE evaluation_cases SET judgment_version = ? WHERE case_id = ? AND judgment_version = ?",
                (fresh.version, case_id, expected_version),
            )
            self._insert_set(conn, case_id, fresh)
            crash_point("evaluation.replace_judgments.before_commit")
        crash_point("evaluation.replace_judgments.after_commit")
        return fresh

    def set_reviewed(self, case_id: str, expected_version: int, reviewed: bool) -> Case:
        with self._lock, storage_errors("cannot store review"), write_transaction(self._conn) as conn:
            check_judgment_version(self._case(conn, case_id), expected_version)
            conn.execute(
                "UPDATE evaluation_cases SET reviewed_version = ? WHERE case_id = ?",
                (expected_version if reviewed else None, case_id),
            )
            return self._case(conn, case_id)

    def delete_case(self, case_id: str) -> None:
        with self._lock, storage_errors("cannot delete evaluation case"), write_transaction(self._conn) as conn:
            case = self._case(conn, case_id)
            conn.execute("DELETE FROM evaluation_cases WHERE case_id = ?", (case_id,))
            conn.execute(
                "DELETE FROM evaluation_corpora WHERE corpus_id = ? AND NOT EXISTS "
                "(SELECT 1 FROM evaluation_cases WHERE corpus_id = ?)",
                (case.corpus_id, case.corpus_id),
            )

    def runs_of_cases(self) -> set[str]:
        with self._lock, storage_errors("cannot read evaluation cases"):
            return {str(r) for (r,) in self._conn.execute("SELECT DISTINCT source_run_id FROM evaluation_cases")}

    def referenced_blobs(self) -> set[str]:
        with self._lock, storage_errors("cannot read evaluation corpora"):
            return {
                str(d) for (d,) in self._conn.execute("SELECT DISTINCT resource_hash FROM evaluation_corpus_resources")
            }


__all__ = ["SqliteEvaluationStore"]
