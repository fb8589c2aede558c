"""``workbench tune``: the fastest model that keeps its answers here, per workload, against the peers as
they ship, saved ready to deploy."""

from __future__ import annotations

import sys
from pathlib import Path

from ..config import ATTENTIONS, EXPORTERS
from ..errors import ConfigError
from ..measure.tune.workload import WORKLOADS
from . import common, print_json


def register(sub) -> None:
    p = sub.add_parser("tune", help="find the fastest variant whose answers hold on this machine, and save it",
                       description="In one run: this machine's fusion plan (a short ablation), answer-guarded and "
                                   "calibrated int8 models for ONNX Runtime and OpenVINO (NNCF, sentence-"
                                   "transformers' recipe), then PyTorch eager, torch.compile, ONNX Runtime and "
                                   "OpenVINO measured interleaved and as shipped (alternating time slices), each "
                                   "with its answers against PyTorch on sentences the int8 recipes did not tune "
                                   "on; recommends per workload the fastest whose answers hold and, with -o DIR, "
                                   "saves it with its tokenizer and a model card.")
    common.add_model_arg(p)
    common.add_measure_args(p)
    common.add_plan_args(p)
    common.add_text_arg(p)
    p.add_argument("--workload", choices=WORKLOADS, default=None,
                   help="latency: one sentence at a time; throughput: the text repeated to a few hundred sentences, "
                        "sorted by length, in padded batches of each variant's best size (1-64); both (default with "
                        "--text; latency without)")
    p.add_argument("--no-shipped", action="store_true",
                   help="skip the as-shipped measurement (faster; the figures are then the interleaved ones, "
                        "spinning off, and no peak memory is measured)")
    p.add_argument("--attention", choices=ATTENTIONS, default="eager",
                   help="transformers attention for the export and PyTorch (default: eager)")
    p.add_argument("--exporter", choices=EXPORTERS, default="torchscript",
                   help="torch.onnx exporter behind the ONNX variants (default: torchscript)")
    p.add_argument("-o", "--out", metavar="DIR", default=None,
                   help="save the recommended model here (a new or empty folder; never overwritten)")
    p.add_argument("--provider", choices=("cpu", "cuda"), default="cpu", help=_ProviderHelp("cpu or cuda"))
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


class _ProviderHelp(str):
    """``--provider``' help, the GPU's recipes read from the registry when help is printed (argparse fills a
    help string in with ``%``), so a cold start does not import the registry."""

    def __mod__(self, params) -> str:
        from ..measure.variants import names

        return (f"cpu (default), or cuda: {','.join(names(tune=True, device='cuda'))} timed at one --batch and "
                "--seq against PyTorch fp32")


def _f(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table_lines(res, saved: dict | None = None) -> list[str]:
    """The terminal's table of a :class:`workbench.measure.tune.result.TuneResult`, line by line: the machine, each
    variant (``(changed)`` after one whose answers did not hold, never on random weights), the busy sentence when
    the machine was busy, the random-weights note, the recommendation per workload, and what was saved."""
    from ..measure.harness.load import busy_warning
    from ..measure.tune.rows import answers_note, changed_mark, fig, peers_line, plan_lines, same_as_mark
    from ..ort.answer_policy import words
    from ..ort.machine import machine_line

    sp = res.config["split"]
    mode = "as shipped (alternating slices)" if res.shipped else "interleaved, spinning off"
    out = [machine_line(res.machine),
           f"{res.threads} threads; answers against {res.reference}: check part {sp['check']} sentences "
           f"(decides), search part {sp['search']} (the int8 recipes tune on it; {sp['source']})",
           f"figures {mode}; answers at batch 1 | in padded batches (check part)",
           f"{'variant':<22}{'p50 ms':>9}{'sent/s':>9}{'batch':>6}{'MB':>8}{'peak MB':>9}  answers"]
    for r in res.variants:
        ans = "reference" if r.reference else f"{words(r.task_parity) or '-'} | {words(r.task_parity_batched) or '-'}"
        out.append(f"{r.name:<22}{_f(r.p50_ms, '.2f'):>9}{_f(r.sentences_per_s, '.0f'):>9}"
                   f"{_f(r.batch, 'd'):>6}{_f(r.size_mb, '.1f'):>8}{_f(r.peak_rss_mb, '.0f'):>9}  {ans}"
                   f"{changed_mark(res, r)}{same_as_mark(r)}")
    out += plan_lines(res)
    if busy := busy_warning(res.machine_load):
        out.append(busy)
    if note := answers_note(res):  # random weights: no verdict, what the check would mean, what was done anyway
        out.append(f"note: the answers above: {note}")
    s = res.int8_search
    if s:
        out.append(f"int8-guarded: {s['chosen']}; kept in fp32: {len(s['kept_fp32'])} node(s), "
                   f"{s['kept_fp32_share']:.0%} of the weights; {len(s['candidates'])} candidates tried")
    for w, rec in res.recommended.items():
        out += [f"recommended for {w}: {rec.variant} ({fig(w, rec.figure)}, batch {rec.batch}, {rec.mode}). {rec.why}",
                f"  peers: {peers_line(res, w)}"]
    if saved:
        diff = saved.get("saved_max_abs_diff")
        out.append(f"saved {saved['variant']} ({saved['engine']}) to {saved['dir']} ({', '.join(saved['files'])})"
                   + (f"; reproduces the timed outputs (max abs diff {diff:g})" if diff is not None else ""))
    return out


def run_gpu(args) -> int:
    """``tune --provider cuda``: refused in one line without a GPU; the GPU variants' recommendation with one."""
    from ..measure.tune.gpu import gpu_tune, lines
    from ..ort.gpu import require_gpu

    unsupported = [f for f, on in (("--out", args.out), ("--text", args.text), ("--workload", args.workload)) if on]
    if unsupported:
        raise ConfigError(f"tune --provider cuda times one fixed shape and saves nothing yet: drop "
                          f"{', '.join(unsupported)}")
    require_gpu("workbench tune --provider cuda", torch_too=True)
    with common.StageBar(f"tune {args.model} on the GPU") as bar:
        res = gpu_tune(args.model, common.bench_config(args, "cuda"), plan=common.fusion_plan(args),
                       exporter=args.exporter, attention=args.attention, progress=bar)
    for sk in res["skipped"]:
        print(f"{sk['name']} skipped: {sk['why']}", file=sys.stderr)
    if args.json:
        print_json(res)
    else:
        print("\n".join(lines(res)))
    return 0


def run(args) -> int:
    if args.provider == "cuda":
        return run_gpu(args)
    from ..measure.tune.run import tune
    from ..measure.tune.save import check_target, save
    from ..models import resolve

    if args.out:
        if Path(args.out).expanduser().is_symlink() and Path(args.out).expanduser().is_dir():
            args.out = str(Path(args.out).expanduser().resolve())  # a link to a folder: saved into that folder
        check_target(args.out)  # before minutes of measuring: /proc, through a file, not empty
    plan = common.fusion_plan(args)
    cfg = common.bench_config(args)
    src = resolve(args.model)
    text = common.text_sentences(args)
    if text is not None or args.workload:
        from ..measure.tune.workload import workloads
        from ..measure.variants.split import split
        workloads(args.workload, text is not None)
        split(text)  # too few sentences: one line now, not after the export
    with common.StageBar(f"tune {args.model}") as bar:
        res = tune(src, text=text, cfg=cfg, plan=plan, exporter=args.exporter, attention=args.attention,
                   workload=args.workload, shipped=not args.no_shipped, progress=bar)
    for sk in res.skipped:
        print(f"{sk.name} skipped: {sk.why}", file=sys.stderr)
    saved = res.saved = save(res, args.out, src) if args.out else None
    if args.json:
        print_json(res.to_json())
        return 0
    print("\n".join(table_lines(res, saved)))
    return 0
