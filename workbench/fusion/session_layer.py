"""ONNX Runtime's own session-time fusion on top of a fusion snapshot: the "second layer".

A session at ``ORT_ENABLE_ALL`` runs graph transformers of its own (some of them the same fusions the
timeline's engines did); this shows what they add to a snapshot, honouring the steps a plan switched off.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx

from ..errors import FusionError
from ..graph.diff import diff_models
from ..graph.summary import fused_counts, histogram
from ..ort.session import create_session
from .catalog import session_optimizers_off
from .snapshot import Snapshot
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


__all__ = ["session_layer"]
