"""Contracts of the Embedder and TokenCounter ports: MiniLM adapters and the in-memory twins."""

from __future__ import annotations

import math
import string
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.adapters.in_memory.vectors import HashingEmbedder, WhitespaceTokenCounter
from memory_core.adapters.models.minilm import MiniLMEmbedder, MiniLMTokenCounter
from memory_core.adapters.models.onnx_minilm import OnnxMiniLMEmbedder
from memory_core.ports import Embedder
from memory_core.retrieval.chunking import TokenCounter

QUERY = "How do I roll back a deploy?"
ROLLBACK = "To roll back a deploy, redeploy the previous release with the rollback script."
COFFEE = "Coffee is brewed by pouring hot water over freshly ground roasted beans."
DOCS = [ROLLBACK, COFFEE, "", "ADR-0042: use Postgres for the event store", "ünïcödé  text\twith\nbreaks"]


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    embedder = MiniLMEmbedder()
    embedder.load()
    return embedder


@pytest.fixture(scope="module")
def onnx_minilm(tmp_path_factory: pytest.TempPathFactory) -> OnnxMiniLMEmbedder:
    embedder = OnnxMiniLMEmbedder(cache_dir=tmp_path_factory.mktemp("models"))
    embedder.load()
    return embedder


@pytest.fixture(scope="module")
def onnx_int8_blockwise(tmp_path_factory: pytest.TempPathFactory) -> OnnxMiniLMEmbedder:
    embedder = OnnxMiniLMEmbedder(cache_dir=tmp_path_factory.mktemp("models"), inference="int8-blockwise")
    embedder.load()
    return embedder


MINILM_PATHS = [pytest.param("minilm", marks=pytest.mark.slow), pytest.param("onnx_minilm", marks=pytest.mark.slow)]
# A quantized path that keeps the port's promises (a text's vector whatever its batch, a query
# embedded as a document); the per-tensor int8 and bf16 paths keep them only to looser bounds.
QUANTIZED_PATHS = [pytest.param("onnx_int8_blockwise", marks=pytest.mark.slow)]


@pytest.fixture(scope="module", params=[*MINILM_PATHS, *QUANTIZED_PATHS, "hashing"])
def embedder(request: pytest.FixtureRequest) -> Embedder:
    if request.param == "hashing":
        return HashingEmbedder()
    return cast(Embedder, request.getfixturevalue(request.param))


@pytest.fixture(scope="module", params=MINILM_PATHS)
def any_minilm(request: pytest.FixtureRequest) -> Embedder:
    """MiniLM on each inference path that gives fp32's vectors: torch and ONNX Runtime (the default)."""
    return cast(Embedder, request.getfixturevalue(request.param))


def norm(v: Sequence[float]) -> float:
    return math.sqrt(sum(float(x) * float(x) for x in v))


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(float(x) * float(y) for x, y in zip(a, b, strict=True))


def test_revision_and_dimensions(embedder: Embedder) -> None:
    assert isinstance(embedder.revision, str) and embedder.revision
    assert isinstance(embedder.dimensions, int) and embedder.dimensions > 0


def test_one_unit_vector_per_text(embedder: Embedder) -> None:
    vectors = embedder.embed_documents(DOCS)
    assert len(vectors) == len(DOCS)
    for v in vectors:
        assert len(v) == embedder.dimensions
        assert norm(v) == pytest.approx(1.0, abs=1e-5)
    assert list(embedder.embed_documents([])) == []


def test_deterministic(embedder: Embedder) -> None:
    first = embedder.embed_documents(DOCS)
    again = embedder.embed_documents(DOCS)
    for a, b in zip(first, again, strict=True):
        assert list(a) == list(b)
    assert list(embedder.embed_query(QUERY)) == list(embedder.embed_query(QUERY))


def test_order_and_batching_do_not_change_a_text_vector(embedder: Embedder) -> None:
    together = embedder.embed_documents(DOCS)
    reversed_ = embedder.embed_documents(list(reversed(DOCS)))[::-1]
    alone = [embedder.embed_documents([d])[0] for d in DOCS]
    for a, b, c in zip(together, reversed_, alone, strict=True):
        assert list(a) == pytest.approx(list(b), abs=1e-5)
        assert list(a) == pytest.approx(list(c), abs=1e-5)


def test_query_and_document_embeddings_agree(embedder: Embedder) -> None:
    """Symmetric model: a text embeds the same as a query and as a document."""
    assert list(embedder.embed_query(ROLLBACK)) == pytest.approx(
        list(embedder.embed_documents([ROLLBACK])[0]), abs=1e-5
    )


def test_related_text_scores_higher(embedder: Embedder) -> None:
    query = embedder.embed_query(QUERY)
    rollback, coffee = embedder.embed_documents([ROLLBACK, COFFEE])
    assert dot(query, rollback) > dot(query, coffee) + 0.2


# --- MiniLM specifics -----------------------------------------------------------------------


@pytest.mark.slow
def test_minilm_revision_names_model_and_weights_hash(any_minilm: Embedder) -> None:
    name, _, rest = any_minilm.revision.partition("@")
    digest = rest.partition("+")[0]  # a path other than torch fp32 names itself after a "+"
    assert name == "all-MiniLM-L6-v2"
    assert len(digest) == 12 and all(c in string.hexdigits for c in digest)
    assert any_minilm.dimensions == 384


@pytest.mark.slow
def test_minilm_semantics_beyond_shared_words(any_minilm: Embedder) -> None:
    query = any_minilm.embed_query(QUERY)
    runbook, coffee = any_minilm.embed_documents(
        [
            "Runbook: reverting a bad release. Redeploy the last good build tag and verify health checks.",
            COFFEE,
        ]
    )
    assert dot(query, runbook) > dot(query, coffee) + 0.2


@pytest.mark.slow
def test_minilm_truncates_long_texts(any_minilm: Embedder) -> None:
    """Past 256 tokens the text is cut: what follows cannot change the vector."""
    head = "the wing in a slipstream " * 80  # ~400 tokens
    a, b = any_minilm.embed_documents([head + "coffee", head + "rollback runbook"])
    assert list(a) == pytest.approx(list(b), abs=1e-6)


@pytest.mark.slow
def test_minilm_returns_float32_rows(any_minilm: Embedder) -> None:
    vector = any_minilm.embed_query(QUERY)
    assert str(vector.dtype) == "float32" and vector.shape == (384,)


@pytest.mark.slow
def test_constructing_imports_neither_torch_nor_transformers() -> None:
    code = (
        "import sys\n"
        "from memory_core.adapters.models.minilm import MiniLMEmbedder, MiniLMTokenCounter\n"
        "e = MiniLMEmbedder(); t = MiniLMTokenCounter()\n"
        "assert e.revision.startswith('all-MiniLM-L6-v2@')\n"
        "assert t.count('hello world') == 2\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# --- TokenCounter contract ------------------------------------------------------------------


@pytest.fixture(scope="module", params=["minilm", "whitespace"])
def counter(request: pytest.FixtureRequest) -> TokenCounter:
    return MiniLMTokenCounter() if request.param == "minilm" else WhitespaceTokenCounter()


def test_counter_basics(counter: TokenCounter) -> None:
    assert isinstance(counter.revision, str) and counter.revision
    assert counter.count("") == 0
    assert counter.count("   \n\t ") == 0
    assert counter.count("hello") >= 1
    assert counter.count("hello world") == counter.count("hello world")


def test_counter_never_truncates(counter: TokenCounter) -> None:
    assert counter.count("word " * 1000) == 1000


_TEXT = st.text(alphabet=string.ascii_letters + string.digits + " .,;:!?'-\n", max_size=80)


@settings(max_examples=60, deadline=None)
@given(a=_TEXT, b=_TEXT)
def test_counts_add_up_across_whitespace(a: str, b: str) -> None:
    for counter in (MiniLMTokenCounter(), WhitespaceTokenCounter()):
        assert counter.count(a + " " + b) == counter.count(a) + counter.count(b)


def test_minilm_counter_counts_wordpieces_without_special_tokens() -> None:
    counter = MiniLMTokenCounter()
    assert counter.revision.startswith("minilm-wordpiece@")
    assert counter.count("hello world") == 2
    # Punctuation splits, and an unknown long word becomes several word pieces.
    assert counter.count("hello, world!") == 4
    assert counter.count("aeroelasticity") > 1
    assert counter.count_many(["hello world", "", "word " * 300]) == [2, 0, 300]


@pytest.mark.slow
def test_minilm_counter_agrees_with_the_embedder_tokenizer(minilm: MiniLMEmbedder) -> None:
    counter = MiniLMTokenCounter()
    tokenizer = minilm._tokenizer  # the transformers tokenizer the embedder truncates with
    for text in DOCS + [QUERY, "ADR-0042 snake_case CamelCase 3.14"]:
        assert counter.count(text) == len(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_the_torch_paths_without_torch_name_the_extra(tmp_path: Path) -> None:
    """torch and transformers are the optional `torch` extra: without them the torch embedder and
    the cross-encoder fail with a typed error naming the extra, and the default path still runs."""
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # importing torch now raises ImportError, as when not installed\n"
        "from memory_core.adapters.models.minilm import MiniLMEmbedder, ModelUnavailable, TORCH_EXTRA\n"
        "from memory_core.adapters.models.cross_encoder import CrossEncoderReranker\n"
        "for load in (MiniLMEmbedder().load, CrossEncoderReranker(sys.argv[1]).load):\n"
        "    try:\n"
        "        load()\n"
        "    except ModelUnavailable as e:\n"
        "        assert TORCH_EXTRA in str(e) and e.code == 'model_unavailable', e\n"
        "    else:\n"
        "        raise AssertionError('loaded without torch')\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=120)
