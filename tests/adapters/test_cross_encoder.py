"""CrossEncoderReranker over a tiny BERT the test builds itself (no cross-encoder weights are
installable offline)."""

from __future__ import annotations

import string
from pathlib import Path

import pytest

from memory_core.adapters.models.cross_encoder import CrossEncoderReranker, weights_digest
from memory_core.domain.errors import InvalidRequest
from tests.units import text_candidate

pytestmark = pytest.mark.slow

WORDS = [
    *["how", "do", "i", "roll", "back", "a", "deploy", "the", "previous", "release", "with"],
    *["rollback", "script", "coffee", "is", "brewed", "from", "roasted", "beans", "wing"],
    *["slipstream", "lift", "drag", "mach", "number", "boundary", "layer", "heat", "transfer"],
    "runbook",
]


def build_tiny_cross_encoder(directory: Path, num_labels: int) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    directory.mkdir(parents=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set(WORDS)), *string.ascii_lowercase]
    vocab += [f"##{c}" for c in string.ascii_lowercase] + list(".,?!'-")
    vocab_file = directory / "vocab.txt"
    vocab_file.write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(vocab_file), do_lower_case=True)
    tokenizer.save_pretrained(str(directory))
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=num_labels,
    )
    BertForSequenceClassification(config).eval().save_pretrained(str(directory))
    return directory


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("ce") / "tiny-ce", num_labels=1)


@pytest.fixture(scope="module")
def reranker(model_dir: Path) -> CrossEncoderReranker:
    return CrossEncoderReranker(model_dir, batch_size=4)


CANDIDATES = [
    text_candidate("to roll back a deploy run the rollback script"),
    text_candidate("coffee is brewed from roasted beans"),
    text_candidate("the wing in a slipstream has more lift"),
    text_candidate(""),
    text_candidate("heat transfer in the boundary layer at mach number 5"),
    text_candidate("the previous release"),
    text_candidate("drag"),
]
QUERY = "how do i roll back a deploy?"


def test_constructing_loads_nothing(model_dir: Path) -> None:
    fresh = CrossEncoderReranker(model_dir)
    assert not fresh.loaded


def test_one_finite_score_per_candidate(reranker: CrossEncoderReranker) -> None:
    scores = reranker.rerank(QUERY, CANDIDATES)
    assert len(scores) == len(CANDIDATES)
    assert all(isinstance(s, float) and s == s and abs(s) != float("inf") for s in scores)
    assert len(set(scores)) > 1  # the model does look at the text
    assert reranker.rerank(QUERY, []) == []


def test_deterministic(reranker: CrossEncoderReranker) -> None:
    assert reranker.rerank(QUERY, CANDIDATES) == reranker.rerank(QUERY, CANDIDATES)


def test_batching_does_not_change_scores(model_dir: Path, reranker: CrossEncoderReranker) -> None:
    one_by_one = CrossEncoderReranker(model_dir, batch_size=1).rerank(QUERY, CANDIDATES)
    assert reranker.rerank(QUERY, CANDIDATES) == pytest.approx(one_by_one, abs=1e-5)
    # A candidate's score does not depend on its neighbours.
    assert reranker.rerank(QUERY, CANDIDATES[::-1])[::-1] == pytest.approx(one_by_one, abs=1e-5)


def test_long_texts_are_truncated_to_what_the_model_can_read(reranker: CrossEncoderReranker) -> None:
    """max_length 512 asks for more than the 128 positions the tiny model has: both are honoured."""
    long_text = "wing slipstream lift drag " * 2_000
    scores = reranker.rerank(QUERY, [text_candidate(long_text), text_candidate(long_text + " coffee")])
    assert len(scores) == 2
    # Everything past the window is cut, so the appended word cannot matter.
    assert scores[0] == pytest.approx(scores[1], abs=1e-6)
    assert reranker.rerank("lift " * 1_000, [text_candidate("drag")])  # an over-long query too


def test_revision_names_directory_and_weights_hash(model_dir: Path, reranker: CrossEncoderReranker) -> None:
    digest = weights_digest(model_dir)
    assert reranker.revision == f"cross-encoder:tiny-ce@{digest[:12]}"
    assert len(digest) == 64 and all(c in string.hexdigits for c in digest)
    assert (model_dir / "model.safetensors").exists()


def test_two_class_head_scores_the_positive_class(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    directory = build_tiny_cross_encoder(tmp_path / "two-class", num_labels=2)
    scores = CrossEncoderReranker(directory, batch_size=3).rerank(QUERY, CANDIDATES)
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    model = AutoModelForSequenceClassification.from_pretrained(str(directory)).eval()
    batch = tokenizer([QUERY] * len(CANDIDATES), [c.text for c in CANDIDATES], padding=True, return_tensors="pt")
    with torch.inference_mode():
        probs = model(**batch).logits.softmax(-1)[:, 1].tolist()
    # Log-odds of the positive class order candidates exactly as its probability does.
    assert sorted(range(len(scores)), key=scores.__getitem__) == sorted(range(len(probs)), key=probs.__getitem__)


def test_a_missing_model_directory_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest):
        CrossEncoderReranker(tmp_path / "nope")
