"""BEIR import: index a collection as a project, run each query, freeze and judge it (qrels)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import attrs

from memory_core.domain.errors import InvalidRequest, ProjectNotFound, StorageUnavailable
from memory_core.domain.evaluation_errors import EvaluationCaseNotFound, EvaluationImportConflict
from memory_core.domain.model import Source, validate_project_id
from memory_core.domain.progress import Progress, no_progress
from memory_core.evaluation.beir import BeirCollection, Prepared, beir_case_id, resource_id_for
from memory_core.evaluation.cases import BEIR_IMPORT, Case, Judgment
from memory_core.evaluation.metrics import RankedItem
from memory_core.evaluation.report import Report
from memory_core.ports.evaluation import Workspace
from memory_core.services.engine import Engine
from memory_core.services.evaluation import EvaluationService
from memory_core.services.manifests import stored_manifest

WriteSource = Callable[[str, Mapping[str, bytes]], Source]


@attrs.frozen
class EngineWorkspace:
    """A Workspace over an Engine. ``write_source(project_id, files)`` puts the files where the
    engine's scanner reads them and returns that Source (a folder for the real engine:
    ``memory_core.adapters.files.evaluation_sources.FolderSources``)."""

    engine: Engine
    write_source: WriteSource

    def prepare(self, project_id: str, files: Mapping[str, bytes], progress: Progress = no_progress) -> Prepared:
        source = self.write_source(project_id, files)
        try:
            project = self.engine.show_project(project_id).project
        except ProjectNotFound:
            self.engine.add_project(project_id, [source])
        else:
            if project.sources != (source,):
                raise InvalidRequest(
                    f"project {project_id!r} exists with other sources; choose another project name",
                    project=project_id,
                )
        report = self.engine.index(project_id, progress=progress)
        entries = stored_manifest(self.engine.manifests, report.effective_memory_hash, project_id)
        return Prepared({e.resource_id: e.resource_hash for e in entries}, report.warnings)

    def activate(self, project_id: str, query: str) -> str:
        run_id = self.engine.activate(project_id, query).response.run_id
        if not run_id:
            raise StorageUnavailable("the activation was not recorded as a Run (is history enabled and writable?)")
        return run_id

    def rank(self, project_id: str, query: str, ranked_as: str | None = None) -> list[RankedItem]:
        ranking = self.engine.ranking_for(ranked_as) if ranked_as is not None else None
        activation = self.engine.activate(project_id, query, ranking=ranking)
        return [RankedItem(c.unit.unit_id, c.unit.resource_id, c.unit.resource_hash) for c in activation.candidates]


@attrs.frozen
class BeirImportResult:
    project_id: str
    split: str
    case_ids: tuple[str, ...]
    created: int
    resumed: int  # cases that existed already (an earlier, interrupted import)
    dropped_judgments: int  # qrels naming a document the scanner skipped (not in the corpus)
    report: Report
    too_long_queries: tuple[str, ...] = ()  # judged queries an activation would refuse: no case
    marked_reviewed: int = 0  # resumed cases that ``reviewed`` marked reviewed now
    left_unreviewed: int = 0  # resumed cases ``reviewed`` left alone: not the judgments this import makes


IMPORTED_VERSION = 1  # the judgment version an import creates a case with (``create_case``)


def import_beir(
    service: EvaluationService,
    workspace: Workspace,
    folder: str | Path,
    project_id: str,
    *,
    split: str = "test",
    reviewed: bool = False,
    progress: Progress = no_progress,
) -> BeirImportResult:
    """Import a BEIR folder as project ``project_id`` and one case per query of ``split``.

    ``reviewed``: mark the qrels as reviewed by a person (only reviewed cases may gate); a case an
    earlier import made is marked too when its judgments are still the ones this import makes
    (else it is left as it is, and counted).
    A judged query longer than an activation takes makes no case and is named in the result.
    """
    validate_project_id(project_id)
    collection = BeirCollection.read(folder, split)  # every check before anything is written
    workspace.prepare(project_id, collection.files(), progress)
    queries = collection.split_queries()
    in_corpus: dict[str, frozenset[str]] = {}
    case_ids: list[str] = []
    created = resumed = dropped = marked = left = 0
    for done, (qid, text) in enumerate(queries, start=1):
        case_id = beir_case_id(project_id, qid)
        case_ids.append(case_id)
        existing = _existing(service, case_id)
        if existing is not None:
            if existing.query != text or existing.project_id != project_id:
                raise EvaluationImportConflict(
                    f"case {case_id!r} exists with another query or project", case_id=case_id
                )
            resumed += 1
            if reviewed and not existing.reviewed:
                # Only judgments as this import makes them: not a person's (a later version), nor
                # another split's or an earlier copy of the qrels under the same case id.
                imported, _ = _judgments(collection.qrels[qid], _corpus_resources(service, existing.source_run_id,
                                                                                  in_corpus))  # fmt: skip
                if existing.judgment_version == IMPORTED_VERSION and set(
                    service.judgments(case_id).judgments
                ) == set(imported):
                    service.mark_reviewed(case_id, existing.judgment_version)
                    marked += 1
                else:
                    left += 1
            progress("cases", done, len(queries))
            continue
        run_id = workspace.activate(project_id, text)
        judgments, left_out = _judgments(collection.qrels[qid], _corpus_resources(service, run_id, in_corpus))
        dropped += left_out
        service.create_case(run_id, case_id=case_id, provenance=BEIR_IMPORT, judgments=judgments, reviewed=reviewed)
        created += 1
        progress("cases", done, len(queries))
    report = service.report(case_ids=case_ids)
    return BeirImportResult(project_id, split, tuple(case_ids), created, resumed, dropped, report,
                            collection.too_long, marked, left)  # fmt: skip


def _judgments(qrels: Mapping[str, int], resources: frozenset[str] | None) -> tuple[list[Judgment], int]:
    """A query's qrels as resource judgments, and how many name a document the corpus lacks (left out)."""
    judgments = []
    for doc_id, relevance in qrels.items():
        resource_id = resource_id_for(doc_id)
        if resources is None or resource_id in resources:
            judgments.append(Judgment.resource(resource_id, relevance))
    return judgments, len(qrels) - len(judgments)


def _existing(service: EvaluationService, case_id: str) -> Case | None:
    try:
        return service.get_case(case_id)
    except EvaluationCaseNotFound:
        return None


def _corpus_resources(
    service: EvaluationService, run_id: str, cache: dict[str, frozenset[str]]
) -> frozenset[str] | None:
    """Resource ids of the Run's Effective Memory (None when unknown: create_case will say so)."""
    manifest_hash = service.runs.get_run(run_id).summary.effective_memory_hash
    if manifest_hash is None:
        return None
    if manifest_hash not in cache:
        entries = service.runs.run_manifest(manifest_hash)
        if entries is None:
            return None
        cache[manifest_hash] = frozenset(e.resource_id for e in entries)
    return cache[manifest_hash]
