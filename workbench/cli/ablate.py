"""``workbench ablate``: what each fusion buys on this machine, on the user's workload (the plan without each step,
side by side), and the plan that keeps only what helps, checked against the unfused graph and the full plan."""

from __future__ import annotations

from ..config import ATTENTIONS, EXPORTERS
from . import common, print_json


def register(sub) -> None:
    p = sub.add_parser("ablate", help="time the fusion plan without each of its steps: what each fusion buys here",
                       description="Fuse the model with the full plan, then once more per fusion step with that "
                                   "step switched off (ONNX Runtime's session transformer for it too), and time all "
                                   "of them interleaved in one worker, with the full plan twice to measure the "
                                   "noise. Prints what each step saves or costs on this machine and the plan that "
                                   "keeps only what helps, checked once more against the unfused graph and the full "
                                   "plan (the faster of them ships where it loses). With --text, on your sentences as "
                                   "they will be served: each alone at batch 1 (latency) and in length-sorted padded "
                                   "batches at the throughput search's batch (throughput); --batch or --seq adds that "
                                   "fixed shape.")
    common.add_model_arg(p)
    common.add_plan_args(p)
    p.add_argument("--exporter", choices=EXPORTERS, default="torchscript",
                   help="torch.onnx exporter (default: torchscript)")
    p.add_argument("--attention", choices=ATTENTIONS, default="eager",
                   help="transformers attention for the export (default: eager)")
    p.add_argument("--steps", default="", metavar="STEP,...",
                   help="only these steps (default: every fusion step that fired)")
    common.add_measure_args(p)
    p.set_defaults(batch=None, seq=None)  # given: that shape is measured too (beside a text's workloads)
    common.add_text_arg(p)
    p.add_argument("--workload", choices=("latency", "throughput", "both"), default=None,
                   help="with --text: which workloads to measure on (default: both)")
    p.add_argument("--throughput-batch", type=common.whole(1, 4096), default=None, metavar="B",
                   help="with --text: the throughput workload's batch size (default: the throughput search's pick "
                        "for the full plan)")
    p.add_argument("--ep", choices=("openvino",), default=None,
                   help="measure on ONNX Runtime's OpenVINO execution provider (the onnxruntime-ep-openvino plugin) "
                        "instead of its CPU provider: which fusions help on one provider and hurt on another")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _workloads(args) -> list:
    """The workloads asked for: the text's (latency, throughput) and, given or without a text, the fixed shape."""
    from ..errors import ConfigError
    from ..measure.tune.served import Workload
    from ..measure.tune.workload import workloads

    sentences = common.text_sentences(args)
    if sentences is None and (args.workload or args.throughput_batch):
        raise ConfigError("--workload and --throughput-batch need --text (the sentences the workloads serve)")
    out = []
    if sentences is not None:
        source = "built-in sentences" if args.text == "builtin" else args.text
        for kind in workloads(args.workload, True):
            out.append(Workload.of_text(kind, sentences, source, batch=args.throughput_batch))
    if sentences is None or args.batch is not None or args.seq is not None:
        out.append(Workload.shape(args.batch or 1, args.seq or 128))
    return out


def run(args) -> int:
    from ..config import ExportConfig
    from ..export import export
    from ..fusion import get_step
    from ..measure.tune.plan import plan_for
    from ..models import resolve

    plan = common.fusion_plan(args)
    steps = common.steps_arg(args.steps) or None
    for s in steps or ():
        get_step(s)
    loads = _workloads(args)
    if args.ep:
        from ..measure.tune.served import ep_options

        ep_options(args.ep)  # a provider that cannot run here: one line before the export
    args.batch, args.seq = args.batch or 1, args.seq or 128
    cfg = common.bench_config(args)
    src = resolve(args.model)
    results = []
    with common.StageBar(f"ablate {args.model}", enabled=not args.json) as bar:
        exp = export(src, ExportConfig(exporter=args.exporter, attention=args.attention))
        for i, w in enumerate(loads):
            results.append(plan_for(src, exp.path, plan, cfg, workload=w, exporter=args.exporter,
                                    attention=args.attention, steps=steps, ep=args.ep,
                                    progress=lambda s, f, i=i: bar(f"{w.kind}: {s}", (i + f) / len(loads))))
    if args.json:
        print_json({**results[0].ablation, "check": results[0].check.to_dict(),
                    "plans": {w.kind: r.to_dict() for w, r in zip(loads, results)}})
        return 0
    for r in results:
        print(ablation_markdown(r), end="")
        print(f"Checked: {r.words()}.")
        for line in r.kernel_lines():  # why a step loses here, in the kernels' words (ONNX Runtime's profiler)
            print(f"Why, profiled: {line}.")
        print()
    return 0


def ablation_markdown(r) -> str:
    """A checked plan's ablation as the markdown table :class:`~workbench.measure.tune.ablation.AblationResult` writes."""
    from ..measure.tune.ablation import AblationResult

    return AblationResult.from_dict(r.ablation).to_markdown()
