"""The exercises of notebook 03, as plain functions: the answer, the reason, and whether the premise holds.

Each function runs the real exporter and engine on the export its exercise names and returns a
:class:`Finding`: the tool's answer, a sentence saying why in the tool's own data (what a step removed
and emitted, the engine's words for a refusal), the exercise's premise and whether it holds on this
export, and a few evidence rows for a table. The notebook prints them; ``tests/test_workshop.py``
asserts every premise, so an exporter or engine change that empties an exercise turns a test red
instead of leaving a notebook that runs green and teaches nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx

from ..cache.root import cache_root
from ..config import ExportConfig, FusionPlan
from ..export import export
from ..fusion import Timeline
from ..fusion.catalog import BY_NAME, CATALOG
from ..models import ModelSource, resolve

#: The export where the exporter still writes LayerNorm as elementary ops (ReduceMean, Sub, Pow, ...).
#: From opset 17 both torch exporters write ONNX's LayerNormalization op instead, and from opset 20 ONNX's
#: Gelu op (checked in ``tests/test_workshop.py``).
WRITTEN_OUT_OPSET = 14
#: The opsets from which the exporters write each op as one ONNX op.
ONE_OP_SINCE = {"LayerNormalization": 17, "Gelu": 20}


@dataclass
class Finding:
    """One exercise's answer, with the reason and the premise it rests on.

    Attributes:
        name: what is asked, in a few words.
        answer: the tool's answer (a count, a step name, True/False).
        why: the reason, in sentences built from the tool's data.
        premise: what the exercise assumes about the export.
        holds: whether that premise is true on this export.
        table: evidence rows (one dict per row), for a short table.
        facts: the numbers behind ``why``, for tests.
    """

    name: str
    answer: Any
    why: str
    premise: str
    holds: bool
    table: list[dict] = field(default_factory=list)
    facts: dict = field(default_factory=dict)

    def line(self, guess: Any = None) -> str:
        """The check's sentence for a participant's ``guess`` (None: not answered yet)."""
        if guess is None:
            head = f"{self.name}: not answered yet. Solution: {self.answer}."
        elif guess == self.answer:
            head = f"{self.name}: correct ({self.answer})."
        else:
            head = f"{self.name}: not quite: you said {guess}, the tool says {self.answer}."
        tail = "" if self.holds else f" (Note: this exercise's premise does not hold on this export: {self.premise})"
        return f"{head} Why: {self.why}{tail}"

    def frame(self):
        """The evidence as a pandas DataFrame (pandas is imported only here)."""
        import pandas as pd

        return pd.DataFrame(self.table)


# ------------------------------------------------------------------ running the tool
#: The last runs asked for (an exercise asks for the same run several times), the oldest dropped first.
_RUNS: dict[tuple, list] = {}
_RUNS_MAX = 8


def source_of(model):
    """A ``ModelSource`` for a preset name, folder or an existing source."""

    return model if isinstance(model, ModelSource) else resolve(str(model))


def fusion_run(model, *, exporter: str = "torchscript", attention: str = "eager", opset: int | None = None,
               engine: str = "ort", disabled=()) -> list:
    """The snapshots of one engine on one export (the same Timeline arguments the notebooks and app use,
    so a prepared cache answers from disk)."""

    src = source_of(model)
    # Keyed by the cache too: a run made for another cache folder (an earlier prepare, a test) must not
    # stand in for this one, or `workbench prepare` would leave its folder without these timelines.
    key = (str(cache_root()), src.identity, exporter, attention, opset, engine, frozenset(disabled))
    if key not in _RUNS:
        r = export(src, ExportConfig(exporter=exporter, attention=attention, opset=opset))
        tl = Timeline(r.path, FusionPlan(engine=engine, disabled=frozenset(disabled)), **src.timeline_args())
        while len(_RUNS) >= _RUNS_MAX:
            _RUNS.pop(next(iter(_RUNS)))
        _RUNS[key] = tl.run()
    return _RUNS[key]


def step_of(snaps: list, name: str):
    """The snapshot of step ``name`` (None when the plan or engine did not run it)."""
    return next((s for s in snaps if s.step == name), None)


def change(snaps: list, name: str) -> dict:
    """What step ``name`` did: ``{"removed": {op: n}, "emitted": {op: n}, "removed_n", "emitted_n", "nodes"}``."""
    i = next((k for k, s in enumerate(snaps) if s.step == name), None)
    if i is None or i == 0:
        return {"removed": {}, "emitted": {}, "removed_n": 0, "emitted_n": 0, "nodes": None, "ran": False}
    before, after = snaps[i - 1], snaps[i]
    ops = {n.name: n.op_type for n in before.skeleton.graph.node}
    removed: dict[str, int] = {}
    for r in after.diff.removed:
        if r in ops:
            removed[ops[r]] = removed.get(ops[r], 0) + 1
    return {"removed": removed, "emitted": dict(after.fused_here), "removed_n": len(after.diff.removed),
            "emitted_n": len(after.diff.added), "nodes": after.nodes, "before": before.nodes, "ran": True}


def ops_words(ops: dict, most: int = 8) -> str:
    """``{"ReduceMean": 10, "Sub": 5}`` → ``"ReduceMean 10, Sub 5"`` (largest first; past ``most``, a count)."""
    items = sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))
    words = ", ".join(f"{op} {n}" for op, n in items[:most])
    rest = len(items) - most
    if rest > 0:
        words += f", {rest} more op type{'s' if rest > 1 else ''}"
    return words or "nothing"


def change_words(name: str, c: dict) -> str:
    """One sentence: what step ``name`` removed and emitted."""
    if not c["ran"]:
        return f"{name} did not run"
    if not c["removed_n"] and not c["emitted_n"]:
        return f"{name} left the graph as it was ({c['nodes']} nodes)"
    return (f"{name} removed {c['removed_n']} nodes ({ops_words(c['removed'])}) and emitted "
            f"{ops_words(c['emitted'])}: {c['before']} → {c['nodes']} nodes")


def ort_anchor_ops(fusion_attr: str = "attention_fusion") -> list[str]:
    """The op types ONNX Runtime's fusion object starts its search from, read from the engine itself."""
    from onnxruntime.transformers.onnx_model_bert import BertOnnxModel

    empty = onnx.helper.make_model(onnx.helper.make_graph([], "empty", [], []))
    return list(getattr(BertOnnxModel(empty), fusion_attr).search_op_types)


# ------------------------------------------------------------------ the exercises
def fused_counts(model) -> tuple[Finding, Finding]:
    """Exercise 1: Attention and SkipLayerNormalization nodes after ORT's fusions on the default export."""
    src = source_of(model)
    L = src.num_layers
    snaps = fusion_run(src)
    final = snaps[-1].fused
    att, sln = change(snaps, "attention"), change(snaps, "skip_layer_norm")
    n_att, n_sln = final.get("Attention", 0), final.get("SkipLayerNormalization", 0)
    per = att["removed_n"] // max(1, att["emitted"].get("Attention", 0) or 1)
    first = Finding(
        "Attention", n_att,
        f"{change_words('attention', att)}. One Attention per encoder layer ({L} layers), each replacing about "
        f"{per} nodes of projections, reshapes, scores, mask and softmax.",
        "ORT's attention step emits one Attention per encoder layer on the TorchScript export",
        att["emitted"].get("Attention", 0) == L == n_att,
        facts={"attention": att, "layers": L})
    n_ln = snaps[0].histogram.get("LayerNormalization", 0)
    second = Finding(
        "SkipLayerNormalization", n_sln,
        f"{change_words('skip_layer_norm', sln)}. Two per layer: the residual Add before the norm after attention "
        f"and after the feed-forward block. The embeddings' norm has no residual Add (it becomes part of "
        f"EmbedLayerNormalization), so {n_ln} norms give {n_sln}.",
        "the skip_layer_norm step emits two SkipLayerNormalization per encoder layer",
        sln["emitted"].get("SkipLayerNormalization", 0) == 2 * L == n_sln,
        facts={"skip_layer_norm": sln, "layers": L})
    return first, second


def layer_norm_nodes(model, opset: int = WRITTEN_OUT_OPSET) -> Finding:
    """Exercise 2: the node count after ``layer_norm`` on an export that writes LayerNorm out."""
    src = source_of(model)
    snaps = fusion_run(src, opset=opset)
    c = change(snaps, "layer_norm")
    k = next(i for i, s in enumerate(snaps) if s.step == "layer_norm")
    before = snaps[k - 1]
    n_ln = c["emitted"].get("LayerNormalization", 0)
    per = c["removed_n"] / n_ln if n_ln else 0
    modern = fusion_run(src)  # the default export, for contrast
    m = step_of(modern, "layer_norm")
    why = (f"{change_words('layer_norm', c)}: {per:.0f} nodes → 1 for each of the {n_ln} layer norms (one after "
           f"the embeddings, two per encoder layer), so {before.nodes} − {c['removed_n']} + {c['emitted_n']} = "
           f"{c['nodes']}. On the default export (opset {ExportConfig().resolved_opset}) the exporter already "
           f"writes LayerNormalization; there the step says: \"{m.diagnostic if m else 'not run'}\"")
    return Finding(
        "nodes after layer_norm", c["nodes"], why,
        f"the TorchScript export at opset {opset} writes each LayerNorm as 9 elementary ops",
        n_ln > 0 and per == 9 and before.histogram.get("ReduceMean", 0) == 2 * n_ln,
        table=[{"snapshot": name, "nodes": s.nodes, "ReduceMean": s.histogram.get("ReduceMean", 0),
                "LayerNormalization": s.histogram.get("LayerNormalization", 0)}
               for name, s in (("before layer_norm", before), ("after layer_norm", snaps[k]))],
        facts={"layer_norm": c, "before": before.nodes, "default_export_layer_norms":
               modern[0].histogram.get("LayerNormalization", 0), "default_step_changed": bool(
                   m and (m.diff.removed or m.diff.added))})


def biggest_drop(model) -> Finding:
    """Exercise 3: the fusion step that removes the most nodes (net), with every step's change as a table."""

    snaps = fusion_run(model)
    rows = []
    for s in snaps[1:]:
        c = change(snaps, s.step)
        if not (c["removed_n"] or c["emitted_n"]):
            continue
        kind = BY_NAME[s.step].kind if s.step in BY_NAME else ""
        rows.append({"step": s.step, "kind": kind, "removed": c["removed_n"], "added": c["emitted_n"],
                     "net drop": c["removed_n"] - c["emitted_n"], "emitted": ops_words(c["emitted"]) if
                     kind == "fusion" else "", "nodes after": s.nodes})
    fusions = [r for r in rows if r["kind"] == "fusion"]
    best = max(fusions, key=lambda r: r["net drop"])
    cleanup = max((r for r in rows if r["kind"] == "cleanup"), key=lambda r: r["net drop"], default=None)
    why = change_words(best["step"], change(snaps, best["step"])) + "."
    if cleanup:
        why += (f" (Of the clean-ups, {cleanup['step']} removes {cleanup['net drop']}: constant folding and "
                f"shape arithmetic, no fused kernel.)")
    emits = BY_NAME[best["step"]].emits
    return Finding("biggest drop", best["step"], why,
                   "the step with the largest net drop is a fusion that emits its catalog op",
                   best["net drop"] > 0 and bool(emits) and emits in change(snaps, best["step"])["emitted"],
                   table=rows, facts={"drop": best["net drop"]})


def dynamo_attention(model) -> tuple[Finding, list[dict]]:
    """Exercise 4: does ORT fuse Attention on the dynamo export? The engine's words, and onnxscript's result."""
    src = source_of(model)
    L = src.num_layers
    ort_d = fusion_run(src, exporter="dynamo", engine="ort")
    os_d = fusion_run(src, exporter="dynamo", engine="onnxscript")
    ort_ts = fusion_run(src)
    att = step_of(ort_d, "attention")
    n = ort_d[-1].fused.get("Attention", 0)
    words = (att.diagnostic or att.base_diagnostic or "") if att else "the attention step did not run"
    n_os = os_d[-1].fused.get("Attention", 0) + os_d[-1].fused.get("MultiHeadAttention", 0)
    why = (f"ORT's attention step on the dynamo export: \"{words.strip()}\" The same step on the TorchScript export "
           f"fused {ort_ts[-1].fused.get('Attention', 0)}; onnxscript's rules fuse {n_os} on the dynamo export.")
    rows = [{"export": exp, "engine": eng, "nodes": snaps[-1].nodes,
             **{op: snaps[-1].fused.get(op, 0) for op in ("Attention", "MultiHeadAttention",
                                                           "SkipLayerNormalization", "BiasGelu")}}
            for exp, eng, snaps in (("torchscript", "ort", ort_ts), ("dynamo", "ort", ort_d),
                                    ("dynamo", "onnxscript", os_d))]
    f = Finding("ORT fuses Attention on dynamo", n > 0, why,
                "ORT fuses no Attention on the dynamo export and says why; onnxscript fuses one per layer",
                n == 0 and bool(words) and "Failed to match" in words and n_os == L
                and ort_ts[-1].fused.get("Attention", 0) == L,
                table=rows, facts={"ort": n, "onnxscript": n_os})
    return f, rows


def prerequisite_off(model, step: str = "layer_norm", target: str = "attention", op: str = "Attention",
                     opset: int = WRITTEN_OUT_OPSET) -> Finding:
    """Exercise 5: ``op`` nodes with prerequisite ``step`` switched off, on an export where that matters."""
    src = source_of(model)
    on = fusion_run(src, opset=opset)
    off = fusion_run(src, opset=opset, disabled=(step,))
    n_on, n_off = on[-1].fused.get(op, 0), off[-1].fused.get(op, 0)
    k = next(i for i, s in enumerate(off) if s.step == target)
    before = off[k - 1]
    anchors = ort_anchor_ops() if target == "attention" else []
    seen = ", ".join(f"{a} {before.histogram.get(a, 0)}" for a in anchors)
    diag = off[k].diagnostic or ""
    why = (f"with {step} on: {n_on} {op}; off: {n_off}. "
           + (f"ONNX Runtime's attention matcher starts its search from {' / '.join(anchors)} nodes (its "
              f"search_op_types); with {step} off the graph before the {target} step has {seen}, so it has "
              f"nowhere to start. " if anchors else "")
           + (f"The step's diagnostic: \"{diag.strip()}\"" if diag else ""))
    simp = change(off, "simplified_layer_norm")
    if simp["emitted"]:
        why += (f" Meanwhile the RMS-norm rule found part of each written-out norm: "
                f"{change_words('simplified_layer_norm', simp)}.")
    default = fusion_run(src, disabled=(step,))
    return Finding(f"{op} without {step}", n_off, why,
                   f"switching {step} off changes the {op} count on the TorchScript export at opset {opset}",
                   n_on != n_off,
                   table=[{"plan": f"{step} on", op: n_on, "nodes": on[-1].nodes},
                          {"plan": f"{step} off", op: n_off, "nodes": off[-1].nodes}],
                   facts={"on": n_on, "off": n_off, "default_export_off": default[-1].fused.get(op, 0)})


# ------------------------------------------------------------------ a modern encoder (notebook 04)
#: The engines compared on a rotary encoder: (label, engine, the workbench's own rules on).
MODERN_ENGINES = (("ONNX Runtime optimizer", "ort", False), ("onnxscript rules", "onnxscript", False),
                  ("workbench (onnxscript + own rules)", "onnxscript", True))


def own_rules() -> frozenset[str]:
    """The catalog steps that are the workbench's own rules (switched off to see an engine alone)."""

    return frozenset(s.name for s in CATALOG if "workbench" in s.engines)


def _refusal(snaps: list, steps: tuple[str, ...]) -> str:
    """The first diagnostic among ``steps`` that says the engine failed or found no match, in its words."""
    for s in snaps:
        if s.step in steps and s.diagnostic and not s.fused_here:
            return f"{s.step}: {s.diagnostic.strip()}"
    return ""


def modern_encoder(model) -> tuple[list[dict], Finding]:
    """What each engine fuses on a rotary encoder (ModernBERT), per exporter, and why the rest stays.

    Returns the table rows and the exercise: how many SkipLayerNormalization ONNX Runtime's optimizer
    fuses on the dynamo export, with the engine's words for its failure.
    """
    src = source_of(model)
    L = src.num_layers
    rows, runs = [], {}
    for exporter in ("torchscript", "dynamo"):
        for label, engine, own in MODERN_ENGINES:
            snaps = fusion_run(src, exporter=exporter, engine=engine, disabled=() if own else own_rules())
            runs[(exporter, label)] = snaps
            f, h = snaps[-1].fused, snaps[-1].histogram
            rows.append({"export": exporter, "engine": label, "nodes": f"{snaps[0].nodes} → {snaps[-1].nodes}",
                         "attention": f.get("Attention", 0) + f.get("MultiHeadAttention", 0),
                         "RotaryEmbedding": f.get("RotaryEmbedding", 0),
                         "SkipLayerNorm": f.get("SkipLayerNormalization", 0),
                         "rotary ops left (Neg, Sin, Cos)": sum(h.get(op, 0) for op in ("Neg", "Sin", "Cos")),
                         "Softmax left": h.get("Softmax", 0),
                         "why not": ""})
            full = {"attention": L, "sdpa": L, "skip_layer_norm": 2 * L}
            have = {"attention": rows[-1]["attention"], "sdpa": rows[-1]["attention"],
                    "skip_layer_norm": rows[-1]["SkipLayerNorm"]}
            short = [st for st in full if have[st] < full[st]]
            rows[-1]["why not"] = _refusal(snaps, tuple(short))
    ort = runs[("dynamo", "ONNX Runtime optimizer")]
    full = runs[("dynamo", "workbench (onnxscript + own rules)")]
    skip = step_of(ort, "skip_layer_norm")
    n = ort[-1].fused.get("SkipLayerNormalization", 0)
    own = change(full, "encoder_skip_norm")
    words = (skip.diagnostic or "").strip() if skip else "the step did not run"
    why = (f"ONNX Runtime's skip_layer_norm step on the dynamo export: \"{words}\" ModernBERT's LayerNorms have no "
           f"bias, and the exporter writes LayerNormalization without its optional bias input. The workbench's "
           f"rule: {change_words('encoder_skip_norm', own)}.")
    finding = Finding("SkipLayerNormalization by ORT on ModernBERT (dynamo)", n, why,
                      "ORT's optimizer fuses no SkipLayerNormalization on the dynamo ModernBERT export and says why; "
                      "the workbench's rule fuses two per layer",
                      n == 0 and "failed" in words and own["emitted"].get("SkipLayerNormalization", 0) == 2 * L,
                      table=rows, facts={"ort": n, "workbench": own["emitted"].get("SkipLayerNormalization", 0)})
    return rows, finding
