"""Tiny models the tests build themselves (no download): a random BERT encoder or cross-encoder
with MiniLM's tokenizer files, saved in the model-cache layout (``config.json``, tokenizer files,
``model.safetensors``) with sentence-transformers files declaring its pooling."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


def tiny_bert(directory: Path, *, hidden: int = 32, pooling: str | None = "cls", classifier: bool = False,
              seed: int = 0) -> Path:  # fmt: skip
    """A one-layer BERT of width ``hidden`` with random weights (``classifier``: one logit)."""
    import torch
    import transformers

    from memory_core.adapters.models.minilm import default_model_dir

    directory.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copyfile(default_model_dir() / name, directory / name)
    shape = {"hidden_size": hidden, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 2 * hidden}
    config = transformers.BertConfig(vocab_size=30522, max_position_embeddings=128, num_labels=1, **shape)
    torch.manual_seed(seed)
    kind = transformers.BertForSequenceClassification if classifier else transformers.BertModel
    kind(config).eval().save_pretrained(str(directory), safe_serialization=True)
    if pooling is not None and not classifier:
        st = "sentence_transformers.models"
        modules = [{"idx": 0, "name": "0", "path": "", "type": f"{st}.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": f"{st}.Pooling"}]  # fmt: skip
        (directory / "modules.json").write_text(json.dumps(modules))
        (directory / "1_Pooling").mkdir(exist_ok=True)
        flags = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token"}
        settings = {flag: name == pooling for name, flag in flags.items()}
        (directory / "1_Pooling" / "config.json").write_text(
            json.dumps({**settings, "word_embedding_dimension": hidden})
        )
    return directory
