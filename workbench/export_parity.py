"""Parity of an export against PyTorch: the cases, the reference outputs (computed beside the tracer), ONNX
Runtime's outputs (no graph optimizations) and the one line for an export that differs."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from .concurrency import spawn
from .errors import ExportError, WorkbenchError
from .models import ModelSource
from .ort.inputs import InputSpec, make_inputs, parity_cases
from .ort.parity import ATOL, RTOL, compare, merge, real_tokens
from .ort.session import create_session, run_session

#: (batch, seq, right-padded): batch 1 and 2, sequence 8 and 128, a padded mask among them.
#: Two cases, not four, so checking costs little next to the export itself.
EXPORT_PARITY_CASES: tuple[tuple[int, int, bool], ...] = ((1, 8, False), (2, 128, True))


def root_cause(e: BaseException) -> str:
    """The innermost exception's first line, without terminal colour codes."""
    while e.__cause__ is not None:
        e = e.__cause__
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    return text.splitlines()[0] if text else type(e).__name__


#: The longest an export waits for one of its checking threads (ONNX Runtime and PyTorch on two inputs: seconds
#: on bert-base, a minute on a large model on a busy machine); past it the export is refused in one line.
THREAD_WAIT_S = 900.0


def join_bounded(thread, what: str, timeout: float | None = None) -> None:
    """Wait for ``thread`` (doing ``what``) at most ``timeout`` (default :data:`THREAD_WAIT_S`) seconds.

    The checking threads are daemons and this wait is interruptible: Ctrl-C ends the export at once, and the
    interpreter's exit never waits for a thread still inside ONNX Runtime or PyTorch (two quick Ctrl-C printed
    "Exception ignored in: <module 'threading'>" while it did).

    Raises:
        ExportError: the thread did not finish in time (one line naming what it was doing and the time).
    """
    limit = THREAD_WAIT_S if timeout is None else timeout
    thread.join(limit)
    if thread.is_alive():
        raise ExportError(f"{what} did not finish within {limit:.0f} s; nothing was kept (a machine this busy: "
                          f"run it again later)")


def head_output(out):
    """The task head's logits when the model has one, else the encoder's last hidden state."""
    logits = getattr(out, "logits", None)
    return logits if logits is not None else out.last_hidden_state


def broken_line(label: str, cfg: ExportConfig, parity: dict, *, finite_onnx: bool,
                finite_torch: bool | None = None) -> str:
    """One line for an export whose parity against PyTorch failed: not finite, or beyond tolerance."""
    how = f"the {cfg.exporter} export of {label}"
    if not finite_onnx:
        also = " (PyTorch's are too)" if finite_torch is False else ""
        return (f"{how} gives outputs that are not finite (NaN or infinity) at real tokens{also}: the model is "
                f"broken (check its config and weights); refused, nothing was fused or measured")
    return (f"{how} differs from PyTorch by {parity.get('max_abs_diff', float('nan')):.1e} (cosine "
            f"{parity.get('cosine', float('nan')):.6f}) at real tokens, beyond the tolerance ({ATOL:g} + {RTOL:g} x "
            f"|value|): the exported model is wrong; refused (try the other exporter or --attention eager)")


def _parity_feeds(source: ModelSource) -> list[dict]:
    spec = InputSpec(names=source.input_names, vocab_size=source.vocab_size,
                     type_vocab_size=int(source.config_dict.get("type_vocab_size", 2)),
                     max_positions=source.max_positions)
    cases = parity_cases(spec.max_positions, EXPORT_PARITY_CASES)
    return [make_inputs(spec, b, s, seed=100 + i, padded=p) for i, (b, s, p) in enumerate(cases)]


def _torch_outputs(model, feeds: list[dict]) -> list:
    import torch

    with torch.no_grad():
        return [head_output(model(**{k: torch.from_numpy(v) for k, v in f.items()})).numpy() for f in feeds]


class ReferenceOutputs:
    """PyTorch's outputs on the parity cases, computed while the TorchScript exporter traces.

    The tracer records only its own thread, and tracing is mostly single-threaded Python,
    so the reference forward passes overlap with it on a second core. The dynamo exporter
    swaps the module's parameters for fake tensors while it traces, so for it the
    reference is computed afterwards.
    """

    def __init__(self, model, source: ModelSource, *, concurrent: bool):
        self.model, self.source, self.result, self.error = model, source, None, None
        self.thread = spawn("export-parity-torch", self._run) if concurrent else None

    def _run(self):
        try:
            self.result = _torch_outputs(self.model, _parity_feeds(self.source))
        except BaseException as e:  # re-raised in the caller's thread
            self.error = e

    def settle(self) -> None:
        """Wait (bounded) for the thread to leave PyTorch, its result unused: the export failed."""
        if self.thread is not None:
            self.thread.join(THREAD_WAIT_S)

    def get(self):
        if self.thread is None:
            return None
        join_bounded(self.thread, f"PyTorch's reference outputs of {self.source.label}")
        if self.error is not None:
            raise self.error
        return self.result


def _parity_outputs(model, source: ModelSource, onnx_path: Path, refs: list | None = None):
    """``(feeds, PyTorch's outputs, ONNX Runtime's outputs, no graph optimizations)`` on the parity cases."""
    feeds = _parity_feeds(source)
    # onnxruntime (session creation and runs) works in a thread while torch computes the
    # reference: both release the GIL, and the two overlap on a 2-core machine.
    got: dict = {}

    def run_ort():
        try:
            sess = create_session(onnx_path, "cpu", level="disable", threads=1)
            got["outs"] = [run_session(sess, f)[0] for f in feeds]
        except BaseException as e:  # re-raised in the caller's thread
            got["error"] = e

    worker = spawn("export-parity-ort", run_ort)
    if refs is None:
        refs = _torch_outputs(model, feeds)
    join_bounded(worker, f"ONNX Runtime's parity run of {source.label}")
    if "error" in got:
        err = got["error"]
        if isinstance(err, WorkbenchError):
            raise err
        raise ExportError(f"onnxruntime cannot run the export of {source.label}: {root_cause(err)}") from err
    return feeds, refs, got["outs"]


def export_parity(model, source: ModelSource, onnx_path: Path, refs: list | None = None):
    """Run PyTorch and ONNX Runtime (no graph optimizations) on the parity cases."""
    return checked_parity(model, source, onnx_path, refs)[0]


def checked_parity(model, source: ModelSource, onnx_path: Path, refs: list | None = None):
    """``(Parity, ONNX outputs finite, PyTorch outputs finite)``, both at real tokens."""
    feeds, refs, outs = _parity_outputs(model, source, onnx_path, refs)
    masks = [f.get("attention_mask") for f in feeds]
    finite = [all(bool(np.isfinite(real_tokens(o, m)).all()) for o, m in zip(arrays, masks)) for arrays in (outs, refs)]
    return merge([compare(r, g, mask=m) for r, g, m in zip(refs, outs, masks)]), finite[0], finite[1]
