"""``workbench ablate``: what each fusion buys on this machine (the plan without each step, side by side)."""

from __future__ import annotations

from ..config import ATTENTIONS, EXPORTERS
from . import common, print_json


def register(sub) -> None:
    p = sub.add_parser("ablate", help="time the fusion plan without each of its steps: what each fusion buys here",
                       description="Fuse the model with the full plan, then once more per fusion step with that "
                                   "step switched off (ONNX Runtime's session transformer for it too), and time all "
                                   "of them interleaved in one worker, with the full plan twice to measure the "
                                   "noise. Prints what each step saves or costs on this machine and the plan that "
                                   "keeps only what helps.")
    common.add_model_arg(p)
    common.add_plan_args(p)
    p.add_argument("--exporter", choices=EXPORTERS, default="torchscript",
                   help="torch.onnx exporter (default: torchscript)")
    p.add_argument("--attention", choices=ATTENTIONS, default="eager",
                   help="transformers attention for the export (default: eager)")
    p.add_argument("--steps", default="", metavar="STEP,...",
                   help="only these steps (default: every fusion step that fired)")
    common.add_measure_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..fusion import get_step
    from ..measure.tune.ablation import fusion_ablation

    plan = common.fusion_plan(args)
    steps = common.steps_arg(args.steps) or None
    for s in steps or ():
        get_step(s)
    cfg = common.bench_config(args)
    with common.StageBar(f"ablate {args.model}", enabled=not args.json) as bar:
        res = fusion_ablation(args.model, cfg, plan=plan, exporter=args.exporter, attention=args.attention,
                              steps=steps, progress=bar)
    if args.json:
        print_json(res.to_dict())
    else:
        print(res.to_markdown(), end="")
    return 0
