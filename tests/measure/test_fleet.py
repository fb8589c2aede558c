"""Fleet sweeps: the spec, the local executor, Ray (local and a simulated two-node cluster)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from workbench.errors import ConfigError
from workbench.measure.fleet import MEASURE_RESOURCE, expand, load_spec, run_sweep

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
    assert _shape(ray_doc) == _shape(local)
    assert sorted(ray_doc["rows"][0]) == sorted(local["rows"][0])


def test_two_nodes_measure_one_point_at_a_time_each():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {MEASURE_RESOURCE: 1}})
    cluster.add_node(num_cpus=1, resources={MEASURE_RESOURCE: 1})
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        res = run_sweep({**SPEC, "seq": [8, 16, 24]}, "ray")
    finally:
        ray.shutdown()
        cluster.shutdown()
    rows = res["rows"]
    assert len(rows) == 6 and all(r["error"] is None for r in rows)
    by_node: dict = {}
    for r in rows:
        by_node.setdefault(r["node"], []).append((r["started"], r["ended"]))
    assert len(by_node) == 2 and len(res["nodes"]) == 2  # both nodes measured, each with its machine
    for spans in by_node.values():
        spans.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans
