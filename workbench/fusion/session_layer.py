"""ONNX Runtime's own session on top of a fusion snapshot: what it adds (the "second layer"), and which
execution provider runs each node.

A session at ``ORT_ENABLE_ALL`` runs graph transformers of its own (some of them the same fusions the
timeline's engines did); :func:`session_layer` shows what they add to a snapshot, honouring the steps a plan
switched off. :func:`providers_of` says which provider runs each of its nodes (ONNX Runtime's own record).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx

from ..errors import FusionError
from ..graph.diff import diff_models
from ..graph.summary import fused_counts, histogram
from ..ort.assignment import Assignment, record_assignment
from ..ort.session import create_session
from .catalog import session_optimizers_off
from .snapshot import Snapshot, session_source
from .snapshot_weights import WeightStore


def session_layer(snap: Snapshot, disabled=(), level: str = "all") -> dict:
    """What an ONNX Runtime session (``level``) adds on top of ``snap``.

    The session's own transformers for the steps in ``disabled`` are off too (``kept_off`` names them),
    so a step switched off stays off, as it does in the benchmarks; with none disabled it shows what a
    plain ORT session would redo.

    Returns:
        ``{"level", "nodes", "histogram", "fused", "diff", "added_ops", "kept_off", "model"}``;
        ``diff`` is against ``snap``.
    """

    kept_off = session_optimizers_off(disabled)
    with tempfile.TemporaryDirectory(prefix="workbench-session-") as tmp:
        out = Path(tmp) / "session_optimized.onnx"
        try:
            create_session(snap.model.SerializeToString(), "cpu", level=level, threads=1,
                           optimized_model_path=out, disabled_optimizers=kept_off)
        except ValueError as e:
            raise FusionError(str(e)) from e
        optimized = onnx.load(str(out))
    sk = WeightStore().strip(optimized)
    d = diff_models(snap.skeleton, sk)
    added: dict[str, int] = {}
    ops = {n.name: n.op_type for n in sk.graph.node}
    for a in d.added:
        added[ops[a]] = added.get(ops[a], 0) + 1
    return {"level": level, "nodes": len(sk.graph.node), "histogram": histogram(sk), "fused": fused_counts(sk),
            "diff": d, "added_ops": added, "kept_off": list(kept_off), "model": optimized}


def providers_of(snap: Snapshot, provider: str = "cpu", disabled=(), level: str = "all") -> Assignment:
    """Which execution provider runs each node of ``snap`` in a session on ``provider`` ("cpu", "openvino",
    "cuda", "tensorrt": :func:`workbench.ort.assignment.record_assignment`) at ``level``, the session's own
    transformers for the steps in ``disabled`` kept off; kept on ``snap.assignment`` too.

    ``.providers()`` of the result is the graph view's badge per node: the snapshot's node name → provider
    (resolve names to the view's node ids as the latency overlay does, ``table.resolve``).

    Raises:
        RuntimeUnavailableError: the provider cannot run here, in one line.
    """
    if provider == "tensorrt":  # TensorRT builds from the whole model, not from a skeleton and its arrays
        data, arrays = snap.model.SerializeToString(), None
    else:
        data, arrays = session_source(snap)
    snap.assignment = record_assignment(data, provider, level=level, initializers=arrays,
                                        disabled_optimizers=session_optimizers_off(disabled))
    return snap.assignment


__all__ = ["session_layer", "providers_of"]
