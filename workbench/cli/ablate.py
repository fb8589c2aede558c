"""``workbench ablate``: what each fusion buys on this machine (the plan without each step, side by side)."""

from __future__ import annotations

from . import common


def register(sub) -> None:
    p = sub.add_parser("ablate", help="time the fusion plan without each of its steps: what each fusion buys here",
                       description="Fuse the model with the full plan, then once more per fusion step with that "
                                   "step switched off (ONNX Runtime's session transformer for it too), and time all "
                                   "of them interleaved in one worker, with the full plan twice to measure the "
                                   "noise. Prints what each step saves or costs on this machine and the plan that "
                                   "keeps only what helps.")
    common.add_model_arg(p)
    common.add_plan_args(p)
    p.add_argument("--exporter", choices=("torchscript", "dynamo"), default="torchscript",
                   help="torch.onnx exporter (default: torchscript)")
    p.add_argument("--attention", choices=("eager", "sdpa"), default="eager",
                   help="transformers attention for the export (default: eager)")
    p.add_argument("--steps", default="", metavar="STEP,...",
                   help="only these steps (default: every fusion step that fired)")
    p.add_argument("--batch", type=int, default=1, help="batch size (default: 1)")
    p.add_argument("--seq", type=int, default=128, help="sequence length (default: 128)")
    p.add_argument("--threads", type=int, default=2, help="intra-op threads (default: 2)")
    p.add_argument("--runs", type=int, default=30, help="timed runs per plan (default: 30)")
    p.add_argument("--warmup", type=int, default=5, help="warm-up runs per plan (default: 5)")
    p.add_argument("--dynamic-block-base", type=int, default=0, metavar="N",
                   help="ONNX Runtime session.dynamic_block_base for every plan (default: 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..config import BenchConfig
    from ..fusion import get_step
    from ..runtime.ablation import fusion_ablation
    from . import print_json

    plan = common.fusion_plan(args)
    steps = common.steps_arg(args.steps) or None
    for s in steps or ():
        get_step(s)
    cfg = BenchConfig(batch=args.batch, seq=args.seq, threads=args.threads, runs=args.runs, warmup=args.warmup,
                      dynamic_block_base=args.dynamic_block_base)
    with common.StageBar(f"ablate {args.model}", enabled=not args.json) as bar:
        res = fusion_ablation(args.model, cfg, plan=plan, exporter=args.exporter, attention=args.attention,
                              steps=steps, progress=bar)
    if args.json:
        print_json(res.to_dict())
    else:
        print(res.to_markdown(), end="")
    return 0
