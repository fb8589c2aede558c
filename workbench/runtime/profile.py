"""ONNX Runtime's profiler output turned into data: per op type, node, layer, provider.

The profile is taken in a worker process (as every timing is), from the
session's own trace (``SessionOptions.enable_profiling``). Nodes are named
after the graph ONNX Runtime actually ran (after its own session-time
fusions), so the encoder layer of each node is read from that optimized
graph: from the node's name or its weights' names, else from the nearest
named node downstream.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from dataclasses import dataclass, field

_LAYER = re.compile(r"layers?[._/](\d+)[._/]")
_EMBED = re.compile(r"embeddings?", re.I)


def _layer_of(text: str) -> int | None:
    m = _LAYER.search(text + "/")
    return int(m.group(1)) if m else None


def layer_map(model) -> dict[str, str]:
    """Map each node name of ``model`` to "embeddings", "shared", "layer N" or "output".

    "shared" marks nodes feeding several layers (attention-mask and shape
    preparation).

    Args:
        model: ONNX path or ModelProto (the session-optimized graph).
    """
    import onnx

    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model), load_external_data=False)
    nodes = list(model.graph.node)
    inits = {i.name for i in model.graph.initializer}
    known: dict[int, object] = {}
    for idx, n in enumerate(nodes):
        lay = _layer_of(n.name)
        for o in n.output:  # a node's own output names beat shared (deduplicated) weights
            if lay is None:
                lay = _layer_of(o)
        if lay is None:
            for i in n.input:
                if i in inits and (lay := _layer_of(i)) is not None:
                    break
        if lay is not None:
            known[idx] = lay
        elif _EMBED.search(n.name) or any(i in inits and _EMBED.search(i) for i in n.input):
            known[idx] = "embeddings"
    consumers = defaultdict(list)
    for idx, n in enumerate(nodes):
        for i in n.input:
            consumers[i].append(idx)
    first_layer = min((i for i, v in known.items() if isinstance(v, int)), default=len(nodes))
    out: dict[str, str] = {}
    for idx, n in enumerate(nodes):
        lay = known.get(idx)
        if lay is None:
            # Named nodes downstream: a fused Attention feeds its own layer's output projection;
            # mask and shape preparation feeds every layer, so it is "shared".
            seen, todo, found = {idx}, deque((c, 1) for o in n.output for c in consumers[o]), set()
            while todo:
                c, depth = todo.popleft()
                if c in seen or depth > 8:
                    continue
                seen.add(c)
                if c in known:
                    found.add(known[c])
                else:
                    todo.extend((cc, depth + 1) for o in nodes[c].output for cc in consumers[o])
            ints = sorted(f for f in found if isinstance(f, int))
            if len(ints) > 1:
                lay = "shared"
            elif ints:
                lay = ints[0]
            elif found:
                lay = next(iter(found))
            else:
                lay = "embeddings" if idx < first_layer else "output"
        out[n.name] = f"layer {lay}" if isinstance(lay, int) else lay
    return out


def parse_profile_events(events: list[dict], *, skip_runs: int = 0,
                         layers: dict[str, str] | None = None) -> tuple[list[dict], float | None]:
    """Aggregate a profiler trace into one record per node.

    Args:
        events: the JSON list ONNX Runtime writes (Chrome trace format).
        skip_runs: leading ``model_run`` events to ignore (warm-up).
        layers: node name → layer label (see :func:`layer_map`).

    Returns:
        ``(records, run_ms)``: records with ``node, op_type, provider, layer,
        mean_us, calls_per_run, share``; ``run_ms`` the mean measured run.
    """
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])
    kept = runs[skip_runs:] if len(runs) > skip_runs else runs
    if not kept:
        return [], None
    start = kept[0]["ts"]
    n_runs = len(kept)
    per_node: dict[str, dict] = {}
    layers = layers or {}
    for e in events:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time") or e["ts"] < start:
            continue
        args = e.get("args", {})
        node = e["name"][: -len("_kernel_time")]
        rec = per_node.get(node)
        if rec is None:
            rec = per_node[node] = {"node": node, "op_type": args.get("op_name", "?"),
                                    "provider": args.get("provider", "?"), "layer": layers.get(node, "?"),
                                    "total_us": 0.0, "calls": 0}
        rec["total_us"] += float(e.get("dur", 0))
        rec["calls"] += 1
    run_us = sum(float(r["dur"]) for r in kept) / n_runs
    node_sum = sum(r["total_us"] for r in per_node.values()) / n_runs
    records = []
    for rec in per_node.values():
        mean = rec["total_us"] / n_runs
        records.append({"node": rec["node"], "op_type": rec["op_type"], "provider": rec["provider"],
                        "layer": rec["layer"], "mean_us": mean, "calls_per_run": rec["calls"] / n_runs,
                        "share": mean / node_sum if node_sum else 0.0})
    records.sort(key=lambda r: -r["mean_us"])
    return records, run_us / 1e3


def _layer_key(label: str):
    if label.startswith("layer "):
        return (1, int(label.split()[1]))
    return {"embeddings": (0, 0), "shared": (0, 1)}.get(label, (2, 0))


@dataclass
class OpProfile:
    """Where the time of one model run goes.

    Attributes:
        variant: the profiled variant's name.
        records: one dict per node (node, op_type, provider, layer, mean_us,
            calls_per_run, share of kernel time).
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

        df = pd.DataFrame(self.records, columns=["node", "op_type", "provider", "layer", "mean_us",
                                                 "calls_per_run", "share"])
        g = df.groupby(key, sort=False).agg(mean_us=("mean_us", "sum"), nodes=("node", "count"),
                                            share=("share", "sum"))
        return g.sort_values("mean_us", ascending=False).reset_index()

    @property
    def by_node(self):
        """DataFrame, one row per node, slowest first."""
        import pandas as pd
        return pd.DataFrame(self.records, columns=["node", "op_type", "provider", "layer", "mean_us",
                                                   "calls_per_run", "share"])

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
                name: str = "model", timeout: float | None = 600, disabled_optimizers=()) -> OpProfile:
    """Profile one model's operators in a worker process.

    Args:
        model: ONNX path or bytes (a snapshot of the fusion timeline, say).
        cfg: BenchConfig for shape, threads, warm-up and runs (default:
            batch 1, sequence 128, 2 threads, 5 + 30 runs).
        provider, level, fp16, disabled_optimizers: as in
            :class:`workbench.runtime.bench.Variant`.

    Raises:
        BenchmarkError: bad shape, a failing model, or the worker died.
    """
    from dataclasses import asdict

    from ..config import BenchConfig
    from .bench import BenchHandle, Variant, _prepare

    cfg = cfg or BenchConfig()
    described, cleanup = _prepare([Variant(name, model, provider=provider, level=level, fp16=fp16,
                                           disabled_optimizers=disabled_optimizers)])
    job = {"mode": "profile", "variants": described, "cfg": asdict(cfg)}
    handle = BenchHandle(job, cfg, described, cleanup=cleanup)
    with handle:
        handle.result(timeout)
    msg = handle.profile or {}
    return OpProfile(name, provider, msg.get("records", []), msg.get("run_ms"), int(msg.get("runs", 0)),
                     list(msg.get("session_providers", [])))


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


__all__ = ["profile_ops", "OpProfile", "parse_profile_events", "layer_map", "compare_profiles"]
