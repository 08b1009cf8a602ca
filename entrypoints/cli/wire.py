"""The CLI's JSON wire format: every ``--json`` document (``memcore runs``, ``memcore eval``,
``memcore index``, ``memcore activate`` ...) goes through the one converter made here.

Values are written as their fields (as the core's ``plain`` writes them); the hooks below are the
places a CLI document differs from a value's fields, each said once: a candidate flattens its
unit, a case says whether it is reviewed, a judgment names its one target, a judgment set shows
its version and judgments, a case detail calls its missed evidence ``missed_evidence`` and a BEIR
import counts its cases. The daemon's HTTP documents have their own converter
(``entrypoints/daemon/api``): they differ (a case detail there carries the corpus and history).
"""

from __future__ import annotations

import enum
from typing import Any

import cattrs
from cattrs.gen import make_dict_unstructure_fn, override

from memory_core.domain.canonical import plain
from memory_core.domain.model import Generation, Project
from memory_core.evaluation.cases import Case, CaseDetail, Judgment, JudgmentSet
from memory_core.retrieval.pipeline import Candidate
from memory_core.services.activation import ActivationResponse
from memory_core.services.beir_import import BeirImportResult
from memory_core.services.engine import ProjectInfo
from memory_core.services.indexing import IndexReport


def make_converter() -> cattrs.Converter:
    conv = cattrs.Converter()
    conv.register_unstructure_hook(enum.Enum, lambda e: e.value)
    conv.register_unstructure_hook(tuple, lambda t: [conv.unstructure(x) for x in t])
    case_fields = make_dict_unstructure_fn(Case, conv)

    def case(c: Case) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in case_fields(c).items():
            out[key] = value
            if key == "reviewed_version":  # where the CLI has always shown it
                out["reviewed"] = c.reviewed
        return out

    conv.register_unstructure_hook(Case, case)
    conv.register_unstructure_hook(Judgment, plain)  # one target, a note only when given (OMIT_NONE)
    conv.register_unstructure_hook(
        JudgmentSet,
        make_dict_unstructure_fn(JudgmentSet, conv, case_id=override(omit=True), created_at=override(omit=True)),
    )
    conv.register_unstructure_hook(
        CaseDetail, make_dict_unstructure_fn(CaseDetail, conv, missed=override(rename="missed_evidence"))
    )
    conv.register_unstructure_hook(
        BeirImportResult,
        make_dict_unstructure_fn(BeirImportResult, conv, case_ids=override(rename="cases", unstruct_hook=len)),
    )
    conv.register_unstructure_hook(
        Candidate,
        lambda c: {
            "unit_id": c.unit.unit_id,
            "resource_id": c.unit.resource_id,
            "unit_hash": c.unit.unit_hash,
            "resource_hash": c.unit.resource_hash,
            "heading_path": list(c.unit.heading_path),
            "token_count": c.unit.token_count,
            **{
                f: getattr(c, f)
                for f in (
                    "exact_rank",
                    "exact_score",
                    "bm25_rank",
                    "bm25_score",
                    "lexical_rank",
                    "dense_rank",
                    "dense_score",
                    "dense_similarity",
                    "rrf_rank",
                    "rrf_score",
                    "rerank_rank",
                    "rerank_score",
                    "final_rank",
                    "final_score",
                    "disposition",
                    "exclusion_code",
                    "delta_action",
                )
            },
            "start": c.unit.start,  # the unit's span, last, as a recorded candidate keeps it
            "end": c.unit.end,
        },
    )
    return conv


_converter = make_converter()


def response_to_json(response: ActivationResponse) -> dict[str, Any]:
    return _converter.unstructure(response)  # type: ignore[no-any-return]


def candidates_to_json(candidates: tuple[Candidate, ...]) -> list[dict[str, Any]]:
    return [_converter.unstructure(c) for c in candidates]


def to_json(value: Any) -> Any:
    """Any value of the engine's API (Run pages and details, cases, reports, replays) as JSON."""
    return _converter.unstructure(value)


def project_to_json(info: ProjectInfo) -> dict[str, Any]:
    return {
        "project": _converter.unstructure(info.project),
        "generation": _converter.unstructure(info.generation) if info.generation else None,
    }


def index_report_to_json(report: IndexReport) -> dict[str, Any]:
    return _converter.unstructure(report)  # type: ignore[no-any-return]


__all__ = ["Generation", "Project", "make_converter", "response_to_json", "project_to_json"]
