"""The exporter matrix: exporter x attention x opset, fused counts per engine.

This is the table a user needs to choose an export: which engine fuses
Attention on which export.
"""

from __future__ import annotations

from typing import Callable, Iterable

from ..config import ATTENTIONS, EXPORTERS, ExportConfig, FusionPlan
from ..errors import WorkbenchError
from ..export import export
from ..graph.summary import attention_kinds
from ..models import ModelSource, resolve
from .timeline import Timeline

MATRIX_OPS = ("Attention", "MultiHeadAttention", "SkipLayerNormalization", "BiasGelu", "EmbedLayerNormalization")


#: The opsets the matrix tries by default: the classic three, and 23, where the dynamo exporter
#: writes sdpa attention as ONNX's own Attention op (one node per layer, the exporter's doing).
MATRIX_OPSETS = (14, 17, 18, 23)


#: The workbench's own rules (step, op it emits), which run inside the engines' chains.
OWN_RULES = (("sdpa_attention", "Attention"), ("standard_attention", "MultiHeadAttention"))


def _fired(snaps, step: str, op: str) -> int:
    return sum(sn.fused_here.get(op, 0) for sn in snaps if sn.step == step)


def _counts(snap) -> dict:

    kinds = attention_kinds(snap.skeleton)
    return {**{op: snap.fused.get(op, 0) for op in MATRIX_OPS}, "nodes": snap.nodes,
            "attention_nodes": sum(kinds.values()), "attention_kinds": kinds}


def _fill_counts(row: dict, tl: Timeline, path, src: ModelSource) -> None:
    """Put in ``row`` what each engine of the run timeline ``tl`` fused, and what it fuses without own rules."""
    row["nodes"] = tl.input.nodes
    # Attention already in the export (the standard op at opset 23+) is the exporter's fusion.
    row["exporter_attention"] = _counts(tl.input)["attention_nodes"]
    for eng, snaps in tl.runs.items():
        row[eng] = _counts(snaps[-1])
    row["best"] = tl.engine_used
    row["auto"] = _counts(tl.snapshots[-1])
    chosen = tl.runs.get(tl.engine_used, [])
    row["workbench_rule_attention"] = _fired(tl.runs.get("ort", []), "sdpa_attention", "Attention")
    row["workbench_rule_standard"] = _fired(chosen, "standard_attention", "MultiHeadAttention")
    # Both chains include workbench rules. Where one fired, run that engine without them too, so
    # the table says what ONNX Runtime's optimizer or onnxscript's rules do on their own.
    for eng, snaps in tl.runs.items():
        if any(_fired(snaps, step, op) for step, op in OWN_RULES):
            alone = Timeline(path, FusionPlan(engine=eng, disabled=frozenset(s for s, _ in OWN_RULES)),
                             **src.timeline_args())
            row[eng] = _counts(alone.run()[-1])


def exporter_matrix(source, opsets: Iterable[int] = MATRIX_OPSETS, *, exporters: Iterable[str] = EXPORTERS,
                    attentions: Iterable[str] = ATTENTIONS,
                    progress: Callable[[str, float], None] | None = None) -> list[dict]:
    """Export ``source`` every way and count what each engine fuses.

    Args:
        source: a ModelSource or name/path for :func:`workbench.models.resolve`.
        opsets: ai.onnx opsets to try.
        exporters: torch exporters to try.
        attentions: attention implementations to try.
        progress: ``progress(stage, fraction)`` callback.

    Returns:
        One dict per cell: exporter, attention, opset, nodes, ``ort`` (ONNX
        Runtime's optimizer on its own) and ``onnxscript`` (onnxscript's rules
        on their own: fused counts, node count), ``auto`` (what the workbench
        ends with, its own rules included), ``best`` engine,
        ``exporter_attention`` (standard ``Attention`` nodes the exporter
        wrote), ``workbench_rule_attention`` (Attention nodes from the
        workbench's own sdpa rule), ``workbench_rule_standard``
        (MultiHeadAttention nodes the ``standard_attention`` step made from the
        standard op in the chain auto kept), and ``error`` (one line) when the
        export itself failed.
    """

    src = source if isinstance(source, ModelSource) else resolve(source)
    cells = [(e, a, o) for e in exporters for a in attentions for o in opsets]
    rows = []
    for i, (exp, att, opset) in enumerate(cells):
        if progress:
            progress(f"{exp} {att} opset {opset}", i / max(1, len(cells)))
        row = {"exporter": exp, "attention": att, "opset": opset, "nodes": None, "ort": None, "onnxscript": None,
               "best": None, "error": None}
        try:
            res = export(src, ExportConfig(exporter=exp, attention=att, opset=opset), check_parity=False)
            tl = Timeline(res.path, FusionPlan(engine="auto"), **src.timeline_args())
            tl.run()
        except WorkbenchError as e:
            row["error"] = str(e)
            rows.append(row)
            continue
        _fill_counts(row, tl, res.path, src)
        rows.append(row)
    if progress:
        progress("done", 1.0)
    return rows
