"""Cross-encoder reranker: ``AutoModelForSequenceClassification`` from a local model directory.

Scores each (query, candidate text) pair. A one-logit head gives its logit; a two-class head
gives the positive class's log-odds (logit 1 - logit 0, monotonic in its softmax probability);
wider heads give the last class's logit. torch and transformers load on first use.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from memory_core.adapters.models.minilm import available_cores, file_sha256, load_local_model, require_torch
from memory_core.domain.errors import InvalidRequest
from memory_core.retrieval.pipeline import RerankInput

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def weights_digest(model_dir: Path) -> str:
    """SHA-256 over the weight files (sharded checkpoints included), in name order."""
    files = sorted(p for p in model_dir.iterdir() if p.is_file() and p.suffix in _WEIGHT_SUFFIXES)
    files = [p for p in files if not p.name.startswith("training_args")]
    if not files:
        raise InvalidRequest(f"no model weights in {model_dir}", model_dir=str(model_dir))
    if len(files) == 1:
        return file_sha256(files[0])
    combined = hashlib.sha256()
    for p in files:
        combined.update(f"{p.name}\0{file_sha256(p)}\n".encode())
    return combined.hexdigest()


class CrossEncoderReranker:
    def __init__(
        self,
        model_dir: Path | str,
        device: str = "cpu",
        batch_size: int = 16,
        max_length: int = 512,
        torch_threads: int | None = None,
    ) -> None:
        if batch_size < 1 or max_length < 8:
            raise InvalidRequest("batch_size must be >= 1 and max_length >= 8")
        self.model_dir = Path(model_dir)
        if not self.model_dir.is_dir():
            raise InvalidRequest(f"cross-encoder model directory {self.model_dir} does not exist")
        self.device = device
        self.batch_size = batch_size
        self.max_length = max_length
        self.torch_threads = torch_threads
        self._tokenizer: Any = None
        self._model: Any = None
        self._effective_max_length = max_length
        self._lock = threading.Lock()

    @cached_property
    def revision(self) -> str:
        return f"cross-encoder:{self.model_dir.name}@{weights_digest(self.model_dir)[:12]}"

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> None:
        with self._lock:
            if self._model is not None:
                return
            require_torch()
            tokenizer, model = load_local_model(self.model_dir, self.device, "AutoModelForSequenceClassification")
            # A model cannot read past its position embeddings, whatever max_length asks for.
            limits = [self.max_length, getattr(model.config, "max_position_embeddings", None)]
            self._effective_max_length = min(x for x in limits if isinstance(x, int) and x > 0)
            self._tokenizer = tokenizer
            self._model = model

    def rerank(self, query: str, candidates: Sequence[RerankInput]) -> list[float]:
        texts = [c.text for c in candidates]
        if not texts:
            return []
        self.load()
        scores: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            scores.extend(self._score(query, texts[start : start + self.batch_size]))
        return scores

    def _score(self, query: str, texts: list[str]) -> list[float]:
        import torch

        batch = self._tokenizer(
            [query] * len(texts),
            texts,
            padding=True,
            # Trims the longer side token by token: the passage, unless the query is longer.
            truncation="longest_first",
            max_length=self._effective_max_length,
            return_tensors="pt",
        ).to(self.device)
        with self._lock, torch.inference_mode():
            threads = self.torch_threads or available_cores()
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)
            logits = self._model(**batch).logits.float()
        if logits.shape[1] == 2:
            values = logits[:, 1] - logits[:, 0]
        else:
            values = logits[:, -1]
        return [float(v) for v in values.cpu().tolist()]
