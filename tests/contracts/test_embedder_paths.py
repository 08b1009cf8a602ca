"""MiniLM inference paths, the query-embedding cache, a model that fails to load (issue 17)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory_core.adapters.models.minilm import (
    QUERY_CACHE_SIZE,
    MiniLMEmbedder,
    ModelUnavailable,
    default_model_dir,
    normalized_query,
)
from memory_core.domain.errors import InvalidRequest, ProjectNotIndexed, RetrievalFailed
from memory_core.domain.model import Source
from memory_core.entrypoints.bootstrap import bootstrap
from tests.runs import outcome

pytestmark = pytest.mark.slow


class _Counting:
    """Counts forward passes of an embedder (wraps its ``_encode``)."""

    def __init__(self, embedder: MiniLMEmbedder) -> None:
        self.calls = 0
        self._encode = embedder._encode

        def encode(texts: list[str], threads: int) -> Any:
            self.calls += 1
            return self._encode(texts, threads)

        embedder._encode = encode  # type: ignore[method-assign]


@pytest.fixture(scope="module")
def int8() -> MiniLMEmbedder:
    embedder = MiniLMEmbedder(inference="int8")
    embedder.load()
    return embedder


def test_query_cache_hits_whitespace_variants_and_returns_copies() -> None:
    embedder = MiniLMEmbedder()
    counting = _Counting(embedder)
    first = embedder.embed_query("roll back  a deploy")
    again = embedder.embed_query("  roll back a\tdeploy\n")
    assert counting.calls == 1 and embedder.cached_queries == 1
    assert np.array_equal(first, again)
    # The cached vector is the one a miss computes, and a caller writing into its copy changes nothing.
    fresh = MiniLMEmbedder(query_cache_size=0).embed_query("roll back a deploy")
    assert np.array_equal(first, fresh)
    again[:] = 0.0
    assert np.array_equal(embedder.embed_query("roll back a deploy"), first)
    # Case is not folded: the key is the text, only its whitespace normalized.
    embedder.embed_query("Roll back a deploy")
    assert counting.calls == 2
    assert normalized_query(" a \u00a0b\n") == "a b"


def test_query_cache_is_a_bounded_lru() -> None:
    embedder = MiniLMEmbedder(query_cache_size=2)
    counting = _Counting(embedder)
    embedder.embed_query("alpha")
    embedder.embed_query("beta")
    embedder.embed_query("alpha")  # alpha is now the most recent
    embedder.embed_query("gamma")  # evicts beta
    assert embedder.cached_queries == 2 and counting.calls == 3
    embedder.embed_query("alpha")
    assert counting.calls == 3
    embedder.embed_query("beta")
    assert counting.calls == 4
    assert MiniLMEmbedder().query_cache_size == QUERY_CACHE_SIZE
    with pytest.raises(InvalidRequest):
        MiniLMEmbedder(query_cache_size=-1)


def test_int8_is_its_own_revision_with_close_vectors(int8: MiniLMEmbedder) -> None:
    fp32 = MiniLMEmbedder()
    assert int8.revision != fp32.revision
    assert int8.revision.startswith(fp32.revision + "+")
    text = "laminar boundary layer transition on a swept wing"
    a, b = fp32.embed_query(text), int8.embed_query(text)
    assert b.dtype == np.float32 and b.shape == (384,)
    assert abs(float(np.linalg.norm(b)) - 1.0) < 1e-5
    assert 0.9 < float(a @ b) < 0.9999  # close, yet not the same vectors: never to be mixed
    with pytest.raises(InvalidRequest):
        MiniLMEmbedder(inference="fp16")


def test_bf16_is_its_own_revision_with_nearly_fp32_vectors() -> None:
    fp32, bf16 = MiniLMEmbedder(), MiniLMEmbedder(inference="bf16")
    assert bf16.revision == fp32.revision + "+torch-bf16"
    texts = [
        "laminar boundary layer transition on a swept wing",
        "the wing in a slipstream " * 80,  # truncated at 256 tokens, padded against the others
        "",
        "ünïcödé  text",
    ]
    a, b = np.stack(fp32.embed_documents(texts)), np.stack(bf16.embed_documents(texts))
    assert b.dtype == np.float32 and b.shape == (4, 384)
    assert np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)  # pooled and normalised in fp32
    cosine = (a * b).sum(axis=1)
    assert float(cosine.min()) > 0.999 and float(cosine.max()) < 0.999999  # close, never to be mixed
    # bf16 rounding depends a little on the batch's shape: a query agrees with its document vector.
    query = bf16.embed_query(texts[0])
    assert float(query @ b[0]) > 0.9999
    with pytest.raises(InvalidRequest, match="fp32, int8, bf16"):
        MiniLMEmbedder(inference="int8-blockwise")  # an ONNX path, not torch's


def _project(tmp_path: Path) -> Path:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "deploy.md").write_text("# Deploy\n\nUse helm upgrade.\n\n## Rollback\n\nUse helm rollback.\n")
    (notes / "coffee.md").write_text("# Coffee\n\nPour hot water over ground beans.\n")
    return notes


def test_switching_the_inference_path_re_embeds_and_never_mixes(tmp_path: Path, int8: MiniLMEmbedder) -> None:
    home, notes = tmp_path / "home", _project(tmp_path)
    engine = bootstrap(home)
    engine.add_project("notes", [Source(str(notes))])
    first = engine.index("notes")
    assert first.embedded == first.units
    engine.close()

    switched = bootstrap(home, embedder=int8)
    try:
        # The generation holds fp32 vectors: an int8 query is refused, as a failed Run, not ranked.
        with pytest.raises(ProjectNotIndexed) as info:
            switched.activate("notes", "how do I roll back?")
        run = switched.get_run(info.value.details["run_id"])
        assert outcome(run) == ("failed", "embed_query", "project_not_indexed")
        again = switched.index("notes")
        assert again.status == "built"
        assert (again.embedded, again.reused_embeddings) == (again.units, 0)  # no fp32 vector reused
        answer = switched.activate("notes", "how do I roll back?").response
        assert answer.fragments and answer.revisions["embedding_model"] == int8.revision
    finally:
        switched.close()


def test_a_model_that_fails_to_load_is_a_failed_run_with_a_stage_code(tmp_path: Path) -> None:
    home, notes = tmp_path / "home", _project(tmp_path)
    broken_dir = tmp_path / "model"
    shutil.copytree(default_model_dir(), broken_dir)
    engine = bootstrap(home, embedder=MiniLMEmbedder(broken_dir))
    engine.add_project("notes", [Source(str(notes))])
    engine.index("notes")
    engine.close()
    # Same weights file (so the same revision) but a config the loader cannot parse.
    (broken_dir / "config.json").write_text("{ not json")
    broken = MiniLMEmbedder(broken_dir)
    engine = bootstrap(home, embedder=broken)
    try:
        with pytest.raises(RetrievalFailed) as info:
            engine.activate("notes", "rollback")
        assert (info.value.stage, info.value.error_code) == ("embed_query", "model_unavailable")
        run = engine.get_run(info.value.run_id or "")
        assert outcome(run) == ("failed", "embed_query", "model_unavailable")
    finally:
        engine.close()
    with pytest.raises(ModelUnavailable):
        MiniLMEmbedder(tmp_path / "no-such-model").embed_documents(["text"])


def test_the_inference_path_is_chosen_by_name_at_the_composition_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memory_core.adapters.models.inference import CHOICES, DEFAULT_INFERENCE, INFERENCE_ENV

    home, notes = tmp_path / "home", _project(tmp_path)
    monkeypatch.delenv(INFERENCE_ENV, raising=False)
    engine = bootstrap(home)
    assert engine.embedder.revision.endswith("+onnx-int8-per-channel") and DEFAULT_INFERENCE == "onnx-int8"
    engine.close()
    # Each name gives its own revision (no two paths share vectors); nothing loads to know it.
    revisions = set()
    for name in CHOICES:
        engine = bootstrap(home, inference=name)
        revisions.add(engine.embedder.revision)
        engine.close()
    assert len(revisions) == len(CHOICES)
    # The environment picks it when the caller does not; the caller's name wins over it.
    monkeypatch.setenv(INFERENCE_ENV, "torch-bf16")
    engine = bootstrap(home)
    try:
        assert engine.embedder.revision.endswith("+torch-bf16")
        engine.add_project("notes", [Source(str(notes))])
        report = engine.index("notes")
        assert report.embedded == report.units
        answer = engine.activate("notes", "how do I roll back?").response
        assert answer.revisions["embedding_model"] == engine.embedder.revision
        assert "Rollback" in answer.fragments[0].text
    finally:
        engine.close()
    engine = bootstrap(home, inference="onnx-fp32")
    try:
        with pytest.raises(ProjectNotIndexed):  # built with bf16 vectors: refused, never mixed
            engine.activate("notes", "how do I roll back?")
    finally:
        engine.close()
    # A name it does not know is a typed error naming the choices, before the home is touched.
    monkeypatch.setenv(INFERENCE_ENV, "fp16")
    with pytest.raises(InvalidRequest, match="MEMORY_CORE_INFERENCE must be one of onnx-int8, onnx-fp32") as info:
        bootstrap(tmp_path / "untouched")
    assert info.value.details["inference"] == "fp16" and not (tmp_path / "untouched").exists()
    with pytest.raises(InvalidRequest, match="inference must be one of"):
        bootstrap(tmp_path / "untouched", inference="bf16")
