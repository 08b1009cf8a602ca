"""Your own models through a real daemon on its socket (issue 33): the model operations and
``project set`` go through it, and a new embedding model re-embeds the project in the background
(the watcher's worker, trigger ``model``) while the current generation keeps answering; the CLI
talks to the daemon for ``project show``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_core.domain.model_registry_errors import ModelInUse
from memory_core.domain.models import ModelOverrides
from memory_core.entrypoints.cli.main import main
from tests.daemon.test_server import Daemon, running_daemon
from tests.integration.own_models import tiny_bert


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    yield from running_daemon(tmp_path_factory, "models", indexed_project="ledger")


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("model") / "small", hidden=32, pooling="mean", seed=5)


def wait_for(predicate, timeout: float = 120.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_a_model_chosen_through_the_daemon_reembeds_in_the_background(
    daemon: Daemon, small: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = daemon.client
    builtin = client.show_project("ledger").generation.revisions.embedding_model
    added = client.add_model("small", str(small), ModelOverrides(query_prefix="query: "))
    assert added.kind == "embedding" and added.dimensions == 32 and added.query_prefix == "query: "
    assert [m.name for m in client.list_models().models] == ["minilm", "small"]
    chosen = client.set_project_models("ledger", embedding="small")
    assert chosen.embedding == "small" and chosen.dimensions == 32
    # The current generation answers while the worker re-embeds (or has just finished).
    answered = client.activate_memory("ledger", "ledger owner approvals")
    assert answered.revisions["embedding_model"] in (builtin, chosen.embedding_revision)

    def rebuilt() -> bool:
        health = next(h for h in client.runtime_status().projects if h.project_id == "ledger")
        last = health.last_reindex
        return last is not None and last.trigger == "model" and last.status == "built"

    wait_for(rebuilt)
    models = client.show_project_models("ledger")
    assert not models.reembedding and models.serving_revision == chosen.embedding_revision
    answer = client.activate_memory("ledger", "ledger owner approvals")
    assert answer.revisions["embedding_model"] == chosen.embedding_revision and answer.fragments
    with pytest.raises(ModelInUse):
        client.remove_model("small")

    # The CLI goes through the daemon: project show names the model serving.
    capsys.readouterr()
    assert main(["--home", str(daemon.home), "project", "show", "ledger", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["models"]["embedding"] == "small" and shown["models"]["reembedding"] is False

    # Back to the built-in: from the cache, nothing is embedded again.
    client.set_project_models("ledger", embedding="minilm")
    wait_for(lambda: client.show_project("ledger").generation.revisions.embedding_model == builtin)
    health = next(h for h in client.runtime_status().projects if h.project_id == "ledger")
    assert health.last_reindex is not None and health.last_reindex.embedded == 0
    client.remove_model("small")
    assert [m.name for m in client.list_models().models] == ["minilm"]
