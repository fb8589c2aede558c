"""CTranslate2 as a peer: the model converted by its transformers converter, int8 on the CPU, ragged batches.

How a user serving a BERT-family embedding model on CPU ships it: ``TransformersConverter(folder).convert(out,
quantization="int8")`` once, then ``ctranslate2.Encoder(out, "cpu", compute_type="int8")`` and
``encoder.forward_batch(token id lists)``: each sentence's own tokens, no padding (the encoder packs the
batch itself), the last hidden state mean-pooled over the real tokens like every other variant's.

The conversion is cached in the model store (the export's group, ``variant-<key>/``, its meta written last,
so a half-written folder is never found). Its converter knows BERT, DistilBERT, RoBERTa, XLM-RoBERTa and
CamemBERT among the encoders; the others (MPNet, DeBERTa-v2, ELECTRA, ALBERT, and the rotary encoders
ModernBERT, NomicBERT, GTE, EuroBERT) it refuses ("No conversion is registered for the model configuration"),
tried on tiny configs with ctranslate2 4.8.5 and transformers 5.23: they are skipped with that reason.
Under transformers 5 its BERT loader reads ``config.position_embedding_type``, which transformers 5 no longer
sets: the folder converted from says "absolute" (the only kind these families have there).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

from ...errors import BenchmarkError, RuntimeUnavailableError, first_line
from ...families import ctranslate2_families, family_of
from ...ort.inputs import InputSpec
from ..harness.results import Variant
from ..worker.peers import peer_status
from .recipe import Build, Recipe

COMPUTE_TYPE = "int8"
NAME = "ctranslate2"


def _installed(device: str = "cpu") -> tuple[bool, str]:
    return peer_status("ctranslate2", "CTranslate2")


def _supports(src) -> str:
    if src.kind == "onnx":
        return "an ONNX file carries no transformers model for CTranslate2's converter"
    fam = family_of(src.model_type)
    if not (fam and fam.ctranslate2):
        return (f"CTranslate2's transformers converter has no conversion for {src.model_type} (it converts "
                f"{', '.join(ctranslate2_families())})")
    return ""


def _vocabulary(src, folder: Path, vocab_size: int) -> None:
    """The model's tokenizer beside the weights (the converter copies its vocabulary); a placeholder
    vocabulary of the right size for a preset without one (token ids are fed, never strings)."""
    import transformers

    try:
        tok = src.tokenizer()
        if len(tok) == vocab_size:
            tok.save_pretrained(str(folder))
            return
    except Exception:  # noqa: BLE001 - no tokenizer: the placeholder below
        pass
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words += [f"[unused{i}]" for i in range(vocab_size - len(words))]
    (folder / "vocab.txt").write_text("\n".join(words) + "\n")
    transformers.BertTokenizer(str(folder / "vocab.txt")).save_pretrained(str(folder))


def convert(src, into: Path) -> None:
    """Convert ``src`` (its PyTorch weights) into the CTranslate2 model folder ``into``, int8 weights."""
    from ctranslate2.converters import TransformersConverter

    hf = Path(tempfile.mkdtemp(prefix="workbench-ct2-"))
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # progress bars
            src.build("eager").save_pretrained(str(hf))
            cfg = json.loads((hf / "config.json").read_text())
            cfg.setdefault("position_embedding_type", "absolute")
            (hf / "config.json").write_text(json.dumps(cfg))
            _vocabulary(src, hf, int(cfg["vocab_size"]))
            TransformersConverter(str(hf)).convert(str(into), quantization=COMPUTE_TYPE, force=True)
    except Exception as e:  # noqa: BLE001 - the converter raises ValueError, AttributeError, OSError, ...
        raise BenchmarkError(f"{NAME}: CTranslate2's converter failed on {src.name}: {first_line(e)}") from e
    finally:
        shutil.rmtree(hf, ignore_errors=True)


def _build(ctx: Build, name: str):
    import ctranslate2

    from .models import cached  # lazy: models.py imports this module at its load

    ctx.progress("CTranslate2 conversion", 0.8)

    def build(out: Path) -> None:  # the converter replaces its output folder: convert beside, then move in
        convert(ctx.src, out.parent / "ct2")
        for f in (out.parent / "ct2").iterdir():
            f.rename(out.parent / f.name)
        (out.parent / "ct2").rmdir()

    model = cached(ctx.export_path, f"ctranslate2-{COMPUTE_TYPE}-{ctranslate2.__version__}", build, name="model.bin")
    src = ctx.src
    spec = {"names": list(src.input_names), "vocab_size": src.vocab_size, "max_positions": src.max_positions,
            "type_vocab_size": int(src.config_dict.get("type_vocab_size", 2))}
    return Variant(name, str(Path(model).parent), provider="cpu", kind=NAME,
                   options={"compute_type": COMPUTE_TYPE, "spec": spec})


class Ct2Runner:
    """A CTranslate2 encoder in the benchmark worker: ``prepare`` cuts each padded row to its real tokens (the
    lists a tokenizer hands over), ``run`` forwards that ragged batch, ``output`` lays it out as the feeds were."""

    def __init__(self, v: dict, threads: int, workdir: Path):
        import ctranslate2

        self.name, self.provider = v["name"], v["provider"]
        if self.provider != "cpu":
            raise RuntimeUnavailableError(f"{self.name}: the CTranslate2 variant runs on the CPU only")
        opts = v.get("options") or {}
        spec = dict(opts.get("spec") or {})
        self.spec = InputSpec(**{**spec, "names": tuple(spec.get("names") or ("input_ids", "attention_mask"))})
        self.input_names = list(self.spec.names)
        self.graph_flops_source = None  # no ONNX graph: no floor for it
        self.compute_type = opts.get("compute_type", COMPUTE_TYPE)
        try:
            self.encoder = ctranslate2.Encoder(str(v["model"]), device="cpu", compute_type=self.compute_type,
                                               intra_threads=int(threads), inter_threads=1)
        except Exception as e:  # noqa: BLE001 - a missing or damaged folder
            raise BenchmarkError(f"{self.name}: CTranslate2 cannot load {v['model']}: {first_line(e)}") from e
        self.providers = [f"CTranslate2 CPU ({self.compute_type})"]

    def prepare(self, feeds: dict) -> None:
        ids = feeds["input_ids"]
        mask = feeds.get("attention_mask")
        keep = mask.astype(bool) if mask is not None else np.ones(ids.shape, dtype=bool)
        self.ids = [row[m].tolist() for row, m in zip(ids, keep)]
        tt = feeds.get("token_type_ids") if "token_type_ids" in self.input_names else None
        self.types = [row[m].tolist() for row, m in zip(tt, keep)] if tt is not None else None
        self.keep = keep

    def run(self):
        return self.encoder.forward_batch(self.ids, token_type_ids=self.types)

    def output(self):
        """The last hidden state laid out as the padded feeds were: each sentence's tokens where its mask is 1,
        zeros where the batch had padding (CTranslate2 returns each row's tokens first, then its own filler)."""
        h = np.array(self.run().last_hidden_state, dtype=np.float32)
        out = np.zeros(self.keep.shape + (h.shape[2],), dtype=np.float32)
        for k, m in enumerate(self.keep):
            out[k, m] = h[k, :int(m.sum())]
        return out

    def close(self):
        self.encoder = None


RECIPES = (
    Recipe(NAME, "CTranslate2 int8", engine="ctranslate2", kind=NAME, build=_build,
           runner="workbench.measure.variants.ctranslate2:Ct2Runner", devices=("cpu",), precision="int8", peer=True,
           check=_installed, supports=_supports,
           card="Precision: CTranslate2 int8 (its transformers converter's int8 weights, compute type int8), "
                "ragged batches without padding."),
)

__all__ = ["RECIPES", "Ct2Runner", "convert"]
