"""One ONNX Runtime CPU kernel against the subgraph it replaced, alone, on a model built here (no model files).

Kernels (``--kernel``), each beside what the workbench's fusion step replaced in a BERT export:

- ``attention``: contrib ``Attention`` (packed QKV weights, padding given as the 1-D ``mask_index`` of valid
  lengths that ``EmbedLayerNormalization`` writes in the workbench's fused graphs, or ``--mask raw``: the 2-D
  int32 mask) against 3 x (MatMul + Add + Reshape + Transpose), MatMul, Div, Add(mask), Softmax, MatMul,
  Transpose, Reshape, with the additive mask built from the 2-D mask as the export builds it;
- ``skiplayernorm``: ``SkipLayerNormalization`` with the projection's bias (5 inputs, as in the workbench's full
  plan; ``--no-bias``: 4) against Add(bias) + Add(skip) + LayerNormalization;
- ``biasgelu``: ``BiasGelu`` against Add + contrib Gelu (``--gelu erf``: Add + the erf formula the export writes).

Both sessions as the workbench opens them: ``ORT_ENABLE_ALL``, spinning off, intra-op threads fixed, sequential.
At ENABLE_ALL ONNX Runtime's own session transformers would fuse the unfused side back (AttentionFusion,
SkipLayerNormFusion, GeluFusion, BiasGeluFusion): the unfused side runs without them, named by the workbench's
catalog (``session_optimizers_off``, as the ablation does), and the op types each session really runs are printed.
Timed interleaved (fused, unfused, fused, ...) after a warm-up; p50s, their ratio, the median of the run-by-run
ratios (steadier on a shared machine), the outputs' max abs diff, the CPU, its instruction sets and the load.

    python benchmarks/slow_kernel.py --kernel attention --batch 8 --seq 32 --pad 0.4
    python benchmarks/slow_kernel.py --kernel attention,skiplayernorm,biasgelu --batch 1,8,32 --seq 16,32,64,128 \\
        --pad 0,0.4 --hidden 384 --heads 12 --threads 2 --runs 40   # a grid: one table row per point
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from workbench.fusion.catalog import session_optimizers_off
from workbench.measure.harness.load import LoadSampler
from workbench.ort.machine import describe_machine, machine_line
from workbench.ort.session import create_session

MS = "com.microsoft"
#: The workbench's fusion steps each kernel stands for (their session transformers stay off on the unfused side).
STEPS = {"attention": ("attention",), "skiplayernorm": ("layer_norm", "skip_layer_norm", "bias_skip_layer_norm"),
         "biasgelu": ("gelu", "bias_gelu")}


def _w(name: str, a: np.ndarray):
    return numpy_helper.from_array(np.asarray(a), name)


def _model(nodes, inputs, out_shape, inits, name: str) -> bytes:
    g = h.make_graph(nodes, name, inputs, [h.make_tensor_value_info("y", T.FLOAT, out_shape)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(MS, 1)], ir_version=8)
    onnx.checker.check_model(m)
    return m.SerializeToString()


def _x(name: str, last: int | str = "H"):
    return h.make_tensor_value_info(name, T.FLOAT, ["B", "S", last])


def attention(hidden: int, heads: int, mask: str, rng) -> tuple[bytes, bytes]:
    """(fused, unfused) self-attention of one layer, the same weights."""
    d = hidden // heads
    wq, wk, wv = (rng.standard_normal((hidden, hidden), dtype=np.float32) * 0.05 for _ in range(3))
    bq, bk, bv = (rng.standard_normal(hidden, dtype=np.float32) * 0.05 for _ in range(3))
    m_in = h.make_tensor_value_info("mask", T.INT32, ["B"] if mask == "index" else ["B", "S"])
    fused = _model([h.make_node("Attention", ["x", "w", "b", "mask"], ["y"], domain=MS, num_heads=heads)],
                   [_x("x"), m_in], ["B", "S", hidden],
                   [_w("w", np.concatenate([wq, wk, wv], 1)), _w("b", np.concatenate([bq, bk, bv]))], "fused")
    n = [h.make_node("Unsqueeze", ["am", "ax12"], ["am4"]), h.make_node("Cast", ["am4"], ["amf"], to=T.FLOAT),
         h.make_node("Sub", ["one", "amf"], ["inv"]), h.make_node("Mul", ["inv", "neg"], ["bias"])]
    for p, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        n += [h.make_node("MatMul", ["x", f"w{p}"], [f"{p}0"]), h.make_node("Add", [f"{p}0", f"b{p}"], [f"{p}1"]),
              h.make_node("Reshape", [f"{p}1", "heads"], [f"{p}2"]),
              h.make_node("Transpose", [f"{p}2"], [p], perm=perm)]
    n += [h.make_node("MatMul", ["q", "k"], ["s0"]), h.make_node("Div", ["s0", "scale"], ["s1"]),
          h.make_node("Add", ["s1", "bias"], ["s2"]), h.make_node("Softmax", ["s2"], ["p"], axis=-1),
          h.make_node("MatMul", ["p", "v"], ["c0"]), h.make_node("Transpose", ["c0"], ["c1"], perm=[0, 2, 1, 3]),
          h.make_node("Reshape", ["c1", "merge"], ["y"])]
    inits = [_w("wq", wq), _w("wk", wk), _w("wv", wv), _w("bq", bq), _w("bk", bk), _w("bv", bv),
             _w("ax12", np.array([1, 2], np.int64)), _w("one", np.float32(1)), _w("neg", np.float32(-10000)),
             _w("heads", np.array([0, 0, heads, d], np.int64)), _w("merge", np.array([0, 0, hidden], np.int64)),
             _w("scale", np.float32(np.sqrt(d)))]
    unfused = _model(n, [_x("x"), h.make_tensor_value_info("am", T.INT64, ["B", "S"])], ["B", "S", hidden], inits,
                     "unfused")
    return fused, unfused


def skiplayernorm(hidden: int, bias: bool, rng) -> tuple[bytes, bytes]:
    g, b, pb = 1 + 0.1 * rng.standard_normal(hidden, dtype=np.float32), *(
        0.1 * rng.standard_normal(hidden, dtype=np.float32) for _ in range(2))
    inits = [_w("g", g), _w("beta", b)] + ([_w("pb", pb)] if bias else [])
    fused = _model([h.make_node("SkipLayerNormalization", ["x", "skip", "g", "beta"] + ["pb"] * bias, ["y"],
                                domain=MS, epsilon=1e-12)], [_x("x"), _x("skip")], ["B", "S", hidden], inits, "fused")
    first = [h.make_node("Add", ["x", "pb"], ["xb"])] if bias else []
    unfused = _model(first + [h.make_node("Add", ["xb" if bias else "x", "skip"], ["s"]),
                              h.make_node("LayerNormalization", ["s", "g", "beta"], ["y"], axis=-1, epsilon=1e-12)],
                     [_x("x"), _x("skip")], ["B", "S", hidden], inits, "unfused")
    return fused, unfused


def biasgelu(hidden: int, gelu: str, rng) -> tuple[bytes, bytes]:
    inter = 4 * hidden
    inits = [_w("bias", 0.1 * rng.standard_normal(inter, dtype=np.float32))]
    x = _x("x", inter)
    fused = _model([h.make_node("BiasGelu", ["x", "bias"], ["y"], domain=MS)], [x], ["B", "S", inter], inits, "fused")
    if gelu == "contrib":
        n = [h.make_node("Add", ["x", "bias"], ["a"]), h.make_node("Gelu", ["a"], ["y"], domain=MS)]
    else:
        inits += [_w("sqrt2", np.float32(np.sqrt(2))), _w("one", np.float32(1)), _w("half", np.float32(0.5))]
        n = [h.make_node("Add", ["x", "bias"], ["a"]), h.make_node("Div", ["a", "sqrt2"], ["d"]),
             h.make_node("Erf", ["d"], ["e"]), h.make_node("Add", ["e", "one"], ["e1"]),
             h.make_node("Mul", ["a", "e1"], ["m"]), h.make_node("Mul", ["m", "half"], ["y"])]
    return fused, _model(n, [x], ["B", "S", inter], inits, "unfused")


def feeds(kernel: str, batch: int, seq: int, hidden: int, pad: float, mask: str, rng) -> tuple[dict, dict, float]:
    """(fused feeds, unfused feeds, the padding's real share): rows right-padded, lengths spread around 1 - pad."""
    spread = (np.arange(batch) + 0.5) / batch if batch > 1 else np.array([0.5])
    valid = np.clip(np.round(seq * (1 - 2 * pad * spread)), 1, seq).astype(np.int64)
    am = (np.arange(seq)[None, :] < valid[:, None]).astype(np.int64)
    share = 1 - am.sum() / am.size
    if kernel == "attention":
        x = rng.standard_normal((batch, seq, hidden), dtype=np.float32)
        m = valid.astype(np.int32) if mask == "index" else am.astype(np.int32)
        return {"x": x, "mask": m}, {"x": x, "am": am}, share
    if kernel == "skiplayernorm":
        x, s = (rng.standard_normal((batch, seq, hidden), dtype=np.float32) for _ in range(2))
        return {"x": x, "skip": s}, {"x": x, "skip": s}, share
    x = rng.standard_normal((batch, seq, 4 * hidden), dtype=np.float32)
    return {"x": x}, {"x": x}, share


def session(model: bytes, threads: int, off=()):
    """The session as the workbench opens one, and the op types it runs (from its optimized graph)."""
    with tempfile.TemporaryDirectory() as tmp:
        opt = Path(tmp) / "opt.onnx"
        create_session(model, level="all", threads=threads, disabled_optimizers=off, optimized_model_path=opt)
        ops = Counter(n.op_type for n in onnx.load(str(opt), load_external_data=False).graph.node)
    return create_session(model, level="all", threads=threads, disabled_optimizers=off), ops


def timed(sessions, feed_list, runs: int, warmup: int) -> list[list[float]]:
    for _ in range(warmup):
        for s, f in zip(sessions, feed_list):
            s.run(None, f)
    out = [[] for _ in sessions]
    for _ in range(runs):
        for i, (s, f) in enumerate(zip(sessions, feed_list)):
            t0 = time.perf_counter()
            s.run(None, f)
            out[i].append((time.perf_counter() - t0) * 1e3)
    return out


def point(kernel: str, batch: int, seq: int, pad: float, a) -> dict:
    rng = np.random.default_rng(0)
    models = {"attention": lambda: attention(a.hidden, a.heads, a.mask, rng),
              "skiplayernorm": lambda: skiplayernorm(a.hidden, a.bias, rng), "biasgelu": lambda: biasgelu(a.hidden, a.gelu, rng)}
    fused_m, unfused_m = models[kernel]()
    (fs, fops), (us, uops) = session(fused_m, a.threads), session(unfused_m, a.threads, session_optimizers_off(STEPS[kernel]))
    ff, uf, share = feeds(kernel, batch, seq, a.hidden, pad, a.mask, rng)
    diff = float(np.abs(fs.run(None, ff)[0] - us.run(None, uf)[0]).max())
    tf, tu = timed([fs, us], [ff, uf], a.runs, a.warmup)
    pf, pu = statistics.median(tf), statistics.median(tu)
    paired = statistics.median(f / u for f, u in zip(tf, tu))
    return {"kernel": kernel, "batch": batch, "seq": seq, "pad": share, "fused_ms": pf, "unfused_ms": pu,
            "ratio": pf / pu, "paired": paired, "diff": diff, "fused_ops": fops, "unfused_ops": uops,
            "load": os.getloadavg()[0]}


def _ops(c: Counter) -> str:
    return " ".join(f"{k}x{v}" if v > 1 else k for k, v in sorted(c.items()))


def _list(kind):
    return lambda s: [kind(x) for x in s.split(",") if x.strip()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Comma-separated lists make a grid: one row per point. The ratio is fused p50 "
                                       "over unfused p50: above 1 the fused kernel loses.")
    p.add_argument("--kernel", type=_list(str), default=["attention"], help="attention, skiplayernorm, biasgelu")
    p.add_argument("--batch", type=_list(int), default=[8])
    p.add_argument("--seq", type=_list(int), default=[32])
    p.add_argument("--pad", type=_list(float), default=[0.4], help="share of padding tokens, 0 to 0.9 (default 0.4)")
    p.add_argument("--hidden", type=int, default=384, help="hidden size (default 384: all-MiniLM-L6-v2)")
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--mask", choices=("index", "raw"), default="index",
                   help="Attention's padding: 1-D mask_index of lengths (as in the workbench's graphs) or raw 2-D")
    p.add_argument("--bias", action=argparse.BooleanOptionalAction, default=True,
                   help="SkipLayerNormalization with the projection's bias folded in (default) or without")
    p.add_argument("--gelu", choices=("contrib", "erf"), default="contrib",
                   help="BiasGelu's unfused side: Add + contrib Gelu, or Add + the erf formula")
    a = p.parse_args(argv)
    bad = [k for k in a.kernel if k not in STEPS]
    if bad or a.hidden % a.heads or not all(0 <= x < 1 for x in a.pad):
        p.error(f"unknown kernel {bad}" if bad else "--hidden must divide by --heads and --pad lie in [0, 1)")
    machine = describe_machine(a.threads, check_cuda=False)
    print(f"{machine_line(machine)}; microarchitecture {machine.get('microarch')}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs; hidden {a.hidden}, "
          f"{a.heads} heads, {a.runs} runs interleaved, ORT_ENABLE_ALL, spinning off")
    print("| kernel | batch | seq | pad | fused p50 ms | unfused p50 ms | fused/unfused | run-by-run | max abs diff "
          "| load avg | others' cores |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    seen, busy = set(), 0
    for k in a.kernel:
        for b in a.batch:
            for s in a.seq:
                for pad in a.pad:
                    sampler = LoadSampler(a.threads).start()  # other processes' CPU while this point ran
                    r = point(k, b, s, pad, a)
                    load = sampler.stop()
                    busy += load.busy()
                    others = f"{load.other_cores:.2f}" if load.other_cores is not None else "?"
                    print(f"| {k} | {b} | {s} | {r['pad']:.0%} | {r['fused_ms']:.3f} | {r['unfused_ms']:.3f} | "
                          f"{r['ratio']:.2f}x | {r['paired']:.2f}x | {r['diff']:.1e} | {r['load']:.1f} | {others} |",
                          flush=True)
                    if k not in seen:
                        seen.add(k)
                        print(f"<!-- {k}: fused runs {_ops(r['fused_ops'])}; unfused runs {_ops(r['unfused_ops'])} -->")
    print(f"load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {busy} point(s) measured while the "
          f"machine was busy (other processes over a quarter of the cores the threads used)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
