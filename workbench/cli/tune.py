"""``workbench tune``: the fastest model that keeps its answers here, against the peers, saved ready to deploy."""

from __future__ import annotations

import sys

from . import common


def register(sub) -> None:
    p = sub.add_parser("tune", help="find the fastest variant whose answers hold on this machine, and save it",
                       description="In one run: this machine's fusion plan (a short ablation), the answer-guarded "
                                   "int8 model, then PyTorch eager, torch.compile, ONNX Runtime unfused/fused/tuned/"
                                   "int8/int8-guarded and OpenVINO (f32 and its default precision, where installed) "
                                   "timed interleaved in one worker, each with its answers against PyTorch; "
                                   "recommends the fastest whose answers hold and, with -o DIR, saves it with its "
                                   "tokenizer and a model card.")
    common.add_model_arg(p)
    common.add_measure_args(p)
    common.add_plan_args(p)
    common.add_text_arg(p)
    p.add_argument("--attention", choices=("eager", "sdpa"), default="eager",
                   help="transformers attention for the export and PyTorch (default: eager)")
    p.add_argument("--exporter", choices=("torchscript", "dynamo"), default="torchscript",
                   help="torch.onnx exporter behind the ONNX variants (default: torchscript)")
    p.add_argument("-o", "--out", metavar="DIR", default=None,
                   help="save the recommended model here (a new or empty folder; never overwritten)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _print(res: dict, saved: dict | None) -> None:
    from ..measure.guarded import answers_line
    from ..measure.tune import peers_line
    from ..ort.machine import machine_line

    print(machine_line(res["machine"]))
    print(f"timed on {res['config']['timed_on']}, {res['threads']} threads, interleaved; answers against "
          f"{res['reference']} on {res['config']['answers_text']['sentences']} sentences")
    print(f"{'variant':<14}{'p50 ms':>9}{'p90 ms':>9}  answers")
    for r in res["variants"]:
        ans = "reference" if r["parity"] is None else answers_line(r["task_parity"])
        print(f"{r['name']:<14}{r['p50_ms']:>9.2f}{r['p90_ms']:>9.2f}  {ans}{'' if r['holds'] else '  (changed)'}")
    s = res.get("int8_search")
    if s:
        kept = s["kept_fp32"]
        print(f"int8-guarded: {s['chosen']}; kept in fp32: {len(kept)} node(s), {s['kept_fp32_share']:.0%} of the "
              f"weights; {len(s['candidates'])} candidates tried")
    rec = res["recommended"]
    print(f"recommended: {rec['variant']} ({rec['p50_ms']:.2f} ms). {rec['why']}")
    print(f"  peers: {peers_line(res)}")
    if saved:
        diff = saved.get("saved_max_abs_diff")
        print(f"saved {saved['variant']} to {saved['dir']} ({', '.join(saved['files'])})"
              + (f"; reproduces the timed session (max abs diff {diff:g})" if diff is not None else ""))


def run(args) -> int:
    from ..measure.tune import tune
    from ..measure.tune_save import check_target, save
    from ..models import resolve
    from . import print_json

    if args.out:
        check_target(args.out)  # before minutes of measuring
    plan = common.fusion_plan(args)
    cfg = common.bench_config(args)
    src = resolve(args.model)
    text = common.text_batches(args, src)
    with common.StageBar(f"tune {args.model}") as bar:
        res = tune(src, text=text, cfg=cfg, plan=plan, exporter=args.exporter, attention=args.attention,
                   progress=bar)
    for sk in res["skipped"]:
        print(f"{sk['name']} skipped: {sk['why']}", file=sys.stderr)
    saved = save(res, args.out, src, text=text) if args.out else None
    if args.json:
        doc = {k: v for k, v in res.items() if k not in ("paths",)}
        doc["saved"] = saved
        print_json(doc)
        return 0
    _print(res, saved)
    return 0
