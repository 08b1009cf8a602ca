"""The Evaluation Set's records are defined once, by the core's attrs classes; the fixture
validator's field tables, the fixture JSON Schema and the OpenAPI types are checked against
them here, field by field and in what each says is optional (issue 16)."""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path
from typing import Any

import attrs
import pytest

from memory_core.domain.canonical import omit_none_fields
from memory_core.domain.model import ManifestEntry
from memory_core.evaluation import fixture
from memory_core.evaluation.cases import SourceTrace
from memory_core.runs.records import CandidateRecord

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "contracts" / "evaluation-fixture.schema.json").read_text(encoding="utf-8"))["$defs"]
OPENAPI = json.loads((ROOT / "contracts" / "openapi.json").read_text(encoding="utf-8"))["components"]["schemas"]

# (the attrs class, the validator's table, the fixture schema's $defs name, the OpenAPI schema name)
RECORDS = [
    (CandidateRecord, fixture.CANDIDATE_FIELDS, "candidate", "CandidateRecord"),
    (SourceTrace, fixture.TRACE_FIELDS, "trace", "SourceTrace"),
    (ManifestEntry, fixture.RESOURCE_FIELDS, "resource", "ManifestEntry"),
]
ARGS = ("cls", "table", "fixture_name", "api_name")


def optional_fields(cls: type) -> set[str]:
    hints = typing.get_type_hints(cls)
    return {name for name, hint in hints.items()
            if isinstance(hint, types.UnionType) and type(None) in typing.get_args(hint)}  # fmt: skip


def nullable(schema: dict[str, Any]) -> bool:
    kinds = schema.get("type")
    if kinds == "null" or (isinstance(kinds, list) and "null" in kinds) or None in schema.get("enum", ()):
        return True
    return any(nullable(option) for option in schema.get("anyOf", []) + schema.get("oneOf", []))


@pytest.mark.parametrize(ARGS, RECORDS, ids=lambda x: getattr(x, "__name__", ""))
def test_every_definition_names_the_same_fields(cls: type, table: dict[str, Any], fixture_name: str,
                                                api_name: str) -> None:  # fmt: skip
    fields = [f.name for f in attrs.fields(cls)]
    assert list(table) == fields, "the fixture validator's table differs from the attrs class"
    assert sorted(SCHEMA[fixture_name]["properties"]) == sorted(fields), "the fixture JSON Schema differs"
    # Every field is written, null or not, except those ``plain`` leaves out while None (a
    # candidate's span, absent from Runs recorded before spans were kept; issue 18 item 3).
    written = sorted(set(fields) - set(omit_none_fields(cls)))
    assert sorted(SCHEMA[fixture_name]["required"]) == written, "every field is written, null or not"
    assert sorted(OPENAPI[api_name]["properties"]) == sorted(fields), "the OpenAPI type differs"


@pytest.mark.parametrize(ARGS, RECORDS, ids=lambda x: getattr(x, "__name__", ""))
def test_every_definition_agrees_on_what_may_be_null(cls: type, table: dict[str, Any], fixture_name: str,
                                                     api_name: str) -> None:  # fmt: skip
    optional = optional_fields(cls)
    for name, check in table.items():
        assert (check(None) is None if name in optional else _refuses_null(check)), name
    assert {n for n, s in SCHEMA[fixture_name]["properties"].items() if nullable(s)} == optional
    assert {n for n, s in OPENAPI[api_name]["properties"].items() if nullable(s)} == optional


def _refuses_null(check: Any) -> bool:
    try:
        check(None)
    except Exception:
        return True
    return False


def test_the_comparison_sees_a_missing_field() -> None:
    fields = [f.name for f in attrs.fields(CandidateRecord)]
    assert list({k: v for k, v in fixture.CANDIDATE_FIELDS.items() if k != "final_score"}) != fields
