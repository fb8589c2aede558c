"""``workbench sweep``: one measurement spec on this machine or on every node of a Ray cluster."""

from __future__ import annotations

import sys

from . import common, print_json


def register(sub) -> None:
    p = sub.add_parser("sweep", help="run a sweep spec (models x plans x shapes x ...) locally or on Ray",
                       description="Expand a YAML sweep spec (lists per axis: models, exporters, attention, opsets, "
                                   "engines, plans, batch, seq, threads, providers, precisions; runs) and measure "
                                   "every point, one measurement per machine at a time. Rows carry their node's "
                                   "machine; the result gives a tuned plan per machine type.")
    p.add_argument("spec", help="YAML file with the sweep's axes")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: this machine, one point after another; ray: a Ray cluster (default: local)")
    p.add_argument("--address", default=None,
                   help="Ray cluster address (or 'auto'); without it --executor ray starts a local Ray and stops it")
    p.add_argument("-o", "--out", default=None,
                   help="JSON result; every row is appended to a journal beside it as it lands; an existing "
                        "result is resumed (its rows are kept)")
    p.add_argument("--retries", type=common.whole(0, 100), default=2,
                   help="Ray: times a measurement runs again when its worker or node dies (0: report the row "
                        "as failed; default: 2)")
    p.add_argument("--json", action="store_true", help="print one JSON object: rows, nodes, tuned_plans")
    p.set_defaults(func=run)


def run(args) -> int:
    from tqdm import tqdm

    from ..measure.fleet.run import run_sweep, to_frame
    from ..measure.fleet.spec import expand

    total = len(expand(args.spec))
    bar = tqdm(total=total, desc="sweep", unit="point", file=sys.stderr, disable=not sys.stderr.isatty())
    try:
        res = run_sweep(args.spec, args.executor, address=args.address, out=args.out, retries=args.retries,
                        progress=lambda row, n, t: bar.update(1))
    finally:
        bar.close()
    if args.json:
        print_json(res)
        return 0
    frame = to_frame(res)
    cols = [c for c in ("model", "plan", "precision", "batch", "seq", "threads", "provider", "node", "p50_ms",
                        "p90_ms", "error") if c in frame]
    print(frame[cols].to_string(index=False))
    from ..measure.harness.load import busy_words

    busy = [w for r in res["rows"] if (w := busy_words(r.get("machine_load")))]
    if busy:
        print(f"warning: {len(busy)} of {len(res['rows'])} points: {busy[0]}")
    from ..measure.fleet.rows import plan_line

    for mt, plan in res["tuned_plans"].items():
        print(plan_line(mt, plan))
    return 0
