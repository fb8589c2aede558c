"""Which execution provider runs each node (``workbench.ort.assignment``), read from real ONNX Runtime sessions:
the CPU provider on bert-tiny's export and its fused graph; the fall-back lines from typed data; the OpenVINO
provider where its plugin offers this CPU (an Intel one), else its one line why."""

from __future__ import annotations

from collections import Counter

import onnx
import pytest

from workbench.ort.assignment import AssignedNode, Assignment, Node, record_assignment

CONTRIB = {"EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "BiasGelu"}


@pytest.fixture(scope="module")
def files(tiny_export):
    """bert-tiny's TorchScript export and the same export after the BERT fusions (2 layers)."""
    from workbench.measure.variants.models import fuse_bert
    from workbench.models import resolve

    path = tiny_export().path
    return path, fuse_bert(path, **resolve("bert-tiny").timeline_args())


def _nodes(path):
    return onnx.load(str(path), load_external_data=False).graph.node


def test_the_cpu_provider_runs_every_node_of_the_export_and_the_counts_match_the_graph(files):
    export, _ = files
    nodes = _nodes(export)
    a = record_assignment(export, "cpu", level="disable")
    consts = [n.name for n in nodes if n.op_type == "Constant"]
    # Every node the session kept runs on the CPU, each under its name in the file; the Constant nodes became
    # initializers before the assignment, so no provider runs them.
    assert a.asked == "CPU" and a.counts() == {"CPU": len(nodes) - len(consts)} and not a.fallbacks()
    assert a.providers() == {n.name: "CPU" for n in nodes if n.op_type != "Constant"}
    assert sorted(n.name for n in a.removed) == sorted(consts) and a.added == ()
    kept = len(nodes) - len(consts)
    assert a.words() == (f"{kept} nodes: CPU {kept}; the session removed {len(consts)} of the file's {len(nodes)} "
                         f"before assigning providers ({len(consts)} Constant)")
    # At level "all" the basic level folds more before the assignment; its later fusions (BiasGelu, ...) run on
    # the provider their parts got, so every recorded name is still a node of the file.
    full = record_assignment(export, "cpu", level="all")
    assert full.added == () and set(full.providers()) < {n.name for n in nodes}
    assert len(full.removed) > len(consts) and {"Identity", "Constant"} <= {n.op_type for n in full.removed}
    assert len(full.nodes) + len(full.removed) == len(nodes)


def test_a_fused_graphs_contrib_ops_run_on_the_cpu_provider(files):
    _, fused = files
    nodes = _nodes(fused)
    a = record_assignment(fused, "cpu", level="all")
    contrib = Counter(n.op_type for n in a.nodes if n.domain == "com.microsoft")
    assert set(contrib) == CONTRIB and contrib["Attention"] == 2 and contrib["SkipLayerNormalization"] == 4
    assert all(n.provider == "CPU" for n in a.nodes) and a.counts() == {"CPU": len(nodes)}
    assert a.providers() == {n.name: "CPU" for n in nodes} and not a.removed
    d = a.to_dict()
    assert d["counts"] == {"CPU": len(nodes)} and d["fallbacks"] == [] and d["nodes"] == len(nodes)


def test_fall_backs_are_grouped_by_op_and_said_in_one_line_each():
    """Built by hand: no second provider runs on this machine (the OpenVINO plugin serves Intel CPUs only)."""
    placed = ([AssignedNode(f"attn{i}", "Attention", "com.microsoft", "CPU") for i in range(12)]
              + [AssignedNode(f"mm{i}", "MatMul", "", "OpenVINO") for i in range(13)]
              + [AssignedNode(f"mm{i}", "MatMul", "", "CPU") for i in range(13, 16)]
              + [AssignedNode("sln", "SkipLayerNormalization", "com.microsoft", "OpenVINO")]
              + [AssignedNode("shape", "Shape", "", "CPU")])
    a = Assignment("OpenVINO", "all", tuple(placed), removed=(Node("c", "Constant"),))
    assert a.counts() == {"OpenVINO": 14, "CPU": 16}
    assert [f.words() for f in a.fallbacks()] == [
        "12 Attention nodes fall back to the CPU provider: OpenVINO takes no com.microsoft.Attention",
        "3 of 16 MatMul nodes fall back to the CPU provider: OpenVINO took the other 13 (ai.onnx.MatMul)",
        "1 Shape node falls back to the CPU provider: OpenVINO takes no ai.onnx.Shape"]
    assert a.lines()[0] == ("30 nodes: OpenVINO 14, CPU 16; the session removed 1 of the file's 31 before "
                            "assigning providers (1 Constant)")
    assert a.providers()["attn0"] == "CPU" and a.providers()["sln"] == "OpenVINO"
    d = a.to_dict()
    assert d["fallbacks"][0] == {"op_type": "Attention", "domain": "com.microsoft", "count": 12, "provider": "CPU",
                                 "taken": 0, "words": a.fallbacks()[0].words()}


def test_the_openvino_provider_where_its_plugin_offers_this_cpu(files):
    """On an Intel CPU: OpenVINO runs the export, and the fused graph's Attention falls back to the CPU provider
    with its line. Elsewhere (this session's AMD CPU): one line why, naming the package."""
    from workbench.errors import RuntimeUnavailableError
    from workbench.ort.openvino_ep import status

    export, fused = files
    ok, why = status()
    if not ok:
        with pytest.raises(RuntimeUnavailableError) as e:
            record_assignment(fused, "openvino")
        assert str(e.value) == why and "onnxruntime-ep-openvino" in why and "\n" not in why
        return
    plain = record_assignment(export, "openvino")
    assert plain.asked == "OpenVINO" and max(plain.counts(), key=plain.counts().get) == "OpenVINO"
    fa = record_assignment(fused, "openvino")
    lines = [f.words() for f in fa.fallbacks()]
    assert any(ln.startswith("2 Attention nodes fall back to the CPU provider: OpenVINO") for ln in lines), lines
