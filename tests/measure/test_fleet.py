"""Fleet sweeps: the spec, the local executor, Ray (local and a simulated two-node cluster)."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time

import pytest

from workbench.errors import ConfigError
from workbench.measure.fleet.run import MEASURE_RESOURCE, TRACE_ENV, run_sweep, to_frame
from workbench.measure.fleet.spec import config_key, expand, load_spec

SPEC = {"models": ["bert-tiny"], "plans": ["default", {"disable": ["attention"]}], "seq": [8, 16],
        "threads": [1], "runs": 3, "warmup": 1}


def test_spec_expands_every_axis_and_ablation():
    points = expand({**SPEC, "plans": ["ablation"], "seq": [8]})
    plans = [p["plan"] for p in points]
    assert plans[0] == "default" and "without attention" in plans and "without skip_layer_norm" in plans
    assert len(expand(SPEC)) == 4 and {p["seq"] for p in expand(SPEC)} == {8, 16}


@pytest.mark.parametrize("spec, message", [
    ({"modles": ["bert-tiny"]}, "unknown sweep key(s) modles"),
    ({"seq": []}, "sweep axis seq is empty"),
    ({"runs": 0}, "runs must be a whole number"),
    ({"plans": [{"keep": ["x"]}]}, "a plan is 'default', 'ablation'"),
    ({"precisions": ["int4"]}, "precision 'int4'"),
])
def test_bad_specs_are_refused_in_one_line(spec, message):
    with pytest.raises(ConfigError, match=None) as e:
        expand(spec)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_yaml_spec_file(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("models: [bert-tiny]\nseq: [8, 16]\nplans: [default, {disable: [attention]}]\nruns: 3\n")
    assert load_spec(p)["seq"] == [8, 16]
    (tmp_path / "bad.yaml").write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="does not hold a mapping"):
        load_spec(tmp_path / "bad.yaml")


def _cli_sweep(spec_path, *args):
    p = subprocess.run([sys.executable, "-m", "workbench.cli", "sweep", str(spec_path), "--json", *args],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


def _shape(doc):
    return sorted((r["config"]["plan"], r["config"]["seq"]) for r in doc["rows"])


@pytest.fixture(scope="module")
def local_result(tmp_path_factory):
    d = tmp_path_factory.mktemp("sweep")
    spec = d / "spec.yaml"
    import yaml

    spec.write_text(yaml.safe_dump(SPEC))
    return d, spec, _cli_sweep(spec, "-o", str(d / "out.json"))


def test_local_sweep_rows_nodes_and_tuned_plans(local_result):
    _, _, doc = local_result
    assert _shape(doc) == [("default", 8), ("default", 16), ("without attention", 8), ("without attention", 16)]
    for r in doc["rows"]:
        assert {"config", "node", "machine", "p50_ms", "p90_ms", "runs"} <= set(r) and r["error"] is None
        assert r["runs"] == 3 and 0 < r["p50_ms"] <= r["p90_ms"] and r["machine"]["cpu"]
        # How busy the machine was while the point ran (issue 38): the figures, the verdict, its words.
        assert r["machine_load"]["seconds"] > 0 and bool(r["machine_load"]["words"]) == r["machine_load"]["busy"]
    assert len(doc["nodes"]) == 1 and doc["nodes"][0]["machine"]["isa"] is not None
    (plan,) = doc["tuned_plans"].values()
    assert isinstance(plan["disable"], list) and len(plan["evidence"]) == 2


def test_sweep_resumes_from_its_output_file(local_result):
    d, spec, doc = local_result
    again = _cli_sweep(spec, "-o", str(d / "out.json"))
    assert [r["started"] for r in again["rows"]] == [r["started"] for r in doc["rows"]]  # nothing measured again


def test_ray_executor_gives_the_same_table(local_result):
    pytest.importorskip("ray")
    _, spec, local = local_result
    ray_doc = _cli_sweep(spec, "--executor", "ray")
    # The same rows (every swept value), the same fields and the same table columns, on the same machine.
    assert sorted(r["key"] for r in ray_doc["rows"]) == sorted(r["key"] for r in local["rows"])
    by_key = {r["key"]: r for r in local["rows"]}
    for r in ray_doc["rows"]:
        twin = by_key[r["key"]]
        assert sorted(r) == sorted(twin) and r["config"] == twin["config"] and r["error"] is None
        assert r["runs"] == twin["runs"] == 3 and r["machine"]["cpu"] == twin["machine"]["cpu"]
        assert r["machine"]["isa"] == twin["machine"]["isa"]
    assert list(to_frame(ray_doc).columns) == list(to_frame(local).columns)
    assert sorted(ray_doc) == sorted(local) and len(ray_doc["nodes"]) == 1
    assert ray_doc["tuned_plans"].keys() == local["tuned_plans"].keys()
    # Medians only loosely (runs=3 on a shared machine): the same models at the same shapes, not another
    # model, unit or shape. How close they are is benchmarks/sweep_overhead.py's figure.
    ratios = [r["p50_ms"] / by_key[r["key"]]["p50_ms"] for r in ray_doc["rows"]]
    assert 0.2 < math.exp(sum(map(math.log, ratios)) / len(ratios)) < 5, ratios


def test_progress_reports_every_row_and_cancel_stops_between_rows(tmp_path):
    out, stop, seen = tmp_path / "out.json", threading.Event(), []

    def progress(row, done, total):
        seen.append((row["key"], done, total))
        if done == 2:
            stop.set()  # what an app's Cancel button does from another thread

    res = run_sweep(SPEC, "local", out=out, progress=progress, cancel=stop)
    assert res["cancelled"] and res["total"] == 4 and len(res["rows"]) == 2
    assert [(d, t) for _, d, t in seen] == [(1, 4), (2, 4)]
    assert [k for k, _, _ in seen] == [r["key"] for r in res["rows"]] == [config_key(c) for c in expand(SPEC)[:2]]
    assert len(json.loads(out.read_text())["rows"]) == 2  # the file holds what finished
    # Resuming reports the rows already there first, then measures only the rest.
    seen.clear()
    again = run_sweep(SPEC, "local", out=out, progress=progress, cancel=lambda: False)
    assert not again["cancelled"] and [(d, t) for _, d, t in seen] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert [r["started"] for r in again["rows"][:2]] == [r["started"] for r in res["rows"]]
    assert sorted(r["key"] for r in again["rows"]) == sorted(config_key(c) for c in expand(SPEC))


@pytest.mark.parametrize("kw, message", [({"retries": -1}, "retries must be"), ({"cancel": 3}, "cancel must be"),
                                         ({"executor": "dask"}, "executor must be local or ray")])
def test_bad_run_arguments_are_refused(kw, message):
    with pytest.raises(ConfigError, match=message):
        run_sweep(SPEC, **kw)


@pytest.fixture(scope="module")
def cluster():
    """One simulated Ray cluster for the tests below (starting one takes ~15 s on 2 cores). Its head only
    builds (one CPU, no measuring resource); each test adds the measuring nodes it needs and removes them."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    ray.init(address=c.address, log_to_driver=False)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def _measuring_nodes(cluster, n: int) -> list:
    return [cluster.add_node(num_cpus=1, resources={MEASURE_RESOURCE: 1}) for _ in range(n)]


def _remove(cluster, nodes, timeout: float = 60) -> None:
    """Remove ``nodes`` and wait until the cluster no longer counts their measuring slots (a node killed
    earlier included), so the next test starts from the bare head."""
    import ray

    for node in nodes:
        if node in cluster.worker_nodes:
            cluster.remove_node(node)
    deadline = time.monotonic() + timeout
    while ray.cluster_resources().get(MEASURE_RESOURCE, 0) and time.monotonic() < deadline:
        time.sleep(0.2)


def test_two_nodes_measure_one_point_at_a_time_each(cluster):
    nodes = _measuring_nodes(cluster, 2)
    try:
        res = run_sweep({**SPEC, "seq": [8, 16, 24]}, "ray")
    finally:
        _remove(cluster, nodes)
    rows = res["rows"]
    assert len(rows) == 6 and all(r["error"] is None for r in rows)
    by_node: dict = {}
    for r in rows:
        by_node.setdefault(r["node"], []).append((r["started"], r["ended"]))
    assert len(by_node) == 2 and len(res["nodes"]) == 2  # both nodes measured, each with its machine
    for spans in by_node.values():
        spans.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans


def _sweep_killing_the_second_node(cluster, tmp_path, monkeypatch, spec, *, survivor=True, **kw):
    """A sweep on two measuring nodes (or, ``survivor=False``, one) whose last is killed once a
    measurement runs on it.

    The measurement announces itself through :data:`TRACE_ENV` (a file per start), so the kill lands
    mid-measurement however slow the machine is. Returns the result, the killed point's key and the
    kill time, both node ids and the trace folder.
    """
    trace = tmp_path / "trace"
    monkeypatch.setenv(TRACE_ENV, str(trace))  # before the nodes start, so their workers inherit it
    nodes = _measuring_nodes(cluster, 2 if survivor else 1)
    victim_node = nodes[-1]
    ids = {"survivor": nodes[0].node_id if survivor else None, "victim": victim_node.node_id}
    killed, stop = {}, threading.Event()

    def kill_once_measuring():
        while not stop.wait(0.05):
            started = sorted(trace.glob(f"*.{ids['victim']}.*.start")) if trace.is_dir() else []
            if started:
                killed["key"] = started[0].name.split(".")[0]
                cluster.remove_node(victim_node, allow_graceful=False)
                killed["at"] = time.time()
                return

    killer = threading.Thread(target=kill_once_measuring, daemon=True)
    killer.start()
    try:
        res = run_sweep(spec, "ray", **kw)
    finally:
        stop.set()
        killer.join(60)
        _remove(cluster, nodes)
    assert "key" in killed, "no measurement started on the second node"
    return res, killed, ids, trace


@pytest.mark.parametrize("retries", [2, 0])
def test_a_node_killed_mid_measurement_costs_only_its_row(cluster, tmp_path, monkeypatch, retries):
    """Kill the second node once a measurement runs on it: that row is retried on the node left
    (``retries=2``) or comes back as an error row (``retries=0``); every other row comes back, and the
    output file resumes."""
    out, spec = tmp_path / "out.json", {**SPEC, "seq": [8, 16, 24]}
    res, killed, ids, trace = _sweep_killing_the_second_node(cluster, tmp_path, monkeypatch, spec, out=out,
                                                             retries=retries)
    survivor_id, victim_id = ids["survivor"], ids["victim"]
    rows = {r["key"]: r for r in res["rows"]}
    assert sorted(rows) == sorted(config_key(c) for c in expand(spec)) and len(res["rows"]) == 6
    lost = rows[killed["key"]]
    others = [r for k, r in rows.items() if k != killed["key"]]
    assert all(r["error"] is None and r["p50_ms"] > 0 for r in others)  # every other row came back
    # A row from the killed node, if any, ended before the node went.
    assert all(r["ended"] <= killed["at"] for r in others if r["node"] == victim_id)
    attempts = sorted(p.name.split(".")[1] for p in trace.glob(f"{killed['key']}.*.start"))
    if retries:
        # Retried, once, on the node still alive.
        assert lost["error"] is None and lost["node"] == survivor_id and lost["p50_ms"] > 0
        assert attempts == sorted([survivor_id, victim_id])
    else:
        assert lost["p50_ms"] is None and ("died" in lost["error"] or "dead" in lost["error"]), lost["error"]
        assert attempts == [victim_id]  # not retried
    # The output file resumes: only a lost row is measured again (here, on this machine).
    seen = []
    again = run_sweep(spec, "local", out=out, progress=lambda row, done, total: seen.append((done, total)))
    assert seen == [(i, 6) for i in range(1, 7)]
    assert all(r["error"] is None for r in again["rows"]) and len(again["rows"]) == 6
    remeasured = {r["key"] for r in again["rows"]} - {r["key"] for r in again["rows"] if r["started"] in
                                                        {o["started"] for o in res["rows"]}}
    assert remeasured == (set() if retries else {killed["key"]})


def test_losing_the_last_measuring_node_ends_the_sweep_with_error_rows(cluster, tmp_path, monkeypatch):
    """Only one node measures, and it dies: the sweep reports what it could not measure and
    returns, instead of waiting for ever for a node that could hold the measurement."""
    from workbench.measure.fleet import run as fleet

    monkeypatch.setattr(fleet, "NO_NODE_GRACE_S", 3.0)
    spec = {**SPEC, "seq": [8]}
    res, killed, _, _ = _sweep_killing_the_second_node(cluster, tmp_path, monkeypatch, spec, survivor=False)
    assert len(res["rows"]) == 2 and not res["cancelled"]
    assert all(r["p50_ms"] is None and "no node with the workbench_measure resource" in r["error"]
               for r in res["rows"]), [r["error"] for r in res["rows"]]


def test_an_ablation_sweep_times_the_unfused_graph_and_a_fused_plan_slower_than_it_does_not_ship():
    """Issue 42: a machine's plan is never slower than the graph it started from, in the fleet too."""
    from workbench.measure.fleet.rows import plan_line, summarize

    points = expand({**SPEC, "plans": ["ablation"], "seq": [8]})
    (unfused,) = [p for p in points if p["plan"] == "unfused"]
    assert unfused["unfused"] is True and unfused["disable"] == []
    assert not any("unfused" in p for p in points if p is not unfused)  # the other points' keys are unchanged
    machine = {"microarch": "zen5", "isa": ["AVX2"], "cpu": "AMD EPYC"}
    base = {k: v for k, v in unfused.items() if k not in ("plan", "disable", "unfused")}

    def rows(unfused_ms):
        return [{"config": {**base, "plan": "default", "disable": []}, "machine": machine, "p50_ms": 10.0},
                {"config": {**base, "plan": "without attention", "disable": ["attention"]}, "machine": machine,
                 "p50_ms": 9.0},
                {"config": {**base, "plan": "unfused", "disable": [], "unfused": True}, "machine": machine,
                 "p50_ms": unfused_ms}]

    (lost,) = summarize(rows(8.0))["tuned_plans"].items()
    assert lost[1]["ships"] == "unfused" and "the unfused graph" in plan_line(*lost) and "20.0% faster" in lost[1]["why"]
    (kept,) = summarize(rows(12.0))["tuned_plans"].values()
    assert kept["ships"] == "plan" and kept["disable"] == ["attention"] and "not slower" in kept["why"]
