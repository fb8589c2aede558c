"""Tiny BERT folders with task heads and a tokenizer written in the test (a small vocab.txt), offline."""

from __future__ import annotations

import re
from pathlib import Path

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
TINY = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
            vocab_size=1000, max_position_embeddings=160)
HEADS = {"embedding": "BertModel", "masked_lm": "BertForMaskedLM",
         "sequence_classification": "BertForSequenceClassification",
         "token_classification": "BertForTokenClassification"}


def write_vocab(folder: Path) -> Path:
    """A vocab.txt: specials, every lowercase word of the built-in sentences, digits, punctuation, ## pieces."""
    from workbench.text import BUILTIN_SENTENCES

    words = sorted({w for s in BUILTIN_SENTENCES for w in re.findall(r"[a-z]+", s.lower())})
    chars = sorted(set("abcdefghijklmnopqrstuvwxyz0123456789.,;:!?'\"()%$-—/"))
    vocab = SPECIALS + words + chars + [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return folder / "vocab.txt"


def save_task_model(task: str, folder: Path, *, with_tokenizer: bool = True, seed: int = 0) -> Path:
    """``save_pretrained`` a tiny seeded BERT with ``task``'s head (and a tokenizer) into ``folder``."""
    import torch
    import transformers

    torch.manual_seed(seed)
    kw = {"num_labels": 5 if task == "token_classification" else 3} if task.endswith("classification") else {}
    cfg = transformers.BertConfig(**TINY, **kw)
    cls = getattr(transformers, HEADS[task])
    model = cls(cfg, add_pooling_layer=False) if task == "embedding" else cls(cfg)
    model.save_pretrained(folder, safe_serialization=True)
    if with_tokenizer:
        vocab = write_vocab(folder / ".vocab")
        tok = transformers.BertTokenizer.from_pretrained(str(vocab.parent), do_lower_case=True)
        tok.save_pretrained(folder)
    return folder
