"""ONNX Runtime's profiler output turned into data: per op type, node, layer, provider.

The profile is taken in a worker process (as every timing is), from the
session's own trace (``SessionOptions.enable_profiling``). Nodes are named
after the graph ONNX Runtime actually ran (after its own session-time
fusions), so the encoder layer of each node is read from that optimized
graph: from the node's name or its weights' names, else from the nearest
named node downstream.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field

from ...config import BenchConfig
from ..worker.protocol import ProfileJob
from .bench import BenchHandle
from .results import Variant, prepare_variants

_COLUMNS = ["node", "op_type", "provider", "kernel", "layer", "mean_us", "calls_per_run", "share"]


def _layer_key(label: str):
    if label.startswith("layer "):
        return (1, int(label.split()[1]))
    return {"embeddings": (0, 0), "shared": (0, 1)}.get(label, (2, 0))


@dataclass
class OpProfile:
    """Where the time of one model run goes.

    Attributes:
        variant: the profiled variant's name.
        records: one dict per node (node, op_type, provider, kernel, layer, mean_us,
            calls_per_run, share of kernel time); on CUDA one per node and GPU kernel (provider "cuda").
        run_ms: mean wall time of a profiled run (profiling adds overhead).
        runs: profiled runs after warm-up.
        session_providers: providers the session really had.
    """

    variant: str
    provider: str
    records: list[dict]
    run_ms: float | None
    runs: int
    session_providers: list[str] = field(default_factory=list)

    @property
    def kernel_ms(self) -> float:
        """Sum of node kernel times per run (the rest is framework overhead)."""
        return sum(r["mean_us"] for r in self.records) / 1e3

    def _group(self, key: str):
        import pandas as pd

        df = pd.DataFrame(self.records, columns=_COLUMNS)
        g = df.groupby(key, sort=False).agg(mean_us=("mean_us", "sum"), nodes=("node", "count"),
                                            share=("share", "sum"))
        return g.sort_values("mean_us", ascending=False).reset_index()

    @property
    def by_node(self):
        """DataFrame, one row per node, slowest first."""
        import pandas as pd
        return pd.DataFrame(self.records, columns=_COLUMNS)

    @property
    def by_kernel(self):
        """DataFrame: the GPU kernels (CUDA provider), mean_us per run, nodes, share; slowest first (empty on
        the CPU)."""
        import pandas as pd

        g = self._group("kernel")
        return g[g["kernel"].fillna("") != ""].reset_index(drop=True) if len(g) else pd.DataFrame(g)

    def kernel_totals(self) -> dict[str, float]:
        """GPU kernel name → microseconds per run ({} for a profile taken on the CPU)."""
        out: dict[str, float] = defaultdict(float)
        for r in self.records:
            if r.get("kernel"):
                out[r["kernel"]] += r["mean_us"]
        return dict(out)

    def kernel_note(self) -> str:
        """One line on where a profile's times come from on the GPU ("" for a CPU profile): the kernels' own
        times, or, when the trace has no kernel events (an onnxruntime built without ``--enable_cuda_profiling``,
        which the CUDA profiler needs), that the CUDA nodes show the host's launch time, not the GPU's."""
        kernels = self.kernel_totals()
        if kernels:
            return (f"{len(kernels)} GPU kernels, {sum(kernels.values()) / 1e3:.3f} ms per run on the GPU "
                    f"(ONNX Runtime's CUDA profiler)")
        if any(r["provider"] == "CUDAExecutionProvider" for r in self.records):
            return ("no GPU kernel events in this trace (this onnxruntime was built without CUDA profiling, "
                    "--enable_cuda_profiling): CUDA nodes show the host's launch time, not the GPU's")
        return ""

    @property
    def by_op_type(self):
        """DataFrame: op_type, mean_us per run, nodes, share; slowest first."""
        return self._group("op_type")

    @property
    def by_provider(self):
        """DataFrame: which execution provider ran how much."""
        return self._group("provider")

    @property
    def by_layer(self):
        """DataFrame in model order: embeddings, shared, layer 0..N-1, output."""
        g = self._group("layer")
        order = sorted(range(len(g)), key=lambda i: _layer_key(str(g["layer"].iloc[i])))
        return g.iloc[order].reset_index(drop=True)

    def op_type_totals(self) -> dict[str, float]:
        """op_type → microseconds per run (plain data for plots and diffs)."""
        out: dict[str, float] = defaultdict(float)
        for r in self.records:
            out[r["op_type"]] += r["mean_us"]
        return dict(out)

    def to_dict(self) -> dict:
        return {"variant": self.variant, "provider": self.provider, "run_ms": self.run_ms, "runs": self.runs,
                "kernel_ms": self.kernel_ms, "session_providers": self.session_providers, "records": self.records}


def profile_ops(model, cfg=None, *, provider: str = "cpu", level: str = "all", fp16: bool = False,
                name: str = "model", timeout: float | None = 600, disabled_optimizers=(),
                feeds: dict | None = None) -> OpProfile:
    """Profile one model's operators in a worker process.

    Args:
        model: ONNX path or bytes (a snapshot of the fusion timeline, say).
        cfg: BenchConfig for shape, threads, warm-up and runs (default:
            batch 1, sequence 128, 2 threads, 5 + 30 runs).
        provider, level, fp16, disabled_optimizers: as in
            :class:`workbench.measure.harness.bench.Variant`.
        feeds: one batch of real inputs to profile on (a padded batch of text); default seeded random ids at
            ``cfg``'s shape.

    Raises:
        BenchmarkError: bad shape, a failing model, or the worker died.
    """
    v = Variant(name, model, provider=provider, level=level, fp16=fp16, disabled_optimizers=disabled_optimizers)
    return profile_many([v], cfg, timeout=timeout, feeds=feeds)[name]


def profile_many(variants: list[Variant], cfg=None, *, timeout: float | None = 600,
                 feeds: dict | None = None) -> dict[str, OpProfile]:
    """Profile several ONNX Runtime variants one after the other in one worker process (one start for all):
    ``{name: OpProfile}``; arguments as :func:`profile_ops`."""
    cfg = cfg or BenchConfig()
    described, cleanup = prepare_variants(variants)
    handle = BenchHandle(ProfileJob(described, asdict(cfg), feeds=feeds), cfg, described, cleanup=cleanup)
    with handle:
        handle.result(timeout)
    out = {}
    for v in variants:
        m = handle.profiles.get(v.name)
        out[v.name] = (OpProfile(v.name, v.provider, [], None, 0, []) if m is None else
                       OpProfile(v.name, v.provider, m.records, m.run_ms, int(m.runs), list(m.session_providers)))
    return out


def compare_profiles(before: OpProfile, after: OpProfile):
    """Per op type, microseconds per run before and after a step (pandas DataFrame).

    Columns: op_type, before_us, after_us, delta_us (negative: time saved);
    op types that appear or vanish have 0 on the other side.
    """
    import pandas as pd

    a, b = before.op_type_totals(), after.op_type_totals()
    rows = [{"op_type": k, "before_us": a.get(k, 0.0), "after_us": b.get(k, 0.0),
             "delta_us": b.get(k, 0.0) - a.get(k, 0.0)} for k in sorted(set(a) | set(b))]
    return pd.DataFrame(rows, columns=["op_type", "before_us", "after_us", "delta_us"]).sort_values("delta_us")


__all__ = ["profile_ops", "profile_many", "OpProfile", "compare_profiles"]
