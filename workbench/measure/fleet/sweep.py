"""Sweeps: the same variants over batch x sequence x threads, as a table and JSON.

Each (batch, sequence, threads) point is one interleaved benchmark in its own
worker, so every point is measured the honest way, and the thread count is
equal for all variants within a point.
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable

from ...cache.atomic import atomic_write_text
from ...config import BenchConfig
from ...errors import ConfigError, WorkbenchError
from ..harness.bench import benchmark
from ..harness.results import BenchResult, Variant

COLUMNS = ["variant", "provider", "batch", "seq", "threads", "p50_ms", "p90_ms", "p99_ms", "mean_ms", "std_ms",
           "throughput_per_s", "runs", "floor_ms", "floor_ratio", "cosine", "max_abs_diff", "error", "busy"]


@dataclass
class SweepResult:
    """All points of a sweep: ``rows`` (plain dicts), ``frame`` (pandas), ``machine``."""

    rows: list[dict]
    machine: dict = field(default_factory=dict)

    @property
    def frame(self):
        import pandas as pd
        return pd.DataFrame(self.rows, columns=COLUMNS)

    def to_dict(self) -> dict:
        return {"machine": self.machine, "columns": COLUMNS, "rows": self.rows}

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """The sweep as JSON text; written atomically to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=1, default=str)
        if path is not None:
            atomic_write_text(Path(path), text + "\n")
        return text


def _rows(res: BenchResult, batch: int, seq: int, threads: int) -> list[dict]:
    out = []
    for v in res.variants:
        par = v.parity or {}
        out.append({"variant": v.name, "provider": v.provider, "batch": batch, "seq": seq, "threads": threads,
                    "p50_ms": v.p50_ms, "p90_ms": v.p90_ms, "p99_ms": v.p99_ms, "mean_ms": v.mean_ms,
                    "std_ms": v.std_ms, "throughput_per_s": v.throughput_per_s, "runs": v.runs,
                    "floor_ms": res.floor_ms, "floor_ratio": v.floor_ratio, "cosine": par.get("cosine"),
                    "max_abs_diff": par.get("max_abs_diff"), "error": None,
                    "busy": res.machine_load.words() if res.machine_load else ""})  # "" when quiet
    return out


def sweep(variants: list[Variant], batches: Iterable[int] = (1,), seqs: Iterable[int] = (128,),
          threads: Iterable[int] = (2,), *, cfg: BenchConfig | None = None,
          on_point: Callable[[list[dict]], None] | None = None, stop_on_error: bool = False) -> SweepResult:
    """Benchmark ``variants`` at every batch x sequence x threads point.

    Args:
        variants: as for :func:`workbench.measure.harness.bench.benchmark`.
        batches, seqs, threads: the grid.
        cfg: warm-up, runs, seed and provider (its batch, seq and threads
            are replaced by the grid's).
        on_point: called with each point's rows as soon as it is measured.
        stop_on_error: raise on the first failing point instead of recording
            its error in the ``error`` column and going on.

    Raises:
        ConfigError: an empty grid or a value below 1.
    """
    cfg = cfg or BenchConfig(runs=20)
    grid = list(itertools.product(list(threads), list(batches), list(seqs)))
    if not grid:
        raise ConfigError("the sweep grid is empty")
    rows, machine = [], {}
    for t, b, s in grid:
        point_cfg = replace(cfg, batch=int(b), seq=int(s), threads=int(t))  # BenchConfig validates
        try:
            res = benchmark(variants, point_cfg)
        except WorkbenchError as e:
            if stop_on_error:
                raise
            point = [{**{c: None for c in COLUMNS}, "variant": v.name, "provider": v.provider, "batch": b,
                      "seq": s, "threads": t, "runs": 0, "error": str(e)} for v in variants]
        else:
            machine = machine or {k: v for k, v in res.machine.items() if k != "threads"}
            point = _rows(res, b, s, t)
        rows.extend(point)
        if on_point:
            on_point(point)
    return SweepResult(rows, machine)


__all__ = ["sweep", "SweepResult", "COLUMNS"]
