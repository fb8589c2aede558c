"""The hardware floor: a model's FLOPs at a shape over this machine's matmul rate.

No schedule of kernels can beat the time the multiply-adds themselves take,
so ``floor_ms = model_flops / matmul_rate`` tells how much any further fusion
could still buy. The rate is measured once per machine (CPU model, threads,
provider, precision, onnxruntime version) with a large MatMul through ONNX
Runtime and cached in :func:`workbench.cache.root.cache_root`.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import Counter
from pathlib import Path

import numpy as np

from ...cache.atomic import atomic_write_text
from ...cache.root import cache_root
from ...errors import BenchmarkError
from ...models import PRESETS, ModelSource
from ...ort.machine import cpu_info, gpu_names, package_version
from ...ort.session import create_session
from .precision import quantize_int8

#: MatMul shape of the rate probe: BERT's feed-forward at sequence 128.
PROBE_SHAPE = (128, 768, 3072)
#: Ops whose second input, when a 2-D initializer, is a dense weight every token meets.
_WEIGHT_OPS = {"MatMul", "Gemm", "MatMulInteger", "DynamicQuantizeMatMul", "MatMulNBits", "FusedMatMul",
               "QAttention", "Attention", "QGemm", "QLinearMatMul"}
_ATTENTION_OPS = {"Attention", "QAttention", "MultiHeadAttention"}


def bert_flops(layers: int, hidden: int, intermediate: int, batch: int = 1, seq: int = 128) -> float:
    """FLOPs of a BERT encoder (multiply-add counted as 2), per MEASURING.md.

    Per layer: Q, K, V and output projections ``4*S*H*H*2``, the feed-forward
    ``2*S*H*I*2`` and attention scores plus context ``2*S*S*H*2``.
    """
    s, h, i = seq, hidden, intermediate
    per_layer = 4 * s * h * h * 2 + 2 * s * h * i * 2 + 2 * s * s * h * 2
    return float(batch * layers * per_layer)


def _flops_from_config(cfg: dict, batch: int, seq: int) -> float:
    layers = cfg.get("num_hidden_layers", cfg.get("n_layers"))
    hidden = cfg.get("hidden_size", cfg.get("dim"))
    inter = cfg.get("intermediate_size", cfg.get("hidden_dim", 4 * (hidden or 0)))
    if not layers or not hidden:
        raise BenchmarkError("cannot count FLOPs: the config has no layer count or hidden size")
    return bert_flops(int(layers), int(hidden), int(inter), batch, seq)


#: Weight ops whose multiply-adds run in int8 (what ``quantize_dynamic`` and the QDQ passes emit).
_INT8_OPS = {"MatMulInteger", "DynamicQuantizeMatMul", "QAttention", "QGemm", "QLinearMatMul"}
#: Precisions in the order a label names them ("int8+fp32").
PRECISIONS = ("int8", "fp16", "fp32")


def onnx_flops_by_precision(model, batch: int = 1, seq: int = 128) -> dict[str, float]:
    """Dense FLOPs of a BERT-like ONNX graph split by the precision they run in.

    After ``quantize_dynamic`` the projections and feed-forward MatMuls are int8 while attention's
    score and context products stay in float (fp16 when the model's weights are fp16, else fp32);
    a mixed model's floor adds each part at its own rate. Counting as in :func:`onnx_flops`.
    """
    import onnx

    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model), load_external_data=False)
    inits = {i.name: (tuple(i.dims), i.data_type) for i in model.graph.initializer}
    out: Counter = Counter()
    ks, layers, halves = Counter(), 0, 0
    for node in model.graph.node:
        if node.op_type in _ATTENTION_OPS or node.op_type == "Softmax":
            layers += 1
        if node.op_type in _WEIGHT_OPS and len(node.input) > 1:
            dims, dtype = inits.get(node.input[1], (None, None))
            if node.op_type == "QLinearMatMul" and len(node.input) > 3:
                dims, dtype = inits.get(node.input[3], (None, None))
            if dims and len(dims) == 2:
                k, n = dims
                if node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute):
                    k, n = n, k
                half = dtype in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
                halves += half
                prec = "int8" if node.op_type in _INT8_OPS else ("fp16" if half else "fp32")
                out[prec] += 2.0 * batch * seq * k * n
                ks[k] += 1
    if ks:
        hidden = ks.most_common(1)[0][0]
        # Attention's own products run in the float type of the weights (fp16 in an fp16 model).
        float_prec = "fp16" if halves and not out.get("fp32") else "fp32"
        out[float_prec] += layers * 4.0 * batch * seq * seq * hidden
    return {p: out[p] for p in PRECISIONS if out.get(p)}


def precision_label(flops: dict[str, float]) -> str:
    """``"fp32"``, ``"int8+fp32"``, ``"fp16"``: the precisions a model's FLOPs run in."""
    return "+".join(p for p in PRECISIONS if flops.get(p)) or "fp32"


def onnx_flops(model, batch: int = 1, seq: int = 128) -> float:
    """Count the dense FLOPs of a BERT-like ONNX graph at ``batch x seq``.

    Every MatMul-like node whose weight is a 2-D initializer ``K x N`` costs
    ``2*B*S*K*N`` (each token meets each weight once, fused or not, fp32 or
    int8). Attention scores and context add ``4*B*S*S*H`` per layer, where
    layers are counted as Softmax or fused attention nodes and H is the most
    common weight input size.
    """
    return float(sum(onnx_flops_by_precision(model, batch, seq).values()))


def model_flops(model, batch: int = 1, seq: int = 128) -> float:
    """FLOPs of one forward pass at ``batch x seq``.

    Args:
        model: a config dict (``num_hidden_layers``, ``hidden_size``,
            ``intermediate_size``), a :class:`workbench.models.ModelSource`,
            a preset name, or an ONNX path / ModelProto (counted from the graph).
    """
    if isinstance(model, dict):
        return _flops_from_config(model, batch, seq)
    if isinstance(model, ModelSource):
        if model.kind == "onnx":
            return onnx_flops(model.path, batch, seq)
        return _flops_from_config(model.config_dict, batch, seq)
    if isinstance(model, str) and model in PRESETS:
        return _flops_from_config(PRESETS[model], batch, seq)
    return onnx_flops(model, batch, seq)


#: A probe whose median run is more than this over its 10th-percentile run was disturbed
#: by other work (on 2 cores one busy process halves a run); its rate is not trusted.
QUIET_SPREAD = 1.10
#: Distinct weight matrices in the streaming probe: together far larger than the L2 caches,
#: like a real model's weights, so every MatMul reads its weights from memory.
STREAM_WEIGHTS = 16


def _cache_file(threads: int, provider: str, dtype: str, kind: str = "hot") -> Path:
    cpu = cpu_info()[0] if provider == "cpu" else ",".join(gpu_names())
    ort_v = package_version("onnxruntime-gpu") or package_version("onnxruntime")
    key = json.dumps([cpu, threads, provider, dtype, ort_v, PROBE_SHAPE] + ([kind] if kind != "hot" else []))
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    safe = re.sub(r"[^A-Za-z0-9]+", "-", f"{provider}-{dtype}-{threads}t" + ("" if kind == "hot" else f"-{kind}"))
    return cache_root() / "floor" / f"matmul-{safe}-{digest}.json"


def plausible_bound(bound_ms: float | None, measured_ms: float | None) -> float | None:
    """A lower bound, or None when it exceeds what was measured.

    The floor and the MatMuls-alone bound say what a model cannot run faster than; one above the
    measured time is impossible (a probe disturbed by other load, a wrong FLOP count), so it is
    shown as unknown, never as a figure.
    """
    if bound_ms is None or not measured_ms:
        return bound_ms
    return None if bound_ms > measured_ms else bound_ms


def distrust_rate(threads: int, provider: str = "cpu", dtype: str = "fp32", kind: str = "stream") -> None:
    """Mark a cached rate as disturbed, so the next benchmark measures it again instead of reusing it."""
    path = _cache_file(threads, provider, dtype, kind)
    info = _read(path)
    if info is not None and info.get("quiet"):
        info["quiet"] = False
        info["distrusted"] = "a bound from this rate came out above a measured time"
        try:
            atomic_write_text(path, json.dumps(info, indent=1))
        except OSError:
            pass


def _matmul_model(m: int, k: int, n: int, dtype: str, weights: int = 1):
    """``weights`` independent MatMuls of one input, each with its own ``k x n`` weight."""
    from onnx import TensorProto, numpy_helper
    from onnx import helper as h

    if dtype == "int8":  # the fp32 probe through quantize_dynamic: what the int8 variant runs

        fp32, np_dt = _matmul_model(m, k, n, "fp32", weights)
        return quantize_int8(fp32, per_channel=True), np_dt
    np_dt = np.float16 if dtype == "fp16" else np.float32
    pt = TensorProto.FLOAT16 if dtype == "fp16" else TensorProto.FLOAT
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((k, n), dtype=np.float32) * 0.02).astype(np_dt), f"W{i}")
             for i in range(weights)]
    nodes = [h.make_node("MatMul", ["A", f"W{i}"], [f"Y{i}"]) for i in range(weights)]
    outs = [h.make_tensor_value_info(f"Y{i}", pt, [m, n]) for i in range(weights)]
    g = h.make_graph(nodes, "matmul_rate", [h.make_tensor_value_info("A", pt, [m, k])], outs, inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model, np_dt


def _measure_once(sess, provider: str, a, seconds: float) -> list[float]:
    if provider == "cuda":
        import onnxruntime as ort
        binding = sess.io_binding()
        binding.bind_ortvalue_input("A", ort.OrtValue.ortvalue_from_numpy(a, "cuda", 0))
        for o in sess.get_outputs():
            binding.bind_output(o.name, "cuda")

        def once():
            sess.run_with_iobinding(binding)
            binding.synchronize_outputs()
    else:
        def once():
            sess.run(None, {"A": a})
    for _ in range(5):
        once()
    times, deadline = [], time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 10:
        t0 = time.perf_counter()
        once()
        times.append(time.perf_counter() - t0)
    return times


def measure_matmul_gflops(threads: int, provider: str = "cpu", dtype: str = "fp32", *,
                          seconds: float = 1.5, shape: tuple[int, int, int] = PROBE_SHAPE, weights: int = 1,
                          attempts: int = 3) -> dict:
    """Measure the matmul rate now (no cache), from the fast end of repeated runs.

    Noise from other processes only ever slows a run down, so the rate comes
    from the 10th-percentile run time, not the median. A probe whose median is
    more than :data:`QUIET_SPREAD` over that was disturbed: it is measured
    again (up to ``attempts`` times) and the result says ``"quiet": False``
    if no attempt was quiet.

    Args:
        weights: 1 for the hot rate (one weight, which stays in cache: the
            fastest MatMul this machine runs); :data:`STREAM_WEIGHTS` for the
            streaming rate (each MatMul reads a different weight from memory,
            as in a real model).
    """
    m, k, n = shape
    model, np_dt = _matmul_model(m, k, n, dtype, weights)
    sess = create_session(model.SerializeToString(), provider, level="all", threads=threads)
    del model
    a = np.random.default_rng(1).standard_normal((m, k)).astype(np_dt)
    flops = 2.0 * m * k * n * weights
    best = None
    for attempt in range(1, max(1, attempts) + 1):
        times = _measure_once(sess, provider, a, seconds)
        fast, med, low = float(np.percentile(times, 10)), float(np.median(times)), float(np.min(times))
        info = {"gflops": flops / fast / 1e9, "p10_ms": fast * 1e3, "best_ms": low * 1e3,
                "best_gflops": flops / low / 1e9, "median_ms": med * 1e3, "median_gflops": flops / med / 1e9,
                "spread": med / fast, "quiet": med / fast <= QUIET_SPREAD, "attempts": attempt,
                "runs": len(times), "shape": list(shape), "weights": weights, "threads": threads,
                "provider": provider, "dtype": dtype, "measured": time.strftime("%Y-%m-%dT%H:%M:%S")}
        if best is None or (info["quiet"], info["gflops"]) > (best["quiet"], best["gflops"]):
            best = info
        if info["quiet"]:
            break
    best["attempts"] = attempt
    return best


def _read(path: Path) -> dict | None:
    try:
        info = json.loads(path.read_text())
        float(info["gflops"])
        return info
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _better(old: dict | None, new: dict) -> dict:
    """Which of two measurements of one rate to keep.

    The latest quiet measurement wins (the rate of a shared VM drifts by a
    few percent from hour to hour, and keeping the maximum of many noisy
    estimates would drift upward by itself); a disturbed one never replaces
    a quiet one, so a busy moment cannot lower the floor's rate and fake a
    pass. Between two disturbed ones the faster is kept.
    """
    if old is None or new.get("quiet") or old.get("distrusted"):  # a distrusted figure never wins
        return new
    if old.get("quiet"):
        return old
    return new if float(new["gflops"]) > float(old["gflops"]) else old


def machine_matmul_info(threads: int = 2, provider: str = "cpu", dtype: str = "fp32", *, kind: str = "hot",
                        refresh: bool = False) -> dict:
    """This machine's matmul rate, measured once and cached, with how it was measured.

    A cached figure from a disturbed probe (``"quiet": False``, or a file
    from before probes were checked) is measured again on the next call.

    Args:
        threads: intra-op threads, the same the benchmarks use.
        provider: "cpu" or "cuda".
        dtype: "fp32", "fp16" or "int8" (the probe through quantize_dynamic, as the int8 variant runs).
        kind: "hot" (one weight in cache: the hardware floor's rate) or
            "stream" (:data:`STREAM_WEIGHTS` weights read from memory).
        refresh: measure again even when a quiet cached figure exists; a
            quiet new figure replaces it, a disturbed one does not (see :func:`_better`).
    """
    if kind not in ("hot", "stream"):
        raise ValueError("kind must be 'hot' or 'stream'")
    path = _cache_file(threads, provider, dtype, kind)
    cached = _read(path)
    if cached is not None and cached.get("quiet") and not refresh:
        return cached
    info = measure_matmul_gflops(threads, provider, dtype, weights=1 if kind == "hot" else STREAM_WEIGHTS)
    keep = _better(cached, info)
    if keep is info:
        try:
            atomic_write_text(path, json.dumps(info, indent=1))
        except OSError:
            pass  # a read-only cache only costs a re-measurement
    return keep


def refresh_rates(threads: int = 2, provider: str = "cpu", dtype: str = "fp32") -> dict[str, dict]:
    """Measure the hot and streaming rates now (for a benchmark that compares with the floor right after)."""
    return {kind: machine_matmul_info(threads, provider, dtype, kind=kind, refresh=True) for kind in ("hot", "stream")}


def machine_matmul_gflops(threads: int = 2, provider: str = "cpu", dtype: str = "fp32", *,
                          refresh: bool = False, kind: str = "hot") -> float:
    """This machine's matmul rate in GFLOP/s (see :func:`machine_matmul_info`)."""
    return float(machine_matmul_info(threads, provider, dtype, kind=kind, refresh=refresh)["gflops"])


def floor_ms(model, batch: int = 1, seq: int = 128, *, threads: int = 2, provider: str = "cpu",
             dtype: str = "fp32", gflops: float | None = None) -> float:
    """The fastest ``model`` could run at this shape here, in milliseconds."""
    rate = gflops if gflops else machine_matmul_gflops(threads, provider, dtype)
    return model_flops(model, batch, seq) / (rate * 1e9) * 1e3


def matmul_bound_ms(model, batch: int = 1, seq: int = 128, *, threads: int = 2, provider: str = "cpu",
                    dtype: str = "fp32", gflops: float | None = None) -> float:
    """What the model's multiply-adds alone take at the streaming rate, in milliseconds.

    Above the floor: a real model's weights do not stay in cache, so its
    MatMuls run at the streaming rate however well the rest is fused. The gap
    between this and a measured latency is what fusing the other operators
    could still buy; the gap between this and the floor is memory traffic.
    """
    rate = gflops if gflops else machine_matmul_gflops(threads, provider, dtype, kind="stream")
    return model_flops(model, batch, seq) / (rate * 1e9) * 1e3


def cached_rate(threads: int, provider: str = "cpu", dtype: str = "fp32", kind: str = "hot") -> float | None:
    """The cached rate if one exists, without measuring."""
    info = _read(_cache_file(threads, provider, dtype, kind))
    return float(info["gflops"]) if info else None


__all__ = ["bert_flops", "onnx_flops", "model_flops", "machine_matmul_gflops", "machine_matmul_info",
           "measure_matmul_gflops", "refresh_rates", "floor_ms", "matmul_bound_ms", "cached_rate", "PROBE_SHAPE", "QUIET_SPREAD",
           "STREAM_WEIGHTS"]
