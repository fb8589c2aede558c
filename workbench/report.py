"""The main job, headless: export → fusion timeline → benchmark → report data.

Plain data out; :mod:`workbench.viz.report` renders it. Each stage that
fails adds its one-line error to ``errors`` and the report still gets
written with what succeeded.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

from . import __version__
from .config import BenchConfig, ExportConfig, FusionPlan
from .errors import WorkbenchError
from .models import ModelSource, resolve

Progress = Callable[[str, float], None]


def collect(source: ModelSource | str | None = None, export_cfg: ExportConfig | None = None,
            plan: FusionPlan | None = None, bench_cfg: BenchConfig | None = None, *,
            bench: bool = True, progress: Progress | None = None, text=None, tune: bool = False) -> dict:
    """Run the main job and return the report's data.

    Args:
        text: real text for answer-level parity: a ``workbench.text.TextBatches``
            or a list of sentences (tokenized here with the model's tokenizer).
            With it every fusion step gets ``task_parity`` on the text, and
            the benchmark cycles through the text's batches (a length mix, so
            no single hardware floor) and gives each variant ``task_parity``.
            ``data["text"]`` then describes the text (sentences, batches,
            bucket mix, padding share).

    Raises:
        ModelSourceError: ``text`` given for a model without a tokenizer.
        ConfigError: no sentences.

    ``tune``: also run :func:`workbench.measure.tune.tune` (the recommendation against PyTorch,
    torch.compile and OpenVINO); the report then leads with it (``data["tune"]``).
    """
    progress = progress or (lambda stage, f: None)
    src = source if isinstance(source, ModelSource) else resolve(source)
    export_cfg = export_cfg or ExportConfig()
    plan = plan or FusionPlan()
    if text is not None and not hasattr(text, "batches"):
        from .text import text_batches

        text = text_batches(src, list(text))  # before the export: no tokenizer fails in a moment
    data: dict = {"version": __version__, "created": time.strftime("%Y-%m-%d %H:%M:%S"),
                  "model": src.describe(), "errors": []}
    if text is not None:
        data["text"] = text.describe()

    from .export import export

    progress("export", 0.0)
    result = export(src, export_cfg, progress=lambda s, f: progress(f"export: {s}", 0.3 * f))
    data["export"] = result.to_dict()

    progress("fusion", 0.3)
    try:
        from .fusion import run_fusion

        tl = run_fusion(result.path, plan, num_layers=src.num_layers, num_heads=src.num_heads,
                        hidden_size=src.hidden_size)
        if text is not None:  # the answers on the text after every step, as `workbench fuse --text` checks them
            tl.use_text(text)
            for i in range(1, len(tl.snapshots)):
                tl.check_parity(i)
        else:
            tl.check_parity(len(tl.snapshots) - 1)
        data["fusion"] = {**tl.to_dict(), "engine_note": tl.engine_note}
        try:  # one encoder layer before and after, as pictures (a report without them is still a report)
            from .viz.layer_svg import layer_picture

            data["layer_pictures"] = {"before": layer_picture(tl.snapshots[0], 0, title="layer 0, exported"),
                                      "after": layer_picture(tl.final, 0, title="layer 0, after the fusions")}
        except Exception as e:  # noqa: BLE001
            data["errors"].append(f"layer pictures: {e}")
    except WorkbenchError as e:
        data["errors"].append(f"fusion: {e}")

    if bench:
        progress("benchmark", 0.6)
        try:
            from .measure.bench import benchmark
            from .measure.recipes import standard_variants

            cfg = bench_cfg or BenchConfig(runs=20)
            if text is not None:  # the shape the sessions are sized for: the text's largest batch and bucket
                cfg = dataclasses.replace(cfg, batch=max(int(b["input_ids"].shape[0]) for b in text.batches),
                                          seq=max(text.lengths))
            names = ("torch", "unfused", "fused", "int8") if src.kind != "onnx" else ("unfused", "fused", "int8")
            # The fused variant is the graph the fusion table shows: same exporter, opset and plan.
            variants = standard_variants(src, names, provider=cfg.provider, attention=export_cfg.attention,
                                         exporter=export_cfg.exporter, opset=export_cfg.opset, plan=plan,
                                         progress=lambda s, f: progress(f"benchmark: {s}", 0.6 + 0.1 * f))
            # One floor means one shape; a length mix has many, so with text there is none (as in `bench --text`).
            from .measure.answers import builtin_answers_text, int8_report

            answers = builtin_answers_text(src) if text is None and cfg.provider == "cpu" else None  # int8's answers
            res = benchmark(variants, cfg, text=text or answers, text_answers_only=text is None, floor=text is None)
            from .viz.report import plural

            t = data.get("text") or {}
            shape = ({"text": f"{plural(t['sentences'], 'sentence')} in {plural(t['batches'], 'batch')}"}
                     if text is not None else {"batch": cfg.batch, "sequence": cfg.seq})
            int8 = int8_report(res, text)
            data["bench"] = {**res.to_dict(samples=False), **int8,
                             "config": {"provider": cfg.provider, **shape, "threads": cfg.threads, "runs": cfg.runs}}
        except WorkbenchError as e:
            data["errors"].append(f"benchmark: {e}")
    if tune:
        progress("tune", 0.8)
        try:
            from .measure.tune import tune as _tune

            res = _tune(src, text=text, cfg=bench_cfg or BenchConfig(runs=20), plan=plan,
                        exporter=export_cfg.exporter, attention=export_cfg.attention,
                        progress=lambda s, f: progress(f"tune: {s}", 0.8 + 0.2 * f))
            data["tune"] = {k: v for k, v in res.items() if k not in ("paths", "ablation")}
        except WorkbenchError as e:
            data["errors"].append(f"tune: {e}")
    progress("done", 1.0)
    return data
