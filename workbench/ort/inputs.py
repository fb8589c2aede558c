"""Seeded, realistic model inputs: random token ids and right-padded masks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: The export/fusion parity cases: (batch, seq, right-padded mask).
PARITY_CASES: tuple[tuple[int, int, bool], ...] = ((1, 8, False), (2, 8, True), (1, 128, False), (2, 128, True))


@dataclass(frozen=True)
class InputSpec:
    """What a BERT-family graph takes: input names and the vocabulary size."""

    names: tuple[str, ...] = ("input_ids", "attention_mask", "token_type_ids")
    vocab_size: int = 30522
    type_vocab_size: int = 2
    max_positions: int = 512


def make_inputs(spec: InputSpec, batch: int, seq: int, *, seed: int = 0, padded: bool = False,
                dtype=np.int64) -> dict[str, np.ndarray]:
    """Random token ids (never constants), a mask, and token types.

    With ``padded`` every row after the first is right-padded to a different
    length, so masking code paths really run.
    """
    if batch < 1 or seq < 1:
        from ..errors import BenchmarkError
        raise BenchmarkError(f"batch and sequence must be at least 1 (got batch {batch}, sequence {seq})")
    if seq > spec.max_positions:
        from ..errors import BenchmarkError
        raise BenchmarkError(
            f"sequence {seq} is longer than the model's {spec.max_positions} positions")
    rng = np.random.default_rng(seed)
    ids = rng.integers(low=min(1000, spec.vocab_size - 1), high=spec.vocab_size, size=(batch, seq), dtype=dtype)
    mask = np.ones((batch, seq), dtype=dtype)
    if padded:
        for b in range(1, batch):
            keep = max(1, seq - (seq * b) // (2 * batch) - 1)
            mask[b, keep:] = 0
            ids[b, keep:] = 0
    feeds = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in spec.names:
        tt = np.zeros((batch, seq), dtype=dtype)
        if spec.type_vocab_size > 1:
            tt[:, seq // 2:] = 1
        feeds["token_type_ids"] = tt
    return {k: v for k, v in feeds.items() if k in spec.names}


def spec_from_onnx(model) -> InputSpec:
    """Read the input names of a BERT-like ONNX graph (initializers excluded)."""
    inits = {i.name for i in model.graph.initializer}
    names = tuple(i.name for i in model.graph.input if i.name not in inits)
    vocab, types, positions = 30522, 2, 512
    # Embedding table sizes tell the vocabulary, type and position counts.
    by_name = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Gather" and node.input and node.input[0] in by_name:
            dims = list(by_name[node.input[0]].dims)
            if len(dims) == 2 and node.input[1] == "input_ids":
                vocab = dims[0]
            elif len(dims) == 2 and node.input[1] == "token_type_ids":
                types = dims[0]
        elif node.op_type in ("EmbedLayerNormalization", "QEmbedLayerNormalization"):
            # fused (and int8): the tables are inputs 2 (words) and 4 (token types)
            words = by_name.get(node.input[2]) if len(node.input) > 2 else None
            segs = by_name.get(node.input[4]) if len(node.input) > 4 else None
            if words is not None and len(words.dims) == 2:
                vocab = int(words.dims[0])
            if segs is not None and len(segs.dims) == 2:
                types = int(segs.dims[0])
    positions = _max_positions(model, types, positions)
    return InputSpec(names=names, vocab_size=vocab, type_vocab_size=types, max_positions=positions)


def _max_positions(model, type_vocab: int, default: int) -> int:
    """Rows of the position-embedding table, found by initializer name.

    Fused graphs (EmbedLayerNormalization) keep the exporter's initializer
    names, so the name is a steadier clue than the graph's shape. RoBERTa-style
    tables (one token type) reserve two rows for the padding offset.
    """
    for init in model.graph.initializer:
        if "position_embeddings" in init.name and len(init.dims) == 2:
            rows = int(init.dims[0])
            return rows - 2 if type_vocab == 1 and rows > 2 else rows
    return default
