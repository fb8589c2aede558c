"""``workbench prepare``: build everything the workshop notebooks need, once, into one folder to copy."""

from __future__ import annotations

import os
import sys

from ..errors import ConfigError
from . import common, print_json


def register(sub) -> None:
    p = sub.add_parser("prepare", help="prepare a workshop: build what the notebooks need into one cache folder",
                       description="Export every model the notebooks open (each exporter, attention and opset they "
                                   "use), run and persist the fusion timelines (every toggle warmed, parity "
                                   "checked), build the fused, int8 and fp16 models the benchmarks time and the "
                                   "packaged real model's export, into one folder. Copy the folder to each laptop "
                                   "and set WORKBENCH_CACHE to it. Nothing is measured: timings belong to each "
                                   "participant's machine.")
    p.add_argument("--models", default="bert-base", type=common.steps_arg, metavar="MODEL,...",
                   help="models the notebooks will open with WORKBENCH_NOTEBOOK_MODEL (default: bert-base)")
    p.add_argument("--real", default="minilm", metavar="MODEL,...",
                   help="real models for notebook 05 (default: minilm; 'none' skips it)")
    p.add_argument("--modern", default="modernbert-base", metavar="MODEL,...",
                   help="rotary encoders for notebook 04's last section (default: modernbert-base; 'none' skips it)")
    p.add_argument("--notebooks", default="01,02,03,04,05,06", type=common.steps_arg, metavar="NN,...",
                   help="prepare only for these notebooks (default: all six)")
    p.add_argument("--cache", metavar="DIR", help="the folder to fill (default: $WORKBENCH_CACHE or the user cache)")
    p.add_argument("--check", metavar="DIR", help="only say whether DIR, prepared elsewhere, will be read as it is "
                                                  "here (same package versions)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..workshop.prepare import check_prepared, prepare

    if args.check:
        problems = check_prepared(args.check)
        if args.json:
            print_json({"folder": args.check, "ok": not problems, "problems": problems})
        else:
            print("\n".join(problems) if problems else f"{args.check}: prepared with this machine's versions")
        return 0 if not problems else 1
    if args.cache:
        if os.path.exists(args.cache) and not os.path.isdir(args.cache):
            raise ConfigError(f"--cache {args.cache} is not a folder")
        os.environ["WORKBENCH_CACHE"] = os.path.abspath(args.cache)
    real = tuple(m for m in args.real.split(",") if m.strip() and m.strip() != "none")
    modern = tuple(m for m in args.modern.split(",") if m.strip() and m.strip() != "none")
    say = (lambda line: None) if args.json else (lambda line: print(line, file=sys.stderr, flush=True))
    done = prepare(tuple(args.models), real=real, modern=modern, notebooks=tuple(args.notebooks), say=say)
    if args.json:
        print_json(done.to_dict())
        return 0
    for s in done.stages:
        cold = f" ({len(s['not_warmed'])} toggles not warmed: the app warms them on first use)" \
            if s.get("not_warmed") else ""
        print(f"{s['model']:12s} {s['stage']:22s} " + (f"skipped: {s['skipped']}" if "skipped" in s
                                                       else f"{s['seconds']:7.1f} s{cold}"))
    print(f"prepared {done.folder} in {done.seconds / 60:.1f} min. Copy it to each laptop and set "
          f"WORKBENCH_CACHE=<the copy> before starting JupyterLab.")
    return 0
