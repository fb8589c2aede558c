"""Encoder families: one frozen record each, the one place that knows a family.

A :class:`Family` says which ``model_type`` values it covers, its presets (a seeded random-weight
architecture with a note), the inputs it takes, where a task-head checkpoint keeps the bare encoder and
its head, whether its presets borrow BERT's vocabulary, which fusion engine fuses it best, whether ONNX
Runtime's BERT optimizer was written for it, how it counts positions, whether transformers gives it sdpa
attention, whether the workbench is tested on it, and whether it is an encoder at all (decoders and
encoder-decoders are refused). Adding a family is adding a record here (and its tests); nothing else
branches on ``model_type``.

Pure data and lookups (layer 0): no torch, no transformers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

ENCODER, DECODER, ENCODER_DECODER = "encoder", "decoder", "encoder-decoder"
#: A type without a record that transformers cannot build either (remote code, or a typo).
UNKNOWN = "unknown"
#: Config keys that give a model's longest sequence, in the order they are read (BERT, GPT-2, fairseq, ...).
POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_positions", "n_ctx", "max_seq_len",
                 "max_sequence_length")


def _frozen(d: dict) -> Mapping[str, Any]:
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class Preset:
    """A named architecture built from its config with seeded random weights (offline)."""

    name: str
    note: str
    #: The config as given to transformers (and hashed into the preset's cache identity: keep it stable).
    config: Mapping[str, Any]
    #: Its vocabulary is BERT's uncased one, so it borrows the packaged real model's tokenizer for text.
    bert_vocab: bool = False


@dataclass(frozen=True)
class Family:
    """Everything the workbench knows about one encoder family (or one refused non-encoder)."""

    name: str
    #: transformers' ``model_type`` values of this family.
    model_types: tuple[str, ...]
    #: ENCODER, or DECODER / ENCODER_DECODER: refused in one line whatever the config's ``architectures`` says.
    role: str = ENCODER
    #: Exported, fused and checked by the test suite (others open with a one-line "untested" note).
    tested: bool = True
    presets: tuple[Preset, ...] = ()
    #: Token types: None = the family takes none; else the ``type_vocab_size`` assumed when the config has none
    #: (an encoder takes ``token_type_ids`` where that is above 0).
    type_vocab_default: int | None = 0
    #: Where a task-head checkpoint keeps the bare encoder ("mpnet.encoder..."); None: not known.
    base_prefix: str | None = None
    #: First names of the bare encoder's own tensors (a bare checkpoint holds these at the top).
    base_tensors: tuple[str, ...] = ("embeddings",)
    #: First names of task-head tensors (a checkpoint holding one of these has a head).
    head_tensors: tuple[str, ...] = ()
    #: ONNX Runtime's transformers optimizer has a model type written for this family's graphs ("bert").
    ort_model_type: str | None = None
    #: The engine that fuses this family best; None: the one that fuses the exporter's graphs best.
    likely_engine: str | None = "onnxscript"
    #: Positions count from ``pad_token_id + 1`` (RoBERTa, MPNet): that many rows are not usable.
    position_offset: bool = False
    #: transformers gives the family sdpa attention (MPNet and DeBERTa have eager only).
    sdpa: bool = True
    #: Config keys holding the rotary base (besides ``rope_parameters``' ``rope_theta``): must be above 0.
    rotary_base: tuple[str, ...] = ()
    #: CTranslate2's transformers converter converts this family's models (its BERT-like encoders only).
    ctranslate2: bool = False
    #: Keyword arguments for building a preset's model (BERT's presets have no pooler).
    model_kwargs: Mapping[str, Any] = field(default_factory=lambda: _frozen({}))

    @property
    def model_type(self) -> str:
        """The family's main ``model_type`` (the first)."""
        return self.model_types[0]


def _encoder(name, types, presets=(), **kw) -> Family:
    return Family(name=name, model_types=tuple(types), presets=tuple(presets), **kw)


def _p(name: str, note: str, config: dict, *, bert_vocab: bool = False) -> Preset:
    return Preset(name=name, note=note, config=_frozen(config), bert_vocab=bert_vocab)


_BERT_SHAPE = dict(vocab_size=30522, max_position_embeddings=512)
#: ONNX Runtime's BERT optimizer fuses these families' TorchScript exports; onnxscript's rules the dynamo ones.
_ORT_BERT = dict(ort_model_type="bert", likely_engine=None, ctranslate2=True)

FAMILIES: tuple[Family, ...] = (
    _encoder("BERT", ("bert",), (
        _p("bert-base", "bert-base-uncased architecture: 12 layers, hidden 768, 12 heads",
           dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072, **_BERT_SHAPE),
           bert_vocab=True),
        _p("bert-tiny", "2 layers, hidden 128, 2 heads: for tests and quick demos",
           dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=512, **_BERT_SHAPE),
           bert_vocab=True),
        _p("bert-3layer", "3 layers, hidden 768: the distilled model of the ONNX Runtime BERT article",
           dict(num_hidden_layers=3, hidden_size=768, num_attention_heads=12, intermediate_size=3072, **_BERT_SHAPE),
           bert_vocab=True),
        _p("bert-large", "24 layers, hidden 1024, 16 heads",
           dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16, intermediate_size=4096,
                **_BERT_SHAPE), bert_vocab=True),
    ), type_vocab_default=2, base_prefix="bert", head_tensors=("cls", "classifier"),
        model_kwargs=_frozen({"add_pooling_layer": False}), **_ORT_BERT),
    _encoder("RoBERTa", ("roberta", "xlm-roberta"), type_vocab_default=2, base_prefix="roberta",
             head_tensors=("lm_head", "classifier"), position_offset=True, **_ORT_BERT),
    _encoder("DistilBERT", ("distilbert",), type_vocab_default=None, base_prefix="distilbert",
             base_tensors=("embeddings", "transformer"),
             head_tensors=("vocab_transform", "vocab_projector", "vocab_layer_norm", "pre_classifier", "classifier"),
             **_ORT_BERT),
    # The encoders of 2025, at their published base sizes (transformers builds them natively).
    _encoder("ModernBERT", ("modernbert",), (
        # 22 layers, every third global, the others a 128-token sliding window, GeGLU, no biases.
        _p("modernbert-base", "ModernBERT-base architecture: 22 layers, rotary, GeGLU, local + global attention",
           dict(model_type="modernbert", num_hidden_layers=22, hidden_size=768, num_attention_heads=12,
                intermediate_size=1152, vocab_size=50368, max_position_embeddings=8192, local_attention=128,
                global_attn_every_n_layers=3)),
    ), base_prefix="model", base_tensors=("embeddings", "layers", "final_norm"),
        head_tensors=("head", "decoder", "classifier"), rotary_base=("global_rope_theta", "local_rope_theta")),
    _encoder("NomicBERT", ("nomic_bert",), (
        # nomic-embed-text-v1.5: rotary, SwiGLU, BERT's uncased vocabulary padded to 30528.
        _p("nomic-embed", "nomic-embed-text-v1.5 architecture: 12 layers, rotary, SwiGLU",
           dict(model_type="nomic_bert", num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                intermediate_size=3072, vocab_size=30528, max_position_embeddings=2048, type_vocab_size=2),
           bert_vocab=True),
    ), base_prefix="nomic_bert", base_tensors=("embeddings", "layers"), head_tensors=("cls", "classifier"),
        rotary_base=("rotary_emb_base",)),
    _encoder("GTE", ("gte",), (
        # Alibaba-NLP/gte-base-en-v1.5: rotary, GELU MLP, BERT's uncased vocabulary, 8192 positions.
        _p("gte-base", "Alibaba gte-base-en-v1.5 architecture: 12 layers, rotary, 8192 positions",
           dict(model_type="gte", num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                intermediate_size=3072, vocab_size=30528, max_position_embeddings=8192, type_vocab_size=1,
                rope_theta=500000.0), bert_vocab=True),
    ), base_prefix="gte", base_tensors=("embeddings", "layers"), head_tensors=("lm_head", "classifier")),
    _encoder("EuroBERT", ("eurobert",), (
        # EuroBERT-210m: rotary, RMSNorm, SwiGLU, the Llama-3 vocabulary.
        _p("eurobert-210m", "EuroBERT-210m architecture: 12 layers, rotary, RMSNorm, SwiGLU",
           dict(model_type="eurobert", num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                intermediate_size=3072, vocab_size=128256, max_position_embeddings=8192)),
    ), base_prefix="model", base_tensors=("embed_tokens", "layers", "norm"),
        head_tensors=("lm_head", "dense", "classifier")),
    # The other encoders in daily use, at their published base sizes.
    _encoder("MPNet", ("mpnet",), (
        # microsoft/mpnet-base (all-mpnet-base-v2's architecture): a relative-position bias shared by every layer.
        _p("mpnet-base", "MPNet-base architecture (all-mpnet-base-v2): 12 layers, shared relative-position bias",
           dict(model_type="mpnet", num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                intermediate_size=3072, vocab_size=30527, max_position_embeddings=514,
                relative_attention_num_buckets=32, layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0,
                eos_token_id=2)),
    ), base_prefix="mpnet", head_tensors=("lm_head", "classifier"), position_offset=True, sdpa=False),
    _encoder("DeBERTa-v2/v3", ("deberta-v2",), (
        # microsoft/deberta-v3-base: disentangled attention (content-to-position and position-to-content).
        _p("deberta-v3-base", "DeBERTa-v3-base architecture: 12 layers, disentangled attention, 128k vocabulary",
           dict(model_type="deberta-v2", num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                intermediate_size=3072, vocab_size=128100, max_position_embeddings=512, relative_attention=True,
                position_buckets=256, norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"],
                layer_norm_eps=1e-7, max_relative_positions=-1, position_biased_input=False, type_vocab_size=0,
                pad_token_id=0)),
    ), base_prefix="deberta", head_tensors=("cls", "lm_predictions", "classifier", "pooler"), sdpa=False),
    _encoder("ELECTRA", ("electra",), (
        # google/electra-base-discriminator: BERT's architecture and uncased vocabulary.
        _p("electra-base", "ELECTRA-base discriminator architecture: 12 layers, hidden 768",
           dict(model_type="electra", num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                intermediate_size=3072, vocab_size=30522, max_position_embeddings=512, embedding_size=768,
                type_vocab_size=2), bert_vocab=True),
    ), base_prefix="electra",
        head_tensors=("generator_predictions", "generator_lm_head", "discriminator_predictions", "classifier")),
    _encoder("ALBERT", ("albert",), (
        # albert-base-v2: 128-wide embeddings projected to 768, one layer's weights shared by all 12, gelu_new.
        _p("albert-base", "ALBERT-base-v2 architecture: 12 layers sharing one layer's weights, 128-wide embeddings",
           dict(model_type="albert", num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                intermediate_size=3072, vocab_size=30000, max_position_embeddings=512, embedding_size=128,
                hidden_act="gelu_new", num_hidden_groups=1, inner_group_num=1, type_vocab_size=2)),
    ), base_prefix="albert", head_tensors=("predictions", "sop_classifier", "classifier")),
    # Not encoders: refused by name, whatever the config's `architectures` says (other decoders and
    # encoder-decoders are recognised from transformers' own model tables, see `role_of`).
    Family("decoders (text generation)", ("gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3",
                                          "phi", "phi3", "opt", "gpt_neox", "falcon", "bloom", "modernbert-decoder"),
           role=DECODER, tested=False, likely_engine=None),
    Family("encoder-decoders", ("t5", "mt5", "umt5", "bart", "mbart", "marian", "pegasus", "encoder-decoder"),
           role=ENCODER_DECODER, tested=False, likely_engine=None),
)

_BY_TYPE: dict[str, Family] = {t: f for f in FAMILIES for t in f.model_types}
_BY_PRESET: dict[str, tuple[Family, Preset]] = {p.name: (f, p) for f in FAMILIES for p in f.presets}
#: Every config key a rotary base goes by, over all families (plus ``rope_theta`` anywhere, incl. ``rope_parameters``).
ROTARY_BASE_KEYS = ("rope_theta", *dict.fromkeys(k for f in FAMILIES for k in f.rotary_base))


def ctranslate2_families() -> tuple[str, ...]:
    """The families CTranslate2's transformers converter converts, by name."""
    return tuple(f.name for f in FAMILIES if f.ctranslate2)


def family_of(model_type: str | None) -> Family | None:
    """The record covering ``model_type`` (None for a type the workbench has no record of)."""
    return _BY_TYPE.get(model_type or "")


def preset(name: str) -> tuple[Family, Preset] | None:
    """The family and preset named ``name``, or None."""
    return _BY_PRESET.get(name)


def preset_names() -> tuple[str, ...]:
    return tuple(_BY_PRESET)


def preset_configs() -> dict[str, dict[str, Any]]:
    """``{preset name: its config}`` (a fresh copy), in the records' order."""
    return {name: dict(p.config) for name, (_, p) in _BY_PRESET.items()}


def tested_types() -> tuple[str, ...]:
    """Every ``model_type`` the workbench is tested on."""
    return tuple(t for f in FAMILIES if f.tested and f.role == ENCODER for t in f.model_types)


def ort_optimizes(model_type: str | None) -> bool:
    """ONNX Runtime's BERT optimizer was written for this family's graphs (else the workbench's own rules fuse it)."""
    fam = family_of(model_type)
    return fam is not None and fam.ort_model_type is not None


def likely_engine(model_type: str | None) -> str | None:
    """The engine that fuses this family best; None when the exporter decides (BERT-like families, .onnx files).

    A type without a record is fused by the workbench's own rules, which run in the onnxscript chain.
    """
    if not model_type:
        return None
    fam = family_of(model_type)
    return fam.likely_engine if fam is not None else "onnxscript"


def role_of(model_type: str | None, config: Mapping[str, Any] | None = None,
            tables: Mapping[str, Any] | None = None) -> str:
    """ENCODER, DECODER, ENCODER_DECODER or UNKNOWN: from the record, the config, and transformers' tables.

    A record's role wins; a type without a record is UNKNOWN when ``tables["known"]`` lacks it; then the
    config's flags (``is_encoder_decoder``, ``is_decoder``) and the names in its ``architectures``; last, for a
    type without a record, ``tables`` (``{"known", "seq2seq", "causal", "masked"}``: sets of transformers' model
    types, passed in by the caller so this module stays free of transformers) decide: a seq2seq type is an
    encoder-decoder, a causal-LM type without a masked-LM head is a decoder.
    """
    fam, config = family_of(model_type), config or {}
    if fam is not None and fam.role != ENCODER:
        return fam.role
    if fam is None and tables is not None and (not model_type or model_type not in tables["known"]):
        return UNKNOWN
    if config.get("is_encoder_decoder") is True:
        return ENCODER_DECODER
    if config.get("is_decoder") is True:
        return DECODER
    archs = " ".join(str(a) for a in config.get("architectures") or ()).lower()
    if any(w in archs for w in ("seq2seq", "conditionalgeneration")):
        return ENCODER_DECODER
    if any(w in archs for w in ("causallm", "lmheadmodel")):
        return DECODER
    if fam is None and tables is not None:
        if model_type in tables["seq2seq"]:
            return ENCODER_DECODER
        if model_type in tables["causal"] and model_type not in tables["masked"]:
            return DECODER
    return ENCODER


__all__ = ["Family", "Preset", "FAMILIES", "ENCODER", "DECODER", "ENCODER_DECODER", "UNKNOWN", "POSITION_KEYS",
           "ROTARY_BASE_KEYS", "family_of", "preset", "preset_names", "preset_configs", "tested_types",
           "ort_optimizes", "likely_engine", "role_of"]
