"""The model card (README.md) of a tuned model folder: plain markdown from a tune's result."""

from __future__ import annotations

from .guarded import answers_line


def run_lines(out_dir: str, session: dict, engine: str, threads: int) -> list[str]:
    """The lines that load and run the saved model (plain onnxruntime + the tokenizer, or OpenVINO)."""
    text = "The cat sat on the mat."
    if engine == "openvino":
        return ["import openvino as ov, transformers",
                f"tok = transformers.AutoTokenizer.from_pretrained({out_dir!r})",
                f"model = ov.Core().compile_model({out_dir + '/model.onnx'!r}, \"CPU\", "
                f"{{\"INFERENCE_NUM_THREADS\": {threads}, \"PERFORMANCE_HINT\": \"LATENCY\""
                + (f", \"INFERENCE_PRECISION_HINT\": {session['options']['precision']!r}"
                   if (session.get("options") or {}).get("precision") else "") + "})",
                f"enc = tok([{text!r}], return_tensors=\"np\")",
                "out = model({i.get_any_name(): enc[i.get_any_name()] for i in model.inputs})[0]"]
    off = list(session.get("disabled_optimizers") or ())
    kw = f", disabled_optimizers={off!r}" if off else ""
    return ["import onnxruntime as ort, transformers",
            f"tok = transformers.AutoTokenizer.from_pretrained({out_dir!r})",
            f"sess = ort.InferenceSession({out_dir + '/model.onnx'!r}, providers=[\"CPUExecutionProvider\"]{kw})",
            f"enc = tok([{text!r}], return_tensors=\"np\")",
            "out = sess.run(None, {i.name: enc[i.name] for i in sess.get_inputs()})[0]"]


def _precision(result: dict, variant: str) -> list[str]:
    if variant == "int8-guarded" and result.get("int8_search"):
        s = result["int8_search"]
        kept = s.get("kept_fp32") or []
        lines = [f"Precision: int8 weights, activations quantized per run (ONNX Runtime dynamic quantization), "
                 f"chosen by the answer-guarded search: {s['chosen']} ({s['method']}).",
                 f"MatMuls kept in fp32: {', '.join(kept) if kept else 'none'} "
                 f"({s['kept_fp32_share']:.0%} of the weights)."]
        lines += ["", "| candidate | kept in fp32 | answers | p50 ms | holds |", "|---|---:|---|---:|---|"]
        for c in s["candidates"]:
            p50 = f"{c['p50_ms']:.2f}" if c.get("p50_ms") else "not timed"
            lines.append(f"| {c['label']} | {c['kept_fp32_share']:.0%} | {answers_line(c['task_parity'])} | {p50} | "
                         f"{'yes' if c['holds'] else 'no'} |")
        return lines
    if variant == "int8":
        return ["Precision: int8 weights (per channel), activations quantized per run; no MatMul kept in fp32."]
    if variant == "openvino":
        return ["Precision: OpenVINO's default inference precision on this CPU (bf16 where the CPU has AVX512-BF16 "
                "or AMX, f32 otherwise)."]
    return ["Precision: fp32 throughout."]


def model_card(result: dict, info: dict, out_dir: str) -> str:
    """README.md of the saved folder."""
    from ..ort.machine import machine_line
    from .tune import LABELS, peers_line

    rec, variant, engine = result["recommended"], info["variant"], info["engine"]
    m = result["model"]
    plan = result["plan"]
    lines = [f"# {m.get('label') or result['source']}, tuned for this machine", "",
             f"Measured on: {machine_line(result['machine'])}; timed on "
             f"{result['config'].get('timed_on')}.", "",
             f"**Recommended: {rec['label']}**, p50 {rec['p50_ms']:.2f} ms. {rec['why']}", "",
             f"Against the peers measured in the same run: {peers_line(result)}.", ""]
    if engine == "openvino":
        lines += [f"This folder holds the ONNX file OpenVINO ran. **Run it with OpenVINO for the speed above**; "
                  f"plain ONNX Runtime opens the same file at the speed of `unfused` in the table below.", ""]
    elif variant != rec["variant"]:
        lines += [f"{rec['label']} was the fastest here, but it is a PyTorch variant; this folder holds the fastest "
                  f"ONNX Runtime variant whose answers hold, {LABELS.get(variant, variant)}.", ""]
    lines += [f"Saved variant: {LABELS.get(variant, variant)} (`{variant}`).",
              f"Fusion plan: engine {plan['engine']}"
              + (f", steps switched off: {', '.join(plan['disabled'])}" if plan["disabled"] else "")
              + (f", steps switched on: {', '.join(plan['enabled'])}" if plan["enabled"] else "") + ".",
              f"Fused and quantized operators in the saved graph: {info.get('fusions') or 'none'}.", ""]
    lines += _precision(result, variant) + [""]
    lines += ["## Latency and answers", "",
              f"Answers against {LABELS.get(result['reference'], result['reference'])} on "
              f"{result['config']['answers_text']['sentences']} sentences.", "",
              "| variant | p50 ms | p90 ms | vs PyTorch | answers | holds |", "|---|---:|---:|---:|---|---|"]
    base = next((r["p50_ms"] for r in result["variants"] if r["name"] == "torch"), None)
    for r in result["variants"]:
        vs = f"{base / r['p50_ms']:.2f}x" if base and r["p50_ms"] else "-"
        ans = "reference" if r["parity"] is None else answers_line(r["task_parity"])
        lines.append(f"| {r['label']} | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {vs} | {ans} | "
                     f"{'yes' if r['holds'] else 'no'} |")
    for sk in result.get("skipped") or ():
        lines.append(f"| {LABELS.get(sk['name'], sk['name'])} | skipped: {sk['why']} | | | | |")
    lines += ["", "## Run it", "", "```python", *run_lines(out_dir, result["sessions"].get(variant, {}), engine,
                                                        result["threads"]), "```", ""]
    if engine == "onnxruntime" and info.get("saved_max_abs_diff") is not None:
        lines += [f"These lines reproduce the session the tune timed: max abs diff "
                  f"{info['saved_max_abs_diff']:g} on the first batch of sentences.", ""]
    if not info.get("tokenizer"):
        lines += ["This model came without tokenizer files: feed `input_ids` (and `attention_mask`) yourself.", ""]
    return "\n".join(lines)


__all__ = ["model_card", "run_lines"]
