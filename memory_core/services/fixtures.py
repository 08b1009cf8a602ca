"""Export and import of an Evaluation Set through the evaluation service and the blob store."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, Unpack

from memory_core.domain.canonical import canonical_json, plain
from memory_core.domain.errors import BlobCorrupted, BlobNotFound
from memory_core.domain.evaluation_errors import (
    EvaluationImportConflict,
)
from memory_core.domain.progress import Progress, no_progress
from memory_core.evaluation.cases import (
    Case,
    CaseRecord,
    Corpus,
    JudgmentSet,
    SourceTrace,
)
from memory_core.evaluation.fixture import (
    BLOB_WRITERS,
    FORMAT,
    FORMAT_VERSION,
    EvaluationSet,
    ExportScope,
    ImportResult,
    body_dict,
    case_dict,
    dump,
    load_fixture,
    portable_corpus,
    portable_record,
)
from memory_core.evaluation.report import METRIC_CONVENTIONS, CaseInput, Report, build_report
from memory_core.ports import BlobStore
from memory_core.ports.evaluation import EvaluationStore


class EvaluationService(Protocol):
    """What export and import read of ``services.evaluation.EvaluationService``: declared here,
    so that the service can offer ``export_fixture``/``import_fixture`` without an import cycle."""

    store: EvaluationStore
    blobs: BlobStore
    now: Callable[[], str]

    def get_case(self, case_id: str) -> Case: ...
    def list_cases(self, project_id: str | None = None, case_ids: Sequence[str] | None = None) -> list[Case]: ...
    def get_trace(self, case_id: str) -> SourceTrace: ...
    def get_corpus(self, corpus_id: str) -> Corpus: ...
    def judgments(self, case_id: str, version: int | None = None) -> JudgmentSet: ...
    def judgment_history(self, case_id: str) -> list[JudgmentSet]: ...
    def report(self, project_id: str | None = None, case_ids: Sequence[str] | None = None) -> Report: ...


def export_document(
    service: EvaluationService,
    *,
    project_id: str | None = None,
    case_ids: Sequence[str] | None = None,
    with_history: bool = False,
    with_uris: bool = False,
    exported_at: str | None = None,
) -> dict[str, Any]:
    """The fixture of a project's cases, chosen cases, or all; bodies come from the blob store
    (read verified: a missing or corrupted blob fails the export with its typed error).

    Without ``with_uris`` each corpus travels as its ``portable_corpus`` (no local paths)."""
    cases = service.list_cases(project_id, case_ids)
    records = [_record(service, c, with_history) for c in cases]
    corpora = {c.corpus_id: service.get_corpus(c.corpus_id) for c in cases}
    if not with_uris:
        portable = {k: portable_corpus(v) for k, v in corpora.items()}
        records = [portable_record(r, portable[r.case.corpus_id]) for r in records]
        # Corpora that differed only in their paths become one.
        corpora = {p.corpus_id: p for p in portable.values()}
    digests = sorted({d for corpus in corpora.values() for d in corpus.digests()})
    report = service.report(project_id=project_id, case_ids=[c.case_id for c in cases])
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "exported_at": exported_at or service.now(),
        "metric_conventions": METRIC_CONVENTIONS,
        "corpora": [plain(corpora[k]) for k in sorted(corpora)],
        "bodies": [body_dict(d, service.blobs.get(d)) for d in digests],
        "cases": [case_dict(r, with_history) for r in records],
        "report": plain(report),
    }


def _record(service: EvaluationService, case: Case, with_history: bool) -> CaseRecord:
    trace = service.get_trace(case.case_id)
    if with_history:
        sets = tuple(service.judgment_history(case.case_id))
    elif case.judgment_version:
        sets = (service.judgments(case.case_id),)
    else:
        sets = ()
    return CaseRecord(case, trace, sets)


def export_fixture(
    service: EvaluationService, *, exported_at: str | None = None, **scope: Unpack[ExportScope]
) -> bytes:
    """The fixture file (canonical JSON) of ``export_document``."""
    return dump(export_document(service, exported_at=exported_at, **scope))


def _same_record(service: EvaluationService, incoming: CaseRecord, corpus: Corpus) -> bool:
    """The case here and ``incoming`` (over ``corpus``) are one record when their portable forms
    are: a case exported with or without its URIs is the same case."""
    existing = service.get_case(incoming.case.case_id)
    mine = _record(service, existing, with_history=False)
    theirs = CaseRecord(incoming.case, incoming.trace, incoming.judgment_sets[-1:])
    if canonical_json(case_dict(mine, False)) == canonical_json(case_dict(theirs, False)):
        return True
    mine = portable_record(mine, portable_corpus(service.get_corpus(existing.corpus_id)))
    theirs = portable_record(theirs, portable_corpus(corpus))
    return canonical_json(case_dict(mine, False)) == canonical_json(case_dict(theirs, False))


def _blob_is_sound(blobs: BlobStore, digest: str) -> bool:
    """Present and hashing to its name. A damaged blob is rewritten from the fixture's verified
    body like a missing one: the fixture is a good copy, and a corrupted body must not stay."""
    try:
        blobs.get(digest)
    except (BlobNotFound, BlobCorrupted):
        return False
    return True


def import_fixture(
    service: EvaluationService, data: bytes | str | Mapping[str, Any], progress: Progress = no_progress
) -> ImportResult:
    """Verify the whole fixture, then store what is new; nothing is written on any problem.

    Ids are kept. A case already here with the same record is left as is; a different record under
    an existing id is an EvaluationImportConflict. Corpora are keyed by their manifest hash, so an
    existing corpus_id is the same corpus.
    """
    progress("importing", 0, 3)
    loaded = load_fixture(data)
    progress("importing", 1, 3)
    known: set[str] = {c.case_id for c in service.list_cases()}
    added: list[CaseRecord] = []
    unchanged: list[str] = []
    for record in loaded.records:
        if record.case.case_id not in known:
            added.append(record)
        elif _same_record(service, record, loaded.corpora[record.case.corpus_id]):
            unchanged.append(record.case.case_id)
        else:
            raise EvaluationImportConflict(
                f"case {record.case.case_id!r} exists here with a different record; nothing was imported",
                case_id=record.case.case_id,
            )
    needed = {r.case.corpus_id for r in added}
    corpora = [loaded.corpora[k] for k in sorted(needed) if not service.store.has_corpus(k)]
    # Every body the new cases need, also of a corpus known here (a lost blob is restored).
    digests = sorted({d for k in needed for d in loaded.corpora[k].digests()})
    # Blobs before rows: a crash in between leaves unreferenced blobs, which GC sweeps. Each put
    # waits on fsync (and each check reads a whole blob), so a few run at once (I/O, not CPU).
    with concurrent.futures.ThreadPoolExecutor(max_workers=BLOB_WRITERS) as pool:
        unusable = list(pool.map(lambda d: not _blob_is_sound(service.blobs, d), digests))
        missing = [d for d, bad in zip(digests, unusable, strict=True) if bad]
        for _ in pool.map(service.blobs.put, (loaded.bodies[d] for d in missing)):
            pass
    written = len(missing)
    progress("importing", 2, 3)
    if added:
        service.store.add_cases(corpora, added)
    progress("importing", 3, 3)
    return ImportResult(
        cases_added=tuple(r.case.case_id for r in added),
        cases_unchanged=tuple(unchanged),
        corpora_added=len(corpora),
        blobs_written=written,
    )


def evaluation_set(
    service: EvaluationService, *, project_id: str | None = None, case_ids: Sequence[str] | None = None
) -> EvaluationSet:
    """This home's cases as a verified EvaluationSet (to replay the live set without a file), as
    a portable export has them: the live set and its export replay in the same projects."""
    return load_fixture(export_document(service, project_id=project_id, case_ids=case_ids))


def report_of(loaded: EvaluationSet) -> dict[str, Any]:
    """Recompute the report of a loaded fixture from its traces and judgments (no store needed)."""
    inputs = []
    for r in loaded.records:
        current = r.judgment_sets[-1] if r.judgment_sets else JudgmentSet(r.case.case_id, 0, (), None)
        inputs.append(
            CaseInput(
                case_id=r.case.case_id,
                candidates=r.trace.candidates,
                latency_ms=r.trace.latency_ms,
                warm=r.trace.warm,
                judgments=current.to_metric_judgments(r.trace.unit_resources()),
                corpus_hashes=loaded.corpora[r.case.corpus_id].hashes(),
            )
        )
    document: dict[str, Any] = plain(
        build_report(inputs, reviewed_cases=sum(1 for r in loaded.records if r.case.reviewed))
    )
    return document
