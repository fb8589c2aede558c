"""Answer-level parity of fusion snapshots on real text (``Timeline.use_text``).

The unfused model's outputs on the tokenized batches are computed once; each
snapshot is then run on the same batches and judged by
:func:`workbench.ort.task_parity.task_parity`, plus max abs diff and cosine.
"""

from __future__ import annotations

import onnx

from ..errors import FusionError


class TextReference:
    """Outputs of the unfused model on tokenized text batches, and the task check against them."""

    def __init__(self, model: onnx.ModelProto, text):
        from ..ort.session import create_session, run_session

        self.text = text
        sess = create_session(model.SerializeToString(), "cpu", level="disable", threads=2)
        names = {i.name for i in sess.get_inputs()}
        self.feeds = [{k: v for k, v in b.items() if k in names} for b in text.batches]
        self.outputs = [run_session(sess, f)[0] for f in self.feeds]

    def compare(self, model: onnx.ModelProto) -> dict:
        """The task check plus max abs diff and cosine on the text batches (``model`` made runnable by the caller)."""
        from ..ort.parity import compare
        from ..ort.session import create_session, run_session
        from ..ort.task_parity import task_parity

        try:
            sess = create_session(model.SerializeToString(), "cpu", level="disable", threads=2)
        except Exception as e:
            raise FusionError(f"ONNX Runtime cannot load this snapshot: "
                              f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}") from e
        got = [run_session(sess, f)[0] for f in self.feeds]
        d = task_parity(self.text.kind, self.outputs, got, self.feeds, mask_token_id=self.text.mask_token_id)
        p = compare(self.outputs, got)
        d.update(max_abs_diff=p.max_abs_diff, cosine=p.cosine)
        return d
