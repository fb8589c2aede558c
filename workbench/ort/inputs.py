"""Seeded, realistic model inputs: random token ids and right-padded masks; any other input from its declaration.

A BERT-shaped graph gets token ids, masks and token types. Any other input (a float image, an input
named ``x``) gets seeded random values of its declared type and shape: a named symbolic dimension
takes its value from :data:`DIMS_ENV` (``--dim NAME=VALUE`` on the command line), else the batch for
a batch-like name or the first axis, the sequence length for a sequence-like name; an input that
cannot be made (a string tensor, a dimension with no value) is refused in one line naming it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np

from ..errors import BenchmarkError, ConfigError

#: ``NAME=VALUE,...``: values of symbolic dimensions of non-BERT inputs (``--dim`` sets it for the worker).
DIMS_ENV = "WORKBENCH_DIMS"
BERT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_BATCH_NAMES = re.compile(r"^(n|b|bs|batch|batch_?size|num_?batch(es)?|unk__batch)$", re.I)
_SEQ_NAMES = re.compile(r"^(s|seq|seq_?len(gth)?|sequence(_?length)?|max_?seq(_?len(gth)?)?|tokens?|length)$", re.I)
#: ONNX element types (TensorProto enum) the workbench can make values for, as numpy dtypes.
ONNX_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64,
               9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}
_TYPE_NAMES = {0: "undefined", 8: "string", 14: "complex64", 15: "complex128", 16: "bfloat16"}

#: The export/fusion parity cases: (batch, seq, right-padded mask).
PARITY_CASES: tuple[tuple[int, int, bool], ...] = ((1, 8, False), (2, 8, True), (1, 128, False), (2, 128, True))


def parity_cases(max_positions: int, cases=PARITY_CASES) -> tuple[tuple[int, int, bool], ...]:
    """``cases`` with each sequence cut to the model's ``max_positions`` (never longer, never none left):
    a model with few positions is still checked, at the longest sequence it takes."""
    most = max(1, int(max_positions))
    return tuple(dict.fromkeys((b, min(s, most), p) for b, s, p in cases))


@dataclass(frozen=True)
class InputSpec:
    """What a BERT-family graph takes: input names and the vocabulary size."""

    names: tuple[str, ...] = ("input_ids", "attention_mask", "token_type_ids")
    vocab_size: int = 30522
    type_vocab_size: int = 2
    max_positions: int = 512
    #: Inputs that are not BERT's: ``(name, ONNX element type, dims)``, a dim an int, a name or None.
    others: tuple = ()


def make_inputs(spec: InputSpec, batch: int, seq: int, *, seed: int = 0, padded: bool = False,
                dtype=np.int64) -> dict[str, np.ndarray]:
    """Random token ids (never constants), a mask, and token types.

    With ``padded`` every row after the first is right-padded to a different
    length, so masking code paths really run.
    """
    if batch < 1 or seq < 1:
        raise BenchmarkError(f"batch and sequence must be at least 1 (got batch {batch}, sequence {seq})")
    if seq > spec.max_positions:
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
    feeds = {k: v for k, v in feeds.items() if k in spec.names}
    if spec.others:
        feeds.update(other_inputs(spec.others, batch, seq, seed=seed))
    return feeds


def dims_setting(text: str | None = None) -> dict[str, int]:
    """``NAME=VALUE,...`` (default: $WORKBENCH_DIMS) → ``{name: value}``; a bad entry is a one-line ConfigError."""
    text = os.environ.get(DIMS_ENV, "") if text is None else text
    out = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        name, sep, value = item.partition("=")
        try:
            v = int(value)
        except ValueError:
            v = 0
        if not sep or not name.strip() or v < 1:
            raise ConfigError(f"--dim wants NAME=VALUE with a whole number of at least 1, not {item!r}")
        out[name.strip()] = v
    return out


def _dim_value(input_name: str, axis: int, dim, batch: int, seq: int, dims: dict) -> int | str:
    """One dimension's value, or (a string) why there is none."""
    if isinstance(dim, int) and dim > 0:
        return dim
    key = dim if isinstance(dim, str) and dim else f"{input_name}[{axis}]"
    if key in dims:
        return dims[key]
    if isinstance(dim, str) and _BATCH_NAMES.match(dim) or (axis == 0 and not (isinstance(dim, str) and dim)):
        return batch
    if isinstance(dim, str) and _SEQ_NAMES.match(dim):
        return seq
    return f"its dimension {axis} ({key!r}) has no value: give one with --dim {key}=N"


def check_other_inputs(others, batch: int, seq: int, where: str, dims: dict | None = None) -> None:
    """Refuse, in one line naming ``where`` and the input, an input the workbench cannot make."""
    dims = dims_setting() if dims is None else dims
    for name, etype, shape in others:
        if etype not in ONNX_DTYPES:
            raise BenchmarkError(f"{where}: input {name!r} is a {_TYPE_NAMES.get(etype, f'type {etype}')} tensor; "
                                 f"the workbench can only time inputs of numbers")
        for axis, d in enumerate(shape or ()):
            v = _dim_value(name, axis, d, batch, seq, dims)
            if isinstance(v, str):
                raise BenchmarkError(f"{where}: input {name!r}: {v}")


def other_inputs(others, batch: int, seq: int, *, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random values of each input's declared type and shape (see :func:`check_other_inputs`)."""
    check_other_inputs(others, batch, seq, "the model")
    dims, rng, feeds = dims_setting(), np.random.default_rng(seed + 7), {}
    for name, etype, shape in others:
        size = tuple(int(_dim_value(name, a, d, batch, seq, dims)) for a, d in enumerate(shape or ()))
        dtype = np.dtype(ONNX_DTYPES[etype])
        if dtype == np.bool_:
            feeds[name] = rng.integers(0, 2, size=size).astype(np.bool_)
        elif dtype.kind in "iu":
            feeds[name] = rng.integers(0, 10, size=size).astype(dtype)  # small: safe as indices and counts
        else:
            feeds[name] = rng.standard_normal(size).astype(dtype)
    return feeds


def declared_inputs(model) -> tuple:
    """``(name, element type, dims)`` of every graph input that is not an initializer or a BERT input."""
    inits = {i.name for i in model.graph.initializer}
    out = []
    for i in model.graph.input:
        if i.name in inits or i.name in BERT_INPUTS:
            continue
        t = i.type.tensor_type
        shape = tuple((d.dim_value if d.HasField("dim_value") else (d.dim_param or None))
                      for d in t.shape.dim) if t.HasField("shape") else ()
        out.append((i.name, int(t.elem_type) if i.type.HasField("tensor_type") else 0, shape))
    return tuple(out)


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
    return InputSpec(names=names, vocab_size=vocab, type_vocab_size=types, max_positions=positions,
                     others=declared_inputs(model))


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
