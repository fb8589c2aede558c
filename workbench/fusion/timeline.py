"""The fusion timeline: run an engine's steps in order, keep a snapshot after each.

Snapshots are cached by the plan prefix that produced them, so a toggle
recomputes only from the first step whose on/off state changed, and
switching back is a lookup. Weights are shared between snapshots through a
:class:`~workbench.fusion.store.WeightStore`.
"""

from __future__ import annotations

import os
import threading
import time
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
# INTERMEDIATE_DOMAINS and _lower_priority stay importable from here, where they used to live.
from .snapshot import INTERMEDIATE_DOMAINS, ParityReference, Snapshot, fingerprint, fused_op_types, runnable  # noqa: F401
from .store import WeightStore
from .persist import enabled as persist_enabled
from .warming import WarmingMixin, _enabled_in, _lower_priority, _toggled  # noqa: F401

ENGINE_NAMES = ("ort", "onnxscript")

#: Held while engine steps run. The engines keep process-wide state (ORT's loggers, which a step's
#: log capture reconfigures; onnxscript's rule objects), so a background warm-up of one timeline
#: and a run of any timeline never run steps at the same time.
_ENGINE_LOCK = threading.RLock()


def _load(model: onnx.ModelProto | str | os.PathLike, check: bool = True) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    from ..modelio import load_model
    return load_model(model, full_check=False, check=check, check_runtime=check)


def _name_ir_nodes(model) -> None:
    """Give unnamed onnx_ir nodes unique names, so diffs can key by name."""
    from ..graph.summary import name_nodes

    name_nodes(model.graph)


def _name_proto_nodes(model: onnx.ModelProto) -> None:
    from ..graph.summary import ensure_node_names
    ensure_node_names(model)


def _engine_failure(step: str, error: Exception, model) -> StepOutcome:
    """The outcome of an ORT step whose own code raised: the graph unchanged, the failure in its words."""
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    where = next((f for f in reversed(frames) if "onnxruntime" in f.filename), frames[-1] if frames else None)
    at = f" in {os.path.basename(where.filename)}, line {where.lineno}" if where else ""
    msg = str(error).strip().splitlines()[0] if str(error).strip() else ""
    words = f"{type(error).__name__}: {msg}" if msg else type(error).__name__
    note = (f"ONNX Runtime's optimizer failed in this step ({words}{at}); the graph is left as it was and the "
            f"later steps go on. The workbench's own rules in the onnxscript chain cover this pattern.")
    return StepOutcome(model, counts={}, messages=[f"onnxruntime raised {words}{at}"], notes=[note])


def _score(snaps: list[Snapshot]) -> tuple:
    f = snaps[-1].fused
    attn = f.get("Attention", 0) + f.get("MultiHeadAttention", 0)
    key_ops = sum(f.get(op, 0) for op in ("Attention", "MultiHeadAttention", "SkipLayerNormalization", "BiasGelu",
                                          "EmbedLayerNormalization", "Gelu", "FastGelu"))
    # Between equal attention counts, Q, K and V packed in one projection (contrib Attention) beats a
    # MultiHeadAttention core with three projections left around it (the workbench's late rule on TorchScript BERT).
    return (attn, f.get("Attention", 0), key_ops, -snaps[-1].nodes)


def auto_choice(runs: dict[str, list[Snapshot]]) -> tuple[str, str]:
    """The engine ``auto`` keeps among ``runs`` (engine → snapshots), and the sentence that says why."""
    engines = list(runs)
    scores = {e: _score(s) for e, s in runs.items()}
    used = max(engines, key=lambda e: scores[e])
    other = next((e for e in engines if e != used), None)

    def desc(e: str) -> str:
        f = runs[e][-1].fused
        return (f"{e} fused {f.get('Attention', 0) + f.get('MultiHeadAttention', 0)} attention, "
                f"{f.get('SkipLayerNormalization', 0)} SkipLayerNormalization, {f.get('BiasGelu', 0)} BiasGelu "
                f"({runs[e][-1].nodes} nodes)")

    return used, f"auto: kept {used}: {desc(used)}" + (f"; {desc(other)}" if other else "")


#: The engine that fuses an exporter's graphs best (measured on bert-tiny and bert-base, every attention
#: implementation: tests/fusion/test_cells.py); ``auto`` shows it first and checks the other afterwards.
LIKELY_ENGINE = {"torchscript": "ort", "dynamo": "onnxscript"}
#: Families whose graphs ONNX Runtime's BERT optimizer was written for; the others' fusions are the
#: workbench's own rules, which run in the onnxscript chain.
ORT_FAMILIES = ("bert", "roberta", "xlm-roberta", "distilbert")


def likely_engine(exporter: str, model_type: str | None = None) -> str | None:
    """The engine likely to fuse this export best (shown first under auto)."""
    if model_type and model_type not in ORT_FAMILIES:
        return "onnxscript"
    return LIKELY_ENGINE.get(exporter)


class Timeline(WarmingMixin):
    """Every fusion step of an engine as a snapshot you can switch on and off.

    Args:
        model: the exported model (ModelProto or path). It is not modified.
        plan: engine and disabled steps.
        num_layers: encoder layers (default: read from node names/scopes).
        num_heads: attention heads (default: detected; ORT's own detection
            fails on current TorchScript exports, so pass it when known).
        hidden_size: hidden size (default: from the embedding table).
        persist: read and write this export's snapshots on disk (``persist.py``); default on unless
            ``WORKBENCH_PERSIST_TIMELINE=0``. Only for a model given as a path.
    """

    def __init__(self, model: onnx.ModelProto | str | Path, plan: FusionPlan = FusionPlan(), *,
                 num_layers: int | None = None, num_heads: int | None = None, hidden_size: int | None = None,
                 persist: bool | None = None):
        #: The export file, which ONNX Runtime's basic pass reads itself (see engines._ort_basic).
        self.source_path = str(model) if isinstance(model, (str, os.PathLike)) else None
        self.store = WeightStore()
        #: The on-disk store of this export's snapshots (``persist.py``), or None (an in-memory model,
        #: ``persist=False``, ``WORKBENCH_PERSIST_TIMELINE=0``, or no usable cache folder).
        self.persist = None
        #: Engine step calls this timeline made (0 when every snapshot came from memory or disk).
        self.steps_run = 0
        if self.source_path is not None and persist_enabled(persist):
            from .persist import TimelineStore

            self.persist = TimelineStore.open(self.source_path, self.store, num_layers=num_layers,
                                              num_heads=num_heads, hidden_size=hidden_size)
        entry = self.persist.load_input() if self.persist is not None else None
        if entry is not None:
            # Opened before: the skeleton and what was detected come from disk; the export's weights
            # are read only when a snapshot is assembled or an engine step runs.
            path = self.source_path
            # Checked when first opened; the checker would hold Python's lock for 1.1 s on bert-base (a
            # click meanwhile waits), where parsing alone holds it 0.3 s.
            self.store.defer(lambda: _load(path, check=False), self.persist.input_keys)
            skel, hist, fused = entry.skeleton, entry.histogram, entry.fused
            self.hidden_size, self.num_heads, self.num_layers = entry.hidden_size, entry.num_heads, entry.num_layers
        else:
            src = _load(model)
            skel = self.store.strip(src, take=self.source_path is not None)  # a file's model is ours alone
            _name_proto_nodes(skel)
            self.hidden_size = int(hidden_size or diagnostics.detect_hidden_size(skel) or 0)
            heads = num_heads or diagnostics.detect_num_heads(src, self.hidden_size)
            self.num_heads = int(heads or 0)
            self.num_layers = int(num_layers if num_layers is not None else count_layers(skel))
            hist, fused = histogram(skel), fused_counts(skel)
            del src
        self.input = Snapshot(step="export", engine="", skeleton=skel, nodes=len(skel.graph.node),
                              histogram=hist, fused=fused, elapsed_s=0.0, diff=Diff(),
                              key=(), store=self.store, chain={"counts": {}, "heads": self.num_heads})
        if entry is not None:
            self.input.fingerprint, self.input.persisted = entry.fingerprint, True
        elif self.persist is not None:
            self.persist.save_input(self.input, hidden_size=self.hidden_size, num_heads=self.num_heads,
                                    num_layers=self.num_layers)
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
        #: Runs (toggles) waiting for or holding the lock: background work steps aside for them.
        self._foreground = 0
        self._fg_lock = threading.Lock()
        #: Steps whose toggle the warm-up computes first (the one the user is looking at, say).
        self.warm_first: tuple[str, ...] = ()
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
        plan) when this run ends if :meth:`start_warming` switched it on. When
        every step of the plan is already in memory (a warmed toggle), no
        engine runs and the engine lock is not waited for.
        """
        t0 = time.perf_counter()
        self._cancel_warming()
        runs = self._cached_runs()
        if runs is not None:
            # Every step is in memory (a warmed toggle): no engine runs, so no waiting for the
            # background step that holds the engine lock (up to seconds on bert-base).
            out = self._run_locked(t0, runs)
        else:
            with self._fg_lock:
                self._foreground += 1  # background loops hold back until this run has the lock
            try:
                with self._lock:
                    out = self._run_locked(t0)
            finally:
                with self._fg_lock:
                    self._foreground -= 1
        if self._auto_warm:
            self._start_warm_thread()
        return out

    def _engines(self) -> tuple[str, ...]:
        return ENGINE_NAMES if self.plan.engine == "auto" else (self.plan.engine,)

    def _cached_runs(self, enabled=None) -> dict[str, list[Snapshot]] | None:
        """Each engine's snapshots under the plan (or ``enabled``) when every step is already in memory, else None."""
        enabled = enabled or self.enabled
        runs: dict[str, list[Snapshot]] = {}
        for e in self._engines():
            key: tuple = (e,)
            snaps: list[Snapshot] = []
            for es in engine_steps(e):
                on = enabled(es.name)
                key = key + ((es.name, on),)
                if on:
                    snap = self._cache.get(key)
                    if snap is None:
                        return None
                    snaps.append(snap)
            runs[e] = snaps
        return runs

    def toggle_ready(self, step: str) -> bool:
        """Whether switching ``step`` now would be a lookup: every snapshot of that plan is in memory
        (the warm-up computed it, or it was read back from disk). True for a name that is no step."""
        if step not in BY_NAME:
            return True
        return self._cached_runs(_toggled(self.plan, self.opted_in, step)) is not None

    def _run_locked(self, t0: float, runs: dict[str, list[Snapshot]] | None = None) -> list[Snapshot]:
        engines = self._engines()
        self.runs = runs if runs is not None else {e: self._run_engine(e) for e in engines}
        if len(engines) == 1:
            self.engine_used = engines[0]
            self.engine_note = f"{engines[0]} engine, as asked"
        else:
            self.engine_used, self.engine_note = auto_choice(self.runs)
        self._cross_notes()
        self.snapshots = [self.input] + self.runs[self.engine_used]
        self.last_run_s = time.perf_counter() - t0
        return self.snapshots

    def compare_engines(self, cancel: threading.Event | None = None) -> dict[str, list[Snapshot]] | None:
        """Every engine's snapshots under the current plan's steps, without changing the plan shown.

        What ``engine="auto"`` decides on, computed after the fact: the app shows the engine likely to
        win first and runs this in the background. One engine step per lock hold, so a toggle
        meanwhile waits for one step at most; the steps land in the caches a later
        ``set_plan(engine=...)`` reads. None when ``cancel`` was set.
        """
        plan, opted = self.plan, set(self.opted_in)

        def enabled(name: str) -> bool:
            return _enabled_in(plan, opted, name)

        out: dict[str, list[Snapshot]] = {}
        for e in ENGINE_NAMES:
            snaps = self._run_in_background(e, enabled, cancel)
            if snaps is None:
                return None
            out[e] = snaps
        return out

    def _run_in_background(self, engine: str, enabled, cancel: threading.Event | None) -> list[Snapshot] | None:
        """``engine``'s snapshots under ``enabled`` for background work (the warm-up, auto's comparison):
        one engine step per lock hold, none started while a toggle waits for the lock; None once
        ``cancel`` is set."""
        while True:
            if cancel is not None and cancel.is_set():
                return None
            if self._foreground:  # a toggle is waiting: it goes first
                time.sleep(0.01)
                continue
            with self._lock:
                if cancel is not None and cancel.is_set():
                    return None
                snaps = self._run_engine(engine, enabled, budget=1)
            if snaps is not None:
                return snaps
            time.sleep(0.001)  # let a waiting toggle take the lock

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
            found = self.persist.load(key, prev) if self.persist is not None else None
            if found is not None:
                # Computed by an earlier run (of this process or another): read back, no engine step.
                snap, out = found
                self._cache[key] = snap
                if not out.skipped:
                    ckey = (engine, es.name, fingerprint(prev), heads,
                            tuple((r, tuple(sorted(counts.get(r, {}).items()))) for r in es.reads))
                    self._content.setdefault(ckey, (snap.skeleton, out, snap.elapsed_s, snap.chain.get("heads", 0)))
                self._keep_checked(snap)
                snaps.append(snap)
                prev = snap
                live = None
                continue
            why = es.skip(prev.histogram, prev.skeleton) if es.skip is not None else ""
            if why:
                # None of the engine's anchor ops is in the graph: the step would leave it as it is.
                out = StepOutcome(None, skipped=why)
                snap = self._snapshot(es.name, engine, prev.skeleton, prev, 0.0, out, key,
                                      chain={"counts": {**counts, es.name: {}}, "heads": heads}, enabled=enabled)
                snap.fingerprint = prev.fingerprint
                self._cache[key] = snap
                self._keep(snap, prev, out)
                snaps.append(snap)
                if live is not None and live[0] == prev.key:
                    live = (key, live[1])
                prev = snap
                continue
            # Same step on the same graph gives the same graph: switching a step that changed nothing
            # (or switching back and forth elsewhere) costs a hash, not a rerun of every later step.
            ckey = (engine, es.name, fingerprint(prev), heads,
                    tuple((r, tuple(sorted(counts.get(r, {}).items()))) for r in es.reads))
            hit = self._content.get(ckey)
            if hit is not None:
                skel, out, elapsed, heads_after = hit
                snap = self._snapshot(es.name, engine, skel, prev, elapsed, out, key,
                                      chain={"counts": {**counts, es.name: out.counts}, "heads": heads_after},
                                      enabled=enabled)
                snap.reused = True
                self._cache[key] = snap
                self._keep(snap, prev, out)
                snaps.append(snap)
                prev = snap
                live = None
                continue
            if budget is not None and computed >= budget:
                return None
            computed += 1
            self.steps_run += 1
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
                if engine != "ort":
                    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                    raise FusionError(f"{engine} step {es.name} failed: {msg}") from e
                # ONNX Runtime's optimizer crashed inside one of its fusions (e.g. its SkipLayerNorm
                # fusion reads a bias a bias-free LayerNormalization lacks): the step keeps the graph
                # as it was and says so in the engine's words; later steps go on.
                out = _engine_failure(es.name, e, self.store.working_copy(prev.skeleton))
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
            outcome = StepOutcome(None, dict(out.counts), list(out.messages), list(out.notes), out.skipped)
            self._content[ckey] = (skel, outcome, elapsed, ctx.num_heads)
            self._keep(snap, prev, outcome)
            snaps.append(snap)
            prev = snap
            live = (key, model)
        return snaps

    def _keep(self, snap: Snapshot, prev: Snapshot, outcome: StepOutcome) -> None:
        """Write a snapshot this timeline made to the on-disk store (on the writer thread)."""
        if self.persist is not None:
            self.persist.save(snap, prev, outcome)
            self._keep_checked(snap)

    def _keep_checked(self, snap: Snapshot) -> None:
        """Have parity found later on ``snap`` (by the app or ``check_parity``) written to disk too."""
        if self.persist is not None:
            snap.on_checked = self.persist.save_parity
            if self.text is not None and snap.task_parity is None:
                snap.task_parity = self.persist.task_parity(snap, self._text_id)

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
        snap.skipped = out.skipped
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


    # ------------------------------------------------------------ checks
    @property
    def final(self) -> Snapshot:
        if not self.snapshots:
            self.run()
        return self.snapshots[-1]

    def reference(self) -> ParityReference:
        if self._reference is None:
            self._reference = ParityReference(self.input)
        return self._reference

    #: Tokenized text (``workbench.text.TextBatches``) for answer-level parity; set with :meth:`use_text`.
    text = None
    _text_reference = None

    _text_id = ""

    def use_text(self, text) -> None:
        """Check answers on ``text`` too: each ``check_parity`` then fills the snapshot's ``task_parity``.

        Results stored on disk for the same text (by a run before) are filled in at once.
        """
        self.text, self._text_reference = text, None
        if self.persist is not None and text is not None:
            from .persist import text_identity

            self._text_id = text_identity(text)
        for s in self.snapshots:
            s.task_parity = None
            if s.key:
                self._keep_checked(s)

    def check_parity(self, i: int) -> Parity:
        """Compare snapshot ``i`` with the unfused input on the seeded parity cases (and on the text, if set)."""
        if not self.snapshots:
            self.run()
        snap = self.snapshots[i]
        parity = snap.check_parity(reference=self.reference())
        if self.text is not None:
            if self._text_reference is None:
                from .text_parity import TextReference
                self._text_reference = TextReference(self.input, self.text)
            snap.task_parity = self._text_reference.compare(snap)
            if self.persist is not None:
                self.persist.save_task_parity(snap, self._text_id)
        return parity

    def session_layer(self, i: int, level: str = "all", *, honour_plan: bool = True) -> dict:
        """What ONNX Runtime's own session-time fusion adds on top of snapshot ``i``
        (see :func:`workbench.fusion.session_layer.session_layer`)."""
        from .session_layer import session_layer

        if not self.snapshots:
            self.run()
        return session_layer(self.snapshots[i], self.plan.disabled if honour_plan else (), level)

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




def run_fusion(model: onnx.ModelProto | str | Path, plan: FusionPlan = FusionPlan(), **kwargs) -> Timeline:
    """Build a :class:`Timeline` and run it."""
    tl = Timeline(model, plan, **kwargs)
    tl.run()
    return tl
