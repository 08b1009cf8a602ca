"""Tiny random encoders saved in a model cache's layout (config.json, tokenizer.json,
model.safetensors, sentence-transformers files written by hand), and torch's reference outputs
for them: no weights can be downloaded here (brief §11), so the tests build their own."""

from __future__ import annotations

import json
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

WORDS = [
    *["how", "do", "i", "roll", "back", "a", "deploy", "the", "previous", "release", "with"],
    *["rollback", "script", "coffee", "is", "brewed", "from", "roasted", "beans", "wing"],
    *["slipstream", "lift", "drag", "mach", "number", "boundary", "layer", "heat", "transfer"],
    *["query", "passage", "runbook"],
]
TEXTS = [
    "how do i roll back a deploy",
    "the rollback script restores the previous release",
    "coffee is brewed from roasted beans",
    "lift and drag of a wing in a slipstream " * 12,  # long: padded against the short ones, truncated
    "mach number",
    "",
    "heat transfer across the boundary layer",
]
SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}


def wordpiece_tokenizer(
    directory: Path, specials: Sequence[str] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
) -> int:
    """A WordPiece tokenizer.json (BERT's pipeline; MPNet's ``<s> A </s></s> B </s>`` pairs when
    ``specials`` are ``<s>``-style); its vocabulary size. Built with ``tokenizers`` directly:
    transformers 5's BertTokenizerFast ignores a ``vocab_file`` argument."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    words = [*sorted(set(WORDS) - set(string.ascii_lowercase)), *string.ascii_lowercase]
    vocab = [*specials, *words, *[f"##{c}" for c in string.ascii_lowercase], *".,?!'-:"]
    ids = {token: i for i, token in enumerate(vocab)}
    unk, cls, sep = ("<unk>", "<s>", "</s>") if "<s>" in specials else ("[UNK]", "[CLS]", "[SEP]")
    tokenizer = Tokenizer(models.WordPiece(ids, unk_token=unk))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    if cls == "<s>":
        tokenizer.post_processor = processors.RobertaProcessing((sep, ids[sep]), (cls, ids[cls]))
    else:
        tokenizer.post_processor = processors.BertProcessing((sep, ids[sep]), (cls, ids[cls]))
    tokenizer.add_special_tokens(list(specials))
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return len(vocab)


def bpe_tokenizer(directory: Path) -> int:
    """A byte-level BPE tokenizer.json as RoBERTa's (<s>=0, <pad>=1, </s>=2, <unk>=3), trained here."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TEXTS * 4 + [" ".join(WORDS)], trainer)
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tokenizer.save(str(directory / "tokenizer.json"))
    return int(tokenizer.get_vocab_size())


def build(
    directory: Path,
    family: str,
    head: str = "model",
    seed: int = 0,
    num_labels: int = 1,
    sizes: dict[str, Any] | None = None,
    pooling: str | None = None,
    normalize: bool | None = None,
    max_seq_length: int | None = None,
    prompts: dict[str, str] | None = None,
    max_shard_size: str | None = None,
) -> Path:
    """A random ``family`` encoder (``head`` "model" or "classifier") saved into ``directory``;
    ``pooling``/``normalize``/... write sentence-transformers files declaring them."""
    import torch
    import transformers as t

    directory.mkdir(parents=True, exist_ok=True)
    if family in ("roberta", "xlm-roberta"):
        vocab = bpe_tokenizer(directory)
        pad = 1
    elif family == "mpnet":
        vocab = wordpiece_tokenizer(directory, ("<s>", "<pad>", "</s>", "<unk>", "<mask>"))
        pad = 1
    else:
        vocab = wordpiece_tokenizer(directory)
        pad = 0
    config_class, model_class, classifier_class = {
        "bert": (t.BertConfig, t.BertModel, t.BertForSequenceClassification),
        "roberta": (t.RobertaConfig, t.RobertaModel, t.RobertaForSequenceClassification),
        "xlm-roberta": (t.XLMRobertaConfig, t.XLMRobertaModel, t.XLMRobertaForSequenceClassification),
        "mpnet": (t.MPNetConfig, t.MPNetModel, t.MPNetForSequenceClassification),
    }[family]
    extra: dict[str, Any] = {"pad_token_id": pad, "vocab_size": vocab + 3, "max_position_embeddings": 96}
    if family in ("roberta", "xlm-roberta"):
        extra["type_vocab_size"] = 1
    config = config_class(**{**SIZES, **(sizes or {}), **extra}, num_labels=num_labels)
    torch.manual_seed(seed)
    model = (classifier_class if head == "classifier" else model_class)(config).eval()
    with torch.no_grad():  # random LayerNorm and bias values too, so a wrong name cannot hide
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith(".bias"):
                p.add_(torch.randn_like(p) * 0.1)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(str(directory), **kwargs)
    if pooling is not None or normalize is not None:
        modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
        modules.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"})
        if normalize:
            modules.append(
                {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
            )
        (directory / "modules.json").write_text(json.dumps(modules))
        (directory / "1_Pooling").mkdir(exist_ok=True)
        flags = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token", "last": "pooling_mode_lasttoken"}
        pooling_config = {flag: flag == flags[pooling or "mean"] for flag in flags.values()}
        pooling_config["word_embedding_dimension"] = config.hidden_size
        (directory / "1_Pooling" / "config.json").write_text(json.dumps(pooling_config))
    if max_seq_length is not None:
        (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length}))
    if prompts is not None:
        (directory / "config_sentence_transformers.json").write_text(json.dumps({"prompts": prompts}))
    return directory


def torch_outputs(spec: Any, texts: Sequence[str | tuple[str, str]]) -> np.ndarray:
    """What transformers computes for ``spec``'s model on ``texts`` (pairs for a cross-encoder),
    pooled and normalised as the spec says, tokenized by its tokenizer.json: the reference."""
    import torch
    import transformers as t
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(spec.path) / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=spec.max_tokens, strategy="longest_first")
    encodings = tokenizer.encode_batch(list(texts))
    config = json.loads((Path(spec.path) / "config.json").read_text())
    pad = config.get("pad_token_id") or 0
    width = max(len(e.ids) for e in encodings)
    ids = torch.full((len(encodings), width), pad, dtype=torch.long)
    mask = torch.zeros((len(encodings), width), dtype=torch.long)
    types = torch.zeros((len(encodings), width), dtype=torch.long)
    for row, e in enumerate(encodings):
        ids[row, : len(e.ids)] = torch.tensor(e.ids)
        mask[row, : len(e.ids)] = 1
        types[row, : len(e.ids)] = torch.tensor(e.type_ids)
    inputs = {"input_ids": ids, "attention_mask": mask}
    if spec.family == "bert":
        inputs["token_type_ids"] = types
    with torch.no_grad():
        if spec.kind == "reranker":
            model = t.AutoModelForSequenceClassification.from_pretrained(spec.path, local_files_only=True).eval()
            logits = model(**inputs).logits
            scores = logits[:, 1] - logits[:, 0] if logits.shape[1] == 2 else logits[:, -1]
            return scores.double().numpy()
        model = t.AutoModel.from_pretrained(spec.path, local_files_only=True).eval()
        hidden = model(**inputs).last_hidden_state
        m = mask.unsqueeze(-1).float()
        if spec.pooling == "mean":
            pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
        elif spec.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            pooled = hidden[torch.arange(len(encodings)), mask.sum(1) - 1]
        if spec.normalize:
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled.numpy()
