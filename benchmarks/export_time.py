"""How long `workbench export` takes against torch.onnx.export itself, and a cache hit.

Usage: python benchmarks/export_time.py [MODEL] [--exporter torchscript|dynamo] [--repeat N]

Each measurement is a fresh process (interpreter start and imports included on
both sides), alternated so machine drift hits both alike. Prints the medians
and the ratio; the target is ratio <= 1.2 and a cache hit under 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

DIRECT = r"""
import sys, torch, warnings, contextlib, io
warnings.filterwarnings("ignore")
from workbench.models import resolve
from workbench.config import ExportConfig
from workbench.export import _example_inputs, keyword_wrapper
src = resolve(sys.argv[1]); cfg = ExportConfig(exporter=sys.argv[2])
model = src.build(cfg.attention)
names = list(src.input_names)
kw = dict(input_names=names, output_names=["last_hidden_state"], opset_version=cfg.resolved_opset)
if cfg.exporter == "torchscript":
    kw.update(dynamo=False, dynamic_axes={n: {0: "batch", 1: "sequence"} for n in names})
else:
    d = {n: {0: torch.export.Dim("batch", min=1, max=4096), 1: torch.export.Dim("sequence", min=1, max=src.max_positions)} for n in names}
    kw.update(dynamo=True, dynamic_shapes=d)
with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
    torch.onnx.export(keyword_wrapper(model, src.input_names), _example_inputs(src), sys.argv[3], **kw)
"""


def timed(cmd, env) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="bert-base")
    ap.add_argument("--exporter", default="torchscript")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="wb-export-time-")
    env = {**os.environ, "WORKBENCH_CACHE": os.path.join(tmp, "cache")}
    wb = [sys.executable, "-m", "workbench.cli", "export", a.model, "--exporter", a.exporter, "--json"]
    direct, ours, hits = [], [], []
    for i in range(a.repeat):
        direct.append(timed([sys.executable, "-c", DIRECT, a.model, a.exporter, os.path.join(tmp, f"d{i}.onnx")], env))
        ours.append(timed(wb + ["--no-cache"], env))
        hits.append(timed(wb, env))
    out = {"model": a.model, "exporter": a.exporter, "runs": a.repeat,
           "torch_onnx_export_s": statistics.median(direct), "workbench_export_s": statistics.median(ours),
           "ratio": statistics.median(ours) / statistics.median(direct), "cache_hit_s": statistics.median(hits)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
