"""The step runner: an engine's chain over one input, a snapshot after each enabled step.

For each step it looks in the caches first (``tiers.py``: memory, disk, content); a step whose anchors
are absent from its input graph is not run (``anchors.py``): it is reported as not applicable, with the
graph as it was (or, where the engine's call does more than match, after only that part: its ``rest``).
Only then does it run the step, through the engine's adapter (``engines.py``), which says how the
working model is made and taken back; the runner has no engine branches. Each snapshot gets its diff
against the one before (provenance) and its diagnostic; parity is the timeline's (``timeline.py``).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from ..concurrency import engine_turn
from ..errors import FusionError
from ..graph.diff import Diff, diff_models
from ..graph.summary import fused_counts, histogram
from . import diagnostics
from .adapters import adapter
from .catalog import BY_NAME
from .engine_types import EngineContext, EngineStep, StepFailed, StepOutcome
from .engines import engine_steps
from .snapshot import Snapshot, fused_op_types
from .snapshot_weights import reading_from
from .tiers import SnapshotTiers

Enabled = Callable[[str], bool]


def _skipped(es: EngineStep, prev: Snapshot) -> str:
    """Why ``es`` cannot apply to ``prev``'s graph, and what was done instead ("" when it may apply)."""
    why = es.skip(prev.histogram, prev.skeleton) if es.skip is not None else ""
    if not why:
        return ""
    if es.rest is None:
        return f"{why}; the step was not run."
    return f"{why}; its rules were not tried, only what the engine's call does around them ran."


class StepRunner:
    """Runs chains from one input snapshot, through one timeline's caches and weight store."""

    def __init__(self, input_snapshot: Snapshot, store, tiers: SnapshotTiers, *, num_heads: int, hidden_size: int,
                 num_layers: int, source_path: str | None):
        self.input = input_snapshot
        self.store = store
        self.tiers = tiers
        self.num_heads, self.hidden_size, self.num_layers = num_heads, hidden_size, num_layers
        #: The export file, which ONNX Runtime's basic pass reads itself when the input is unchanged.
        self.source_path = source_path
        self.shape_cache: dict = {}
        self.node_index: dict = {}  # id(skeleton) → (skeleton, name → node), for diffs
        #: Engine step calls made (0 when every snapshot came from a cache).
        self.steps_run = 0

    def run(self, engine: str, enabled: Enabled, budget: int | None = None) -> list[Snapshot] | None:
        """The snapshots of ``engine`` under ``enabled``.

        With ``budget``, compute at most that many new steps and return None if more were needed (the
        warm-up runs one step per lock hold).
        """
        snaps: list[Snapshot] = []
        prev, key, computed = self.input, (engine,), 0
        live: tuple[tuple, Any] | None = None  # (key, the engine's model after that step), to go on from
        for es in engine_steps(engine):
            on = enabled(es.name)
            key = key + (es.key(on),)
            if not on:
                continue
            # After a failed step (a rule past its time limit) nothing of this chain is read from or
            # written to disk: the same plan key there may hold what the step made when it finished.
            disk = not any(s.failed for s in snaps)
            snap = self.tiers.memory.get(key)
            if snap is None:
                snap, live = self._find(engine, es, key, prev, live, enabled, disk)
            if snap is None:
                if budget is not None and computed >= budget:
                    return None
                computed += 1
                snap, model = self._compute(engine, es, key, prev, live, enabled, disk)
                live = (key, model)
            snaps.append(snap)
            prev = snap
        return snaps

    def _find(self, engine: str, es: EngineStep, key: tuple, prev: Snapshot, live, enabled: Enabled, disk: bool):
        """``(snapshot, live)`` from disk, a skip or the content cache; ``(None, live)`` when it must be computed."""
        snap = self.tiers.from_disk(engine, es, key, prev) if disk else None
        if snap is not None:
            return snap, None
        heads = prev.chain.get("heads", 0) or self.num_heads
        counts = dict(prev.chain.get("counts", {}))
        why = _skipped(es, prev)
        if why and es.rest is None:
            # The step's anchors are absent: it would leave the graph as it is, so it is not run.
            out = StepOutcome(None, skipped=why)
            snap = self._snapshot(es.name, engine, prev.skeleton, prev, 0.0, out, key,
                                  {"counts": {**counts, es.name: {}}, "heads": heads}, enabled)
            snap.fingerprint = prev.fingerprint
            self.tiers.keep(snap, prev, out, disk)
            return snap, ((key, live[1]) if live is not None and live[0] == prev.key else live)
        hit = self.tiers.content.get(self.tiers.content_key(engine, es, prev, heads, counts))
        if hit is None:
            return None, live
        # Same step on the same graph gives the same graph: switching a step that changed nothing
        # (or switching back and forth elsewhere) costs a hash, not a rerun of every later step.
        skel, out, elapsed, heads_after = hit
        snap = self._snapshot(es.name, engine, skel, prev, elapsed, out, key,
                              {"counts": {**counts, es.name: out.counts}, "heads": heads_after}, enabled)
        snap.reused = True
        self.tiers.keep(snap, prev, out, disk)
        return snap, None

    def _compute(self, engine: str, es: EngineStep, key: tuple, prev: Snapshot, live, enabled: Enabled, disk: bool):
        """Run one engine step (or, where its anchors are absent, its ``rest``); the snapshot and the model."""
        eng = adapter(engine)
        heads = prev.chain.get("heads", 0) or self.num_heads
        counts = dict(prev.chain.get("counts", {}))
        ckey = self.tiers.content_key(engine, es, prev, heads, counts)
        why = _skipped(es, prev)
        self.steps_run += 1
        # ORT steps edit a copy of the skeleton and read weight values from the store on demand, so
        # recomputing from a cached snapshot does not first copy every weight.
        state = live[1] if live is not None and live[0] == prev.key else eng.working(self.store, prev.skeleton)
        ctx = EngineContext(num_heads=heads, hidden_size=self.hidden_size, counts=counts,
                            shape_cache=self.shape_cache, store=eng.context_store(self.store),
                            source_path=self.source_path if prev is self.input else None)
        t = time.perf_counter()
        try:
            # one engine step at a time in the process; this timeline's weights, never another model's
            with engine_turn(), reading_from(self.store):
                out = (es.rest if why else es.run)(ctx, state)
        except StepFailed as e:  # the graph as it was (the working model may be half edited), the step failed
            out = StepOutcome(eng.working(self.store, prev.skeleton), messages=[str(e)], failed=str(e))
        except FusionError:
            raise
        except Exception as e:
            out = eng.failure(es.name, e, self.store, prev.skeleton)
        out.skipped = why
        elapsed = time.perf_counter() - t
        skel = eng.skeleton(self.store, out.model)
        snap = self._snapshot(es.name, engine, skel, prev, elapsed, out, key,
                              {"counts": {**ctx.counts, es.name: out.counts}, "heads": ctx.num_heads}, enabled)
        outcome = StepOutcome(None, dict(out.counts), list(out.messages), list(out.notes), out.skipped, out.failed)
        self.tiers.keep_computed(ckey, snap, prev, outcome, ctx.num_heads, disk)
        return snap, out.model

    def _snapshot(self, name: str, engine: str, skel, prev: Snapshot, elapsed: float, out: StepOutcome, key: tuple,
                  chain: dict, enabled: Enabled) -> Snapshot:
        """The snapshot after step ``name``: its diff against ``prev`` and its diagnostic."""
        step = BY_NAME[name]
        if skel is prev.skeleton:  # a skipped step: the same graph
            d, fused, hist = Diff(), dict(prev.fused), dict(prev.histogram)
        else:
            d, fused, hist = (diff_models(prev.skeleton, skel, index=self.node_index), fused_counts(skel),
                              histogram(skel))
        snap = Snapshot(step=name, engine=engine, skeleton=skel, nodes=len(skel.graph.node), histogram=hist,
                        fused=fused, elapsed_s=elapsed, diff=d, counts=dict(out.counts), messages=list(out.messages),
                        key=key, store=self.store, chain=chain, skipped=out.skipped, failed=out.failed)
        added = snap.fused_here
        here = added.get(step.emits, 0) if step.emits else 0
        if not here:  # some rule groups emit more than one op type (onnxscript's gelu rules)
            here = sum(n for op, n in added.items() if op in fused_op_types())
        prereq_off = [p for p in step.prerequisites if p in BY_NAME and not enabled(p)
                      and engine in BY_NAME[p].engines]
        snap.base_diagnostic = diagnostics.explain(
            step, fused_here=here, already=prev.fused.get(step.emits, 0) if step.emits else 0,
            num_layers=self.num_layers, prerequisites_off=prereq_off, messages=out.messages, notes=out.notes,
            engine=engine, skipped=out.skipped, failed=out.failed)
        snap.diagnostic = snap.base_diagnostic
        return snap
