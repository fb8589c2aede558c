"""``workbench fuse``: run the fusion timeline and write the fused model."""

from __future__ import annotations

from . import common, print_json


def register(sub) -> None:
    p = sub.add_parser("fuse", help="run the fusion steps one by one and write the fused model",
                       description="Export (or open) a model, run a fusion engine step by step, print what each "
                                   "step fused and why a step fused less than it could, and write the result.")
    common.add_model_arg(p)
    common.add_export_args(p)
    common.add_plan_args(p)
    p.add_argument("-o", "--output", metavar="OUT.onnx", help="write the fused model here (never overwrites)")
    p.add_argument("--parity", action="store_true", help="check every snapshot against the unfused model")
    common.add_text_arg(p)
    p.add_argument("--session-layer", action="store_true",
                   help="also show what ONNX Runtime's own session-time fusion (ORT_ENABLE_ALL) adds on top")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..export import export
    from ..fusion import Timeline
    from ..models import resolve

    plan = common.fusion_plan(args)  # unknown names: one-line FusionError
    if args.output:  # an output that cannot be written fails now, not after the export and the fusions
        common.check_output(args.output)
    source = resolve(args.model)
    for remark in source.remarks:  # an untested family, a head named in config.json but absent from the weights
        import sys
        print(f"note: {remark}", file=sys.stderr)
    text = common.text_batches(args, source)  # before the export: a bad file fails in a moment
    with common.StageBar(f"export {source.label}", enabled=not args.json) as bar:
        result = export(source, common.export_config(args), use_cache=not args.no_cache, progress=bar)
    tl = Timeline(result.path, plan, **source.timeline_args())
    snaps = tl.run()
    ok = True
    if text is not None:
        tl.use_text(text)
    if args.parity or text is not None:  # --text asks for the answer check, which runs with parity
        for i in range(1, len(snaps)):
            ok = tl.check_parity(i).ok and ok
    layer2 = tl.session_layer(len(snaps) - 1, "all") if args.session_layer else None
    out_path = None
    if args.output:
        from ..modelio import save_model
        out_path = save_model(tl.final.model, args.output, protect=[result.path])
    if args.json:
        d = tl.to_dict()
        d["model"] = source.describe()
        d["export"] = result.config.to_dict()
        d["output"] = str(out_path) if out_path else None
        d["text"] = text.describe() if text is not None else None
        if layer2 is not None:
            d["session_layer"] = {"level": "all", "nodes": layer2["nodes"], "added_ops": layer2["added_ops"],
                                  "fused": layer2["fused"], "kept_off": layer2["kept_off"]}
        print_json(d)
    else:
        print(f"{source.label}, {result.config.exporter} export, {result.config.attention} attention, "
              f"opset {result.opset}: {tl.input.nodes} nodes")
        print(tl.engine_note)
        print_steps(snaps[1:], no_encoder=tl.num_layers == 0)
        f = tl.final
        print("final: " + f"{f.nodes} nodes; " + ", ".join(f"{op} {n}" for op, n in f.fused.items()))
        if layer2 is not None:
            added = ", ".join(f"{op} {n}" for op, n in sorted(layer2["added_ops"].items())) or "nothing new"
            print(f"then ONNX Runtime's session (ORT_ENABLE_ALL): {f.nodes} → {layer2['nodes']} nodes; adds {added}"
                  + (f"; kept off as the plan says: {', '.join(layer2['kept_off'])}" if layer2["kept_off"] else ""))
        if out_path:
            print(out_path)
    return 0 if ok else 1


def print_steps(snaps, *, no_encoder: bool = False) -> None:
    """The step table: what each step that applies fused (or why not); the steps that cannot apply to this
    model (none of their anchors in the graph) in one line at the end."""
    from ..ort.answer_policy import words
    from ..report.data import not_applicable

    na = []
    print(f"{'step':28s} {'nodes':>6s} {'time':>7s}  {'fused here':30s} parity")
    for s in snaps:
        if not_applicable({"name": s.step, "skipped": s.skipped, "changed": not s.diff.empty,
                           "diagnostic": s.diagnostic}):
            na.append(s.step)
            continue
        here = ", ".join(f"{op} {n}" for op, n in s.fused_here.items() if n) or "-"
        par = "" if s.parity is None else (f"ok {s.parity.max_abs_diff:.1e}" if s.parity.ok
                                           else f"MISMATCH {s.parity.max_abs_diff:.1e}")
        print(f"{s.step:28s} {s.nodes:6d} {s.elapsed_s:6.2f}s  {here[:30]:30s} {par}"
              + (f"  {words(s.task_parity)}" if s.task_parity else ""))
        if s.diagnostic:
            print(f"    why: {s.diagnostic}")
    if na:
        print(f"not applicable to this model ({len(na)}): {', '.join(na)}  (--json says why)")
    from ..fusion.diagnostics import NO_ENCODER

    said = any(s.diagnostic and NO_ENCODER in s.diagnostic for s in snaps if s.step not in na)
    if no_encoder and not said and not any(n for s in snaps for n in s.fused_here.values()):
        print(f"{NO_ENCODER}: no fusion step found anything to fuse, so the graph stays as exported")  # not only in --json
