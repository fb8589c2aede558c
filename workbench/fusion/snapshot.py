"""A snapshot of the fusion timeline: the model after one step, what that step did, its parity.

Snapshots hold weight-free skeletons (see ``snapshot_weights.py``); ``ParityReference``
runs the unfused model once on the seeded parity cases, and ``runnable``
lowers the intermediate ops an engine keeps between its own steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import onnx

from ..errors import FusionError
from ..graph.diff import Diff
from ..graph.summary import FUSED_OPS
from ..ort.inputs import make_inputs, parity_cases, spec_from_onnx
from ..ort.parity import Parity, compare, merge
from ..ort.session import create_session, run_session
from .snapshot_weights import WeightStore


@dataclass
class Snapshot:
    """The model after one step, and what that step did.

    Attributes:
        step: catalog step name ("export" for the input).
        engine: "ort", "onnxscript" or "" for the input.
        nodes: node count.
        histogram: op type → count.
        fused: fused op type → count (whole model).
        elapsed_s: time the engine spent in this step.
        diff: nodes removed and added since the previous snapshot, with provenance.
        diagnostic: why the step fused less than it could, or None.
        parity: filled by :meth:`check_parity` / ``Timeline.check_parity``.
        counts: the engine's own counters for this step (onnxscript rule counts).
        messages: the engine's raw log / matcher lines for this step.
        skipped: why the step was not run ("" when it ran): its anchors are absent from its input
            graph, so it cannot apply to this model (``anchors.py``). A step that ran and fused
            nothing keeps "" and says why not in ``diagnostic``.
    """

    step: str
    engine: str
    skeleton: onnx.ModelProto
    nodes: int
    histogram: dict[str, int]
    fused: dict[str, int]
    elapsed_s: float
    diff: Diff
    diagnostic: str | None = None
    parity: Parity | None = None
    counts: dict[str, int] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    key: tuple = ()
    store: WeightStore | None = field(default=None, repr=False)
    chain: dict = field(default_factory=dict, repr=False)
    base_diagnostic: str | None = field(default=None, repr=False)
    #: True when this snapshot's graph came from an earlier run of the same step on the same graph.
    reused: bool = field(default=False, repr=False)
    fingerprint: str = field(default="", repr=False)
    #: The answer-level check on text (``ort.task_parity``), filled by ``Timeline.check_parity`` after ``use_text``.
    task_parity: dict | None = None
    #: Which execution provider runs each node in a session of it (:class:`workbench.ort.assignment.Assignment`),
    #: filled by :func:`workbench.fusion.session_layer.providers_of`.
    assignment: object | None = field(default=None, repr=False, compare=False)
    #: True when this snapshot was read back from the on-disk store (``timeline_store.py``), not computed.
    persisted: bool = field(default=False, repr=False)
    #: Why the step was not run at all (none of its anchor ops is in the graph: the engine's skip test), or "".
    skipped: str = ""
    #: Why the step failed (a rule past its time limit, or one that raised): the graph is its input's, or "".
    failed: str = ""
    #: Called with the snapshot after :meth:`check_parity` fills ``parity`` (the timeline writes it to disk).
    on_checked: Callable[["Snapshot"], None] | None = field(default=None, repr=False, compare=False)

    @property
    def model(self) -> onnx.ModelProto:
        """The full model (weights included), assembled on each access."""
        if self.store is None:
            return self.skeleton
        return self.store.assemble(self.skeleton)

    @property
    def fused_here(self) -> dict[str, int]:
        """Op types of the nodes this step added, counted (what it fused)."""
        ops = {n.name: n.op_type for n in self.skeleton.graph.node}
        out: dict[str, int] = {}
        for a in self.diff.added:
            op = ops.get(a)
            if op:
                out[op] = out.get(op, 0) + 1
        return out

    def check_parity(self, reference_model: onnx.ModelProto | None = None, *, reference=None) -> Parity:
        """Compare this snapshot with ``reference_model`` on the seeded parity cases."""
        if reference is None:
            if reference_model is None:
                raise FusionError("check_parity needs the reference (unfused) model")
            reference = ParityReference(reference_model)
        self.parity = reference.compare(self)
        if self.on_checked is not None:
            self.on_checked(self)
        return self.parity

    def to_dict(self, *, provenance: bool = True) -> dict:
        d = {"name": self.step, "step": self.step, "engine": self.engine, "nodes": self.nodes,
             "fused": dict(self.fused), "fused_here": self.fused_here, "elapsed_s": round(self.elapsed_s, 4),
             "removed": len(self.diff.removed), "added": len(self.diff.added),
             "parity": ({"max_abs_diff": self.parity.max_abs_diff, "ok": self.parity.ok, "cases": self.parity.cases}
                        if self.parity else None),
             "task_parity": self.task_parity, "skipped": self.skipped, "failed": self.failed,
             "diagnostic": self.diagnostic, "histogram": dict(self.histogram)}
        if provenance:
            ops = {n.name: n.op_type for n in self.skeleton.graph.node}
            d["provenance"] = {k: v for k, v in self.diff.provenance.items() if ops.get(k) in fused_op_types()}
        return d


def fingerprint(snap: Snapshot) -> str:
    """A hash of the snapshot's graph (its skeleton: weights stand as name, type and shape)."""
    if not snap.fingerprint:
        import hashlib

        snap.fingerprint = hashlib.sha1(snap.skeleton.SerializeToString(deterministic=True)).hexdigest()
    return snap.fingerprint


def fused_op_types() -> set[str]:
    return set(FUSED_OPS)


#: Stub types ``create_session(initializers=...)`` cannot take as numpy arrays.
_NOT_ARRAYS = (onnx.TensorProto.BFLOAT16, onnx.TensorProto.STRING)


def session_source(model: "Snapshot | onnx.ModelProto") -> tuple[bytes, dict]:
    """``(model bytes, initializer arrays)`` for ``create_session``: ``model`` made runnable.

    A snapshot that runs as it is opens from its skeleton (tens of KB) plus its stored weights as numpy
    arrays, which ONNX Runtime uses in place. Serializing the whole bert-base model instead holds
    Python's lock for about 1.1 s (measured, 2 cores): a background parity check then froze the
    notebook's clicks for that long.
    """
    if isinstance(model, Snapshot):
        sk = model.skeleton
        if (model.store is not None and not any(n.domain in INTERMEDIATE_DOMAINS for n in sk.graph.node)
                and not any(t.data_type in _NOT_ARRAYS and WeightStore.stub_key(t) for t in sk.graph.initializer)):
            return sk.SerializeToString(), model.store.arrays(sk)
        model = model.model
    model, _ = runnable(model)
    return model.SerializeToString(), {}


def open_session(model: "Snapshot | onnx.ModelProto", threads: int = 2):
    """A CPU session, no graph optimizations, for checking what ``model`` computes (see :func:`session_source`)."""

    data, arrays = session_source(model)
    try:
        return create_session(data, "cpu", level="disable", threads=threads, initializers=arrays)
    except Exception as e:
        raise FusionError(f"ONNX Runtime cannot load this snapshot: "
                          f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}") from e


class ParityReference:
    """Outputs of the unfused model on the parity cases, computed once."""

    def __init__(self, model: "Snapshot | onnx.ModelProto"):
        self.spec = spec_from_onnx(model.skeleton if isinstance(model, Snapshot) else model)
        self.feeds = [make_inputs(self.spec, b, s, seed=100 + i, padded=p)
                      for i, (b, s, p) in enumerate(parity_cases(self.spec.max_positions))]
        sess = open_session(model)
        self.outputs = [run_session(sess, f) for f in self.feeds]

    def compare(self, model: "Snapshot | onnx.ModelProto") -> Parity:
        sess = open_session(model)
        return merge([compare(ref, run_session(sess, f), mask=f.get("attention_mask"))
                      for ref, f in zip(self.outputs, self.feeds)])


#: Domains of intermediate ops an engine uses between its own steps; no runtime implements them.
INTERMEDIATE_DOMAINS = ("ai.onnxruntime._fusion",)


def runnable(model: onnx.ModelProto) -> tuple[onnx.ModelProto, str | None]:
    """A model ONNX Runtime can run that computes the same as ``model``, and a note when it differs.

    Between its ``sdpa`` and ``multi_head_attention`` steps onnxscript keeps an
    intermediate ``SDPA`` op that only its own later rules consume. To check
    such a snapshot we lower SDPA the way onnxscript's last rule does
    (``replace_sdpa_by_mha``: SDPA => com.microsoft.MultiHeadAttention).
    """
    if not any(n.domain in INTERMEDIATE_DOMAINS for n in model.graph.node):
        return model, None
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions.sdpa_via_mha import replace_sdpa_by_mha

    ir_model = ir.serde.deserialize_model(model)
    replace_sdpa_by_mha(ir_model)
    out = ir.serde.serialize_model(ir_model)
    left = sorted({f"{n.domain}:{n.op_type}" for n in out.graph.node if n.domain in INTERMEDIATE_DOMAINS})
    if left:
        raise FusionError(f"this snapshot holds intermediate ops no runtime implements ({', '.join(left)}), "
                          f"and they could not be lowered to ONNX Runtime ops")
    return out, "intermediate SDPA ops run as MultiHeadAttention (onnxscript's own lowering)"
