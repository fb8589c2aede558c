"""The model card (README.md) of a tuned model folder: plain markdown from a tune's result."""

from __future__ import annotations

from ...ort.answer_policy import words
from ...ort.machine import machine_line
from ...ort.openvino_ep import EP, REGISTRATION, load_config
from ..harness.load import busy_warning
from ..variants import recipe
from ..variants.labels import MODES, variant_label
from ..worker.peer_runners import ov_config
from .result import SessionSpec, TuneResult
from .rows import answers_note, fig, peers_line, plan_lines, same_as_mark

CARD_TEXT = "The cat sat on the mat."


def run_lines(out_dir: str, session: SessionSpec | None, engine: str, threads: int) -> list[str]:
    """The lines that load and run the saved model (plain onnxruntime + the tokenizer, or OpenVINO on its IR)."""
    if engine == "openvino":
        cfg = ov_config(threads, (session.options if session else {}).get("precision"), shipped=True)
        return ["import openvino as ov, transformers",
                f"tok = transformers.AutoTokenizer.from_pretrained({out_dir!r})",
                f"model = ov.Core().compile_model({out_dir + '/openvino/openvino_model.xml'!r}, \"CPU\", {cfg!r})",
                f"enc = tok([{CARD_TEXT!r}], return_tensors=\"np\")",
                "out = model({i.get_any_name(): enc[i.get_any_name()] for i in model.inputs})[0]"]
    off = list(session.disabled_optimizers) if session else []
    kw = f", disabled_optimizers={off!r}" if off else ""
    opts = (session.options if session else {}) or {}
    if opts.get("ep") == "openvino":  # ONNX Runtime with OpenVINO's execution provider: its three lines
        cfg = load_config(ov_config(threads, opts.get("precision"), shipped=True))
        return ["import onnxruntime as ort, onnxruntime_ep_openvino, transformers",
                f"ort.register_execution_provider_library({REGISTRATION!r}, onnxruntime_ep_openvino.get_library_path())",
                f"cpu = next(d for d in ort.get_ep_devices() if d.ep_name == {EP!r} "
                "and d.ep_metadata.get('ov_device') == 'CPU')",
                "so = ort.SessionOptions()",
                f"so.add_provider_for_devices([cpu], {cfg!r})",
                f"tok = transformers.AutoTokenizer.from_pretrained({out_dir!r})",
                f"sess = ort.InferenceSession({out_dir + '/model.onnx'!r}, so{kw})",
                f"enc = tok([{CARD_TEXT!r}], return_tensors=\"np\")",
                "out = sess.run(None, {i.name: enc[i.name] for i in sess.get_inputs()})[0]"]
    return ["import onnxruntime as ort, transformers",
            f"tok = transformers.AutoTokenizer.from_pretrained({out_dir!r})",
            f"sess = ort.InferenceSession({out_dir + '/model.onnx'!r}, providers=[\"CPUExecutionProvider\"]{kw})",
            f"enc = tok([{CARD_TEXT!r}], return_tensors=\"np\")",
            "out = sess.run(None, {i.name: enc[i.name] for i in sess.get_inputs()})[0]"]


def _precision(result: TuneResult, variant: str) -> list[str]:
    r = recipe(variant)
    if r is not None and r.report_key == "int8_search" and result.int8_search:
        s = result.int8_search
        kept = s.get("kept_fp32") or []
        lines = [f"Precision: int8 weights, activations quantized per run (ONNX Runtime dynamic quantization), "
                 f"chosen by the answer-guarded search on the search part: {s['chosen']} ({s['method']}).",
                 f"MatMuls kept in fp32: {', '.join(kept) if kept else 'none'} "
                 f"({s['kept_fp32_share']:.0%} of the weights)."]
        lines += ["", "| candidate | kept in fp32 | answers (search part) | p50 ms | holds |", "|---|---:|---|---:|---|"]
        for c in s["candidates"]:
            p50 = f"{c['p50_ms']:.2f}" if c.get("p50_ms") else "not timed"
            lines.append(f"| {c['label']} | {c['kept_fp32_share']:.0%} | {words(c['task_parity']) or '-'} | {p50} | "
                         f"{'-' if result.random_weights else 'yes' if c['holds'] else 'no'} |")
        return lines
    return [r.card if r is not None else "Precision: fp32 throughout."]


def _table(result: TuneResult) -> list[str]:
    lines = ["| variant | p50 ms (batch 1) | sentences/s | batch | size MB | peak MB | answers, batch 1 | "
             "answers, batched | holds |", "|---|---:|---:|---:|---:|---:|---|---|---|"]
    f = lambda x, s: "-" if x is None else format(x, s)  # noqa: E731
    for r in result.variants:
        ans = ("reference", "reference") if r.reference else (words(r.task_parity) or "-",
                                                              words(r.task_parity_batched) or "-")
        lines.append(f"| {r.label}{same_as_mark(r)} | {f(r.p50_ms, '.2f')} | {f(r.sentences_per_s, '.0f')} | "
                     f"{f(r.batch, 'd')} | {f(r.size_mb, '.1f')} | {f(r.peak_rss_mb, '.0f')} | {ans[0]} | "
                     f"{ans[1]} | {_holds(result, r)} |")
    for sk in result.skipped:
        lines.append(f"| {variant_label(sk.name)} | skipped: {sk.why} | | | | | | | |")
    return lines


def _holds(result: TuneResult, r) -> str:
    """The "holds" cell: yes or no; on random weights "-" (the answers mean nothing: :func:`.rows.answers_note`)."""
    return "-" if result.random_weights and not r.reference else "yes" if r.holds else "no"


def _recommendations(result: TuneResult, info: dict) -> list[str]:
    lines = []
    for w, rec in result.recommended.items():
        held = rec.variant in (info["onnxruntime"], info["openvino"])
        lines += [f"**{w.capitalize()}: {rec.label}**, {fig(w, rec.figure)} at batch {rec.batch} "
                  f"({MODES.get(rec.mode, rec.mode)}). {rec.why}",
                  f"Against the peers in the same run: {peers_line(result, w)}."
                  + ("" if held else f" It is a PyTorch variant; this folder holds the fastest ONNX Runtime variant "
                                     f"whose answers hold instead, {variant_label(info['onnxruntime'])}."), ""]
    return lines


def model_card(result: TuneResult, info: dict, out_dir: str) -> str:
    """README.md of the saved folder."""
    m, plan, sp = result.model, result.plan, result.config["split"]
    lines = [f"# {m.get('label') or result.source}, tuned for this machine", "",
             f"Measured on: {machine_line(result.machine)}. Figures "
             f"{MODES['shipped'] if result.shipped else MODES['interleaved']}.", ""]
    if busy := busy_warning(result.machine_load):
        lines += [busy[0].upper() + busy[1:] + ".", ""]
    lines += _recommendations(result, info)
    lines += [f"ONNX Runtime model: `model.onnx`, {variant_label(info['onnxruntime'])} (`{info['onnxruntime']}`)."]
    if info.get("openvino"):
        lines += [f"OpenVINO model: `openvino/openvino_model.xml`, {variant_label(info['openvino'])} "
                  f"(`{info['openvino']}`); run it with OpenVINO for its speed."]
    lines += [f"Fusion plan: engine {plan['engine']}"
              + (f", steps switched off: {', '.join(plan['disabled'])}" if plan["disabled"] else "")
              + (f", steps switched on: {', '.join(plan['enabled'])}" if plan["enabled"] else "") + ".",
              f"Fused and quantized operators in model.onnx: {info.get('fusions') or 'none'}.", ""]
    if result.plans:  # what each fusion bought on each workload, and which graph the tuned variant ships
        lines += ["This machine's fusion plan, measured on each workload and never slower than the graph it started "
                  "from:", *[f"- {x[0].upper()}{x[1:]}." for x in plan_lines(result)], ""]
    for v in dict.fromkeys(x for x in (info["onnxruntime"], info.get("openvino")) if x):
        lines += _precision(result, v) + [""]
    lines += ["## Speed, size, memory and answers", "",
              f"Answers against {variant_label(result.reference)} on the check part ({sp['check']} sentences the "
              f"int8 recipes never saw; they tuned and calibrated on the search part, {sp['search']} sentences, "
              f"{sp['source']}); batched: in the padded batches each variant is served in.", ""]
    note = answers_note(result)  # random weights: the one sentence, under the table
    lines += _table(result) + ([""] + [note[0].upper() + note[1:] + "."] if note else []) + ["", "## Run it", ""]
    for engine, variant in (("onnxruntime", info["onnxruntime"]), ("openvino", info.get("openvino"))):
        if variant:
            lines += [f"With {'ONNX Runtime' if engine == 'onnxruntime' else 'OpenVINO'} ({variant}):", "",
                      "```python", *run_lines(out_dir, result.sessions.get(variant), engine,
                                              result.threads), "```", ""]
    diffs = [f"{e} max abs diff {info[k]:g}" for e, k in (("ONNX Runtime", "saved_max_abs_diff"),
                                                         ("OpenVINO", "saved_max_abs_diff_openvino"))
             if info.get(k) is not None]
    if diffs:
        lines += [f"These lines reproduce the outputs the tune timed: {'; '.join(diffs)}.", ""]
    if info.get("sentence_transformers") and info.get("openvino"):
        lines += ["This folder keeps the source's sentence-transformers modules (modules.json, pooling), so "
                  "`SentenceTransformer(DIR, backend=\"openvino\")` finds the IR in `openvino/`; that backend needs "
                  "optimum-intel, whose current release pins transformers below 5.6, so it is not run here.", ""]
    if not info.get("tokenizer"):
        lines += ["This model came without tokenizer files: feed `input_ids` (and `attention_mask`) yourself.", ""]
    return "\n".join(lines)


__all__ = ["model_card", "run_lines"]
