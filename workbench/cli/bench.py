"""``workbench bench``: time PyTorch eager, unfused, fused, int8 and fp16 side by side."""

from __future__ import annotations

import dataclasses
import functools
import sys

from ..config import ATTENTIONS, EXPORTERS
from ..errors import RuntimeUnavailableError
from . import common, print_json


def register(sub) -> None:
    p = sub.add_parser("bench", help="measure latency of the standard variants side by side",
                       description="Time the standard variants of a model in one worker process, interleaved "
                                   "round robin with thread spinning off: torch (PyTorch eager), unfused (ONNX "
                                   "Runtime, optimizations off), fused (ONNX Runtime's BERT fusions), int8 (fused, "
                                   "dynamic quantization), fp16 (fused, float16). Reports p50/p90/p99, parity "
                                   "against the first variant and the distance to the hardware floor; an int8 "
                                   "variant's answers are checked on the built-in sentences when no --text is given.")
    common.add_model_arg(p)
    p.add_argument("--provider", choices=("cpu", "cuda"), default="cpu", help="execution provider (default: cpu)")
    common.add_measure_args(p)
    p.add_argument("--variants", default=None, help=_VariantsHelp("the variants to time"))
    p.add_argument("--attention", choices=ATTENTIONS, default="eager",
                   help="transformers attention for the export and PyTorch (default: eager)")
    p.add_argument("--exporter", choices=EXPORTERS, default="torchscript",
                   help="torch.onnx exporter behind the ONNX variants (default: torchscript)")
    common.add_plan_args(p)
    common.add_text_arg(p)
    common.add_dim_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--samples", action="store_true", help="with --json: include every run's time")
    p.set_defaults(func=run)


class _VariantsHelp(str):
    """``--variants``' help, its names read from the registry when help is printed (argparse fills a help
    string in with ``%``), so a cold start (``workbench --version``) does not import the registry."""

    def __mod__(self, params) -> str:
        from ..measure.variants import names

        return (f"comma-separated subset of {','.join(names())} "
                "(default: torch,unfused,fused,int8 on cpu; torch,unfused,fused,fp16 on cuda)")


def _names(args) -> tuple[list[str], list[dict]]:
    """The variants to time and those skipped; every one asked for skipped: the reasons, in one line. A name
    that does not run on ``--provider``, or a CUDA graph asked to time ``--text``, is refused in one line."""
    from ..measure.variants import available, check_fixed_shape, default_variants, refuse_devices

    if not args.variants:
        return default_variants(args.model, args.provider)
    asked = [n.strip() for n in args.variants.split(",") if n.strip()]
    refuse_devices(asked, args.provider)
    check_fixed_shape(asked, bool(args.text))  # with or without a GPU here
    names, skipped = available(asked, provider=args.provider)
    if asked and not names:
        raise RuntimeUnavailableError("; ".join(dict.fromkeys(f"{s['name']}: {s['why']}" for s in skipped)))
    return names, skipped


def _texts(args, cfg, names):
    """``(text, answers_text, cfg)``: ``--text`` (timed on, the shape sized to it), or, when int8 is timed
    without it, the built-in sentences to check the answers on (the timing keeps its one shape)."""
    from ..models import resolve

    if args.text:
        text = common.text_batches(args, resolve(args.model))
        cfg = dataclasses.replace(cfg, batch=max(b["input_ids"].shape[0] for b in text.batches),
                                  seq=max(text.lengths))
        return text, None, cfg
    from ..measure.variants import is_quantized

    if any(is_quantized(n) for n in names) and args.provider == "cpu":
        from ..measure.variants.answers import builtin_answers_text
        return None, builtin_answers_text(resolve(args.model)), cfg
    return None, None, cfg


def _measure(args, cfg, variants, text, answers):
    from tqdm import tqdm

    from ..measure.harness.bench import stream_benchmark, wait_bound

    pbar = tqdm(total=cfg.runs * len(variants), desc="bench", unit="run", file=sys.stderr,
                disable=not sys.stderr.isatty(), leave=False)

    def on_event(msg) -> None:  # a workbench.measure.worker.protocol message
        if msg.kind == "status":
            pbar.set_postfix_str(f"{msg.stage} {msg.variant or ''}".strip())

    handle = stream_benchmark(variants, cfg, on_sample=lambda s: pbar.update(1), on_event=on_event,
                              text=text if text is not None else answers, text_answers_only=text is None,
                              floor=text is None)  # one floor means one shape; a length mix has many
    try:
        with handle:
            return handle.result(wait_bound(cfg, len(variants)))  # generous; WORKBENCH_BENCH_WAIT_S overrides
    finally:
        pbar.close()


def run(args) -> int:
    from ..measure.tune.plan import tuned_plan_of
    from ..measure.tune.served import Workload
    from ..measure.variants import build_variants
    from ..measure.variants.answers import int8_flags
    from ..models import resolve

    plan = common.fusion_plan(args)
    names, skipped = _names(args)  # a name or --text the variants cannot take: said first, GPU or not
    if args.provider == "cuda":  # refused before the export, as tune refuses: no GPU, no work
        from ..ort.gpu import require_gpu

        require_gpu("workbench bench --provider cuda")
    cfg = common.bench_config(args, args.provider)
    common.check_model_inputs(args, args.model)  # a non-BERT .onnx: its inputs made from their declarations
    text, answers, cfg = _texts(args, cfg, names)
    # `tuned`: this machine's plan for what this command times (the text in its batches, else the shape), checked.
    shape = None if text is not None else Workload.shape(cfg.batch, cfg.seq)
    with common.StageBar(f"prepare {args.model}") as bar:
        variants = build_variants(args.model, names, provider=args.provider, attention=args.attention, progress=bar,
                                  plan=plan, exporter=args.exporter,
                                  extra={"text": text, "threads": cfg.threads,
                                         "tuned_plan": functools.partial(tuned_plan_of, workload=shape)})
    for sk in skipped:  # said once the model is known to be usable, so a bad file gets its one error line only
        print(f"{sk['name']} skipped: {sk['why']}", file=sys.stderr)
    res = _measure(args, cfg, variants, text, answers)
    random_weights = resolve(args.model).random_weights
    flags = int8_flags(res.variants, random_weights)
    if args.json:
        doc = res.to_dict(samples=args.samples)
        doc["skipped"] = skipped
        doc["answers_text"] = "text" if text is not None else ("built-in sentences" if answers is not None else None)
        doc["int8_flags"] = flags
        doc["random_weights"] = random_weights
        print_json(doc)
        return 0
    _print(res, cfg, text, answers, flags, random_weights)
    return 0


def _print(res, cfg, text, answers, flags, random_weights=False) -> None:
    from ..measure.harness.explain import explain
    from ..measure.harness.load import busy_warning
    from ..measure.variants import is_quantized
    from ..ort.answer_policy import TaskParity, random_weights_words, words
    from ..ort.machine import machine_line

    print(machine_line(res.machine))
    floor = f"{res.floor_ms:.2f} ms" if res.floor_ms else "unknown"
    if text is not None:
        t = text.describe()
        mix = ", ".join(f"{n}x{k}" for k, n in t["bucket_mix"].items())
        print(f"{t['sentences']} sentences in {t['batches']} batches (length buckets {mix}; "
              f"{t['padding_share']:.0%} padding), {cfg.threads} threads, {cfg.runs} runs each cycling through them, "
              f"interleaved")
    else:
        print(f"batch {cfg.batch}, sequence {cfg.seq}, {cfg.threads} threads, {cfg.runs} runs each, interleaved; "
              f"hardware floor {floor}" + ("; answers checked on the built-in sentences" if answers else ""))
    if res.floor_ms and res.matmul_bound_ms:
        print(f"  floor = FLOPs / {res.floor['gflops']:.0f} GFLOP/s (MatMul with its weight in cache); "
              f"MatMuls alone {res.matmul_bound_ms:.2f} ms at {res.floor['stream_gflops']:.0f} GFLOP/s "
              f"(weights read from memory, as in the model)")
    first = res.variants[0]
    print(f"{'variant':<14}{'provider':<9}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'floor':>11}{'x floor':>9}"
          f"{'x MatMuls':>10}{'vs ' + first.name:>12}{'cosine':>10}")
    for v in res.variants:
        speed = first.p50_ms / v.p50_ms if v.p50_ms and first.p50_ms else None
        cos = f"{v.parity['cosine']:.5f}" if v.parity else "ref"
        ratio = f"{v.floor_ratio:.2f}" if v.floor_ratio else "-"
        bound = f"{v.bound_ratio:.2f}" if v.bound_ratio else "-"
        print(f"{v.name:<14}{v.provider:<9}{v.p50_ms:>9.2f}{v.p90_ms:>9.2f}{v.p99_ms:>9.2f}"
              f"{(v.floor_precision or '-'):>11}{ratio:>9}{bound:>10}"
              f"{(f'{speed:.2f}x' if speed else '-'):>12}{cos:>10}"
              + (f"  {words(v.task_parity)}" if v.task_parity else ""))
    for line in flags:
        print(f"  warning: {line}")
    for v in res.variants:  # nodes that ran on another execution provider than the one asked for
        for f in v.assignment.fallbacks() if v.assignment else ():
            print(f"  {v.name}: {f.words()}")
    kinds = [TaskParity.of(v.task_parity).kind for v in res.variants if is_quantized(v.name) and v.task_parity]
    if random_weights and kinds:  # no warning that int8 "changes the answers": what the check would mean
        print(f"  note: int8's answers above: {random_weights_words(kinds[0])}")
    if busy := busy_warning(res.machine_load):
        print(f"  {busy}")
    for line in explain(res.rates, res.machine):
        print(f"  {line}")
