"""Daemon test helpers: an in-memory engine behind the real ASGI app, and contract validators."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from starlette.testclient import TestClient

from memory_core.adapters.in_memory.storage import InMemoryScanner
from memory_core.entrypoints.bootstrap import bootstrap_in_memory
from memory_core.entrypoints.daemon.app import create_app
from memory_core.entrypoints.daemon.dispatch import Context
from memory_core.entrypoints.daemon.openapi import build_document

ORG, PROJ = "/org", "/proj"


def docs() -> dict[str, dict[str, bytes]]:
    return {
        ORG: {
            "runbooks/deploy.md": b"# Deploy runbook\n\nDeploy with helm upgrade.\n\n## Rollback\n\nhelm rollback.\n",
        },
        PROJ: {
            "decisions/ADR-0004-advisory-locks.md": b"# ADR-0004: Advisory locks\n\nUse Postgres advisory locks.\n",
            "runbooks/deploy.md": b"# Deploy runbook\n\nDeploy the ledger.\n\n## Rollback\n\nhelm rollback.\n",
            "notes.txt": b"Coffee is on the second floor.\n\nThe printer is broken.\n",
        },
    }


class Contract:
    """Validates JSON values against the generated OpenAPI document's component schemas."""

    URI = "urn:memory-core:openapi"

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        resource = Resource.from_contents(document, default_specification=DRAFT202012)
        self.registry: Registry[Any] = Registry().with_resource(self.URI, resource)

    def validator(self, component: str) -> jsonschema.Draft202012Validator:
        schema = {"$ref": f"{self.URI}#/components/schemas/{component}"}
        return jsonschema.Draft202012Validator(schema, registry=self.registry)

    def validate(self, component: str, value: Any) -> None:
        self.validator(component).validate(value)

    def response_component(self, method: str) -> str:
        ref = self.document["paths"][f"/v1/{method}"]["post"]["responses"]["200"]["content"]["application/json"]
        return str(ref["schema"]["$ref"]).rsplit("/", 1)[1]

    def request_component(self, method: str) -> str:
        ref = self.document["paths"][f"/v1/{method}"]["post"]["requestBody"]["content"]["application/json"]
        return str(ref["schema"]["$ref"]).rsplit("/", 1)[1]


@pytest.fixture(scope="session")
def contract() -> Contract:
    return Contract(build_document())


@pytest.fixture
def scanner() -> InMemoryScanner:
    return InMemoryScanner(docs())


@pytest.fixture
def context(scanner: InMemoryScanner) -> Iterator[Context]:
    engine = bootstrap_in_memory(scanner=scanner)
    yield Context(engine, home="/home/test", socket="/home/test/run/memcore.sock", started_at="2026-01-01T00:00:00Z")
    engine.close()


@pytest.fixture
def http(context: Context) -> Iterator[TestClient]:
    with TestClient(create_app(context)) as client:
        yield client
