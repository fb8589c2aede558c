"""``workbench report``: the main job end to end, written as one HTML file."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..config import BenchConfig, FusionPlan
from . import common


def register(sub) -> None:
    p = sub.add_parser("report", help="export, fuse and benchmark a model; write an HTML report",
                       description="Run the whole workbench headless (no browser needed): export the model, run the "
                                   "fusion timeline, measure latency, and write one self-contained HTML report. "
                                   "With --text, every fusion step and every variant also gets the answer-level "
                                   "task parity on that text, and the latency is measured over its length mix.")
    common.add_model_arg(p)
    common.add_export_args(p)
    common.add_engine_arg(p)
    p.add_argument("-o", "--output", metavar="DIR", default="workbench-reports",
                   help="folder for the report (default: ./workbench-reports)")
    p.add_argument("--no-bench", action="store_true", help="skip the latency measurements")
    p.add_argument("--tune", action="store_true",
                   help="also run `workbench tune` and lead the report with its recommendation and the peers")
    p.add_argument("--runs", type=common.whole(1, 1_000_000), default=20, help="timed runs per variant (default 20)")
    p.add_argument("--seq", type=common.whole(1, 1_048_576), default=128, help="sequence length for the benchmark (default 128)")
    p.add_argument("--threads", type=common.whole(1, 4096), default=None, help="threads for every variant (default: all cores)")
    common.add_text_arg(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..models import resolve
    from ..report.data import collect, summary
    from ..report.html import write_report
    from ..viz.summary import summary_lines

    common.check_output(args.output, folder=True)
    source = resolve(args.model)
    text = common.text_batches(args, source)  # before the export: a bad file or no tokenizer fails in a moment
    bench_cfg = BenchConfig(seq=args.seq, runs=args.runs, threads=args.threads or os.cpu_count() or 1)
    with common.StageBar(f"report {source.label}") as bar:
        data = collect(source, common.export_config(args), FusionPlan(engine=args.engine), bench_cfg,
                       bench=not args.no_bench, progress=bar, text=text, tune=args.tune)
    out = Path(args.output) / f"report-{source.name}-{time.strftime('%Y%m%d-%H%M%S')}.html"
    path = write_report(data, out)
    # What was found, in a few lines (the same facts as the report's first screen), then where the report is.
    print("\n".join(summary_lines(summary(data), path)))
    return 0
