"""Why a step fused less than it could, in words a learner understands.

The reasons come from the engines themselves (ORT's fusion debug log lines,
onnxscript's MatchingTracer best partial match); this module only picks the
telling lines, counts repeats and puts them after a plain first sentence.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np
import onnx
from onnx import numpy_helper

from .snapshot_weights import nbytes
from .steps import Step

#: How many nodes of the emitted op one encoder layer should give.
PER_LAYER: dict[str, int] = {"attention": 1, "sdpa_attention": 1, "multi_head_attention": 1,
                             "skip_layer_norm": 2, "bias_skip_layer_norm": 2, "bias_gelu": 1, "gelu": 1}
_TELLING = re.compile(r"\b(fail\w*|not|no|skipped|unable|cannot|can't|unsupported|mismatch|stopped|error)\b"
                      r"|shape inference", re.I)


#: What a model without a BERT encoder layer is told, in every step that could not find one.
NO_ENCODER = "no BERT encoder layer found"


def summarize_messages(lines: list[str], limit: int = 4, *, every: bool = False) -> list[str]:
    """The engine lines worth showing: failures and reasons (``every``: all lines, as a rule's reasons are),
    de-duplicated with counts."""
    picked = [ln for ln in lines if every or _TELLING.search(ln)]
    counts = Counter(picked)
    out = []
    for line, n in counts.most_common(limit):
        out.append(f"{line}" + (f" (x{n})" if n > 1 else ""))
    return out


def explain(step: Step, *, fused_here: int, already: int, num_layers: int, prerequisites_off: list[str],
            messages: list[str], notes: list[str], engine: str, skipped: str = "", failed: str = "") -> str | None:
    """One diagnostic text for a fusion step, or None when it did all it could.

    ``skipped`` is the runner's reason for not running the step at all (its
    anchor ops are absent, e.g. "nothing to fuse: no Gelu nodes ..."); ``failed`` why it failed.
    """
    if failed:
        return f"failed: {failed}"
    if skipped:
        if prerequisites_off and step.kind == "fusion":
            return f"fused nothing ({step.emits or step.title}). Prerequisite step(s) off: " \
                   f"{', '.join(prerequisites_off)}. {skipped[0].upper()}{skipped[1:]}"
        if num_layers == 0 and step.kind == "fusion":
            return f"{NO_ENCODER}: {skipped}"
        return skipped
    if step.kind != "fusion":
        return " ".join(notes) or None
    rule = "workbench" in step.engines  # a workbench rule: every reason it gives names a node that did not match
    if fused_here == 0 and not step.in_bert and not prerequisites_off:
        return f"nothing to fuse: {step.title} targets a pattern BERT encoders do not contain ({step.matches})."
    per = PER_LAYER.get(step.name)
    expected = per * num_layers if per and num_layers else None
    parts: list[str] = []
    if fused_here == 0:
        if num_layers == 0:
            parts.append(f"{NO_ENCODER}: nothing for {step.title} to fuse.")
        else:
            parts.append(f"fused nothing ({step.emits or step.title}).")
        if already and not prerequisites_off and not (rule and messages):
            # (a workbench rule that rewrites an op into the same op, with reasons, says where it stopped)
            return (f"nothing to fuse: the graph already has {already} {step.emits} node(s) "
                    f"(written by the exporter or an earlier step).")
    elif expected and fused_here < expected:
        parts.append(f"fused {fused_here} of {expected} expected {step.emits} ({per} per encoder layer, "
                     f"{num_layers} layers).")
    else:
        return " ".join(notes) or None
    if prerequisites_off:
        parts.append(f"Prerequisite step(s) off: {', '.join(prerequisites_off)}.")
    parts.extend(notes)
    reasons = summarize_messages(messages, every=rule)
    if reasons:
        if rule:
            label = "The workbench rule"
        else:
            label = "ONNX Runtime's fusion log" if engine == "ort" else "onnxscript's matcher"
        parts.append(f"{label} says: " + "; ".join(reasons))
    elif fused_here == 0 and num_layers and not already and not prerequisites_off and not notes:
        parts.append(f"No node in the graph starts this pattern ({step.pattern}); nothing is left in a form "
                     f"this step knows.")
    return " ".join(parts)


# ---------------------------------------------------------------- model shape parameters
def _constants(model: onnx.ModelProto):

    for t in model.graph.initializer:
        if nbytes(t) < 256:
            yield t
    for n in model.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value" and a.t.ByteSize() < 256:
                    yield a.t


def detect_hidden_size(model: onnx.ModelProto) -> int:
    """Hidden size from the word-embedding table (0 if not found)."""
    inits = {t.name: t for t in model.graph.initializer}
    inputs = {i.name for i in model.graph.input}
    for n in model.graph.node:
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[0] in inits and n.input[1] in inputs:
            dims = list(inits[n.input[0]].dims)
            if len(dims) == 2:
                return int(dims[1])
    for n in model.graph.node:
        if n.op_type == "LayerNormalization" and len(n.input) > 1 and n.input[1] in inits:
            dims = list(inits[n.input[1]].dims)
            if len(dims) == 1:
                return int(dims[0])
    return 0


def detect_num_heads(model: onnx.ModelProto, hidden: int) -> int:
    """Head count from the attention scale constant (sqrt(d), 1/sqrt(d) or d^-1/4), 0 if unsure."""
    if hidden <= 0:
        return 0
    scalars: list[float] = []
    for t in _constants(model):
        try:
            arr = numpy_helper.to_array(t)
        except Exception:
            continue
        if arr.size == 1 and np.issubdtype(arr.dtype, np.floating):
            scalars.append(float(arr.reshape(-1)[0]))
    for d in (64, 32, 128, 16, 80, 96, 48, 8, 256):
        if hidden % d or d >= hidden:
            continue
        targets = (math.sqrt(d), 1 / math.sqrt(d), d ** -0.25, d ** 0.25)
        if any(abs(s - t) < 1e-4 * max(1.0, t) for s in scalars for t in targets):
            return hidden // d
    return 0
