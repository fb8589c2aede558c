"""``workbench matrix``: which engine fuses what, per exporter, attention and opset."""

from __future__ import annotations

from ..errors import ConfigError
from . import common, print_json


def register(sub) -> None:
    p = sub.add_parser("matrix", help="tabulate fused counts per engine for every export setting",
                       description="Export the model with each exporter (torchscript, dynamo), attention "
                                   "(eager, sdpa) and opset, run both fusion engines, and print what each fused.")
    common.add_model_arg(p)
    p.add_argument("--opsets", default="14,17,18,23", help="comma-separated opsets (default: 14,17,18,23; at 23 the dynamo exporter writes ONNX's own Attention op)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..fusion import exporter_matrix
    from ..models import resolve

    try:
        opsets = tuple(int(x) for x in args.opsets.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"--opsets must be comma-separated integers, not {args.opsets!r}") from None
    source = resolve(args.model)
    with common.StageBar(f"matrix {source.label}", enabled=not args.json) as bar:
        rows = exporter_matrix(source, opsets, progress=bar)
    if args.json:
        print_json({"model": source.describe(), "rows": rows})
        return 0
    print(f"{source.label}: fused ops per engine (Attn = Attention + MultiHeadAttention, SLN = "
          f"SkipLayerNormalization)")
    print(f"{'exporter':12s} {'attention':9s} {'opset':>5s}  {'ORT alone':16s} {'onnxscript':16s} "
          f"{'workbench auto':16s} Attn/SLN/BiasGelu")
    for r in rows:
        if r["error"]:
            print(f"{r['exporter']:12s} {r['attention']:9s} {r['opset']:5d}  export failed: {r['error']}")
            continue

        def cell(c):
            return f"{c['Attention'] + c['MultiHeadAttention']}/{c['SkipLayerNormalization']}/{c['BiasGelu']}"
        how = r["best"] + (" + workbench sdpa rule" if r.get("workbench_rule_attention") else "")
        if r.get("exporter_attention"):
            how += f"; {r['exporter_attention']} Attention written by the exporter (ONNX's own op)"
        print(f"{r['exporter']:12s} {r['attention']:9s} {r['opset']:5d}  {cell(r['ort']):16s} "
              f"{cell(r['onnxscript']):16s} {cell(r['auto']):16s} ({how})")
    return 0
