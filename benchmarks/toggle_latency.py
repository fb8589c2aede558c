"""Fusion timeline on bert-base: first run, the engine's one-shot call, toggle latency.

Usage: python benchmarks/toggle_latency.py [--exporter torchscript|dynamo] [--attention eager|sdpa]
       [--engine ort|onnxscript|auto] [--all]

Exports bert-base (cached under $WORKBENCH_CACHE), then measures:
first full timeline run, the engine's own one-shot call on the same input,
and the latency of switching late steps off and on again (and of one
early step, which must recompute everything after it).

"cold" toggles run on a timeline with no background warm-up: each first
switch-off recomputes every later step. Unless --no-warm is given, the same
toggles are then measured on a second timeline after
``FusionScheduler.start_warming()`` finished precomputing every single-step toggle
in the background ("warm"), with the warm-up's own duration; the cold figure
is what a user sees when toggling before the warm-up is done.
"""

from __future__ import annotations

import argparse
import platform
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="bert-base")
    ap.add_argument("--exporter", default="torchscript", choices=("torchscript", "dynamo"))
    ap.add_argument("--attention", default="eager", choices=("eager", "sdpa"))
    ap.add_argument("--engine", default=None, choices=("ort", "onnxscript", "auto"))
    ap.add_argument("--all", action="store_true", help="toggle every step, not only the late ones and attention")
    ap.add_argument("--no-warm", action="store_true", help="skip the background warm-up measurement")
    args = ap.parse_args()
    engine = args.engine or ("ort" if args.exporter == "torchscript" else "onnxscript")

    import onnx
    import onnxruntime
    import onnxscript

    from workbench.config import ExportConfig, FusionPlan
    from workbench.export import export
    from workbench.fusion import Timeline
    from workbench.fusion.scheduler import FusionScheduler
    from workbench.fusion.engines import one_shot
    from workbench.models import resolve

    src = resolve(args.model)
    res = export(src, ExportConfig(exporter=args.exporter, attention=args.attention))
    print(f"machine: {platform.processor() or platform.machine()}, onnxruntime {onnxruntime.__version__}, "
          f"onnxscript {onnxscript.__version__}")
    print(f"model: {src.label}, {args.exporter} export, {args.attention} attention, {res.nodes} nodes; engine {engine}")

    tl = Timeline(res.path, FusionPlan(engine=engine), num_heads=src.num_heads, hidden_size=src.hidden_size,
                  num_layers=src.num_layers)
    t = time.perf_counter()
    tl.run()
    first = time.perf_counter() - t
    print(f"first timeline run: {first:.2f} s ({len(tl.snapshots) - 1} steps; final {tl.final.nodes} nodes, "
          f"{tl.final.fused})")

    engines = ("ort", "onnxscript") if engine == "auto" else (engine,)
    for e in engines:
        m = onnx.load(str(res.path))
        t = time.perf_counter()
        out = one_shot(e, m, num_heads=src.num_heads, hidden_size=src.hidden_size)
        print(f"one-shot {e}: {time.perf_counter() - t:.2f} s ({len(out.graph.node)} nodes)")

    steps = [s.step for s in tl.snapshots[1:]]
    late = [s for s in ("bias_skip_layer_norm", "bias_gelu", "fast_gelu") if s in steps]
    chosen = steps if args.all else late + ["attention"]
    worst = (0.0, "")
    cold = {}
    for step in chosen:
        t = time.perf_counter()
        tl.toggle(step, False)
        off = time.perf_counter() - t
        t = time.perf_counter()
        tl.toggle(step, True)
        on = time.perf_counter() - t
        t = time.perf_counter()
        tl.toggle(step, False)
        off2 = time.perf_counter() - t
        tl.toggle(step, True)
        worst = max(worst, (off, step))
        cold[step] = off
        print(f"toggle {step:26s} off (first time) {off:6.3f} s   on (cached) {on:6.3f} s   off again (cached) {off2:6.3f} s")
    print(f"slowest first-time toggle (cold, no warm-up): {worst[1]} {worst[0]:.3f} s")
    if args.no_warm:
        return

    tl = Timeline(res.path, FusionPlan(engine=engine), num_heads=src.num_heads, hidden_size=src.hidden_size,
                  num_layers=src.num_layers)
    tl.run()
    t = time.perf_counter()
    sch = FusionScheduler(tl)
    sch.start_warming()
    sch.wait_warm()
    print(f"background warm-up after the first run: {time.perf_counter() - t:.2f} s"
          + (f" (stopped: {sch.warm_error})" if sch.warm_error else ""))
    sch.stop_warming()
    worst = (0.0, "")
    for step in chosen:
        t = time.perf_counter()
        tl.toggle(step, False)
        off = time.perf_counter() - t
        tl.toggle(step, True)
        worst = max(worst, (off, step))
        print(f"toggle {step:26s} off, cold {cold[step]:6.3f} s   warm {off:6.3f} s")
    print(f"slowest first-time toggle (warm, after the warm-up): {worst[1]} {worst[0]:.3f} s")


if __name__ == "__main__":
    main()
