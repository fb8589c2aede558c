"""The fusion timeline: run an engine's steps in order, keep a snapshot after each.

Snapshots are cached by the plan prefix that produced them, so a toggle
recomputes only from the first step whose on/off state changed, and
switching back is a lookup. Weights are shared between snapshots through a
:class:`~workbench.fusion.store.WeightStore`.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from ..config import FusionPlan
from ..errors import FusionError
from ..graph.diff import Diff, diff_models
from ..graph.summary import attention_kinds, count_layers, fused_counts, histogram
from ..ort.parity import Parity
from . import diagnostics
from .catalog import BY_NAME, CATALOG, get_step
from .engines import EngineContext, StepOutcome, engine_steps
from .store import WeightStore

ENGINE_NAMES = ("ort", "onnxscript")

#: Held while engine steps run. The engines keep process-wide state (ORT's loggers, which a step's
#: log capture reconfigures; onnxscript's rule objects), so a background warm-up of one timeline
#: and a run of any timeline never run steps at the same time.
_ENGINE_LOCK = threading.RLock()


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
        self.parity = reference.compare(self.model)
        return self.parity

    def to_dict(self, *, provenance: bool = True) -> dict:
        d = {"name": self.step, "step": self.step, "engine": self.engine, "nodes": self.nodes,
             "fused": dict(self.fused), "fused_here": self.fused_here, "elapsed_s": round(self.elapsed_s, 4),
             "removed": len(self.diff.removed), "added": len(self.diff.added),
             "parity": ({"max_abs_diff": self.parity.max_abs_diff, "ok": self.parity.ok, "cases": self.parity.cases}
                        if self.parity else None),
             "task_parity": self.task_parity,
             "diagnostic": self.diagnostic, "histogram": dict(self.histogram)}
        if provenance:
            ops = {n.name: n.op_type for n in self.skeleton.graph.node}
            d["provenance"] = {k: v for k, v in self.diff.provenance.items() if ops.get(k) in fused_op_types()}
        return d


def _fingerprint(snap: Snapshot) -> str:
    """A hash of the snapshot's graph (its skeleton: weights stand as name, type and shape)."""
    if not snap.fingerprint:
        import hashlib

        snap.fingerprint = hashlib.sha1(snap.skeleton.SerializeToString(deterministic=True)).hexdigest()
    return snap.fingerprint


def fused_op_types() -> set[str]:
    from ..graph.summary import FUSED_OPS
    return set(FUSED_OPS)


class ParityReference:
    """Outputs of the unfused model on the parity cases, computed once."""

    def __init__(self, model: onnx.ModelProto):
        from ..ort.inputs import PARITY_CASES, make_inputs, spec_from_onnx
        from ..ort.session import create_session, run_session

        self.spec = spec_from_onnx(model)
        self.feeds = [make_inputs(self.spec, b, s, seed=100 + i, padded=p)
                      for i, (b, s, p) in enumerate(PARITY_CASES) if s <= self.spec.max_positions]
        sess = create_session(model.SerializeToString(), "cpu", level="disable", threads=2)
        self.outputs = [run_session(sess, f) for f in self.feeds]

    def compare(self, model: onnx.ModelProto) -> Parity:
        from ..ort.parity import compare, merge
        from ..ort.session import create_session, run_session

        model, _ = runnable(model)
        try:
            sess = create_session(model.SerializeToString(), "cpu", level="disable", threads=2)
        except Exception as e:
            raise FusionError(f"ONNX Runtime cannot load this snapshot: "
                              f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}") from e
        return merge([compare(ref, run_session(sess, f)) for ref, f in zip(self.outputs, self.feeds)])


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


def _load(model: onnx.ModelProto | str | os.PathLike) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    from ..modelio import load_model
    return load_model(model, full_check=False)


def _name_ir_nodes(model) -> None:
    """Give unnamed onnx_ir nodes unique names, so diffs can key by name."""
    from ..graph.summary import name_nodes

    name_nodes(model.graph)


def _name_proto_nodes(model: onnx.ModelProto) -> None:
    from ..graph.summary import ensure_node_names
    ensure_node_names(model)


def _score(snaps: list[Snapshot]) -> tuple:
    f = snaps[-1].fused
    attn = f.get("Attention", 0) + f.get("MultiHeadAttention", 0)
    key_ops = sum(f.get(op, 0) for op in ("Attention", "MultiHeadAttention", "SkipLayerNormalization", "BiasGelu",
                                          "EmbedLayerNormalization", "Gelu", "FastGelu"))
    return (attn, key_ops, -snaps[-1].nodes)


class Timeline:
    """Every fusion step of an engine as a snapshot you can switch on and off.

    Args:
        model: the exported model (ModelProto or path). It is not modified.
        plan: engine and disabled steps.
        num_layers: encoder layers (default: read from node names/scopes).
        num_heads: attention heads (default: detected; ORT's own detection
            fails on current TorchScript exports, so pass it when known).
        hidden_size: hidden size (default: from the embedding table).
    """

    def __init__(self, model: onnx.ModelProto | str | Path, plan: FusionPlan = FusionPlan(), *,
                 num_layers: int | None = None, num_heads: int | None = None, hidden_size: int | None = None):
        src = _load(model)
        #: The export file, which ONNX Runtime's basic pass reads itself (see engines._ort_basic).
        self.source_path = str(model) if isinstance(model, (str, os.PathLike)) else None
        self.store = WeightStore()
        skel = self.store.strip(src)
        _name_proto_nodes(skel)
        self.hidden_size = int(hidden_size or diagnostics.detect_hidden_size(skel) or 0)
        heads = num_heads or diagnostics.detect_num_heads(src, self.hidden_size)
        self.num_heads = int(heads or 0)
        self.num_layers = int(num_layers if num_layers is not None else count_layers(skel))
        self.input = Snapshot(step="export", engine="", skeleton=skel, nodes=len(skel.graph.node),
                              histogram=histogram(skel), fused=fused_counts(skel), elapsed_s=0.0, diff=Diff(),
                              key=(), store=self.store, chain={"counts": {}, "heads": self.num_heads})
        self.plan = plan
        self.opted_in: set[str] = set(getattr(plan, "opted_in", ()) or ())
        self._cache: dict[tuple, Snapshot] = {}
        self._shape_cache: dict = {}
        self._content: dict[tuple, tuple] = {}
        self._node_index: dict = {}  # id(skeleton) → (skeleton, name → node), for diffs
        self.runs: dict[str, list[Snapshot]] = {}
        self.engine_used = ""
        self.engine_note = ""
        self.snapshots: list[Snapshot] = []
        self._reference: ParityReference | None = None
        self.last_run_s = 0.0
        # Background warming (see start_warming): engine steps run one at a time, process-wide.
        self._lock = _ENGINE_LOCK
        self._warm_cancel: threading.Event | None = None
        self._warm_thread: threading.Thread | None = None
        self._auto_warm = False
        #: Seconds the last completed warm-up took, and the error that stopped one (or None).
        self.warm_s: float | None = None
        self.warm_error: str | None = None
        self._check_plan(plan)

    # ------------------------------------------------------------ plan
    def _check_plan(self, plan: FusionPlan) -> None:
        unknown = [s for s in plan.disabled if s not in BY_NAME]
        if unknown:
            raise FusionError(f"unknown fusion step(s) {', '.join(sorted(unknown))}; steps are: {', '.join(BY_NAME)}")

    def enabled(self, step: str) -> bool:
        """Whether ``step`` runs under the current plan."""
        return _enabled_in(self.plan, self.opted_in, step)

    def steps(self, engine: str | None = None) -> list[str]:
        """Step names of ``engine`` (default: the engine used) in run order."""
        return [s.name for s in engine_steps(engine or self.engine_used or "ort")]

    def set_plan(self, plan: FusionPlan) -> list[Snapshot]:
        """Switch to ``plan`` and recompute from the first changed step."""
        self._check_plan(plan)
        self.plan = plan
        self.opted_in |= set(getattr(plan, "opted_in", ()) or ())
        return self.run()

    def toggle(self, step: str, on: bool) -> list[Snapshot]:
        """Switch one step on or off and recompute from it."""
        s = get_step(step)
        if not s.default_on:
            (self.opted_in.add if on else self.opted_in.discard)(step)
            if on:
                self.plan = self.plan.with_step(step, True)
        else:
            self.plan = self.plan.with_step(step, on)
        return self.run()

    # ------------------------------------------------------------ running
    def run(self) -> list[Snapshot]:
        """Run (or fetch from cache) every enabled step; return the chosen engine's snapshots.

        A background warm-up in progress is cancelled first; it gives the
        lock back after the step it is running, and starts again (for the new
        plan) when this run ends if :meth:`start_warming` switched it on.
        """
        t0 = time.perf_counter()
        self._cancel_warming()
        with self._lock:
            out = self._run_locked(t0)
        if self._auto_warm:
            self._start_warm_thread()
        return out

    def _run_locked(self, t0: float) -> list[Snapshot]:
        engines = ENGINE_NAMES if self.plan.engine == "auto" else (self.plan.engine,)
        self.runs = {e: self._run_engine(e) for e in engines}
        if len(engines) == 1:
            self.engine_used = engines[0]
            self.engine_note = f"{engines[0]} engine, as asked"
        else:
            scores = {e: _score(s) for e, s in self.runs.items()}
            self.engine_used = max(engines, key=lambda e: scores[e])
            other = next(e for e in engines if e != self.engine_used)
            def desc(e):
                f = self.runs[e][-1].fused
                return (f"{e} fused {f.get('Attention', 0) + f.get('MultiHeadAttention', 0)} attention, "
                        f"{f.get('SkipLayerNormalization', 0)} SkipLayerNormalization, {f.get('BiasGelu', 0)} BiasGelu "
                        f"({self.runs[e][-1].nodes} nodes)")
            self.engine_note = f"auto: kept {self.engine_used}: {desc(self.engine_used)}; {desc(other)}"
        self._cross_notes()
        self.snapshots = [self.input] + self.runs[self.engine_used]
        self.last_run_s = time.perf_counter() - t0
        return self.snapshots

    def _run_engine(self, engine: str, enabled=None, budget: int | None = None) -> list[Snapshot] | None:
        """The snapshots of ``engine`` under ``enabled`` (default: the current plan).

        With ``budget``, compute at most that many new steps and return None
        if more were needed (the warm-up runs one step per lock hold).
        """
        enabled = enabled or self.enabled
        computed = 0
        snaps: list[Snapshot] = []
        prev = self.input
        key: tuple = (engine,)
        live: tuple[tuple, Any] | None = None
        for es in engine_steps(engine):
            on = enabled(es.name)
            key = key + ((es.name, on),)
            if not on:
                continue
            cached = self._cache.get(key)
            if cached is not None:
                snaps.append(cached)
                prev = cached
                continue
            heads = prev.chain.get("heads", 0) or self.num_heads
            counts = dict(prev.chain.get("counts", {}))
            why = es.skip(prev.histogram, prev.skeleton) if es.skip is not None else ""
            if why:
                # None of the engine's anchor ops is in the graph: the step would leave it as it is.
                snap = self._snapshot(es.name, engine, prev.skeleton, prev, 0.0, StepOutcome(None, skipped=why), key,
                                      chain={"counts": {**counts, es.name: {}}, "heads": heads}, enabled=enabled)
                snap.fingerprint = prev.fingerprint
                self._cache[key] = snap
                snaps.append(snap)
                if live is not None and live[0] == prev.key:
                    live = (key, live[1])
                prev = snap
                continue
            # Same step on the same graph gives the same graph: switching a step that changed nothing
            # (or switching back and forth elsewhere) costs a hash, not a rerun of every later step.
            ckey = (engine, es.name, _fingerprint(prev), heads,
                    tuple((r, tuple(sorted(counts.get(r, {}).items()))) for r in es.reads))
            hit = self._content.get(ckey)
            if hit is not None:
                skel, out, elapsed, heads_after = hit
                snap = self._snapshot(es.name, engine, skel, prev, elapsed, out, key,
                                      chain={"counts": {**counts, es.name: out.counts}, "heads": heads_after},
                                      enabled=enabled)
                snap.reused = True
                self._cache[key] = snap
                snaps.append(snap)
                prev = snap
                live = None
                continue
            if budget is not None and computed >= budget:
                return None
            computed += 1
            if live is not None and live[0] == prev.key:
                state = live[1]
            else:
                # ORT steps edit a copy of the skeleton and read weight values from the store on demand,
                # so recomputing from a cached snapshot does not first copy every weight.
                state = (self.store.working_copy(prev.skeleton) if engine == "ort"
                         else self.store.load_ir(prev.skeleton))
            ctx = EngineContext(num_heads=heads, hidden_size=self.hidden_size, counts=counts,
                                shape_cache=self._shape_cache, store=self.store if engine == "ort" else None,
                                source_path=self.source_path if prev is self.input else None)
            t = time.perf_counter()
            try:
                out = es.run(ctx, state)
            except FusionError:
                raise
            except Exception as e:
                msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise FusionError(f"{engine} step {es.name} failed: {msg}") from e
            elapsed = time.perf_counter() - t
            model = out.model
            if engine == "ort":
                _name_proto_nodes(model)
                skel = self.store.strip(model)
            else:
                _name_ir_nodes(model)
                skel = self.store.strip_ir(model)
            snap = self._snapshot(es.name, engine, skel, prev, elapsed, out, key,
                                  chain={"counts": {**ctx.counts, es.name: out.counts}, "heads": ctx.num_heads},
                                  enabled=enabled)
            self._cache[key] = snap
            self._content[ckey] = (skel, StepOutcome(None, dict(out.counts), list(out.messages), list(out.notes),
                                                     out.skipped),
                                   elapsed, ctx.num_heads)
            snaps.append(snap)
            prev = snap
            live = (key, model)
        return snaps

    def _snapshot(self, name, engine, skel, prev: Snapshot, elapsed, out, key, chain, enabled=None) -> Snapshot:
        step = BY_NAME[name]
        if skel is prev.skeleton:  # a skipped step: the same graph
            d, fused, hist = Diff(), dict(prev.fused), dict(prev.histogram)
        else:
            d, fused, hist = (diff_models(prev.skeleton, skel, index=self._node_index), fused_counts(skel),
                              histogram(skel))
        snap = Snapshot(step=name, engine=engine, skeleton=skel, nodes=len(skel.graph.node), histogram=hist,
                        fused=fused, elapsed_s=elapsed, diff=d, counts=dict(out.counts), messages=list(out.messages),
                        key=key, store=self.store, chain=chain)
        added = snap.fused_here
        here = added.get(step.emits, 0) if step.emits else 0
        if not here:  # some rule groups emit more than one op type (onnxscript's gelu rules)
            here = sum(n for op, n in added.items() if op in fused_op_types())
        enabled = enabled or self.enabled
        prereq_off = [p for p in step.prerequisites if p in BY_NAME and not enabled(p)
                      and engine in BY_NAME[p].engines]
        snap.base_diagnostic = diagnostics.explain(
            step, fused_here=here, already=prev.fused.get(step.emits, 0) if step.emits else 0,
            num_layers=self.num_layers, prerequisites_off=prereq_off, messages=out.messages, notes=out.notes,
            engine=engine, skipped=out.skipped)
        snap.diagnostic = snap.base_diagnostic
        return snap

    def _cross_notes(self) -> None:
        """Where one engine fused less of an op than the other, say how many the other fused."""
        for e, snaps in self.runs.items():
            others = {o: s for o, s in self.runs.items() if o != e}
            for snap in snaps:
                snap.diagnostic = snap.base_diagnostic
                step = BY_NAME[snap.step]
                if (step.kind != "fusion" or snap.diagnostic is None
                        or step.emits not in ("Attention", "MultiHeadAttention", "SkipLayerNormalization", "BiasGelu",
                                              "EmbedLayerNormalization", "Gelu")):
                    continue
                for o, osnaps in others.items():
                    mine = snaps[-1].fused.get(step.emits, 0)
                    theirs = osnaps[-1].fused.get(step.emits, 0) if osnaps else 0
                    if theirs > mine:
                        snap.diagnostic += (f" The {o} engine fuses {theirs} {step.emits} on this export "
                                            f"(this engine ends with {mine}).")

    # ------------------------------------------------------------ warming
    def start_warming(self) -> None:
        """Precompute, in a background thread, the timeline each single toggle would give.

        For every step of the engine(s) run, the plan with that step switched
        (on to off, or off to on) is computed one step at a time, earliest
        steps first (they recompute the most), and lands in the same caches a
        toggle reads. The thread runs at the lowest CPU priority the system
        allows and holds the timeline's lock for one engine step at a time; a
        toggle cancels it and waits at most for the step in flight. Once
        switched on, warming restarts after every run, for the new plan.
        Call :meth:`stop_warming` to switch it off.
        """
        if not self.snapshots:
            self.run()
        self._auto_warm = True
        self._start_warm_thread()

    def stop_warming(self, wait: bool = True) -> None:
        """Switch background warming off and cancel a warm-up in progress."""
        self._auto_warm = False
        thread = self._warm_thread
        self._cancel_warming()
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join()

    def wait_warm(self, timeout: float | None = None) -> bool:
        """Wait for the warm-up in progress; True when none is running any more."""
        thread = self._warm_thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    @property
    def warming(self) -> bool:
        """Whether a warm-up is running now."""
        return self._warm_thread is not None and self._warm_thread.is_alive()

    def _cancel_warming(self) -> None:
        if self._warm_cancel is not None:
            self._warm_cancel.set()

    def _start_warm_thread(self) -> None:
        engines = list(self.runs)
        if not engines:
            return
        plan, opted = self.plan, set(self.opted_in)
        seen: list[str] = []
        for e in engines:
            for es in engine_steps(e):
                if es.name not in seen and (BY_NAME[es.name].default_on or es.name in opted):
                    seen.append(es.name)
        cancel = threading.Event()
        self._warm_cancel = cancel
        self.warm_error = None

        def work():
            _lower_priority()
            t0 = time.perf_counter()
            try:
                for step in seen:
                    on = not _enabled_in(plan, opted, step)
                    flipped = plan.with_step(step, on)

                    def enabled(name, flipped=flipped):
                        return _enabled_in(flipped, opted, name)

                    for e in engines:
                        while True:
                            if cancel.is_set():
                                return
                            with self._lock:
                                if cancel.is_set():
                                    return
                                done = self._run_engine(e, enabled, budget=1) is not None
                            if done:
                                break
                            time.sleep(0.001)  # let a waiting toggle take the lock
                self.warm_s = time.perf_counter() - t0
            except Exception as e:  # a branch that fails here fails again, visibly, when toggled
                self.warm_error = f"{type(e).__name__}: {e}"

        self._warm_thread = threading.Thread(target=work, name="workbench-fusion-warm", daemon=True)
        self._warm_thread.start()

    # ------------------------------------------------------------ checks
    @property
    def final(self) -> Snapshot:
        if not self.snapshots:
            self.run()
        return self.snapshots[-1]

    def reference(self) -> ParityReference:
        if self._reference is None:
            self._reference = ParityReference(self.input.model)
        return self._reference

    #: Tokenized text (``workbench.text.TextBatches``) for answer-level parity; set with :meth:`use_text`.
    text = None
    _text_reference = None

    def use_text(self, text) -> None:
        """Check answers on ``text`` too: each ``check_parity`` then fills the snapshot's ``task_parity``."""
        self.text, self._text_reference = text, None
        for s in self.snapshots:
            s.task_parity = None

    def check_parity(self, i: int) -> Parity:
        """Compare snapshot ``i`` with the unfused input on the seeded parity cases (and on the text, if set)."""
        if not self.snapshots:
            self.run()
        snap = self.snapshots[i]
        parity = snap.check_parity(reference=self.reference())
        if self.text is not None:
            if self._text_reference is None:
                from .text_parity import TextReference
                self._text_reference = TextReference(self.input.model, self.text)
            snap.task_parity = self._text_reference.compare(runnable(snap.model)[0])
        return parity

    def session_layer(self, i: int, level: str = "all", *, honour_plan: bool = True) -> dict:
        """What ONNX Runtime's own session-time fusion adds on top of snapshot ``i``.

        With ``honour_plan`` (the default) the session's own transformers for
        the steps the plan switches off are off too (``kept_off`` names them),
        so a step switched off stays off, as it does in the benchmarks; without
        it the session shows what a plain ORT session would redo.

        Returns:
            ``{"level", "nodes", "histogram", "fused", "diff", "added_ops", "kept_off", "model"}``;
            ``diff`` is against snapshot ``i``.
        """
        from ..ort.session import create_session
        from .catalog import session_optimizers_off

        if not self.snapshots:
            self.run()
        snap = self.snapshots[i]
        kept_off = session_optimizers_off(self.plan.disabled) if honour_plan else ()
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
        added = {}
        ops = {n.name: n.op_type for n in sk.graph.node}
        for a in d.added:
            added[ops[a]] = added.get(ops[a], 0) + 1
        return {"level": level, "nodes": len(sk.graph.node), "histogram": histogram(sk), "fused": fused_counts(sk),
                "diff": d, "added_ops": added, "kept_off": list(kept_off), "model": optimized}

    def to_dict(self) -> dict:
        """The JSON shape of ``workbench fuse --json``."""
        if not self.snapshots:
            self.run()
        f = self.final
        final_fused = {op: f.fused.get(op, 0) for op in ("Attention", "MultiHeadAttention", "SkipLayerNormalization",
                                                         "BiasGelu", "EmbedLayerNormalization")}
        final_fused.update(f.fused)
        return {"engine": self.engine_used, "engine_note": self.engine_note, "plan_engine": self.plan.engine,
                "num_layers": self.num_layers, "num_heads": self.num_heads, "hidden_size": self.hidden_size,
                "input": {"nodes": self.input.nodes, "fused": dict(self.input.fused),
                          "attention_kinds": attention_kinds(self.input.skeleton)},
                "steps": [s.to_dict(provenance=False) for s in self.snapshots[1:]],
                "final": {"nodes": f.nodes, "fused": final_fused,
                          "attention_nodes": sum(attention_kinds(f.skeleton).values()),
                          "attention_kinds": attention_kinds(f.skeleton),
                          "parity": ({"max_abs_diff": f.parity.max_abs_diff, "ok": f.parity.ok} if f.parity else None),
                          "task_parity": f.task_parity}}


def _enabled_in(plan: FusionPlan, opted_in: set[str], step: str) -> bool:
    s = BY_NAME[step]
    if s.default_on:
        return plan.enabled(step)
    return step in opted_in and plan.enabled(step)


def _lower_priority() -> None:
    """Give the calling thread the lowest CPU priority (Linux schedules threads one by one)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass


def run_fusion(model: onnx.ModelProto | str | Path, plan: FusionPlan = FusionPlan(), **kwargs) -> Timeline:
    """Build a :class:`Timeline` and run it."""
    tl = Timeline(model, plan, **kwargs)
    tl.run()
    return tl
