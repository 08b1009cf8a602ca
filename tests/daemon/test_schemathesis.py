"""schemathesis against the daemon's ASGI app in process (it has no Unix-socket transport), built
from the served ``/v1/openapi.json``: no 5xx, every status and body as the contract says.

The engine is the in-memory one: fuzzed source paths never reach the real disk (brief §12). A
project is indexed and activated first so that fuzzed calls also reach the ranking and Run paths,
not only the "not found" ones. Bounded: a few dozen examples per operation.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)
from starlette.testclient import TestClient

from memory_core.adapters.in_memory.storage import InMemoryScanner
from memory_core.entrypoints.bootstrap import bootstrap_in_memory
from memory_core.entrypoints.daemon.app import create_app
from memory_core.entrypoints.daemon.dispatch import Context

from .conftest import docs

MAX_EXAMPLES = 50
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


def _app() -> Any:
    engine = bootstrap_in_memory(scanner=InMemoryScanner(docs()))
    app = create_app(Context(engine, home="/nonexistent/home", socket=None, started_at="2026-01-01T00:00:00Z"))
    with TestClient(app) as http:
        sources = [{"path": "/org", "layer": "organization"}, {"path": "/proj"}]
        for project in ("ledger", "other"):
            assert http.post("/v1/add_project", json={"project_id": project, "sources": sources}).status_code == 200
        assert http.post("/v1/index_project", json={"project_id": "ledger"}).status_code == 200
        query = {"project_id": "ledger", "query": "how do I roll back a deploy?"}
        assert http.post("/v1/activate_memory", json=query).status_code == 200
    return app


# Every rejection status the contract lists; 413 (a body over the limit) is a rejection too.
REJECTED = ["400", "404", "405", "409", "413", "422"]
CONFIG = SchemathesisConfig.from_dict({"checks": {"negative_data_rejection": {"expected-statuses": REJECTED}}})
schema = schemathesis.openapi.from_asgi("/v1/openapi.json", _app(), config=CONFIG)


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_daemon_honours_its_contract(case: Any) -> None:
    case.call_and_validate(checks=CHECKS)
