"""``workbench export``: write the ONNX model and check it against PyTorch."""

from __future__ import annotations

from . import common, print_json


def register(sub) -> None:
    p = sub.add_parser("export", help="export a model to ONNX and check parity with PyTorch",
                       description="Export a model to ONNX with torch.onnx (TorchScript or dynamo) and compare its "
                                   "outputs with PyTorch on random inputs (batch 1 and 2, sequence 8 and 128, "
                                   "a right-padded mask among them).")
    common.add_model_arg(p)
    common.add_export_args(p)
    p.add_argument("-o", "--output", metavar="DIR", help="also write the model into DIR (never overwrites)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..export import copy_export, export
    from ..models import resolve

    if args.output:
        common.check_output(args.output, folder=True)
    source = resolve(args.model)
    with common.StageBar(f"export {source.label}", enabled=not args.json) as bar:
        result = export(source, common.export_config(args), use_cache=not args.no_cache, progress=bar)
    path = copy_export(result, args.output) if args.output else result.path
    info = result.to_dict()
    info["path"] = str(path)
    info["cache_path"] = str(result.path)
    if args.json:
        print_json(info)
    else:
        par = result.parity or {}
        print(f"{source.label}: {result.nodes} nodes, opset {result.opset}, {result.config.exporter} exporter, "
              f"{result.config.attention} attention{' (cached)' if result.cached else f', exported in {result.export_s:.1f} s'}")
        if par:
            verdict = "ok" if par["ok"] else "MISMATCH"
            print(f"parity vs PyTorch: max abs diff {par['max_abs_diff']:.2e} over {par['cases']} cases: {verdict}")
        print(path)
    return 0 if not result.parity or result.parity["ok"] else 1
