"""Options and helpers several subcommands share."""

from __future__ import annotations

import argparse
import os
import sys

from ..config import ATTENTIONS, ENGINES, EXPORTERS, BenchConfig, ExportConfig, FusionPlan
from ..families import preset_names
from ..path_checks import check_output_path
from ..settings import arg_number


def whole(minimum: int, maximum: int):
    """An argparse ``type``: a whole number from ``minimum`` to ``maximum`` ("nan", "1e400", "-1": one line)."""
    return arg_number(integer=True, minimum=minimum, maximum=maximum)


def add_model_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", default="bert-base",
                   help=f"preset ({', '.join(preset_names())}: published architectures, random weights), minilm "
                        f"(real weights: all-MiniLM-L6-v2, the [real] extra), model folder, hub id or .onnx file "
                        f"(default: bert-base, random weights)")


def add_export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--exporter", choices=EXPORTERS, default="torchscript", help="torch.onnx exporter (default: torchscript)")
    p.add_argument("--opset", type=whole(7, 30), default=None, help="ai.onnx opset (default: 17 torchscript, 18 dynamo)")
    p.add_argument("--attention", choices=ATTENTIONS, default="eager", help="transformers attention implementation")
    p.add_argument("--no-cache", action="store_true", help="export again even if the cache has this export")


def add_engine_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=ENGINES, default="auto", help="fusion engine (default: auto = both, keep the better)")


def add_plan_args(p: argparse.ArgumentParser) -> None:
    """``--engine``, ``--disable`` and ``--enable``: the fusion plan."""
    add_engine_arg(p)
    p.add_argument("--disable", default="", metavar="STEP,...", help="comma-separated catalog steps to switch off")
    p.add_argument("--enable", default="", metavar="STEP,...",
                   help="comma-separated steps that are off by default to switch on (e.g. gelu_approximation)")


def steps_arg(text: str) -> list[str]:
    return [s.strip() for s in (text or "").split(",") if s.strip()]


def fusion_plan(args):
    """The FusionPlan the plan arguments describe; unknown step names give a one-line FusionError."""
    from ..fusion import get_step

    disabled, enabled = steps_arg(args.disable), steps_arg(args.enable)
    for name in disabled + enabled:
        get_step(name)
    return FusionPlan(engine=args.engine, disabled=frozenset(disabled), opted_in=frozenset(enabled))


def add_measure_args(p: argparse.ArgumentParser) -> None:
    """Shape, threads, runs and ONNX Runtime's dynamic block base: everything a BenchConfig needs but the provider."""
    p.add_argument("--batch", type=whole(1, 65_536), default=1, help="batch size (default: 1)")
    p.add_argument("--seq", type=whole(1, 1_048_576), default=128, help="sequence length (default: 128)")
    p.add_argument("--threads", type=whole(1, 4096), default=2, help="intra-op threads, equal for every variant (default: 2)")
    p.add_argument("--runs", type=whole(1, 1_000_000), default=30, help="timed runs per variant (default: 30)")
    p.add_argument("--warmup", type=whole(0, 1_000_000), default=5, help="warm-up runs per variant (default: 5)")
    p.add_argument("--dynamic-block-base", type=whole(0, 4096), default=0, metavar="N",
                   help="ONNX Runtime session.dynamic_block_base for every ONNX Runtime variant (default: 0, ORT's "
                        "static split; 4 balances 2 threads on a shared VM better)")


def add_dim_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE",
                   help="value of a symbolic dimension of a non-BERT model's input (e.g. --dim height=224; "
                        "repeatable); batch- and sequence-like names take --batch and --seq")


def check_model_inputs(args, model) -> None:
    """For an .onnx file: every input it declares can be made at this shape, else one line naming the file and input.

    ``--dim`` values travel to the benchmark worker through :data:`~workbench.ort.inputs.DIMS_ENV`.
    """
    from ..ort.inputs import DIMS_ENV, check_other_inputs, declared_inputs, dims_setting

    dims = dims_setting(",".join(getattr(args, "dim", None) or []))
    if dims:
        os.environ[DIMS_ENV] = ",".join(f"{k}={v}" for k, v in dims.items())
    from ..models import ModelSource, resolve

    src = model if isinstance(model, ModelSource) else resolve(model)
    if src.kind != "onnx" or src.path is None:
        return
    from ..modelio import load_model

    proto = load_model(src.path, full_check=False, load_external_data=False, check_runtime=False)
    check_other_inputs(declared_inputs(proto), args.batch, args.seq, str(src.path), dims)


def bench_config(args, provider: str = "cpu"):
    """The BenchConfig the measure arguments describe (bad values: one-line ConfigError)."""
    return BenchConfig(provider=provider, batch=args.batch, seq=args.seq, threads=args.threads, runs=args.runs,
                       warmup=args.warmup, dynamic_block_base=args.dynamic_block_base)


def add_text_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--text", metavar="FILE", default=None,
                   help="sentences, one per line, tokenized with the model's tokenizer into bucketed padded batches "
                        "('builtin': the workbench's own few dozen sentences); adds the answer-level task parity")


def text_batches(args, source):
    """The TextBatches ``--text`` names (None without it): a one-line error for a bad file or no tokenizer."""
    if not getattr(args, "text", None):
        return None
    from ..text import read_sentences
    from ..text import text_batches as tokenized

    notes: list[str] = []
    sentences = None if args.text == "builtin" else read_sentences(args.text, notes=notes)
    for note in notes:  # a file past the cap: one line says how many sentences were used
        print(f"note: {note}", file=sys.stderr)
    return tokenized(source, sentences)


def text_sentences(args) -> list[str] | None:
    """The sentences ``--text`` names, as a list (None without it; the built-in ones for 'builtin')."""
    if not getattr(args, "text", None):
        return None
    from ..text import BUILTIN_SENTENCES, read_sentences

    if args.text == "builtin":
        return list(BUILTIN_SENTENCES)
    notes: list[str] = []
    sentences = read_sentences(args.text, notes=notes)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return sentences


def check_output(path, *, folder: bool = False, existing_ok: bool = False):
    """Refuse an output path that cannot be written before any work (one line, exit 2); nothing is created."""
    return check_output_path(path, folder=folder, existing_ok=existing_ok)


def export_config(args) -> ExportConfig:
    return ExportConfig(exporter=args.exporter, opset=args.opset, attention=args.attention)


class StageBar:
    """A tqdm progress bar on stderr driven by ``progress(stage, fraction)`` callbacks."""

    def __init__(self, desc: str, enabled: bool = True):
        from tqdm import tqdm

        self.bar = tqdm(total=100, desc=desc, file=sys.stderr, disable=not enabled or not sys.stderr.isatty(),
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {postfix}", leave=False)

    def __call__(self, stage: str, fraction: float) -> None:
        self.bar.set_postfix_str(stage)
        self.bar.n = int(100 * max(0.0, min(1.0, fraction)))
        self.bar.refresh()

    def close(self):
        self.bar.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
