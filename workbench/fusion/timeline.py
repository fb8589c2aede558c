"""The fusion timeline: an engine's steps in order, a snapshot after each, switched on and off at will.

:class:`Timeline` is the public face: the plan, toggles, runs under ``engine="auto"`` (both engines, the
better kept), parity and answers on text, the session layer, JSON. The steps themselves are run by
:class:`~workbench.fusion.runner.StepRunner` through the caches of
:class:`~workbench.fusion.tiers.SnapshotTiers` (memory by plan prefix, disk, content), so a toggle
recomputes only from the first step whose on/off state changed and switching back is a lookup.
Weights are shared between snapshots through a :class:`~workbench.fusion.snapshot_weights.WeightStore`. A timeline
is single-threaded code: what runs it in the background (the warm-up of every single toggle, auto's
engine comparison) and the engine turn are :mod:`workbench.fusion.scheduler`'s.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import onnx

from ..config import FusionPlan
from ..errors import FusionError
from ..families import likely_engine as family_engine
from ..graph.diff import Diff
from ..graph.summary import attention_kinds, count_layers, ensure_node_names, fused_counts, histogram
from ..modelio import load_model
from ..ort.parity import Parity
from . import diagnostics
from .adapters import ENGINE_NAMES
from .catalog import BY_NAME, get_step, runs_under
from .engines import engine_steps
from .runner import StepRunner
from .session_layer import session_layer
from .snapshot import ParityReference, Snapshot
from .snapshot_weights import WeightStore
from .text_parity import TextReference, text_identity
from .tiers import SnapshotTiers
from .timeline_store import TimelineStore
from .timeline_store import enabled as persist_enabled


def _load(model: onnx.ModelProto | str | os.PathLike, check: bool = True) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    return load_model(model, full_check=False, check=check, check_runtime=check)


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


def likely_engine(exporter: str, model_type: str | None = None) -> str | None:
    """The engine likely to fuse this export best (shown first under auto): the family's, else the exporter's."""

    return family_engine(model_type) or LIKELY_ENGINE.get(exporter)


class Timeline:
    """Every fusion step of an engine as a snapshot you can switch on and off.

    Args:
        model: the exported model (ModelProto or path). It is not modified.
        plan: engine and disabled steps.
        num_layers: encoder layers (default: read from node names/scopes).
        num_heads: attention heads (default: detected; ORT's own detection
            fails on current TorchScript exports, so pass it when known).
        hidden_size: hidden size (default: from the embedding table).
        persist: read and write this export's snapshots on disk (``timeline_store.py``); default on unless
            ``WORKBENCH_PERSIST_TIMELINE=0``. Only for a model given as a path.
    """

    def __init__(self, model: onnx.ModelProto | str | Path, plan: FusionPlan = FusionPlan(), *,
                 num_layers: int | None = None, num_heads: int | None = None, hidden_size: int | None = None,
                 persist: bool | None = None):
        #: The export file, which ONNX Runtime's basic pass reads itself (see ort_engine._ort_basic).
        self.source_path = str(model) if isinstance(model, (str, os.PathLike)) else None
        self.store = WeightStore()
        #: The on-disk store of this export's snapshots (``timeline_store.py``), or None (an in-memory model,
        #: ``persist=False``, ``WORKBENCH_PERSIST_TIMELINE=0``, or no usable cache folder).
        self.persist = None
        if self.source_path is not None and persist_enabled(persist):
            self.persist = TimelineStore.open(self.source_path, self.store, num_layers=num_layers,
                                              num_heads=num_heads, hidden_size=hidden_size)
        self.input = self._open_input(model, num_layers, num_heads, hidden_size)
        self.tiers = SnapshotTiers(self.persist)
        self.tiers.on_kept = self._keep_checked
        self.runner = StepRunner(self.input, self.store, self.tiers, num_heads=self.num_heads,
                                 hidden_size=self.hidden_size, num_layers=self.num_layers,
                                 source_path=self.source_path)
        #: The plan shown: it alone says which steps are off and which opt-in steps are on.
        self.plan = plan
        self.runs: dict[str, list[Snapshot]] = {}
        self.engine_used = ""
        self.engine_note = ""
        self.snapshots: list[Snapshot] = []
        self._reference: ParityReference | None = None
        self.last_run_s = 0.0
        self._check_plan(plan)

    def _open_input(self, model, num_layers, num_heads, hidden_size) -> Snapshot:
        """The export's snapshot: read back from disk when opened before, else from the model (and written)."""
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
            ensure_node_names(skel)
            self.hidden_size = int(hidden_size or diagnostics.detect_hidden_size(skel) or 0)
            self.num_heads = int(num_heads or diagnostics.detect_num_heads(src, self.hidden_size) or 0)
            self.num_layers = int(num_layers if num_layers is not None else count_layers(skel))
            hist, fused = histogram(skel), fused_counts(skel)
            del src
        snap = Snapshot(step="export", engine="", skeleton=skel, nodes=len(skel.graph.node), histogram=hist,
                        fused=fused, elapsed_s=0.0, diff=Diff(), key=(), store=self.store,
                        chain={"counts": {}, "heads": self.num_heads})
        if entry is not None:
            snap.fingerprint, snap.persisted = entry.fingerprint, True
        elif self.persist is not None:
            self.persist.save_input(snap, hidden_size=self.hidden_size, num_heads=self.num_heads,
                                    num_layers=self.num_layers)
        return snap

    @property
    def _cache(self) -> dict[tuple, Snapshot]:
        """Snapshots in memory by plan prefix (the runner's first cache tier)."""
        return self.tiers.memory

    @property
    def steps_run(self) -> int:
        """Engine step calls this timeline made (0 when every snapshot came from memory or disk)."""
        return self.runner.steps_run

    # ------------------------------------------------------------ plan
    def _check_plan(self, plan: FusionPlan) -> None:
        unknown = [s for s in plan.disabled if s not in BY_NAME]
        if unknown:
            raise FusionError(f"unknown fusion step(s) {', '.join(sorted(unknown))}; steps are: {', '.join(BY_NAME)}")

    def enabled(self, step: str) -> bool:
        """Whether ``step`` runs under the current plan."""
        return runs_under(self.plan, step)

    def steps(self, engine: str | None = None) -> list[str]:
        """Step names of ``engine`` (default: the engine used) in run order."""
        return [s.name for s in engine_steps(engine or self.engine_used or "ort")]

    def enabled_under(self, plan: FusionPlan):
        """``enabled(step) -> bool`` of ``plan`` (the plan alone says what is off and what is opted in)."""
        return lambda name: runs_under(plan, name)

    def is_step(self, name: str) -> bool:
        """Whether ``name`` is a step of the catalog."""
        return name in BY_NAME

    def plan_with(self, step: str, on: bool) -> FusionPlan:
        """The current plan with ``step`` switched on (and opted in) or off.

        Raises:
            FusionError: no such step.
        """
        return self.plan.with_step(get_step(step).name, on)

    def single_toggles(self) -> list[str]:
        """The steps whose checkbox a user may click, in chain order: every step of the engines run that is
        on by default or opted in (what the warm-up computes the toggle of)."""
        return list(dict.fromkeys(n for e in self.runs for n in self.steps(e)
                                  if BY_NAME[n].default_on or n in self.plan.opted_in))

    def set_plan(self, plan: FusionPlan) -> list[Snapshot]:
        """Switch to ``plan`` and recompute from the first changed step."""
        self._check_plan(plan)
        self.plan = plan
        return self.run()

    def toggle(self, step: str, on: bool) -> list[Snapshot]:
        """Switch one step on or off and recompute from it (a step switched on is opted in)."""
        return self.set_plan(self.plan_with(step, on))

    # ------------------------------------------------------------ running
    def run(self) -> list[Snapshot]:
        """Run (or fetch from cache) every enabled step; return the chosen engine's snapshots.

        Single-threaded: with a background warm-up, run it through its
        :class:`~workbench.fusion.scheduler.FusionScheduler` instead.
        """
        t0 = time.perf_counter()
        runs = self._cached_runs(self.enabled)
        engines = self._engines(self.plan)
        self.runs = runs if runs is not None else {e: self.run_engine(e, self.enabled) for e in engines}
        if len(engines) == 1:
            self.engine_used = engines[0]
            self.engine_note = f"{engines[0]} engine, as asked"
        else:
            self.engine_used, self.engine_note = auto_choice(self.runs)
        self._cross_notes()
        self.snapshots = [self.input] + self.runs[self.engine_used]
        self.last_run_s = time.perf_counter() - t0
        return self.snapshots

    @staticmethod
    def _engines(plan: FusionPlan) -> tuple[str, ...]:
        return ENGINE_NAMES if plan.engine == "auto" else (plan.engine,)

    def _cached_runs(self, enabled, plan: FusionPlan | None = None) -> dict[str, list[Snapshot]] | None:
        """Each engine's snapshots under ``enabled`` when every step is already in memory, else None."""
        runs: dict[str, list[Snapshot]] = {}
        for e in self._engines(plan or self.plan):
            key: tuple = (e,)
            snaps: list[Snapshot] = []
            for es in engine_steps(e):
                on = enabled(es.name)
                key = key + (es.key(on),)
                if on:
                    snap = self._cache.get(key)
                    if snap is None:
                        return None
                    snaps.append(snap)
            runs[e] = snaps
        return runs

    def ready(self, plan: FusionPlan) -> bool:
        """Whether every snapshot of ``plan`` is in memory (running it is a lookup, no engine step)."""
        return self._cached_runs(lambda name: runs_under(plan, name), plan) is not None

    def run_engine(self, engine: str, enabled, budget: int | None = None) -> list[Snapshot] | None:
        """The snapshots of ``engine`` under ``enabled(step) -> bool``, without changing the plan shown; with
        ``budget``, None when more than that many engine steps were needed (see ``StepRunner.run``)."""
        return self.runner.run(engine, enabled, budget)

    def _keep_checked(self, snap: Snapshot) -> None:
        """Have parity found later on ``snap`` (by the app or ``check_parity``) written to disk too."""
        if self.persist is not None:
            snap.on_checked = self.persist.save_parity
            if self.text is not None and snap.task_parity is None:
                snap.task_parity = self.persist.task_parity(snap, self._text_id)

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
                self._text_reference = TextReference(self.input, self.text)
            snap.task_parity = self._text_reference.compare(snap)
            if self.persist is not None:
                self.persist.save_task_parity(snap, self._text_id)
        return parity

    def session_layer(self, i: int, level: str = "all", *, honour_plan: bool = True) -> dict:
        """What ONNX Runtime's own session-time fusion adds on top of snapshot ``i``
        (see :func:`workbench.fusion.session_layer.session_layer`)."""

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
