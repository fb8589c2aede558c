""""fused" is one thing: the app's last snapshot and ``workbench bench``'s fused variant are the same graph, timed
the same way (session level "all", the plan's switched-off steps kept off in the session too)."""

from __future__ import annotations

import collections

import onnx

from workbench.ui.state import AppState


def test_the_app_and_bench_time_the_same_fused(tiny_export):
    from workbench.measure.variants import build_variants
    from workbench.ui.controller import Controller

    tiny_export()
    c = Controller(AppState(source="bert-tiny", disabled=["attention"]), background=False)
    try:
        c.load()
        assert c.state.error is None, c.state.error
        app = {v.name: v for v in c.measuring.variants()}
        cfg = c.state.export_config()
        bench = build_variants("bert-tiny", ["unfused", "fused"], plan=c.state.fusion_plan(), exporter=cfg.exporter,
                               attention=cfg.attention, opset=cfg.opset)
        for b in bench:
            a = app[b.name]
            assert (a.level, a.disabled_optimizers, a.provider) == (b.level, b.disabled_optimizers, b.provider)
        fused_app, fused_bench = app["fused"], bench[1]
        assert fused_app.level == "all" and fused_app.disabled_optimizers  # attention switched off stays off

        def ops(model):
            m = onnx.load_from_string(model) if isinstance(model, bytes) else onnx.load(str(model),
                                                                                       load_external_data=False)
            return collections.Counter(n.op_type for n in m.graph.node)

        assert ops(fused_app.model) == ops(fused_bench.model) and "Attention" not in ops(fused_app.model)
    finally:
        c.close()
