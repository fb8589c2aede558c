"""Opset 23 on every path: one attention node per layer, and the answers still PyTorch's?

For each exporter (dynamo, torchscript) and transformers attention (eager,
sdpa) this runs the interface the issue names,

    workbench fuse MODEL --exporter E --attention A --opset 23 --parity --json -o fused.onnx

and reads ``final.attention_nodes`` (attention nodes of every kind) and
``final.parity`` (fused against the unfused export). It adds the export's own
parity against PyTorch (the export's meta) and a direct check of the fused
file against PyTorch on the same parity cases, so "within atol 1e-4 of
PyTorch" is measured, not composed from two differences. A path that cannot
be exported at opset 23 is printed with the exporter's one-line reason.

    python benchmarks/opset23_paths.py [MODEL] [--out benchmarks/results/opset23_paths.md]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PATHS = [(e, a) for e in ("dynamo", "torchscript") for a in ("eager", "sdpa")]
OPSET = 23


def fuse(model: str, exporter: str, attention: str, out: Path) -> tuple[dict | None, str, float]:
    """``workbench fuse ... --json``: (the JSON or None, the first error line, seconds)."""
    cmd = [sys.executable, "-m", "workbench.cli", "fuse", model, "--exporter", exporter, "--attention", attention,
           "--opset", str(OPSET), "--parity", "--json", "-o", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    dt = time.perf_counter() - t0
    try:
        return json.loads(p.stdout), "", dt
    except json.JSONDecodeError:
        lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
        return None, (lines[-1] if lines else f"exit status {p.returncode}"), dt


def against_pytorch(model: str, exporter: str, attention: str, fused: Path) -> tuple[dict, dict, int]:
    """(the export's parity against PyTorch from its meta, the fused file's against PyTorch, the opset written)."""
    from workbench.config import ExportConfig
    from workbench.export import export, export_parity
    from workbench.models import resolve

    src = resolve(model)
    res = export(src, ExportConfig(exporter=exporter, opset=OPSET, attention=attention))  # cached by the fuse run
    direct = export_parity(src.build(attention), src, fused).to_dict()
    import onnx

    written = next(o.version for o in onnx.load(str(res.path), load_external_data=False).opset_import
                   if o.domain in ("", "ai.onnx"))
    return res.parity or {}, direct, written


def kinds(d: dict) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(d.items()) if n) or "none"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", default="bert-base")
    ap.add_argument("--out", default=None, help="also write the markdown here")
    args = ap.parse_args(argv)

    from workbench.models import resolve
    from workbench.ort.machine import describe_machine, machine_line

    src = resolve(args.model)
    load0 = os.getloadavg()
    rows, misses = [], []
    with tempfile.TemporaryDirectory(prefix="opset23-") as tmp:
        for exporter, attention in PATHS:
            out = Path(tmp) / f"{exporter}-{attention}.onnx"
            d, err, dt = fuse(args.model, exporter, attention, out)
            print(f"{exporter} + {attention}: {'error: ' + err if d is None else 'done'} ({dt:.0f} s)", file=sys.stderr)
            if d is None:
                rows.append(f"| {exporter} | {attention} | not exported: {err} | | | | | | | |")
                misses.append(f"{exporter} + {attention}: {err}")
                continue
            exp_par, direct, written = against_pytorch(args.model, exporter, attention, out)
            f = d["final"]
            fp = f.get("parity") or {}
            per_layer = f["attention_nodes"] == src.num_layers
            ok = per_layer and written == OPSET and fp.get("ok") and exp_par.get("ok") and direct.get("ok")
            if not ok:
                misses.append(f"{exporter} + {attention}: attention nodes {f['attention_nodes']}, opset {written}, fused parity "
                              f"{fp.get('ok')}, export parity {exp_par.get('ok')}, vs PyTorch {direct.get('ok')}")
            rows.append(
                f"| {exporter} | {attention} | {written} | {d['input']['nodes']} ({kinds(d['input']['attention_kinds'])}) "
                f"| {d['engine']} | {f['nodes']} | {f['attention_nodes']} ({kinds(f['attention_kinds'])}) "
                f"| {exp_par.get('max_abs_diff', float('nan')):.1e} | {fp.get('max_abs_diff', float('nan')):.1e} "
                f"{'ok' if fp.get('ok') else 'NOT OK'} | {direct['max_abs_diff']:.1e} {'ok' if direct['ok'] else 'NOT OK'} "
                f"| {'yes' if ok else 'no'} |")
    load1 = os.getloadavg()
    m = describe_machine(os.cpu_count() or 1)
    import transformers

    lines = [f"# {src.label} at opset {OPSET}: every exporter and attention path "
             f"({time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC)", "",
             f"Measured on: {machine_line(m)}, transformers {transformers.__version__}. Load average {' '.join(f'{x:.2f}' for x in load0)} before, "
             f"{' '.join(f'{x:.2f}' for x in load1)} after (a shared machine; these are counts and differences, "
             "not timings).", "",
             f"Command per path: `workbench fuse {args.model} --exporter E --attention A --opset {OPSET} --parity "
             f"--json -o fused.onnx` (engine auto); then the fused file against PyTorch on the export's parity cases "
             "(ONNX Runtime, optimizations off). Parity: max abs diff, ok = within atol 1e-4 (rtol 1e-3).", "",
             f"| exporter | attention | opset in the file | export nodes (attention) | engine | fused nodes | attention nodes "
             f"(target {src.num_layers}) | export vs PyTorch | fused vs export | fused vs PyTorch | all met |",
             "|---|---|---:|---|---|---:|---|---:|---:|---:|---|", *rows, ""]
    lines.append("Every path meets the figure." if not misses else "Misses: " + "; ".join(misses) + ".")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0 if not misses else 1


if __name__ == "__main__":
    raise SystemExit(main())
