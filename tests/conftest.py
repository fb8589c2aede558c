"""Shared fixtures: tiny models built and exported inside the test run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Every test run gets its own cache unless the caller points at one
# (CI and developers may reuse a warm cache through WORKBENCH_CACHE).
_BASE = Path(os.environ.get("WORKBENCH_TEST_TMP", "/tmp")) / f"workbench-tests-{os.getpid()}"
os.environ.setdefault("WORKBENCH_CACHE", str(_BASE / "cache"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_sessionfinish(session, exitstatus):
    """Remove this run's private cache (about 2 GB of exports and variants) unless asked to keep it.

    Only the folder this process created under its own pid is removed; a cache
    the caller pointed at with WORKBENCH_CACHE is never touched.
    """
    import shutil

    if os.environ.get("WORKBENCH_KEEP_TEST_TMP") or hasattr(session.config, "workerinput"):
        return
    shutil.rmtree(_BASE, ignore_errors=True)

TINY = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
            vocab_size=1000, max_position_embeddings=160)


@pytest.fixture(scope="session")
def tiny_export():
    """``tiny_export(exporter="torchscript", attention="eager", opset=None)`` → ExportResult of bert-tiny."""
    from workbench.config import ExportConfig
    from workbench.export import export

    memo = {}

    def make(exporter: str = "torchscript", attention: str = "eager", opset: int | None = None, model: str = "bert-tiny"):
        key = (exporter, attention, opset, model)
        if key not in memo:
            memo[key] = export(model, ExportConfig(exporter=exporter, attention=attention, opset=opset))
        return memo[key]

    return make


def _save_tiny(kind: str, folder: Path) -> Path:
    import torch
    import transformers

    torch.manual_seed(0)
    if kind == "bert":
        cfg = transformers.BertConfig(**TINY)
        model = transformers.BertModel(cfg, add_pooling_layer=False)
    elif kind == "roberta":
        cfg = transformers.RobertaConfig(**{**TINY, "max_position_embeddings": TINY["max_position_embeddings"] + 2},
                                         type_vocab_size=1, pad_token_id=1)
        model = transformers.RobertaModel(cfg, add_pooling_layer=False)
    elif kind == "distilbert":
        cfg = transformers.DistilBertConfig(n_layers=2, dim=32, n_heads=2, hidden_dim=64, vocab_size=1000,
                                           max_position_embeddings=160)
        model = transformers.DistilBertModel(cfg)
    else:
        raise ValueError(kind)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


@pytest.fixture(scope="session")
def hf_folder(tmp_path_factory):
    """``hf_folder("bert"|"roberta"|"distilbert")`` → a local save_pretrained folder (tiny, seeded)."""
    memo = {}

    def make(kind: str = "bert") -> Path:
        if kind not in memo:
            memo[kind] = _save_tiny(kind, tmp_path_factory.mktemp(f"hf-{kind}"))
        return memo[kind]

    return make


@pytest.fixture(scope="session")
def bert_base_two_layers(tmp_path_factory):
    """bert-base's layer (hidden 768, 12 heads of 64, intermediate 3072, its vocabulary) twice, seeded, saved
    as a local folder: bert-base's shapes and patterns at a sixth of its export and fusion time. Used for
    the exporter cells other than the default one (which the tests run on the real 12-layer bert-base)."""
    import torch
    import transformers

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("bert-base-2-layers")
    transformers.BertModel(transformers.BertConfig(num_hidden_layers=2), add_pooling_layer=False).save_pretrained(
        folder, safe_serialization=True)
    return folder
