"""A fleet sweep's bookkeeping: its rows, their summary and its output file, at O(1) amortized cost per row.

Each row is appended to a journal beside the output file (``.<name>.rows.jsonl``: one JSON line, so
a sweep killed halfway loses no finished row); the whole result (rows, nodes, summary) is rewritten
only when the row count has doubled since the last rewrite, and once at the end, when the journal
goes. So a sweep of n rows serializes O(n) rows in all and summarizes O(log n) times, each in O(n).
Resuming reads the result and the journal, and keeps each point's first row.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ...cache.atomic import atomic_write_text
from ...errors import ConfigError


def machine_type(machine: dict | None) -> str:
    """What rows group by: the CPU's microarchitecture (e.g. zen4: :mod:`workbench.ort.microarch`), its instruction
    sets, GPUs.

    Not the brand string: two models of one microarchitecture share a tuned plan, and one brand name
    can hide two microarchitectures. A row from before machines carried ``microarch`` falls back to
    the CPU's name.
    """
    if not machine:
        return "unknown"
    gpu = "; " + ", ".join(machine["gpus"]) if machine.get("gpus") else ""
    arch = machine.get("microarch") or machine.get("cpu", "?")
    return f"{arch} ({', '.join(machine.get('isa') or [])}){gpu}"


def _same_point(c: dict) -> str:
    return json.dumps({k: v for k, v in c.items() if k not in ("plan", "disable", "unfused")}, sort_keys=True,
                      default=str)


#: How much faster (percent, averaged over the shapes) leaving a step out, or the unfused graph, must measure.
MARGIN_PCT = 1.0


def _evidence(rows: list[tuple[dict, str]], bases: dict) -> dict:
    """Per machine type: each single-step row against its default-plan row, and the unfused rows against theirs."""
    tuned: dict = {}
    for r, mt in rows:
        c = r["config"]
        single = len(c["disable"]) == 1 and not c.get("unfused")
        if not (single or c.get("unfused")):
            continue
        base = bases.get((mt, _same_point(c)))
        entry = tuned.setdefault(mt, {"disable": [], "evidence": [], "unfused_evidence": []})
        if base is not None:
            gain = round(100 * (1 - r["p50_ms"] / base["p50_ms"]), 2)
            if single:
                entry["evidence"].append({"step": c["disable"][0], "faster_without_pct": gain, "seq": c["seq"],
                                          "model": c["model"]})
            else:
                entry["unfused_evidence"].append({"faster_unfused_pct": gain, "batch": c["batch"], "seq": c["seq"],
                                                  "model": c["model"]})
    return tuned


def _decide(entry: dict) -> None:
    """A step goes when leaving it out is faster on average over the shapes, beyond :data:`MARGIN_PCT`; and the
    plan ships only where the fused graph is not slower than the unfused one there (else the unfused graph does),
    as ``workbench tune`` decides: never slower than the graph it started from."""
    by_step: dict[str, list[float]] = {}
    for ev in entry["evidence"]:
        by_step.setdefault(ev["step"], []).append(ev["faster_without_pct"])
    entry["disable"] = sorted(st for st, g in by_step.items() if sum(g) / len(g) > MARGIN_PCT)
    gains = [ev["faster_unfused_pct"] for ev in entry["unfused_evidence"]]
    if gains and sum(gains) / len(gains) > MARGIN_PCT:
        entry["ships"] = "unfused"
        entry["why"] = (f"the unfused graph measured {sum(gains) / len(gains):.1f}% faster than the full plan on "
                        f"average over {len(gains)} shape(s): no fusion plan ships on this machine type")
    else:
        entry["ships"] = "plan"
        entry["why"] = ("the full plan was not slower than the unfused graph" if gains else
                        "not checked against the unfused graph (the sweep timed no 'unfused' point: plans: "
                        "[ablation] adds one)") + ("; the steps switched off were each timed alone, not together: "
                                                  "`workbench ablate` on that machine checks the combination"
                                                  if entry["disable"] else "")


def plan_line(machine: str, entry: dict) -> str:
    """One line per machine type: what ships there and why."""
    if entry.get("ships") == "unfused":
        return f"tuned plan on {machine}: the unfused graph ({entry.get('why', '')})"
    off = entry.get("disable") or []
    what = f"switch off {', '.join(off)}" if off else "every step helps or is within noise"
    return f"tuned plan on {machine}: {what}" + (f" ({entry['why']})" if entry.get("why") else "")


def summarize(rows: list[dict]) -> dict:
    """``tuned_plans`` per machine type (the steps whose removal was faster; the unfused graph where the fused one
    lost to it) and the best point per shape.

    Linear in the rows: the default-plan row each single-step or unfused row is compared with is found by index.
    """
    best, bases = {}, {}
    ok = [(r, machine_type(r["machine"])) for r in rows if r.get("p50_ms")]
    for r, mt in ok:
        c = r["config"]
        shape = f"{c['model']} b{c['batch']} s{c['seq']} t{c['threads']} {c['provider']}"
        cur = best.setdefault(mt, {}).get(shape)
        if cur is None or r["p50_ms"] < cur["p50_ms"]:
            best[mt][shape] = {"p50_ms": r["p50_ms"], "config": c}
        if not c["disable"] and not c.get("unfused"):
            bases.setdefault((mt, _same_point(c)), r)
    tuned = _evidence(ok, bases)
    for entry in tuned.values():
        _decide(entry)
    return {"tuned_plans": tuned, "best": best}


def journal_path(out: Path) -> Path:
    return out.with_name(f".{out.name}.rows.jsonl")


def read_rows(out: Path | None) -> list[dict]:
    """Finished rows (no error) of an earlier run: its result file, then its journal; first row per point."""
    if out is None:
        return []
    rows = []
    if out.is_file():
        try:
            rows = list(json.loads(out.read_text()).get("rows", []))
        except (OSError, ValueError, AttributeError, UnicodeDecodeError):
            raise ConfigError(f"{out} exists but is not a sweep result; choose another output path") from None
    j = journal_path(out)
    if j.is_file():
        for line in j.read_text(errors="replace").splitlines():
            try:
                row = json.loads(line)
            except ValueError:  # the line a kill cut short
                continue
            if isinstance(row, dict):
                rows.append(row)
    seen, kept = set(), []
    for r in rows:
        if isinstance(r, dict) and not r.get("error") and r.get("key") not in seen:
            seen.add(r.get("key"))
            kept.append(r)
    return kept


class Ledger:
    """The rows of one sweep, written as they land; ``written`` counts the rows serialized (the test's yardstick).

    Args:
        out: the result file (None: nothing is written).
        rows: the rows resumed from it.
        total: the points of the spec.
    """

    def __init__(self, out: Path | None, rows: list[dict], total: int):
        self.out, self.rows, self.total, self.cancelled = out, rows, total, False
        self.written = 0  # rows serialized so far, journal lines and result rewrites together
        self._next_full = max(1, 2 * len(rows))
        self._journal = None

    def doc(self) -> dict:
        nodes: dict[str, dict] = {}
        for r in self.rows:
            if r.get("node") and r.get("machine"):
                nodes.setdefault(r["node"], r["machine"])
        return {"rows": self.rows, "nodes": [{"node": n, "machine": nodes[n]} for n in sorted(nodes)],
                **summarize(self.rows), "total": self.total, "cancelled": self.cancelled}

    def add(self, row: dict) -> None:
        """One more row: one journal line now, the whole result only when the rows have doubled."""
        self.rows.append(row)
        if self.out is None:
            return
        if self._journal is None:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self._journal = open(journal_path(self.out), "a", encoding="utf-8")
        self._journal.write(json.dumps(row, default=str) + "\n")
        self._journal.flush()
        self.written += 1
        if len(self.rows) >= self._next_full:
            self._write_full()
            self._next_full = 2 * len(self.rows)

    def _write_full(self) -> dict:
        doc = self.doc()
        if self.out is not None:
            atomic_write_text(self.out, json.dumps(doc, indent=1, default=str) + "\n")
            self.written += len(self.rows)
            if self._journal is not None:  # every journal row is in the result now
                self._journal.truncate(0)
                self._journal.seek(0)
        return doc

    def close(self) -> dict:
        """Write the whole result once more and drop the journal; the result."""
        doc = self._write_full()
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        if self.out is not None:
            try:
                os.unlink(journal_path(self.out))
            except FileNotFoundError:
                pass
        return doc


__all__ = ["machine_type", "summarize", "read_rows", "journal_path", "Ledger"]
