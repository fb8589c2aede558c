"""Answer-level parity of fusion snapshots on real text (``Timeline.use_text``).

The unfused model's outputs on the tokenized batches are computed once; each
snapshot is then run on the same batches and judged by
:func:`workbench.ort.task_parity.task_parity`, plus max abs diff and cosine.
"""

from __future__ import annotations

import hashlib
from ..ort.parity import compare
from ..ort.session import run_session
from ..ort.task_parity import task_parity
from .snapshot import open_session


class TextReference:
    """Outputs of the unfused model on tokenized text batches, and the task check against them."""

    def __init__(self, model, text):
        """``model``: the unfused model, a Snapshot or ModelProto (see ``snapshot.session_source``)."""

        self.text = text
        sess = open_session(model)
        names = {i.name for i in sess.get_inputs()}
        self.feeds = [{k: v for k, v in b.items() if k in names} for b in text.batches]
        self.outputs = [run_session(sess, f)[0] for f in self.feeds]

    def compare(self, model) -> dict:
        """The task check plus max abs diff and cosine on the text batches (``model``: a Snapshot or ModelProto,
        made runnable here)."""

        sess = open_session(model)
        got = [run_session(sess, f)[0] for f in self.feeds]
        d = task_parity(self.text.kind, self.outputs, got, self.feeds, mask_token_id=self.text.mask_token_id)
        p = compare(self.outputs, got)
        d.update(max_abs_diff=p.max_abs_diff, cosine=p.cosine)
        return d


def text_identity(text) -> str:
    """A hash of tokenized text (``workbench.text.TextBatches``): task parity is stored per text."""
    h = hashlib.sha256(f"{getattr(text, 'kind', '')}|{getattr(text, 'mask_token_id', None)}".encode())
    for batch in text.batches:
        for name in sorted(batch):
            a = batch[name]
            h.update(f"{name}|{a.dtype}|{a.shape}".encode())
            h.update(a.tobytes())
    return h.hexdigest()[:24]
