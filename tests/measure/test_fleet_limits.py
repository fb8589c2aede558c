"""Sweep specs that explode are refused before expanding, and a sweep's bookkeeping stays linear in its rows.

The bookkeeping test drives the real :func:`run_sweep` (spec expansion, resume, the ledger, its output
file and the summary) with a stand-in executor that fakes only the measurements, and counts the rows
serialized and the bytes written, never the time: the yardstick must not depend on how busy the machine is.
"""
from __future__ import annotations

import json

import pytest

from workbench.errors import ConfigError
from workbench.measure.fleet import rows as fleet_rows
from workbench.measure.fleet.rows import journal_path, machine_type, summarize
from workbench.measure.fleet.run import run_sweep
from workbench.measure.fleet.spec import MAX_POINTS_ENV, config_key, count_points, expand, load_spec

MACHINES = [{"cpu": "AMD EPYC 9R14", "microarch": "zen4", "isa": ["AVX2", "AVX-512"], "gpus": []},
            {"cpu": "AMD EPYC 7R13", "microarch": "zen3", "isa": ["AVX2"], "gpus": []}]


def fake_executor(todo, done, cancelled):
    """Rows as the local executor makes them, with made-up times, alternating two machine types."""
    for i, cfg in enumerate(todo):
        if cancelled():
            return True
        p50 = 10.0 + (i % 7) - (0.5 if cfg["disable"] else 0.0)
        done({"key": config_key(cfg), "config": cfg, "node": f"n{i % 2}", "machine": MACHINES[i % 2],
              "p50_ms": p50, "p90_ms": p50, "p99_ms": p50, "runs": 1, "started": 0.0, "ended": 0.0, "error": None})
    return False


def _spec(rows: int) -> dict:
    return {"models": ["bert-tiny"], "plans": ["default", {"disable": ["attention"]}],
            "seq": list(range(1, rows // 2 + 1)), "runs": 1, "warmup": 1}


def _bookkeeping(tmp_path, rows: int, monkeypatch) -> dict:
    out = tmp_path / f"sweep-{rows}.json"
    written = {"bytes": 0, "summaries": 0}
    real_summarize = fleet_rows.summarize

    def counting_summarize(rs):
        written["summaries"] += len(rs)  # rows visited by summaries
        return real_summarize(rs)

    monkeypatch.setattr(fleet_rows, "summarize", counting_summarize)
    ledgers = []
    real_init = fleet_rows.Ledger.__init__

    def init(self, *a, **kw):
        real_init(self, *a, **kw)
        ledgers.append(self)

    monkeypatch.setattr(fleet_rows.Ledger, "__init__", init)
    res = run_sweep(_spec(rows), fake_executor, out=out)
    assert len(res["rows"]) == rows and json.loads(out.read_text())["total"] == rows
    assert not journal_path(out).exists()  # the journal goes once the result holds every row
    return {"serialized": ledgers[0].written, "summaries": written["summaries"]}


def test_bookkeeping_grows_linearly_with_the_rows(tmp_path, monkeypatch):
    small, big = _bookkeeping(tmp_path, 200, monkeypatch), _bookkeeping(tmp_path, 2000, monkeypatch)
    for what in ("serialized", "summaries"):
        per_small, per_big = small[what] / 200, big[what] / 2000
        # Linear: the same cost per row at 10x the rows (quadratic bookkeeping would be 10x per row).
        assert per_big < 2 * per_small and per_big < 6, (what, small, big)


def test_a_killed_sweep_resumes_from_its_journal(tmp_path):
    out = tmp_path / "s.json"

    def dies_halfway(todo, done, cancelled):
        for cfg in todo[:5]:
            fake_executor([cfg], done, cancelled)
        raise KeyboardInterrupt  # the run ends abruptly; the rows so far are in the journal or the result

    with pytest.raises(KeyboardInterrupt):
        run_sweep(_spec(10), dies_halfway, out=out)
    measured = []

    def counting(todo, done, cancelled):
        measured.extend(todo)
        return fake_executor(todo, done, cancelled)

    res = run_sweep(_spec(10), counting, out=out)
    assert len(measured) == 5 and len(res["rows"]) == 10


def test_tuned_plans_group_by_microarchitecture_not_brand():
    a = {"cpu": "AMD EPYC 9R14 96-Core", "microarch": "zen4", "isa": ["AVX2", "AVX-512"], "gpus": []}
    b = {**a, "cpu": "AMD EPYC 9654 96-Core"}  # another model of the same microarchitecture
    assert machine_type(a) == machine_type(b) == "zen4 (AVX2, AVX-512)"
    cfg = {"model": "m", "batch": 1, "seq": 8, "threads": 1, "provider": "cpu"}
    rows = [{"config": {**cfg, "plan": "default", "disable": []}, "machine": a, "p50_ms": 10.0},
            {"config": {**cfg, "plan": "without x", "disable": ["x"]}, "machine": b, "p50_ms": 9.0}]
    (machine, plan), = summarize(rows)["tuned_plans"].items()
    assert machine == "zen4 (AVX2, AVX-512)" and plan["disable"] == ["x"] and plan["unfused_evidence"] == []
    assert plan["evidence"] == [{"step": "x", "faster_without_pct": 10.0, "seq": 8, "model": "m"}]
    # no unfused point in this sweep: the plan ships, and says it was not checked against the unfused graph
    assert plan["ships"] == "plan" and "not checked against the unfused graph" in plan["why"]


BILLION_LAUGHS = "\n".join(["a: &a [1,1,1,1,1,1,1,1,1,1]"] + [
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 10) + "]" for i in range(8)] + ["seq: *i"])


@pytest.mark.parametrize("text, message", [
    (BILLION_LAUGHS, "anchors and aliases"),
    ("x: &x [*x]\n", "anchors and aliases"),  # a recursive alias
    ("seq: [" + ",".join(map(str, range(1000))) + "]\nbatch: [" + ",".join(map(str, range(1000)))
     + "]\nthreads: [" + ",".join(map(str, range(1000))) + "]\n", "1,000,000,000 points"),
    ("models: [bert-tiny\n", "not valid YAML"),
])
def test_exploding_specs_are_refused_before_expanding(tmp_path, text, message):
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=message) as e:  # how fast: benchmarks/bad_input_speed.py
        expand(p)
    assert "\n" not in str(e.value)


def test_the_point_limit_is_a_setting(monkeypatch):
    spec = {"seq": list(range(1, 21)), "plans": ["ablation"]}
    n = count_points(load_spec(spec))
    assert n == len(expand(spec))  # counted without expanding, the same number
    monkeypatch.setenv(MAX_POINTS_ENV, str(n - 1))
    with pytest.raises(ConfigError, match=f"raise {MAX_POINTS_ENV}"):
        expand(spec)
