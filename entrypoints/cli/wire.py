"""JSON wire format for CLI ``--json`` output (and later the daemon): one private converter."""

from __future__ import annotations

import enum
from typing import Any

import cattrs

from memory_core.domain.model import Generation, Project
from memory_core.retrieval.activation_state import ActivationState
from memory_core.retrieval.pipeline import Candidate
from memory_core.services.engine import ActivationResponse, ProjectInfo
from memory_core.services.indexing import IndexReport


def make_converter() -> cattrs.Converter:
    conv = cattrs.Converter()
    conv.register_unstructure_hook(enum.Enum, lambda e: e.value)
    conv.register_unstructure_hook(ActivationState, lambda s: s.to_json())
    conv.register_unstructure_hook(tuple, lambda t: [conv.unstructure(x) for x in t])
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
        },
    )
    return conv


_converter = make_converter()


def response_to_json(response: ActivationResponse) -> dict[str, Any]:
    return _converter.unstructure(response)  # type: ignore[no-any-return]


def candidates_to_json(candidates: tuple[Candidate, ...]) -> list[dict[str, Any]]:
    return [_converter.unstructure(c) for c in candidates]


def to_json(value: Any) -> Any:
    """Any attrs value of the engine's API (Run pages and details, reports) as plain JSON."""
    return _converter.unstructure(value)


def project_to_json(info: ProjectInfo) -> dict[str, Any]:
    return {
        "project": _converter.unstructure(info.project),
        "generation": _converter.unstructure(info.generation) if info.generation else None,
    }


def index_report_to_json(report: IndexReport) -> dict[str, Any]:
    return _converter.unstructure(report)  # type: ignore[no-any-return]


__all__ = ["Generation", "Project", "make_converter", "response_to_json", "project_to_json"]
