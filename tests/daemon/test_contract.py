"""The committed contract: ``contracts/openapi.json`` matches the dispatch table and types, and
the golden examples in ``contracts/examples/`` validate against it and decode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import jsonschema
import pytest

from memory_core.entrypoints.daemon import api
from memory_core.entrypoints.daemon.dispatch import TABLE
from memory_core.entrypoints.daemon.openapi import REF, SchemaBuilder, build_document, default_path, render

from .conftest import Contract

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "contracts" / "openapi.json"
EXAMPLES = ROOT / "contracts" / "examples"


def example_files() -> list[Path]:
    return sorted(EXAMPLES.glob("*.json"))


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def test_the_committed_document_is_current() -> None:
    assert default_path() == CONTRACT
    committed = CONTRACT.read_text(encoding="utf-8")
    assert committed == render(build_document()), (
        "contracts/openapi.json drifted from the dispatch table: run `memcore contracts generate`"
    )


def test_generation_is_deterministic() -> None:
    assert render(build_document()) == render(build_document())


def test_the_cli_check_reports_drift(tmp_path: Path) -> None:
    stale = tmp_path / "openapi.json"
    stale.write_text("{}\n", encoding="utf-8")
    code = (
        "import argparse, sys\n"
        "from memory_core.entrypoints.daemon import cli\n"
        "p = argparse.ArgumentParser(); p.add_argument('--home')\n"
        "cli.add_cli_commands(p.add_subparsers(dest='command', required=True))\n"
        "sys.exit(cli.handle(p.parse_args(sys.argv[1:])))\n"
    )

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT)

    assert run("contracts", "generate", "--check", "--output", str(stale)).returncode == 1
    assert run("contracts", "generate", "--output", str(stale)).returncode == 0
    assert stale.read_text(encoding="utf-8") == CONTRACT.read_text(encoding="utf-8")
    assert run("contracts", "generate", "--check", "--output", str(stale)).returncode == 0


def test_document_shape(contract: Contract) -> None:
    doc = contract.document
    assert doc["openapi"] == "3.1.0" and doc["info"]["version"] == api.API_VERSION
    assert set(doc["paths"]) == {f"/v1/{name}" for name in TABLE} | {"/v1/openapi.json"}
    operation_ids = [op["operationId"] for item in doc["paths"].values() for op in item.values()]
    assert len(operation_ids) == len(set(operation_ids))
    for name in TABLE:
        responses = doc["paths"][f"/v1/{name}"]["post"]["responses"]
        assert "200" in responses and "400" in responses and "500" in responses


def test_every_component_is_a_valid_schema_and_every_ref_resolves(contract: Contract) -> None:
    schemas = contract.document["components"]["schemas"]
    for name, schema in schemas.items():
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema.get("title") == name
    refs = {m for m in json.dumps(contract.document).split('"') if m.startswith(REF)}
    assert {r.removeprefix(REF) for r in refs} <= set(schemas)


def test_served_document_is_the_committed_one(http: Any) -> None:
    reply = http.get("/v1/openapi.json")
    assert reply.status_code == 200 and reply.json() == load(CONTRACT)


def test_every_method_has_golden_examples() -> None:
    names = {p.name.split(".")[0] for p in example_files() if not p.name.startswith("error.")}
    assert names == set(TABLE), "add contracts/examples/<method>.request.json and .response.json"
    for path in example_files():
        if path.name.endswith(".request.json"):
            assert path.with_name(path.name.replace(".request.", ".response.")).exists(), path.name


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_golden_example_validates_and_decodes(path: Path, contract: Contract) -> None:
    value = load(path)
    conv = api.make_converter()
    if path.name.startswith("error."):
        contract.validate("ErrorEnvelope", value)
        code = path.name.split(".")[1]
        assert value["error"]["code"] == code
        exc = api.exception_for(code, value["error"]["message"], value["error"]["details"])
        assert exc.code == code
        return
    method = TABLE[path.name.split(".")[0]]
    if path.name.endswith(".request.json"):
        contract.validate(contract.request_component(method.name), value)
        typed = api.structure(conv, value, method.request)
    else:
        contract.validate(contract.response_component(method.name), value)
        typed = api.structure(conv, value, method.response)
        # Decoding and encoding again gives the same JSON: nothing is lost on the way.
        assert json.loads(json.dumps(api.unstructure(conv, typed))) == value
    assert isinstance(typed, method.request if path.name.endswith(".request.json") else method.response)


def test_examples_catch_a_broken_value(contract: Contract) -> None:
    value = load(EXAMPLES / "activate_memory.response.json")
    value["fragments"][0]["final_rank"] = "first"
    with pytest.raises(jsonschema.ValidationError):
        contract.validate("ActivationResponse", value)
    with pytest.raises(jsonschema.ValidationError):
        contract.validate("ActivateMemoryRequest", {"project_id": "p", "query": "q", "extra": 1})


# -- the schema builder on its own ------------------------------------------------------------
@attrs.frozen
class Inner:
    n: int


@attrs.frozen
class Sample:
    """A sample type."""

    name: str
    tags: tuple[str, ...]
    scores: dict[str, float]
    inner: Inner | None
    maybe: int | None = None
    flag: bool = attrs.field(default=False, metadata={"schema": {"description": "a flag"}})


def test_schema_builder_maps_attrs_types() -> None:
    builder = SchemaBuilder()
    assert builder.ref(Sample) == {"$ref": REF + "Sample"}
    sample = builder.components["Sample"]
    assert sample["required"] == ["name", "tags", "scores", "inner"]
    assert sample["additionalProperties"] is False and sample["description"] == "A sample type."
    props = sample["properties"]
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["scores"] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert props["inner"] == {"anyOf": [{"$ref": REF + "Inner"}, {"type": "null"}]}
    assert props["maybe"] == {"type": ["integer", "null"], "default": None}
    assert props["flag"] == {"type": "boolean", "default": False, "description": "a flag"}
    assert builder.components["Inner"]["required"] == ["n"]


def test_schema_builder_refuses_what_json_cannot_say() -> None:
    @attrs.frozen
    class Pair:
        both: tuple[int, str]

    with pytest.raises(TypeError):
        SchemaBuilder().ref(Pair)
