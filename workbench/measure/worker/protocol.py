"""The measuring processes' messages, typed: one dataclass per message, pickled across the pipe.

Two conversations, each over a ``multiprocessing`` pipe, each dispatched by the message's type (never
by a string in it):

The benchmark worker (:mod:`.worker`; its jobs in :mod:`.serve` and :mod:`.worker_jobs`)
    caller → worker: one job (:class:`BenchJob`, :class:`ThroughputJob` or :class:`ProfileJob`; the
    worker runs the one its type names), then optionally :class:`Stop`.
    worker → caller: :class:`Status` while building and warming, :class:`Ready`, :class:`Floor`,
    :class:`Sample` per timed run (or pass), :class:`Parity` per variant against the reference,
    :class:`Profile` for a profiling job, :class:`Batch` per variant for a throughput job,
    :class:`Memory` after the timed runs, then exactly one of :class:`Done` or :class:`Error`.

A variant timed alone, as shipped (:mod:`.slices`)
    caller → process: :class:`SliceJob`, then :class:`Slice` any number of times, then :class:`End`.
    process → caller: :class:`SliceReady`, one :class:`SliceTimes` per slice, then :class:`SliceDone`
    or :class:`Error`.

Each worker → caller message has ``kind``, the word a progress callback (``on_event``) may show.
Nothing here imports torch or onnxruntime: the worker loads this before its environment is set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ... import errors


@dataclass(frozen=True)
class BenchJob:
    """Caller → worker: time ``variants`` (:meth:`.results.Variant.describe` dicts) round robin at ``cfg``
    (a :class:`~workbench.config.BenchConfig` as a dict); with ``text`` (``TextBatches.job()``, plus
    ``answers_only`` and ``parts``) the runs cycle through its batches and the answers are checked."""

    variants: list
    cfg: dict
    reference: str | None = None
    floor: bool = True
    memory_limit_mb: int | None = None
    fault: str | None = None
    text: dict | None = None
    #: What the caller's result says the text was (``TextBatches.describe()``); the worker ignores it.
    text_summary: dict | None = None


@dataclass(frozen=True)
class ThroughputJob:
    """Caller → worker: serve the corpus of ``serve`` (:func:`.workload.serve_job`) at each variant's batch size
    (``batches``, else searched; ``batch1``: each one's known rate at batch 1), ``passes`` timed passes."""

    variants: list
    cfg: dict
    serve: dict
    reference: str | None = None
    batches: dict = field(default_factory=dict)
    passes: int = 3
    batch1: dict = field(default_factory=dict)
    memory_limit_mb: int | None = None
    fault: str | None = None


@dataclass(frozen=True)
class ProfileJob:
    """Caller → worker: run the one variant with ONNX Runtime's profiler on (``feeds``: this batch of real text
    instead of seeded random ids at ``cfg``'s shape)."""

    variants: list
    cfg: dict
    memory_limit_mb: int | None = None
    feeds: dict | None = None


@dataclass(frozen=True)
class SliceJob:
    """Caller → as-shipped process: its one variant, threads, and what it serves (``latency``: batches one
    sentence each; ``serve`` at ``batch``: the throughput corpus)."""

    variant: dict
    threads: int
    latency: list | None = None
    serve: dict | None = None
    batch: int | None = None


@dataclass(frozen=True)
class Stop:
    """Caller → worker: stop after the current run; what was measured is kept."""


@dataclass(frozen=True)
class Slice:
    """Caller → as-shipped process: time one slice of ``runs`` runs (or passes) of ``workload``."""

    workload: str
    runs: int


@dataclass(frozen=True)
class End:
    """Caller → as-shipped process: no more slices."""


@dataclass(frozen=True)
class Message:
    """A message from a measuring process to its caller."""

    kind: ClassVar[str] = ""


@dataclass(frozen=True)
class Status(Message):
    """What the worker is doing: ``stage`` of ``variant``, step ``index`` of ``count``."""

    kind: ClassVar[str] = "status"
    stage: str
    variant: str | None
    index: int
    count: int


@dataclass(frozen=True)
class Ready(Message):
    """Every runner built: the machine, the worker's own settings, each variant's session providers and, for an
    ONNX Runtime session, which provider runs each node (a :class:`~workbench.ort.assignment.Assignment` or None)."""

    kind: ClassVar[str] = "ready"
    machine: dict
    worker: dict
    variants: list


@dataclass(frozen=True)
class Floor(Message):
    """The hardware floor of each variant at the timed shape (:func:`.worker_jobs.floor_report`)."""

    kind: ClassVar[str] = "floor"
    report: dict


@dataclass(frozen=True)
class Sample(Message):
    """One timed run (or, for a throughput job, one pass of ``sentences`` sentences); ``shape``: the (batch,
    sequence) this run was fed (runs over text cycle through shapes; the spread is judged per shape)."""

    kind: ClassVar[str] = "sample"
    variant: str
    run_index: int
    ms: float
    sentences: int | None = None
    shape: tuple[int, int] | None = None


@dataclass(frozen=True)
class Parity(Message):
    """One variant against the reference: numbers, and with text the answers (per part when split)."""

    kind: ClassVar[str] = "parity"
    variant: str
    reference: str
    max_abs_diff: float
    cosine: float
    task_parity: dict | None = None
    task_parity_parts: dict | None = None


@dataclass(frozen=True)
class Profile(Message):
    """A profiling job's parsed operator records."""

    kind: ClassVar[str] = "profile"
    variant: str
    provider: str
    records: list
    run_ms: float | None
    runs: int
    session_providers: list = field(default_factory=list)


@dataclass(frozen=True)
class Batch(Message):
    """A throughput job's batch size for one variant, and sentences/s per size tried."""

    kind: ClassVar[str] = "batch"
    variant: str
    batch: int
    tried: dict
    sentences: int


@dataclass(frozen=True)
class Memory(Message):
    """The worker's peak resident memory after the timed runs (all its variants together)."""

    kind: ClassVar[str] = "memory"
    peak_rss_mb: float | None


@dataclass(frozen=True)
class Done(Message):
    """The job ended; ``stopped`` when the caller asked it to stop."""

    kind: ClassVar[str] = "done"
    stopped: bool = False


@dataclass(frozen=True)
class Error(Message):
    """The job failed: ``error`` names a :mod:`workbench.errors` class ("internal" for anything else)."""

    kind: ClassVar[str] = "error"
    error: str
    message: str
    traceback: str | None = None

    def exception(self):
        """The error to raise in the caller: the worker's own class, or a BenchmarkError saying what failed."""
        cls = getattr(errors, self.error, None)
        if isinstance(cls, type) and issubclass(cls, errors.WorkbenchError):
            return cls(self.message or "benchmark failed")
        return errors.BenchmarkError(f"the benchmark worker failed: {self.message or 'unknown error'}")


@dataclass(frozen=True)
class SliceReady(Message):
    """The as-shipped process has built its variant."""

    kind: ClassVar[str] = "ready"
    providers: list


@dataclass(frozen=True)
class SliceTimes(Message):
    """One slice's times, in ms (one per run or pass)."""

    kind: ClassVar[str] = "slice"
    ms: list


@dataclass(frozen=True)
class SliceDone(Message):
    """The as-shipped process ended: its own peak resident memory."""

    kind: ClassVar[str] = "done"
    peak_rss_mb: float | None


__all__ = ["BenchJob", "ThroughputJob", "ProfileJob", "SliceJob", "Stop", "Slice", "End", "Message", "Status", "Ready", "Floor", "Sample", "Parity", "Profile",
           "Batch", "Memory", "Done", "Error", "SliceReady", "SliceTimes", "SliceDone"]
