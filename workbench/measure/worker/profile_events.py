"""Parse ONNX Runtime's profile events into per-node records (runs inside the benchmark worker).

Kept apart from :mod:`workbench.measure.harness.profile` so the worker imports no module that imports the
benchmark front-end (no import circle).
"""
from __future__ import annotations

import re
from collections import defaultdict, deque

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
            lay = _downstream_layer(nodes, consumers, known, idx, first_layer)
        out[n.name] = f"layer {lay}" if isinstance(lay, int) else lay
    return out


def _kernels_by_node(events: list[dict], start: float) -> dict[str, list[dict]]:
    """The GPU kernels each node launched: ONNX Runtime's CUDA profiler writes them (``cat: "Kernel"``, the
    kernel's name, ``args.op_name`` its node's op type) right after the node's own event, its ``ts`` the
    node's plus 1, 2, ... (``GPUProfilerBase::MergeEvents``), so a kernel belongs to the node just before it."""
    out: dict[str, list[dict]] = defaultdict(list)
    node = None
    for e in sorted((e for e in events if e.get("ts", 0) >= start), key=lambda e: e["ts"]):
        name = str(e.get("name", ""))
        if e.get("cat") == "Node" and name.endswith("_kernel_time"):
            node = name[: -len("_kernel_time")]
        elif e.get("cat") == "Kernel" and node is not None:
            out[node].append(e)
    return out


def _downstream_layer(nodes: list, consumers: dict, known: dict, idx: int, first_layer: int):
    """The layer of an unnamed node from the named nodes downstream: a fused Attention feeds its own layer's
    output projection; mask and shape preparation feeds every layer, so it is "shared"."""
    seen, todo, found = {idx}, deque((c, 1) for o in nodes[idx].output for c in consumers[o]), set()
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
        return "shared"
    if ints:
        return ints[0]
    if found:
        return next(iter(found))
    return "embeddings" if idx < first_layer else "output"


def parse_profile_events(events: list[dict], *, skip_runs: int = 0,
                         layers: dict[str, str] | None = None) -> tuple[list[dict], float | None]:
    """Aggregate a profiler trace into one record per node (per node and GPU kernel on CUDA).

    On the CUDA provider a node's own event times its launch on the host; the GPU's time is in the kernel
    events after it, so such a node gives one record per kernel it launched (``provider`` "cuda",
    ``kernel`` the kernel's name) instead of its host record.

    Args:
        events: the JSON list ONNX Runtime writes (Chrome trace format).
        skip_runs: leading ``model_run`` events to ignore (warm-up).
        layers: node name → layer label (see :func:`layer_map`).

    Returns:
        ``(records, run_ms)``: records with ``node, op_type, provider, kernel, layer, mean_us, calls_per_run,
        share`` (``kernel`` "" for a node timed on the host); ``run_ms`` the mean measured run.
    """
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])
    kept = runs[skip_runs:] if len(runs) > skip_runs else runs
    if not kept:
        return [], None
    start = kept[0]["ts"]
    n_runs = len(kept)
    kernels = _kernels_by_node(events, start)
    per_key: dict[tuple, dict] = {}
    layers = layers or {}

    def add(key: tuple, node: str, op: str, provider: str, kernel: str, dur: float) -> None:
        rec = per_key.get(key)
        if rec is None:
            rec = per_key[key] = {"node": node, "op_type": op, "provider": provider, "kernel": kernel,
                                  "layer": layers.get(node, "?"), "total_us": 0.0, "calls": 0}
        rec["total_us"] += dur
        rec["calls"] += 1

    for e in events:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time") or e["ts"] < start:
            continue
        args = e.get("args", {})
        node = e["name"][: -len("_kernel_time")]
        if node not in kernels:
            add((node, ""), node, args.get("op_name", "?"), args.get("provider", "?"), "", float(e.get("dur", 0)))
    for node, ks in kernels.items():
        for k in ks:
            name = str(k.get("name", "?"))
            add((node, name), node, k.get("args", {}).get("op_name", "?"), "cuda", name, float(k.get("dur", 0)))
    run_us = sum(float(r["dur"]) for r in kept) / n_runs
    node_sum = sum(r["total_us"] for r in per_key.values()) / n_runs
    records = []
    for rec in per_key.values():
        mean = rec["total_us"] / n_runs
        records.append({"node": rec["node"], "op_type": rec["op_type"], "provider": rec["provider"],
                        "kernel": rec["kernel"], "layer": rec["layer"], "mean_us": mean,
                        "calls_per_run": rec["calls"] / n_runs, "share": mean / node_sum if node_sum else 0.0})
    records.sort(key=lambda r: -r["mean_us"])
    return records, run_us / 1e3
