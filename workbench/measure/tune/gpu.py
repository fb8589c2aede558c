"""``workbench tune --provider cuda``: the fastest GPU variant whose outputs hold, at one fixed shape.

The GPU counterpart of :mod:`.tune`, smaller: no ablation, no int8 (the CPU's), no as-shipped slices (one GPU
runs one thing at a time anyway). PyTorch fp32 on the GPU is the reference; the registry's recipes tuned on
"cuda" (``Recipe.tune``: PyTorch eager, torch.compile in its CUDA mode (reduce-overhead, fp16), ONNX Runtime
unfused, fused, fp16, the CUDA-graph ones and TensorRT fp16) are timed interleaved in the benchmark worker at
``cfg``'s batch and sequence (CUDA graphs replay one shape), each held to its recipe's ``tolerance``; the
recommendation is the fastest that holds.
Without a usable GPU it refuses in one line before any work (:func:`workbench.ort.gpu.require_gpu`).

Not yet run on a GPU (none was lent while it was written): the refusal is tested, the measuring path is not.
"""

from __future__ import annotations

import dataclasses

from ...config import BenchConfig
from ...errors import BenchmarkError
from ...models import ModelSource, resolve
from ...ort.gpu import GpuFacts, gpu_facts, require_gpu
from .. import variants
from ..harness.bench import benchmark


def gpu_tune(model, cfg: BenchConfig | None = None, *, plan=None, exporter: str = "torchscript",
             attention: str = "eager", progress=None) -> dict:
    """Time the GPU variants of ``model`` and recommend the fastest whose outputs hold.

    Returns:
        ``{"recommended": {"latency": row}, "variants": [row, ...], "skipped", "facts", "machine", "config"}``;
        a row is ``{"name", "p50_ms", "parity", "tolerance", "holds"}``.

    Raises:
        RuntimeUnavailableError: no usable GPU here (one line, before any work).
        BenchmarkError: no variant held its outputs.
    """
    require_gpu("workbench tune --provider cuda", torch_too=True)
    src = model if isinstance(model, ModelSource) else resolve(model)
    cfg = dataclasses.replace(cfg or BenchConfig(), provider="cuda")
    say = progress or (lambda stage, fraction: None)
    names, skipped = variants.available(variants.names(tune=True, device="cuda"), src, provider="cuda")
    vs = variants.build_variants(src, names, provider="cuda", attention=attention, plan=plan, exporter=exporter,
                                 progress=say)
    ref = "torch" if "torch" in names else "unfused"
    say("measuring on the GPU, interleaved", 0.5)
    res = benchmark(vs, cfg, reference=ref)
    rows = []
    for v in vs:
        st, tol = res[v.name], variants.get(v.name).tolerance
        holds = v.name == ref or tol.holds(st.parity)
        rows.append({"name": v.name, "p50_ms": st.p50_ms, "parity": st.parity, "tolerance": tol.words(),
                     "holds": holds, "reference": v.name == ref})
    held = [r for r in rows if r["holds"] and r["p50_ms"]]
    if not held:
        raise BenchmarkError("no GPU variant kept its outputs within its tolerance")
    best = min(held, key=lambda r: r["p50_ms"])
    say("done", 1.0)
    return {"recommended": {"latency": best}, "variants": rows, "skipped": skipped, "facts": gpu_facts().to_dict(),
            "machine": res.machine, "config": dict(res.config), "reference": ref}


def lines(res: dict) -> list[str]:
    """The result as the CLI prints it."""
    out = [GpuFacts(**res["facts"]).line(), f"{'variant':<18}{'p50 ms':>9}  outputs vs PyTorch fp32"]
    for r in res["variants"]:
        par = ("reference" if r["reference"] else
               f"max abs {r['parity']['max_abs_diff']:.1e}, cos {r['parity']['cosine']:.5f}"
               + ("" if r["holds"] else f" (beyond: {r['tolerance']})") if r["parity"] else "-")
        out.append(f"{r['name']:<18}{(r['p50_ms'] or float('nan')):>9.3f}  {par}")
    best = res["recommended"]["latency"]
    out.append(f"recommended for latency: {best['name']} ({best['p50_ms']:.3f} ms), the fastest whose outputs hold")
    return out


__all__ = ["gpu_tune", "lines"]
