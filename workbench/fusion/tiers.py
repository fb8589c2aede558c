"""Where a timeline finds a step's snapshot before it runs an engine: three tiers, fastest first.

* memory, by plan prefix: ``(engine, (step, on), ...)`` up to this step (a toggle back is a lookup);
* disk (``timeline_store.py``), by the same key: a model opened before, in this process or another;
* content: the same step on the same graph (fingerprint, head count, the counts it reads) gives the
  same graph, so switching a step that changed nothing elsewhere costs a hash, not a rerun.

Every snapshot the runner makes goes into all three (the disk write on a background thread).
"""

from __future__ import annotations

from typing import Callable

from .engine_types import EngineStep, StepOutcome
from .snapshot import Snapshot, fingerprint


class SnapshotTiers:
    """The snapshot caches of one timeline: memory by plan prefix, disk (``persist``), and content."""

    def __init__(self, persist=None):
        #: Plan prefix key → snapshot.
        self.memory: dict[tuple, Snapshot] = {}
        #: Content key → (skeleton, outcome, elapsed, heads after).
        self.content: dict[tuple, tuple] = {}
        #: The on-disk store (``timeline_store.TimelineStore``) or None.
        self.persist = persist
        #: Called with each snapshot kept or read back (the timeline hooks its parity writes there).
        self.on_kept: Callable[[Snapshot], None] = lambda snap: None

    @staticmethod
    def content_key(engine: str, es: EngineStep, prev: Snapshot, heads: int, counts: dict) -> tuple:
        return (engine, es.name, es.version, fingerprint(prev), heads,
                tuple((r, tuple(sorted(counts.get(r, {}).items()))) for r in es.reads))

    def from_disk(self, engine: str, es: EngineStep, key: tuple, prev: Snapshot) -> Snapshot | None:
        """The snapshot of ``key`` read back from disk (computed by an earlier run), or None."""
        found = self.persist.load(key, prev) if self.persist is not None else None
        if found is None:
            return None
        snap, out = found
        self.memory[key] = snap
        if not out.skipped:
            heads = prev.chain.get("heads", 0)
            ckey = self.content_key(engine, es, prev, heads, dict(prev.chain.get("counts", {})))
            self.content.setdefault(ckey, (snap.skeleton, out, snap.elapsed_s, snap.chain.get("heads", 0)))
        self.on_kept(snap)
        return snap

    def keep(self, snap: Snapshot, prev: Snapshot, outcome: StepOutcome, disk: bool = True) -> None:
        """Keep a snapshot this timeline made: in memory and (on the writer thread) on disk.

        A failed step (and, with ``disk=False``, every step after one) stays in memory only: a later run
        with a larger time limit, or in another process, computes it again.
        """
        self.memory[snap.key] = snap
        if self.persist is not None and disk and not outcome.failed:
            self.persist.save(snap, prev, outcome)
            self.on_kept(snap)

    def keep_computed(self, ckey: tuple, snap: Snapshot, prev: Snapshot, outcome: StepOutcome, heads: int,
                      disk: bool = True) -> None:
        """Keep a snapshot an engine step just computed, also under its content key (unless it failed)."""
        if not outcome.failed:
            self.content[ckey] = (snap.skeleton, outcome, snap.elapsed_s, heads)
        self.keep(snap, prev, outcome, disk)
